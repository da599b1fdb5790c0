"""CRC32C (Castagnoli), the checksum of TFRecord framing, snapshots and checkpoints, in C.

google-crc32c on a GIL build. On a free-threaded build the ``crc32c`` package instead: its
wheels declare that they run without the GIL and google-crc32c's (1.7.1, the last with a cp313t
wheel) do not, so importing that would turn the GIL back on for the whole process.

``value(data)`` is the CRC32C of a read-only buffer, ``extend(crc, data)`` that of what ``crc``
covered followed by ``data``; both are the library's own functions (no Python call between).

Example:
    >>> extend(value(b"12345"), b"6789") == value(b"123456789") == 0xE3069283
    True
"""

from __future__ import annotations

import sysconfig
from collections.abc import Callable
from typing import Any

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _from_crc32c() -> tuple[str, Callable[[Any], int], Callable[[int, Any], int], bool] | None:
    try:
        import crc32c
    except ImportError:
        return None
    return ("crc32c", crc32c.crc32c, lambda crc, data: crc32c.crc32c(data, crc), True)


def _pick() -> tuple[str, Callable[[Any], int], Callable[[int, Any], int], bool]:
    """``(library, value, extend, in C)``."""
    if FREE_THREADED and (picked := _from_crc32c()) is not None:
        return picked
    import google_crc32c

    in_c = getattr(google_crc32c, "implementation", "c") == "c"
    if not in_c and (picked := _from_crc32c()) is not None:
        return picked
    return "google_crc32c", google_crc32c.value, google_crc32c.extend, in_c


LIBRARY, value, extend, IN_C = _pick()
"""The library in use (``"google_crc32c"`` or ``"crc32c"``), its ``value`` and ``extend``, and
whether it runs in C (google-crc32c built without its extension falls back to Python)."""
