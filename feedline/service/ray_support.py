"""Ray, imported only when the service is used, with a clear message when it is missing."""

from __future__ import annotations

import sys
from types import ModuleType

NAMESPACE = "feedline"
"""The Ray namespace of feedline's named actors (dispatchers and workers)."""

DISPATCHER_NAME = "feedline-dispatcher"
"""The name of the dispatcher of a cluster that feedline did not start (``service="auto"``)."""


def import_ray() -> ModuleType:
    """The ``ray`` module.

    Raises:
        ImportError: Ray is not installed (the message says how to install it).

    Example:
        >>> import_ray().__name__
        'ray'
    """
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            "feedline.service runs on Ray, which is not installed: "
            f"{sys.executable} -m pip install 'feedline[service]'") from error
    return ray


def actor_errors() -> tuple[type[BaseException], ...]:
    """The exceptions Ray raises for a call to an actor that died or is restarting."""
    ray = import_ray()
    return (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
