"""The envelope of a whole pipeline's checkpoint: format, fingerprint, checksum.

``PipelineIterator.state_dict()`` returns::

    {"feedline_iterator": 2,
     "pipeline": {"digest": ..., "stages": [[description, digest], ...]},
     "root": <the iterator tree's state>,
     "checksum": "crc32c:<hex>"}

The checksum covers the format, the fingerprint and the root state (as canonical JSON), so a
truncated or garbled state is refused before anything is restored: it cannot silently drop
a buffered element. The fingerprint refuses a state saved by another pipeline, naming the
first stage that differs. Neither is a defence against someone who forges states on
purpose; that defence is the decoder, which builds nothing the pipeline did not declare
(:mod:`feedline.core.state_codec`).
"""

from __future__ import annotations

from typing import Any

from feedline.core import checksum
from feedline.core.errors import CheckpointError
from feedline.core.fingerprint import PipelineFingerprint, canonical_json

FORMAT = 2
"""Version of the envelope; states of format 1 (no fingerprint) are refused."""


def _checksum(fingerprint: Any, root: Any, fingerprint_text: str | None = None) -> str:
    """crc32c of ``canonical_json([FORMAT, fingerprint, root])``.

    The three parts are serialized and checksummed one after the other (the same bytes
    as the whole list), so a fingerprint's text (``fingerprint_text``) is built once per
    pipeline rather than once per ``state_dict()``.
    """
    try:
        if fingerprint_text is None:
            fingerprint_text = canonical_json(fingerprint)
        root_text = canonical_json(root)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"the iterator state is not JSON-safe: {error}") from None
    crc = checksum.value(f"[{FORMAT},{fingerprint_text},".encode("utf-8", "surrogatepass"))
    crc = checksum.extend(crc, root_text.encode("utf-8", "surrogatepass"))
    return f"crc32c:{checksum.extend(crc, b']'):08x}"


def seal(root: Any, fingerprint: PipelineFingerprint) -> dict[str, Any]:
    """Wrap the iterator tree's state ``root`` for ``state_dict()``."""
    return {"feedline_iterator": FORMAT, "pipeline": fingerprint.to_json(), "root": root,
            "checksum": _checksum(None, root, fingerprint.canonical_json)}


def open_sealed(state: Any, fingerprint: PipelineFingerprint) -> Any:
    """Check ``state`` (from :func:`seal`) against this pipeline and return its root state.

    Raises:
        CheckpointError: Not a feedline state, another format, damaged (checksum), or saved
            by a different pipeline (the message names the first stage that differs).

    Example:
        >>> import feedline as fl
        >>> fp = PipelineFingerprint.of(fl.Dataset.range(3))
        >>> open_sealed(seal({"position": 1}, fp), fp)
        {'position': 1}
        >>> damaged = seal({"position": 1}, fp); damaged["root"]["position"] = 2
        >>> open_sealed(damaged, fp)
        Traceback (most recent call last):
        ...
        feedline.core.errors.CheckpointError: the iterator state is damaged: ...
    """
    if not isinstance(state, dict) or "feedline_iterator" not in state:
        raise CheckpointError("not a feedline iterator state (no 'feedline_iterator' key)")
    if state["feedline_iterator"] != FORMAT:
        raise CheckpointError(
            f"iterator state format {state['feedline_iterator']!r} is not supported (this "
            f"feedline reads format {FORMAT}; format 1 states carry no pipeline fingerprint)")
    missing = [key for key in ("pipeline", "root", "checksum") if key not in state]
    if missing:
        raise CheckpointError(f"the iterator state is damaged: missing {missing}")
    if state["checksum"] != _checksum(state["pipeline"], state["root"]):
        raise CheckpointError("the iterator state is damaged: its checksum does not match its "
                              "contents (truncated, edited or corrupted in transit)")
    saved = PipelineFingerprint.from_json(state["pipeline"])
    difference = fingerprint.first_difference(saved)
    if difference is not None:
        raise CheckpointError(f"the state was saved from a different pipeline: {difference}")
    return state["root"]
