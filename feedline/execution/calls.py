"""How a stage calls a user function on an element: a tuple's parts as its arguments, or the
element whole (:class:`Unsplit`: a function a rewrite composed itself)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from feedline.core.functions import call_with_element


def _call_whole(fn: Callable[[Any], Any], element: Any) -> Any:
    return fn(element)


class Unsplit(functools.partial):
    """A function that receives the whole element even when it is a tuple.

    Example:
        >>> caller_of(Unsplit(len))(Unsplit(len), (1, 2))
        2
    """


def caller_of(fn: Callable[..., Any]) -> Callable[[Callable[..., Any], Any], Any]:
    """How ``fn`` is called on an element: whole for an :class:`Unsplit`, else with a
    tuple's parts as its arguments.

    Example:
        >>> caller_of(abs)(abs, -2)
        2
    """
    return _call_whole if isinstance(fn, Unsplit) else call_with_element
