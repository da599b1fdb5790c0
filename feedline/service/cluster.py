"""Where a service runs: a :class:`LocalCluster` on this machine, or a Ray cluster's address.

A ``LocalCluster`` starts Ray on this machine (unless the process already runs it), a
dispatcher actor and its workers; it is what the demo and the tests use, and the simplest
way to use every core of one machine from several trainer processes. Given an address
(``"auto"``, ``"ray://head:10001"``), :func:`connect` joins that Ray cluster and uses the
dispatcher named :data:`~feedline.service.ray_support.DISPATCHER_NAME`, starting it (and
one worker per CPU of the cluster, up to four per CPU when autoscaling) if no consumer has
yet.

**Who can use it.** Anyone who can reach a Ray cluster's ports can run code on it, as the
user who started it: Ray trusts its network (https://docs.ray.io/en/latest/ray-security/).
So the Ray a ``LocalCluster`` starts listens on the loopback interface only (GCS, raylet,
workers, the dispatcher: nothing on ``0.0.0.0`` or ``::``), or does not start at all. Ray
2.60 and later also turn on its token authentication (the token in ``~/.ray/auth_token``),
which keeps the other users of this machine out; without it (Ray 2.52 to 2.59 unless
``RAY_AUTH_MODE=token``, or ``RAY_AUTH_MODE=disabled``) the ``feedline.service`` logger
warns that every process of this machine can run code on it.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

from feedline.core.errors import ServiceError
from feedline.core.validation import schedulable_cpus
from feedline.service.dispatcher import DispatcherCore, ServiceConfig
from feedline.service.ray_support import (
    DISPATCHER_NAME,
    LOOPBACK,
    NAMESPACE,
    actor_error_cause,
    actor_errors,
    import_ray,
    logger,
    warn_if_unauthenticated,
)
from feedline.service.worker import ABANDONED_TASK_SECONDS

DISPATCHER_CONCURRENCY = 32
"""Calls the dispatcher serves at once."""


def _start_dispatcher(config: ServiceConfig, name: str, detached: bool) -> Any:
    ray = import_ray()
    actor = ray.remote(DispatcherCore)
    options: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "max_restarts": -1,
                               "max_task_retries": -1, "num_cpus": 0,
                               "max_concurrency": DISPATCHER_CONCURRENCY,
                               "get_if_exists": True}
    if detached:
        options["lifetime"] = "detached"
    handle = actor.options(**options).remote(config)
    try:
        ray.get(handle.ping.remote())  # the workers are up
    except actor_errors() as error:  # its __init__ failed (a damaged journal)
        raise dispatcher_error(error) from error
    return handle


def dispatcher_error(error: BaseException) -> ServiceError:
    """The :class:`ServiceError` for a call to a dispatcher that failed with ``error`` (a
    Ray actor error), saying why: what its ``__init__`` raised (a journal it cannot
    replay), or Ray's reason for its end.

    Example:
        >>> from ray.exceptions import RayActorError
        >>> str(dispatcher_error(RayActorError(error_msg="The actor died because of an "
        ...     "error raised in its creation task\\nServiceError: journal.jsonl: line 3: "
        ...     "...", actor_init_failed=True)))
        "the service's dispatcher cannot run: ServiceError: journal.jsonl: line 3: ..."
    """
    cause = actor_error_cause(error)
    if getattr(error, "actor_init_failed", False):
        return ServiceError(f"the service's dispatcher cannot run: {cause}")
    return ServiceError(f"the service's dispatcher is gone ({type(error).__name__}: {cause}); "
                        "was the service shut down?")


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """Within it, Ray's choice of this node's address is the loopback one.

    ``ray.init(_node_ip_address="127.0.0.1")`` alone is turned into the address other
    machines reach (Ray expects a node to join a cluster): only where Ray keeps clusters
    to one machine (its ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read once, when Ray is
    imported) does it keep loopback, and then its servers listen on loopback alone. The
    switch is Ray's module constant, set for the call; a Ray without it is caught by the
    check after ``ray.init``.
    """
    try:
        from ray._private import ray_constants  # noqa: PLC0415 - Ray's switch, no public one
    except ImportError:
        yield
        return
    saved = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    if saved is None:
        yield
        return
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def _start_ray(ray: Any, **settings: Any) -> None:
    """Start Ray on this machine, listening on the loopback interface only.

    Raises:
        ServiceError: Ray chose another address (it then is shut down again).
    """
    with _loopback_only():
        ray.init(_node_ip_address=LOOPBACK[0], **settings)
    address = ray.util.get_node_ip_address()
    if address not in LOOPBACK:
        ray.shutdown()
        raise ServiceError(
            f"Ray {ray.__version__} started on {address}, not on the loopback interface: a "
            "LocalCluster would listen on the network, where anyone who reaches its ports "
            "runs code on it, so it does not start (start Ray yourself with "
            "`ray start --head`, secured as https://docs.ray.io/en/latest/ray-security/ "
            "says, and pass its address as the service)")


class LocalCluster:
    """A service on this machine: Ray (started here unless running), a dispatcher and
    ``num_workers`` worker actors.

    Args:
        num_workers: Workers at the start.
        min_workers: Fewest workers the autoscaler keeps (default ``num_workers``).
        max_workers: Most workers the autoscaler starts (default ``num_workers``: no
            autoscaling unless a range is given).
        worker_cpus: CPUs Ray reserves per worker.
        autoscale_interval: Seconds between autoscaling decisions.
        journal_dir: Where the dispatcher keeps its journal (default: a temporary
            directory, removed by :meth:`shutdown`).
        log_to_driver: Whether the workers' output (``print`` in a map function) shows here.
        ray_cpus: CPUs the Ray this cluster starts offers (default: this machine's, or
            enough for ``max_workers``); ignored when Ray already runs.
        abandoned_task_timeout: Seconds a worker's task may go unread before the worker
            ends it (its consumer died without closing; one that reads again restarts it).

    The Ray it starts listens on the loopback interface only; without Ray's token
    authentication any process of this machine can run code on it, and the
    ``feedline.service`` logger warns (module doc).

    Raises:
        ServiceError: Ray would not listen on loopback only, or the dispatcher cannot
            replay the journal in ``journal_dir`` (the message names the file and line).

    Example:
        >>> import feedline as fl
        >>> with fl.service.LocalCluster(num_workers=2) as cluster:  # doctest: +SKIP
        ...     ds = fl.Dataset.range(6).apply(
        ...         fl.service.distribute("distributed_epoch", cluster))
        ...     sorted(int(x) for x in ds)
        [0, 1, 2, 3, 4, 5]
    """

    def __init__(self, num_workers: int = 2, *, min_workers: int | None = None,
                 max_workers: int | None = None, worker_cpus: float = 1.0,
                 autoscale_interval: float = 1.0, journal_dir: str | None = None,
                 log_to_driver: bool = True, ray_cpus: int | None = None,
                 abandoned_task_timeout: float = ABANDONED_TASK_SECONDS) -> None:
        ray = import_ray()
        min_workers = num_workers if min_workers is None else min_workers
        max_workers = num_workers if max_workers is None else max_workers
        self.name = f"feedline-{uuid.uuid4().hex[:8]}"
        self._own_journal = journal_dir is None
        self.journal_dir = journal_dir or tempfile.mkdtemp(prefix="feedline-service-")
        config = ServiceConfig(
            self.name, num_workers, min_workers, max_workers, self.journal_dir, worker_cpus,
            autoscale=min_workers < max_workers, autoscale_interval=autoscale_interval,
            abandoned_task_timeout=abandoned_task_timeout)
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            cpus = ray_cpus or max(schedulable_cpus(), math.ceil(max_workers * worker_cpus))
            # Workers import what the pipeline's functions need from the same paths as here
            # (as feedline's worker processes do).
            path = os.pathsep.join(p for p in sys.path if p)
            _start_ray(ray, num_cpus=cpus, include_dashboard=False, namespace=NAMESPACE,
                       log_to_driver=log_to_driver, configure_logging=False,
                       runtime_env={"env_vars": {"PYTHONPATH": path}})
        where = "the Ray this LocalCluster started" if self._started_ray else \
            "the Ray this process runs, which this LocalCluster uses"
        warn_if_unauthenticated(f"{where} ({ray.util.get_node_ip_address()})")
        try:
            self.dispatcher = _start_dispatcher(config, f"{self.name}-dispatcher",
                                                detached=False)
        except BaseException:
            self._end_ray()
            raise
        self._shut = False

    def workers(self) -> list[str]:
        """The names of the workers taking new work."""
        return import_ray().get(self.dispatcher.workers.remote())

    def worker(self, name: str) -> Any:
        """The actor handle of worker ``name``."""
        return import_ray().get_actor(name, namespace=NAMESPACE)

    def statistics(self) -> dict[str, Any]:
        """The dispatcher's view: workers, autoscaling decisions (with reasons), jobs."""
        return import_ray().get(self.dispatcher.statistics.remote())

    def shutdown(self) -> None:
        """End the workers and the dispatcher (and Ray, if this cluster started it).
        Idempotent."""
        if self._shut:
            return
        self._shut = True
        ray = import_ray()
        try:
            ray.get(self.dispatcher.stop.remote(), timeout=30)
        except (*actor_errors(), ray.exceptions.GetTimeoutError) as error:
            # A dispatcher that cannot run (a damaged journal) or does not answer ends no
            # worker: end them here, by name.
            logger.warning("%r: the dispatcher did not stop its workers (%s); ending them",
                           self, actor_error_cause(error))
            self._kill_workers(ray)
        finally:
            ray.kill(self.dispatcher, no_restart=True)
            self._end_ray()

    def _kill_workers(self, ray: Any) -> None:
        prefix = f"{self.name}-worker-"
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] == NAMESPACE and actor["name"].startswith(prefix):
                with contextlib.suppress(ValueError):  # ended meanwhile
                    ray.kill(ray.get_actor(actor["name"], namespace=NAMESPACE),
                             no_restart=True)

    def _end_ray(self) -> None:
        if self._started_ray:
            import_ray().shutdown()
        if self._own_journal:
            shutil.rmtree(self.journal_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"LocalCluster({self.name!r})"


def connect(service: LocalCluster | str) -> Any:
    """The dispatcher actor of ``service``: a :class:`LocalCluster`, or a Ray address whose
    feedline dispatcher is used (and started, with one worker per CPU, if absent).

    Raises:
        TypeError: ``service`` is neither.
    """
    if isinstance(service, LocalCluster):
        return service.dispatcher
    if not isinstance(service, str):
        raise TypeError("service must be a feedline.service.LocalCluster or a Ray address "
                        f"('auto', 'ray://host:port'), got {type(service).__name__}")
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=service, namespace=NAMESPACE)
        warn_if_unauthenticated(f"the Ray cluster at {service!r}")
    try:
        return ray.get_actor(DISPATCHER_NAME, namespace=NAMESPACE)
    except ValueError:
        pass  # none yet: the first consumer starts it
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    # A journal of its own: Ray's restarts of this dispatcher replay it; a dispatcher
    # started later, for another cluster's life, must not.
    journal = Path(tempfile.gettempdir()) / "feedline-service" / uuid.uuid4().hex
    config = ServiceConfig(DISPATCHER_NAME, cpus, cpus, 4 * cpus, str(journal))
    return _start_dispatcher(config, DISPATCHER_NAME, detached=True)
