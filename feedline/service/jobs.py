"""The dispatcher's bookkeeping of jobs and splits, kept apart from Ray so it can be tested alone.

Every change is an event; :class:`JobTable` applies events to itself the same way whether
they are new (then they are journaled first) or replayed from the journal after a restart,
so a restarted dispatcher is exactly where the old one was.

Exactly once in ``distributed_epoch``: a split is *pending*, *assigned* to one consumer (who
has it run on some worker and reads it), or *done* (that consumer read all of it). A
consumer that stops early gives its unfinished splits back with how many items of each it
handed to its user; they are pending again and resume from there. A worker dying does not
concern the table at all: the consumer that owns the split has it run again elsewhere from
the items it already received. A consumer asking twice with the same request number (its
first answer was lost to a dispatcher restart) gets the same answer again.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from feedline.core.errors import ServiceError
from feedline.service.journal import Journal

KEPT_JOBS = 1024
"""Jobs the dispatcher remembers; beyond that the oldest that no consumer reads a split of
are forgotten (a consumer asking for a forgotten job's splits gets a ServiceError)."""


@dataclasses.dataclass
class Job:
    """One job: a pipeline, how it is processed, and (``distributed_epoch``) its splits."""

    job_id: int
    key: str
    mode: str
    num_splits: int
    num_consumers: int | None
    workers: list[str]
    pending: collections.deque[int] = dataclasses.field(default_factory=collections.deque)
    resume: dict[int, int] = dataclasses.field(default_factory=dict)
    assigned: dict[int, str] = dataclasses.field(default_factory=dict)
    done: set[int] = dataclasses.field(default_factory=set)
    consumers: set[str] = dataclasses.field(default_factory=set)
    left_at: float | None = None
    replies: dict[str, tuple[int, Any]] = dataclasses.field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """A summary for statistics."""
        return {"job_id": self.job_id, "key": self.key, "mode": self.mode,
                "num_splits": self.num_splits, "pending": len(self.pending),
                "assigned": len(self.assigned), "done": len(self.done)}


class JobTable:
    """Jobs by id and by key; journaled when given a journal.

    Example:
        >>> table = JobTable()
        >>> job = table.create("epoch-0", "distributed_epoch", 3, None, ["w0"], None)
        >>> [table.next_split(job, "trainer", request) for request in range(4)]
        [[0, 0], [1, 0], [2, 0], None]
        >>> table.split_done(job, 0); table.split_done(job, 2)
        >>> table.release(job, "trainer", {1: 5})
        >>> table.next_split(job, "trainer", 4)
        [1, 5]
    """

    def __init__(self, journal: Journal | None = None, job_gc_seconds: float = 300.0) -> None:
        self._journal = journal
        self._job_gc_seconds = job_gc_seconds
        self.jobs: dict[int, Job] = {}
        self.by_key: dict[str, int] = {}
        self.workers: list[str] = []
        self._next_id = 0
        """The service's workers, in the order they were added."""
        if journal is not None:
            for line, event in journal.entries():
                self._replay(journal, line, event)

    # ------------------------------------------------------------------ the operations
    def create(self, key: str, mode: str, num_splits: int, num_consumers: int | None,
               workers: list[str], position: dict[str, Any] | None,
               consumer: str = "") -> int:
        """The id of the job ``key`` that ``consumer`` joins, created (from ``position``,
        when restoring) if new.

        ``position`` is ``{"done": [splits], "partial": {split: items}}``.
        """
        job_id = self._create(key, mode, num_splits, num_consumers, workers, position)
        if consumer not in self.jobs[job_id].consumers:
            self._record({"op": "join", "job": job_id, "consumer": consumer})
        return job_id

    def _create(self, key: str, mode: str, num_splits: int, num_consumers: int | None,
                workers: list[str], position: dict[str, Any] | None) -> int:
        existing = self.by_key.get(key)
        if existing is not None and self._expired(self.jobs[existing]):
            self.forget(existing)
            existing = None
        if existing is not None:
            job = self.jobs[existing]
            if (job.mode, job.num_splits, job.num_consumers) != (mode, num_splits,
                                                                  num_consumers):
                raise ServiceError(
                    f"job {key!r} exists with processing_mode={job.mode!r}, "
                    f"{job.num_splits} splits, num_consumers={job.num_consumers}; this "
                    f"consumer asks for {mode!r}, {num_splits} splits, "
                    f"num_consumers={num_consumers}: consumers sharing a job_name must run "
                    "the same pipeline the same way")
            return existing
        job_id = self._next_id  # never reused: a late call about a forgotten job fails
        self._record({"op": "create", "job": job_id, "key": key, "mode": mode,
                      "num_splits": num_splits, "num_consumers": num_consumers,
                      "workers": list(workers), "position": position})
        idle = [old for old, job in self.jobs.items() if not job.assigned and old != job_id]
        for old in idle[:max(0, len(self.jobs) - KEPT_JOBS)]:  # oldest first
            self.forget(old)
        return job_id

    def next_split(self, job_id: int, consumer: str, request: int) -> list[int] | None:
        """``[split, items to skip]`` for ``consumer`` to read next, or ``None``: no split
        is left to hand out."""
        job = self._job(job_id)
        answered = job.replies.get(consumer)
        if answered is not None and answered[0] == request:
            return answered[1]
        if not job.pending:
            self._record({"op": "none", "job": job_id, "consumer": consumer,
                          "request": request})
            return None
        split = job.pending[0]
        self._record({"op": "assign", "job": job_id, "consumer": consumer,
                      "request": request, "split": split})
        return [split, job.resume.get(split, 0)]

    def split_done(self, job_id: int, split: int) -> None:
        """The consumer that owned ``split`` has read all of it."""
        job = self._job(job_id)
        if not _is_int(split) or split >= job.num_splits:
            raise ServiceError(f"job {job_id} has splits 0 to {job.num_splits - 1}, not "
                               f"{split!r}")
        if split not in job.done:
            self._record({"op": "done", "job": job_id, "split": split})

    def release(self, job_id: int, consumer: str, partial: dict[int, int]) -> None:
        """``consumer`` stops: its unfinished splits are pending again, each resuming after
        the items ``partial`` says it handed out (0 when not listed). A job its last
        consumer left ``job_gc_seconds`` ago with nothing left to hand out is over: a
        consumer naming it then starts a new one (tf.data's job garbage collection), so
        that a training run started again with the same ``job_name`` gets its data, while
        a trainer joining a pass its peers just finished does not get it twice."""
        job = self.jobs.get(job_id)
        if job is None:
            return  # forgotten already
        owned = [split for split, owner in job.assigned.items() if owner == consumer]
        self._record({"op": "release", "job": job_id, "consumer": consumer,
                      "partial": {str(split): int(partial.get(split, 0)) for split in owned},
                      "time": time.time()})

    def _expired(self, job: Job) -> bool:
        """Whether ``job`` is over: every consumer left it at least ``job_gc_seconds`` ago
        with nothing left to hand out (always, for ``parallel_epochs``)."""
        finished = job.mode == "parallel_epochs" or not (job.pending or job.assigned)
        return finished and not job.consumers and job.left_at is not None and \
            time.time() - job.left_at >= self._job_gc_seconds

    def set_workers(self, workers: list[str]) -> None:
        """The service's workers are now ``workers`` (the autoscaler changed them)."""
        if workers != self.workers:
            self._record({"op": "workers", "workers": list(workers)})

    def forget(self, job_id: int) -> None:
        """Drop a job that no consumer reads any more."""
        if job_id in self.jobs:
            self._record({"op": "forget", "job": job_id})

    # ------------------------------------------------------------------ events
    def _job(self, job_id: int) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise ServiceError(f"the dispatcher has no job {job_id} (it ended, or the "
                               "dispatcher's journal was lost)")
        return job

    def _record(self, event: dict[str, Any]) -> None:
        try:  # never journal what a restarted dispatcher could not replay
            _check_event(event)
        except _BadEvent as error:
            raise ServiceError(f"the dispatcher refuses a request: {error}") from None
        if self._journal is not None:
            self._journal.append(event)
        self._apply(event)

    def _replay(self, journal: Journal, line: int, event: dict[str, Any]) -> None:
        """Apply ``event``, line ``line`` of ``journal``, checked first: the file may be
        damaged or crafted, and a raw ``KeyError`` would name neither it nor the line."""
        try:
            _check_event(event)
            self._apply(event)
        except _BadEvent as error:
            problem = str(error)
        except (KeyError, TypeError, ValueError, AttributeError) as error:  # missed by the check
            problem = f"it cannot be applied ({type(error).__name__}: {error})"
        else:
            return
        raise ServiceError(f"{journal.path}: line {line}: {problem}; the dispatcher cannot "
                           "recover its state from this journal")

    def _apply(self, event: dict[str, Any]) -> None:
        op = event["op"]
        if op == "workers":
            self.workers = list(event["workers"])
            return
        if op == "create":
            if event["job"] in self.jobs:
                raise _BadEvent(f"a 'create' event of job {event['job']}, which an earlier "
                                "line created (expected a new job number)")
            job = Job(event["job"], event["key"], event["mode"], event["num_splits"],
                      event["num_consumers"], list(event["workers"]))
            position = event["position"] or {}
            job.done = {int(split) for split in position.get("done", ())}
            job.resume = {int(split): int(items)
                          for split, items in position.get("partial", {}).items()}
            # Partly read splits first: their consumers' checkpoints are furthest along.
            order = sorted(range(job.num_splits), key=lambda s: (s not in job.resume, s))
            job.pending.extend(split for split in order if split not in job.done)
            self.jobs[job.job_id] = job
            self.by_key[job.key] = job.job_id
            self._next_id = max(self._next_id, job.job_id + 1)
            return
        job = self.jobs.get(event["job"])
        if job is None:
            raise _BadEvent(f"{op!r} event of job {event['job']}, which no earlier line "
                            "creates (expected a job created by an earlier 'create' line "
                            "and not ended by a 'forget' line)")
        if op == "assign":
            split = event["split"]
            if split not in job.pending:
                pending = sorted(job.pending)
                shown = str(pending[:8])[:-1] + (", ...]" if len(pending) > 8 else "]")
                raise _BadEvent(f"'assign' event of split {split} of job {job.job_id}, which "
                                f"is not pending there (expected one of {shown})")
            job.pending.remove(split)
            job.assigned[split] = event["consumer"]
            job.replies[event["consumer"]] = (event["request"], [split, job.resume.get(split, 0)])
        elif op == "none":
            job.replies[event["consumer"]] = (event["request"], None)
        elif op == "done":
            if not 0 <= event["split"] < job.num_splits:
                raise _BadEvent(f"'done' event of split {event['split']} of job {job.job_id}, "
                                f"which has {job.num_splits} splits")
            if event["split"] in job.pending:
                job.pending.remove(event["split"])
            job.assigned.pop(event["split"], None)
            job.resume.pop(event["split"], None)
            job.done.add(event["split"])
        elif op == "join":
            job.consumers.add(event["consumer"])
        elif op == "release":
            job.consumers.discard(event["consumer"])
            job.left_at = event.get("time")
            for split_key, items in event["partial"].items():
                split = int(split_key)
                if job.assigned.get(split) != event["consumer"]:
                    raise _BadEvent(
                        f"'release' event giving back split {split} of job {job.job_id}, "
                        f"which is not assigned to consumer {event['consumer']!r} (expected "
                        "only splits it was assigned)")
                job.assigned.pop(split, None)
                job.resume[split] = items
                job.pending.appendleft(split)
        elif op == "forget":
            del self.jobs[job.job_id]
            self.by_key.pop(job.key, None)
        else:
            raise _BadEvent(f"unknown journal event {op!r} (expected one of "
                            f"{', '.join(sorted(_EVENTS))})")


class _BadEvent(Exception):
    """A journal event that is malformed or does not follow from the events before it."""


def _is_int(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _is_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(name, str) for name in value)


def _is_counts(value: Any) -> bool:
    """``{"split": items}``: split numbers (as JSON's string keys) to item counts."""
    return isinstance(value, dict) and all(
        isinstance(key, str) and key.isdigit() and key.isascii() and _is_int(items)
        for key, items in value.items())


def _is_position(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, dict) or set(value) - {"done", "partial"}:
        return False
    done = value.get("done", [])
    return isinstance(done, list) and all(_is_int(split) for split in done) and \
        _is_counts(value.get("partial", {}))


_JOB = ("a job number (an int >= 0)", _is_int)
_CONSUMER = ("a consumer name (a string)", lambda value: isinstance(value, str))
_REQUEST = ("a request number (an int)", lambda value: _is_int(value, -2**63))
_SPLIT = ("a split number (an int >= 0)", _is_int)
_EVENTS: dict[str, dict[str, tuple[str, Callable[[Any], bool]]]] = {
    "workers": {"workers": ("a list of worker names", _is_names)},
    "create": {
        "job": _JOB, "key": ("a job key (a string)", lambda value: isinstance(value, str)),
        "mode": ("a processing mode (a string)", lambda value: isinstance(value, str)),
        "num_splits": ("a number of splits (an int >= 0)", _is_int),
        "num_consumers": ("null or a number of consumers (an int >= 1)",
                          lambda value: value is None or _is_int(value, 1)),
        "workers": ("a list of worker names", _is_names),
        "position": ('null or {"done": [splits], "partial": {"split": items}}',
                     _is_position)},
    "assign": {"job": _JOB, "consumer": _CONSUMER, "request": _REQUEST, "split": _SPLIT},
    "none": {"job": _JOB, "consumer": _CONSUMER, "request": _REQUEST},
    "done": {"job": _JOB, "split": _SPLIT},
    "join": {"job": _JOB, "consumer": _CONSUMER},
    "release": {"job": _JOB, "consumer": _CONSUMER,
                "partial": ('{"split": items} (split numbers to item counts)', _is_counts)},
    "forget": {"job": _JOB},
}
"""What each journal event holds: its fields, each with what it must be."""


def _check_event(event: dict[str, Any]) -> None:
    """Raise :class:`_BadEvent` (saying what was expected) unless ``event`` has the fields
    its ``op`` needs, of the right types."""
    op = event["op"]
    fields = _EVENTS.get(op)
    if fields is None:
        raise _BadEvent(f"unknown journal event {op!r} (expected one of "
                        f"{', '.join(sorted(_EVENTS))})")
    for field, (expected, valid) in fields.items():
        if field not in event:
            raise _BadEvent(f"{op!r} event without {field!r} (expected {expected})")
        if not valid(event[field]):
            raise _BadEvent(f"{op!r} event's {field!r} is {event[field]!r} (expected "
                            f"{expected})")
    moment = event.get("time")
    if op == "release" and moment is not None and (
            isinstance(moment, bool) or not isinstance(moment, int | float)):
        raise _BadEvent(f"'release' event's 'time' is {moment!r} (expected a Unix time)")
