"""The operations that :class:`~feedline.core.dataset.Dataset`'s fluent methods build (and
the one method's work that runs a pipeline: ``element_spec``'s inference, whose stand-in input
is a ``Dataset`` too).

Operations subclass ``Dataset``, so the core cannot import them without an arrow back up the
layers. Each operation attaches itself instead: its module registers its builder under the
name of the method that builds it (``@operation("map")``, cf. torchdata's
``@functional_datapipe``), and the package's top (:mod:`feedline._operations`, imported by
``feedline/__init__``) imports every operation module. Importing any ``feedline.x`` imports
``feedline`` first, so the table is full before a user can call a method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

Builder = TypeVar("Builder", bound=Callable[..., Any])

_BUILDERS: dict[str, Callable[..., Any]] = {}


def operation(method: str) -> Callable[[Builder], Builder]:
    """Register the decorated class or function as what ``Dataset.<method>`` builds.

    A second module claiming the same method is a mistake and raises ``ValueError``; the same
    definition registered again (its module reloaded) replaces the first.

    Example:
        >>> @operation("doc_identity")
        ... def identity(dataset):
        ...     return dataset
        >>> build("doc_identity", "a dataset")
        'a dataset'
        >>> del _BUILDERS["doc_identity"]
    """

    def attach(builder: Builder) -> Builder:
        before = _BUILDERS.get(method)
        if before is not None and _origin(before) != _origin(builder):
            raise ValueError(f"Dataset.{method} is built by {_origin(before)} already; "
                             f"{_origin(builder)} cannot claim it too")
        _BUILDERS[method] = builder
        return builder

    return attach


def build(method: str, *args: Any, **kwargs: Any) -> Any:
    """What ``Dataset.<method>(*args, **kwargs)`` returns: its registered builder's result.

    Example:
        >>> import feedline as fl
        >>> [int(x) for x in build("range", 3)]
        [0, 1, 2]
    """
    builder = _BUILDERS.get(method)
    if builder is None:
        raise RuntimeError(
            f"Dataset.{method}: no operation is registered for it; its module attaches it "
            f"when imported, and `import feedline` imports every operation module "
            f"(feedline._operations). Was feedline's import interrupted?")
    return builder(*args, **kwargs)


def _origin(builder: Callable[..., Any]) -> str:
    return f"{builder.__module__}.{builder.__qualname__}"
