"""The dispatcher: one Ray actor per service that owns the workers, the jobs and their splits,
and scales the workers to what the consumers need.

It survives its own restart: Ray restarts the actor (``max_restarts=-1``), and every
decision is in the journal (:mod:`feedline.service.journal`) before it is answered, so the
new incarnation replays it and reattaches to the workers, which are detached named actors
and live on. Consumers' calls are retried by Ray across the restart (``max_task_retries``);
answers that change state are idempotent by request number (:mod:`feedline.service.jobs`).

**Autoscaling** (between ``min_workers`` and ``max_workers``), every ``autoscale_interval``
seconds, from what consumers report (time waiting in ``next()``, items taken) and what
workers report (items produced, seconds spent producing):

* consumers waited more than :data:`SCALE_UP_WAIT` of the time: the input is the
  bottleneck. The rate they would take if they never waited is ``taken / (elapsed -
  waited)``; a worker produces ``produced / busy`` items per second; enough workers for that
  rate are started (at least one more).
* consumers waited less than :data:`SCALE_DOWN_WAIT` for :data:`SCALE_DOWN_TICKS` ticks in a
  row and fewer workers would still produce 1.25x what they take: the newest worker is
  *retired*: it gets no new work, and is ended once its tasks are done (or after
  :data:`RETIRE_GRACE` seconds; its consumers then resume its splits elsewhere, losing
  nothing).

Every decision is kept with its reason (:meth:`DispatcherCore.statistics`).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Any

from feedline.service.jobs import JobTable
from feedline.service.journal import Journal
from feedline.service.ray_support import NAMESPACE, import_ray
from feedline.service.worker import ABANDONED_TASK_SECONDS, MAX_CONCURRENCY, WorkerCore

SCALE_UP_WAIT = 0.05
"""Share of their time consumers may wait for input before workers are added."""
SCALE_DOWN_WAIT = 0.01
"""Share of their time below which consumers are considered never to wait."""
SCALE_DOWN_TICKS = 3
"""Ticks in a row of consumers not waiting before a worker is retired."""
RETIRE_GRACE = 30.0
"""Seconds a retired worker may finish its tasks before it is ended anyway."""
REPORT_WINDOW = 3
"""Autoscale intervals a consumer's report counts for."""


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
    """How a service runs.

    Attributes:
        name: Prefix of its actors' names (unique per service).
        num_workers: Workers at the start.
        min_workers: Fewest workers the autoscaler keeps.
        max_workers: Most workers the autoscaler starts.
        journal_dir: Where the dispatcher journals its decisions.
        worker_cpus: CPUs Ray reserves for each worker.
        autoscale: Whether the autoscaler runs.
        autoscale_interval: Seconds between its decisions.
        abandoned_task_timeout: Seconds a worker's task may go unread before it is ended
            (its consumer died without closing).
        job_gc_seconds: Seconds after its last consumer left before a finished job is
            over and its name starts a new job (:meth:`JobTable.release`).
    """

    name: str
    num_workers: int
    min_workers: int
    max_workers: int
    journal_dir: str
    worker_cpus: float = 1.0
    autoscale: bool = True
    autoscale_interval: float = 1.0
    abandoned_task_timeout: float = ABANDONED_TASK_SECONDS
    job_gc_seconds: float = 300.0

    def __post_init__(self) -> None:
        if not 0 < self.min_workers <= self.num_workers <= self.max_workers:
            raise ValueError(
                "workers must satisfy 0 < min_workers <= num_workers <= max_workers, got "
                f"{self.min_workers}, {self.num_workers}, {self.max_workers}")
        if not self.autoscale_interval > 0:
            raise ValueError(f"autoscale_interval must be > 0, got {self.autoscale_interval}")


def start_worker(config: ServiceConfig, name: str) -> Any:
    """The worker actor ``name`` (started, or the running one of that name)."""
    ray = import_ray()
    actor = ray.remote(WorkerCore)
    return actor.options(
        name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, num_cpus=config.worker_cpus,
        max_concurrency=MAX_CONCURRENCY).remote(name, config.abandoned_task_timeout)


class DispatcherCore:
    """The dispatcher actor's methods (the actor class is ``ray.remote(DispatcherCore)``)."""

    def __init__(self, config: ServiceConfig) -> None:
        self._config = config
        self._lock = threading.RLock()
        self._journal = Journal(config.journal_dir)
        self._table = JobTable(self._journal, config.job_gc_seconds)
        self.restarted = bool(self._table.workers)
        names = self._table.workers or [f"{config.name}-worker-{index}"
                                        for index in range(config.num_workers)]
        self._handles = {name: start_worker(config, name) for name in names}
        self._table.set_workers(names)
        self._retiring: dict[str, float] = {}
        self._reports: dict[str, tuple[float, float, float, int]] = {}
        self._worker_totals: dict[str, tuple[int, float]] = {}
        self._quiet_ticks = 0
        self._decisions: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._autoscaler: threading.Thread | None = None
        if config.autoscale:
            self._autoscaler = threading.Thread(target=self._autoscale_loop,
                                                name="feedline-service-autoscale", daemon=True)
            self._autoscaler.start()

    # ------------------------------------------------------------------ consumers
    def ping(self) -> bool:
        """Whether this incarnation replayed a journal (it is a restart)."""
        ray = import_ray()
        ray.get([handle.ping.remote() for handle in self._handles.values()])
        return self.restarted

    def max_workers(self) -> int:
        """The most workers this service runs (a pass is split for that many)."""
        return self._config.max_workers

    def workers(self) -> list[str]:
        """The names of the workers that take new work."""
        with self._lock:
            return list(self._table.workers)

    def register(self, key: str, mode: str, num_splits: int, num_consumers: int | None,
                 position: dict[str, Any] | None, consumer: str) -> dict[str, Any]:
        """``consumer`` joins (or creates) job ``key``: its id, splits and workers."""
        with self._lock:
            job_id = self._table.create(key, mode, num_splits, num_consumers,
                                        list(self._table.workers), position, consumer)
            job = self._table.jobs[job_id]
            workers = job.workers if num_consumers else list(self._table.workers)
            return {"job_id": job_id, "num_splits": job.num_splits, "workers": workers}

    def next_split(self, job_id: int, consumer: str, request: int) -> dict[str, Any]:
        """The next split for ``consumer`` (``None``: none left), and the workers."""
        with self._lock:
            return {"split": self._table.next_split(job_id, consumer, request),
                    "workers": list(self._table.workers)}

    def split_done(self, job_id: int, split: int) -> None:
        """``split`` of ``job_id`` has been read entirely."""
        with self._lock:
            self._table.split_done(job_id, split)

    def release(self, job_id: int, consumer: str, partial: dict[int, int]) -> None:
        """``consumer`` stops reading ``job_id``; see :meth:`JobTable.release`."""
        with self._lock:
            self._table.release(job_id, consumer, partial)

    def report(self, consumer: str, elapsed: float, waited: float, taken: int) -> list[str]:
        """A consumer's last ``elapsed`` seconds: ``waited`` of them in ``next()``, ``taken``
        items. Returns the workers, so consumers learn of new ones."""
        with self._lock:
            self._reports[consumer] = (time.monotonic(), elapsed, waited, taken)
            return list(self._table.workers)

    # ------------------------------------------------------------------ autoscaling
    def _autoscale_loop(self) -> None:
        while not self._stop.wait(self._config.autoscale_interval):
            try:
                self.autoscale_once()
            except Exception as error:  # noqa: BLE001 - a failed tick must not end the service
                self._decide("none", f"autoscaler tick failed: {error!r}")

    def autoscale_once(self) -> None:
        """One autoscaling decision (the loop calls it every ``autoscale_interval``)."""
        config = self._config
        ray = import_ray()
        self._end_retired(ray)
        with self._lock:
            now = time.monotonic()
            window = REPORT_WINDOW * config.autoscale_interval
            recent = [r for r in self._reports.values() if now - r[0] <= window]
            names = list(self._table.workers)
        if not recent:
            return
        elapsed = sum(r[1] for r in recent)
        waited = sum(r[2] for r in recent)
        taken = sum(r[3] for r in recent)
        if elapsed <= 0:
            return
        capacity = self._worker_capacity(ray, names)
        wait_share = waited / elapsed
        if wait_share > SCALE_UP_WAIT and len(names) < config.max_workers:
            self._quiet_ticks = 0
            wanted = taken / max(elapsed - waited, 1e-9) * len(recent)
            target = len(names) + 1
            if capacity:
                target = max(target, math.ceil(wanted / capacity))
            target = min(target, config.max_workers)
            self._add_workers(target - len(names),
                              f"consumers waited {wait_share:.0%} of the time; they would "
                              f"take {wanted:.1f} items/s, a worker makes "
                              f"{capacity or 0:.1f}/s")
        elif wait_share < SCALE_DOWN_WAIT and len(names) > config.min_workers:
            self._quiet_ticks += 1
            rate = taken / elapsed * len(recent)
            enough = capacity is not None and (len(names) - 1) * capacity >= 1.25 * rate
            if self._quiet_ticks >= SCALE_DOWN_TICKS and enough:
                self._quiet_ticks = 0
                self._retire(names[-1], f"consumers waited {wait_share:.1%} of the time; "
                             f"they take {rate:.1f} items/s, {len(names) - 1} workers make "
                             f"{(len(names) - 1) * (capacity or 0):.1f}/s")
        else:
            self._quiet_ticks = 0

    def _worker_capacity(self, ray: Any, names: list[str]) -> float | None:
        """Items per second of producing, per worker, since the last tick (``None``: no
        worker produced)."""
        with self._lock:
            handles = [self._handles[name] for name in names]
        try:
            statuses = ray.get([handle.status.remote() for handle in handles],
                               timeout=self._config.autoscale_interval)
        except Exception:  # noqa: BLE001 - a worker restarting: no measure this tick
            return None
        produced = busy = 0.0
        for status in statuses:
            before = self._worker_totals.get(status["name"], (0, 0.0))
            # Totals fall when tasks end; count only what grew.
            produced += max(0, status["produced"] - before[0])
            busy += max(0.0, status["busy_seconds"] - before[1])
            self._worker_totals[status["name"]] = (status["produced"], status["busy_seconds"])
        return produced / busy if busy > 0 and produced > 0 else None

    def _add_workers(self, count: int, reason: str) -> None:
        with self._lock:
            existing = set(self._handles) | set(self._table.workers)
            added = []
            index = 0
            while len(added) < count:
                name = f"{self._config.name}-worker-{index}"
                index += 1
                if name in existing:
                    continue
                self._handles[name] = start_worker(self._config, name)
                added.append(name)
            self._table.set_workers([*self._table.workers, *added])
        self._decide("add", reason, added)

    def _retire(self, name: str, reason: str) -> None:
        with self._lock:
            self._table.set_workers([n for n in self._table.workers if n != name])
            self._retiring[name] = time.monotonic()
        self._decide("retire", reason, [name])

    def _end_retired(self, ray: Any) -> None:
        with self._lock:
            retiring = dict(self._retiring)
        for name, since in retiring.items():
            handle = self._handles[name]
            try:
                idle = ray.get(handle.status.remote(), timeout=5)["tasks"] == 0
            except Exception:  # noqa: BLE001 - dead already: nothing left to wait for
                idle = True
            if idle or time.monotonic() - since > RETIRE_GRACE:
                ray.kill(handle, no_restart=True)
                with self._lock:
                    self._retiring.pop(name, None)
                    self._handles.pop(name, None)
                self._decide("end", "retired worker " + ("idle" if idle else "timed out"),
                             [name])

    def _decide(self, action: str, reason: str, workers: list[str] | None = None) -> None:
        with self._lock:
            self._decisions.append({"time": time.time(), "action": action,
                                    "workers": workers or [], "reason": reason})
            del self._decisions[:-100]

    # ------------------------------------------------------------------ the service
    def statistics(self) -> dict[str, Any]:
        """Workers (active and retiring), the autoscaler's decisions, jobs."""
        with self._lock:
            return {"workers": list(self._table.workers),
                    "retiring": sorted(self._retiring),
                    "decisions": list(self._decisions),
                    "jobs": [job.describe() for job in self._table.jobs.values()],
                    "restarted": self.restarted}

    def stop(self) -> list[str]:
        """Stop autoscaling and end every worker; their names."""
        self._stop.set()
        if self._autoscaler is not None:
            self._autoscaler.join(timeout=10)
        ray = import_ray()
        with self._lock:
            handles = dict(self._handles)
            self._handles.clear()
        for handle in handles.values():
            try:
                ray.get(handle.shutdown.remote(timeout=2.0), timeout=5)
            except Exception:  # noqa: BLE001, S110 - the kill below ends it anyway
                pass
            ray.kill(handle, no_restart=True)
        self._journal.close()
        return sorted(handles)
