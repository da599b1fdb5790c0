"""Ray, imported only when the service is used: the version feedline needs, whether its
token authentication is on, and what a failed actor's error says."""

from __future__ import annotations

import logging
import re
import sys
from types import ModuleType

NAMESPACE = "feedline"
"""The Ray namespace of feedline's named actors (dispatchers and workers)."""

DISPATCHER_NAME = "feedline-dispatcher"
"""The name of the dispatcher of a cluster that feedline did not start (``service="auto"``)."""

MIN_RAY_VERSION = (2, 52)
"""The first Ray with token authentication (on by default for a new cluster from 2.60).
Without it, anyone who can reach a Ray cluster's ports runs code on it."""

LOOPBACK = ("127.0.0.1", "::1")
"""The node addresses on which Ray listens on this machine's loopback interface only."""

logger = logging.getLogger("feedline.service")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_QUALIFIED = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*: )")


def import_ray() -> ModuleType:
    """The ``ray`` module.

    Raises:
        ImportError: Ray is not installed, or older than :data:`MIN_RAY_VERSION` (the
            message says how to install it).

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
    check_ray_version(ray.__version__)
    return ray


def check_ray_version(version: str) -> None:
    """Refuse a Ray older than :data:`MIN_RAY_VERSION`.

    Raises:
        ImportError: ``version`` is older (the message says why and how to upgrade).

    Example:
        >>> check_ray_version("2.60.0")
        >>> check_ray_version("2.9.3")
        Traceback (most recent call last):
        ...
        ImportError: feedline.service needs Ray >= 2.52, ...
    """
    numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if numbers and numbers < MIN_RAY_VERSION:
        wanted = ".".join(map(str, MIN_RAY_VERSION))
        raise ImportError(
            f"feedline.service needs Ray >= {wanted}, the first with token authentication "
            f"(without it anyone who can reach a Ray cluster's ports runs code on it); "
            f"found ray {version}: {sys.executable} -m pip install -U 'feedline[service]'")


def token_authentication() -> bool:
    """Whether this process's Ray uses token authentication (``RAY_AUTH_MODE=token``;
    Ray 2.60 turns it on for the clusters ``ray.init()`` starts).

    Example:
        >>> isinstance(token_authentication(), bool)
        True
    """
    import_ray()
    try:
        # Ray has no public call for it; its own clients ask the same function.
        from ray._raylet import AuthenticationMode, get_authentication_mode
    except ImportError:  # a Ray without token authentication
        return False
    return bool(get_authentication_mode() == AuthenticationMode.TOKEN)


def warn_if_unauthenticated(what: str) -> bool:
    """Warn (through the ``feedline.service`` logger) that ``what``, a Ray cluster, runs
    code for anyone who can reach its ports, when token authentication is off.

    Returns:
        Whether it warned.

    Example:
        >>> warn_if_unauthenticated("this cluster") in (True, False)
        True
    """
    if token_authentication():
        return False
    logger.warning(
        "%s runs without Ray's token authentication: anyone who can reach its ports can "
        "run code on it, as this user. Set RAY_AUTH_MODE=token (Ray >= 2.52; a token is "
        "made with `ray get-auth-token --generate`) before Ray starts, as Ray 2.60 and "
        "later do by default; see https://docs.ray.io/en/latest/ray-security/", what)
    return True


def actor_errors() -> tuple[type[BaseException], ...]:
    """The exceptions Ray raises for a call to an actor that died or is restarting."""
    ray = import_ray()
    return (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)


def actor_error_cause(error: BaseException) -> str:
    """What ended an actor, in one line, from the error Ray raised for a call to it: the
    exception its ``__init__`` raised (the last line of the traceback Ray passes on), or
    Ray's own reason (killed, its process died, restarting).

    Example:
        >>> from ray.exceptions import RayActorError
        >>> actor_error_cause(RayActorError(error_msg="The actor died because of an error "
        ...     "raised in its creation task\\n  File x.py, line 3\\nmod.errors.BadError: 3",
        ...     actor_init_failed=True))
        'BadError: 3'
        >>> actor_error_cause(RayActorError(error_msg="The actor died unexpectedly.\\n"
        ...     "\\tpid: 7\\nThe actor is dead because it was killed by `ray.kill`."))
        'The actor died unexpectedly. The actor is dead because it was killed by `ray.kill`.'
    """
    lines = [line.strip() for line in _ANSI.sub("", str(error)).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if getattr(error, "actor_init_failed", False) or len(lines) == 1:
        # "feedline.core.errors.ServiceError: ..." -> "ServiceError: ..."
        return _QUALIFIED.sub("", lines[-1])
    return f"{lines[0]} {lines[-1]}"
