"""The shape of a stage's state (its keys and the JSON kinds of its values): what a restored
state is checked against, so that one saved by a different stage or version is refused with
where it differs, before the stage reads it."""

from __future__ import annotations

from typing import Any


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
