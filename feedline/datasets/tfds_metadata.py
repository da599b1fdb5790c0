"""Reading a TFDS metadata file (``dataset_info.json``, ``features.json``, label lists): bounded
in size, every problem a feedline error naming the file.

Both :mod:`feedline.datasets.tfds_info` and :mod:`feedline.datasets.tfds_features` read such
files, so this lives below both.
"""

from __future__ import annotations

import json
import os
from typing import Any

from feedline.core.errors import InvalidArgumentError

#: Largest ``dataset_info.json``/``features.json`` read (TFDS's are kilobytes; the cap keeps
#: a damaged or hostile one from taking the memory of a JSON parse of any size).
MAX_METADATA_BYTES = 64 << 20


def read_json(path: str, missing: type[Exception] | None = None) -> Any:
    """The decoded JSON of a metadata file, any problem a feedline error naming it.

    Args:
        path: The file.
        missing: Raised (with a message naming the file) when it does not exist; default
            :class:`InvalidArgumentError`.

    Raises:
        InvalidArgumentError: unreadable, larger than :data:`MAX_METADATA_BYTES`, not UTF-8
            or not JSON (or nested deeper than Python's JSON parser goes).

    Example:
        >>> import json, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.json")
        >>> with open(path, "w") as f:
        ...     _ = f.write('{"a": [1]}')
        >>> read_json(path)
        {'a': [1]}
    """
    try:
        # A FIFO or a device would block or never end: only a regular file is read.
        if os.path.exists(path) and not os.path.isfile(path):
            raise InvalidArgumentError(f"{path}: not a regular file", path=path)
        size = os.path.getsize(path)
        if size > MAX_METADATA_BYTES:
            raise InvalidArgumentError(
                f"{path}: {size} bytes, more than the {MAX_METADATA_BYTES} a TFDS metadata "
                "file may have (feedline.datasets.tfds_metadata.MAX_METADATA_BYTES)", path=path)
        with open(path, "rb") as f:
            data = f.read(MAX_METADATA_BYTES + 1)
    except FileNotFoundError:
        raise (missing or InvalidArgumentError)(f"{path}: no such file") from None
    except OSError as error:
        raise InvalidArgumentError(f"{path}: cannot be read ({error.strerror or error})",
                                   path=path) from None
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise InvalidArgumentError(f"{path}: not valid JSON (not UTF-8 at byte {error.start})",
                                   path=path, offset=error.start) from None
    except RecursionError:
        raise InvalidArgumentError(f"{path}: not valid JSON for TFDS (nested too deeply)",
                                   path=path) from None
    except ValueError as error:
        raise InvalidArgumentError(f"{path}: not valid JSON ({error})", path=path,
                                   offset=getattr(error, "pos", None)) from None
