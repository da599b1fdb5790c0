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


def state_shape(state: Any) -> Any:
    """The kinds of one stage's state values: keys kept, values reduced to their JSON kind.

    Lists are not entered (buffers vary in length) and nested stage states (dicts with a
    ``"type"``) are checked by their own stage. ``None`` is left open (``"any"``): stages use
    it for "not yet".

    Example:
        >>> state_shape({"type": "X", "n": 3, "done": False, "buffer": [1], "input": {"type": "Y"}})
        {'type': 'str', 'n': 'number', 'done': 'bool', 'buffer': 'list', 'input': 'state'}
    """
    if isinstance(state, dict):
        return {key: ("state" if isinstance(value, dict) and "type" in value and key != "type"
                      else state_shape(value)) for key, value in state.items()}
    if state is None:
        return "any"
    if isinstance(state, bool):
        return "bool"
    if isinstance(state, int | float):
        return "number"
    return type(state).__name__


def shape_mismatch(expected: Any, state: Any, where: str = "") -> str | None:
    """Where ``state`` does not have the ``expected`` shape (from :func:`state_shape`), or None."""
    if expected == "any" or state is None:
        return None
    if isinstance(expected, dict):
        if not isinstance(state, dict):
            return f"{where or 'the state'} is a {type(state).__name__}, expected a dict"
        if set(expected) != set(state):
            missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
            return f"{where or 'the state'} has keys missing {missing} / unexpected {extra}"
        for key, kind in expected.items():
            problem = shape_mismatch(kind, state[key], f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    found = state_shape(state)
    if expected == "state":
        return None if found == "state" or isinstance(state, dict) else \
            f"{where} is a {type(state).__name__}, expected a stage state"
    if found != expected:
        return f"{where} is a {type(state).__name__}, expected a {expected}"
    return None
