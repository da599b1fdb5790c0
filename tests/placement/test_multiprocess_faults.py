"""Adversarial fault tests of ``Dataset.multiprocess`` (issue 9, "Faults" and "No hangs").

Every test proves that the worker processes it started have ended (by pid, and no child
process of this one is left) and that nothing was left in ``/dev/shm`` nor mapped from a
``memfd`` of the transport once the elements received are freed.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

import feedline as fl
from feedline.core import pipeline_state
from feedline.core.error_records import is_fatal
from feedline.placement.multiprocess import MAX_RESTARTS, MultiprocessIterator
from feedline.transforms.ignore_errors import errors_ignored

QUICK = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.5))
DEADLINE = 20.0  # seconds a process gets to end: generous, only a bound against hangs
REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------- helpers
def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its exit status is left)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _wait_gone(pids, deadline: float = DEADLINE) -> list[int]:
    """The pids still alive after up to ``deadline`` seconds of polling."""
    end = time.monotonic() + deadline
    while True:
        left = [pid for pid in pids if pid is not None and _alive(pid)]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


def _shm() -> set[str]:
    """Entries of ``/dev/shm`` that could be feedline's (other programs on this machine
    create and remove theirs concurrently: those are not this test's to judge)."""
    try:
        return {name for name in os.listdir("/dev/shm") if "feedline" in name}
    except FileNotFoundError:
        return set()


_SHM_SEEN: set[str] = set()  # /dev/shm files a process of a test had open or mapped


def _note_shm_use(pids) -> None:
    """Record the ``/dev/shm`` files that this process and ``pids`` use now."""
    for pid in ["self", *pids]:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                _SHM_SEEN.update(line.split(None, 5)[-1].strip() for line in maps
                                 if "/dev/shm/" in line)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    _SHM_SEEN.add(target)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass


def _feedline_mappings() -> list[str]:
    """Shared-memory mappings of the transport still in this process."""
    with open("/proc/self/maps") as maps:
        return [line for line in maps if "memfd:feedline" in line]


def _children() -> list[int]:
    return [c.pid for c in psutil.Process().children(recursive=True) if _alive(c.pid)]


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(autouse=True)
def no_leaks():
    """After the test: no child process, no new ``/dev/shm`` entry, no transport mapping."""
    _kill(_children())  # a failed test's leftovers must not fail the next one too
    before = _shm()
    yield
    gc.collect()
    end = time.monotonic() + DEADLINE
    while _children() and time.monotonic() < end:
        time.sleep(0.05)
    left = _children()
    _kill(left)
    assert not left, "worker processes were left running"
    assert not (_shm() - before), f"left in /dev/shm: {sorted(_shm() - before)}"
    left_shm = sorted(path for path in _SHM_SEEN if os.path.exists(path.split(" (")[0]))
    _SHM_SEEN.clear()
    assert not left_shm, f"shared memory files left: {left_shm}"
    assert not _feedline_mappings(), "shared memory of the transport is still mapped"


def _stage(it) -> MultiprocessIterator:
    """The multiprocess iterator inside the pipeline iterator ``it``."""
    stack = [it._root]
    while stack:
        node = stack.pop()
        if isinstance(node, MultiprocessIterator):
            return node
        stack.extend(getattr(node, "_inputs", []))
        upstream = getattr(node, "_upstream", None)
        if upstream is not None:
            stack.append(upstream)
    raise AssertionError("no multiprocess stage in this pipeline")


def _pids(it) -> list[int]:
    pids = _stage(it).worker_pids
    assert pids and None not in pids, pids
    _note_shm_use(pids)
    return pids


def _value(x):
    return x.tolist() if isinstance(x, (np.ndarray, np.generic)) else x


def _outcomes(it, limit: int = 1000) -> list:
    """Every outcome of ``it`` until it ends: values, and ``(type, message)`` for errors."""
    out = []
    for _ in range(limit):
        try:
            out.append(_value(next(it)))
        except StopIteration:
            return out
        except Exception as error:  # noqa: BLE001 - recorded in place
            out.append((type(error), str(error)))
    raise AssertionError("the iterator did not end")


def _errors_as_text(outcomes: list) -> list:
    """``outcomes`` with each error as ``"<ValueError?> message"`` (restored errors are
    subclasses of the original type)."""
    return [f"{issubclass(o[0], ValueError)} {o[1]}" if isinstance(o, tuple) else o
            for o in outcomes]


def _all_outcomes(ds: fl.Dataset) -> list:
    """The outcomes of a whole pass over ``ds``, its iterator closed at once."""
    with iter(ds) as it:
        return _errors_as_text(_outcomes(it))


def _notes(error: BaseException) -> str:
    return "\n".join(getattr(error, "__notes__", []))


def _next_or_error(it, limit: int | None = 12) -> tuple[list, BaseException]:
    """Values taken until ``next(it)`` raises (within ``limit`` calls, or with ``None``
    within ``DEADLINE`` seconds), and the error."""
    values = []
    end = time.monotonic() + DEADLINE
    while (len(values) < limit) if limit is not None else (time.monotonic() < end):
        try:
            values.append(_value(next(it)))
        except Exception as error:  # noqa: BLE001 - what the caller checks
            return values, error
    raise AssertionError(f"no error within {limit} next() calls: {values[:20]}...")


def _assert_raised_again(it, error: BaseException) -> None:
    """After a fatal error, every later ``next()`` raises it again, never ``StopIteration``
    (which code going on after the error would read as a complete epoch)."""
    for _ in range(2):
        with pytest.raises(fl.WorkerProcessError) as again:
            next(it)
        assert is_fatal(again.value) and again.value.worker == error.worker
        assert str(again.value) == str(error) and "raised again" in _notes(again.value)


def _run_script(tmp_path: Path, body: str, name: str = "script.py") -> subprocess.Popen:
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                            start_new_session=True)


def _read_pids(process: subprocess.Popen) -> list[int]:
    """The worker pids the script prints on a line ``PIDS a b`` (waits for that line)."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("PIDS"):
            return [int(p) for p in line.split()[1:]]
    process.wait(DEADLINE)
    raise AssertionError(f"the script printed no pids: {process.stderr.read()}")


def _stuck_at(stuck: int, how: str = "sleep"):
    """A map function that never returns for element ``stuck``."""

    def f(x):
        if int(x) == stuck:
            if how == "sleep":
                time.sleep(1000)
            elif how == "event":
                threading.Event().wait()
            elif how == "ignore_sigterm":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                time.sleep(1000)
        return x

    return f


# ---------------------------------------------------------------------------- user errors
def check_element(x):
    if int(x) in (3, 8):
        raise ValueError(f"bad element {int(x)}")
    return x


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_user_error_is_raised_in_place_as_itself_with_traceback_and_stage_name():
    ds = fl.Dataset.range(12).map(check_element).multiprocess(2, name="mp_stage")
    it = iter(ds)
    outcomes = []
    for _ in range(12):
        try:
            outcomes.append(int(next(it)))
        except ValueError as error:  # stays catchable as its own type
            notes = "\n".join(getattr(error, "__notes__", []))
            assert "Traceback" in notes and "check_element" in notes, notes
            assert 'raise ValueError(f"bad element' in notes, notes
            assert "mp_stage" in notes and "worker process" in notes, notes
            outcomes.append(str(error))
    assert outcomes == [0, 1, 2, "bad element 3", 4, 5, 6, 7, "bad element 8", 9, 10, 11]
    pids = _pids(it)
    with pytest.raises(StopIteration):
        next(it)
    it.close()
    assert not _wait_gone(pids)


def _raised_in(error: BaseException) -> list[str]:
    return [n for n in getattr(error, "__notes__", []) if n.startswith("feedline: raised in ")
            and "worker process" not in n]


def _first_error(ds: fl.Dataset) -> BaseException:
    with iter(ds) as it:
        while True:
            try:
                next(it)
            except StopIteration:
                raise AssertionError("no error") from None
            except ValueError as error:
                return error


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_an_error_names_the_pipelines_element_not_the_shards_count():
    # Element 37 is element 18 of worker 1's shard (every other element): the note names
    # 37, as one process does, and says which shard's 18 it was.
    ds = fl.Dataset.range(100).map(check_element_37, name="check")
    error = _first_error(ds.multiprocess(2))
    assert _raised_in(error) == [
        "feedline: raised in check at input element 37 (element 18 of worker 1's shard)"]
    assert _raised_in(_first_error(ds)) == ["feedline: raised in check at input element 37"]


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_under_batch_sharding_errors_name_the_pipelines_element_and_batch():
    # Blocks of 4 (the batches) in turn: element 130 is element 66 of worker 0's shard;
    # batch 7 is batch 3 of worker 1's.
    below = fl.Dataset.range(200).map(check_element_130, name="below").batch(4)
    error = _first_error(below.multiprocess(2))
    assert _raised_in(error) == [
        "feedline: raised in below at input element 130 (element 66 of worker 0's shard)"]
    above = fl.Dataset.range(200).batch(4).map(check_batch_7, name="above")
    error = _first_error(above.multiprocess(2))
    assert _raised_in(error) == [
        "feedline: raised in above at input element 7 (element 3 of worker 1's shard)"]
    assert _raised_in(_first_error(above)) == ["feedline: raised in above at input element 7"]


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_a_stage_name_two_stages_share_keeps_the_shards_count():
    # Which of the two raised is not known in the worker: its own count, as it was.
    ds = fl.Dataset.range(100).map(check_element_37, name="same").map(
        lambda x: x, name="same")
    assert _raised_in(_first_error(ds.multiprocess(2))) == [
        "feedline: raised in same at input element 18"]


def check_element_37(x):
    if int(x) == 37:
        raise ValueError("bad element 37")
    return x


def check_element_130(x):
    if int(x) == 130:
        raise ValueError("bad element 130")
    return x


def check_batch_7(batch):
    if int(batch[0]) == 28:
        raise ValueError("bad batch 7")
    return batch


def check_block_end(x):
    if int(x) in (3, 9):  # the last element of a batch of 2
        raise ValueError(f"bad element {int(x)}")
    return x


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_ignore_errors_after_multiprocess_drops_exactly_the_failed_batches():
    base = fl.Dataset.range(20).map(check_block_end).batch(2)
    outcomes = _all_outcomes(base.multiprocess(2))
    assert outcomes == _all_outcomes(base)  # errors in place: the same as one process
    failed = [o for o in outcomes if isinstance(o, str)]
    assert failed == ["True bad element 3", "True bad element 9"]
    it = iter(base.multiprocess(2).ignore_errors())
    assert [_value(b) for b in it] == [o for o in outcomes if not isinstance(o, str)]
    pids = _pids(it)
    it.close()
    assert not _wait_gone(pids)


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_an_error_inside_a_global_batch_keeps_every_element():
    # Element 8 fails at the start of block [8, 9] of worker 0: the batches after it differ
    # from one process's (whose later batch boundaries all shift by one), the elements not.
    base = fl.Dataset.range(20).map(check_element).batch(2)
    single = [o for o in _all_outcomes(base) if not isinstance(o, str)]
    got = [_value(b) for b in base.multiprocess(2).ignore_errors()]
    assert sorted(x for b in got for x in b) == sorted(x for b in single for x in b)


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_after_an_error_inside_a_global_batch_nothing_is_repeated():
    # autoshard's documented exception to exact_order: batches after the failure differ
    # from one process's, the elements do not.
    base = fl.Dataset.range(20).map(check_element).batch(2)
    assert base.multiprocess(2).sharding().policy == "batch"
    outcomes = _all_outcomes(base.multiprocess(2))
    values = [x for o in outcomes if not isinstance(o, str) for x in o]
    # As in one process, a failed batch is dropped whole; nothing is repeated, the
    # failures are raised once each, and the batches before the first failure are exact.
    assert len(values) == len(set(values)) and not {3, 8} & set(values)
    assert [o for o in outcomes if isinstance(o, str)] == \
        [o for o in _all_outcomes(base) if isinstance(o, str)]
    assert outcomes[:1] == _all_outcomes(base)[:1]


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_unordered_errors_are_all_raised_and_nothing_else_is_lost():
    it = iter(fl.Dataset.range(20).map(check_element).multiprocess(2, deterministic=False))
    outcomes = _outcomes(it)
    values = sorted(x for x in outcomes if isinstance(x, int))
    errors = sorted(message for kind, message in (o for o in outcomes if isinstance(o, tuple))
                    if issubclass(kind, ValueError))
    assert values == [x for x in range(20) if x not in (3, 8)]
    assert errors == ["bad element 3", "bad element 8"] and len(outcomes) == 20
    it.close()


# ---------------------------------------------------------------------------- killed workers
def _kill_then_finish(ds, kill_after: int, victim: int) -> tuple[list, fl.WorkerProcessError]:
    """Take ``kill_after`` elements (and more until both workers have sent one: see
    :func:`test_a_worker_that_dies_before_it_started_is_restarted`), SIGKILL worker
    ``victim``, read on to the end. Elements are batches of 4 of ``range(64) * 10``: batch
    ``b`` is worker ``b % 2``'s."""
    it = iter(ds)
    got = [_value(next(it)) for _ in range(kill_after)]
    while len({b[0] // 40 % 2 for b in got}) < 2:
        got.append(_value(next(it)))
    pids = _pids(it)
    os.kill(pids[victim], signal.SIGKILL)
    # The death is seen in a next() that waits for that worker: elements it sent before
    # dying come first, so at most buffer_size (2) of its elements, and the other
    # worker's in between, precede the error.
    more, error = _next_or_error(it, limit=8)
    assert isinstance(error, fl.WorkerProcessError), repr(error)
    assert error.worker == victim and error.exitcode == -signal.SIGKILL
    assert "SIGKILL" in str(error) and str(pids[victim]) in str(error)
    assert f"worker {victim}" in _notes(error) and "restart" in _notes(error)
    got += more
    got += [_value(x) for x in it]  # restarted from its last position
    new_pids = _stage(it).worker_pids
    assert new_pids[victim] != pids[victim]
    it.close()
    assert not _wait_gone([*pids, *new_pids])
    return got, error


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_sigkill_of_a_worker_is_an_error_then_nothing_is_lost_or_repeated():
    ds = fl.Dataset.range(64).map(lambda x: x * 10).batch(4)
    expected = [_value(b) for b in ds]
    got, _ = _kill_then_finish(ds.multiprocess(2), kill_after=3, victim=1)
    assert got == expected


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", [0, 1])
@pytest.mark.slow
def test_sigkill_unordered_keeps_every_element_once(victim):
    # Shards that never end (a worker that has finished its shard may die harmlessly):
    # batch b is worker b % 2's; each worker's batches must arrive as 0, 1, 2, ... of its
    # shard, across the death, with no gap and no repeat.
    ds = fl.Dataset.range(10**9).batch(4).multiprocess(2, deterministic=False)
    it = iter(ds)
    got = [_value(next(it)) for _ in range(2)]
    while len({b[0] // 4 % 2 for b in got}) < 2:
        got.append(_value(next(it)))
    pids = _pids(it)
    os.kill(pids[victim], signal.SIGKILL)
    # The other worker keeps the consumer busy: the death is seen when the dead one's
    # socket is polled, not after a fixed number of elements.
    more, error = _next_or_error(it, limit=None)
    assert isinstance(error, fl.WorkerProcessError) and error.worker == victim, repr(error)
    got += more
    while sum(1 for b in got if b[0] // 4 % 2 == victim) < 12:
        got.append(_value(next(it)))
    new_pids = _stage(it).worker_pids
    it.close()
    for worker in (0, 1):
        mine = [b[0] // 8 for b in got if b[0] // 4 % 2 == worker]
        assert mine == list(range(len(mine))), (worker, mine)
        assert all(b == list(range(b[0], b[0] + 4)) for b in got)
    assert new_pids[victim] != pids[victim] and not _wait_gone([*pids, *new_pids])


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_sigkill_of_a_worker_with_shared_memory_batches_loses_nothing():
    # Batches of 256 KiB travel in shared memory: a worker killed with buffers lent.
    ds = fl.Dataset.range(24).map(lambda x: np.full((128, 64), x, np.float64)).batch(2)
    it = iter(ds.multiprocess(2))
    held = [next(it) for _ in range(3)]  # keep their shared memory mapped
    pids = _pids(it)
    os.kill(pids[0], signal.SIGKILL)
    more, error = _next_or_error(it, limit=8)
    assert isinstance(error, fl.WorkerProcessError)
    rest = list(it)
    firsts = [b[0][0][0] for b in more] + [float(b[0, 0, 0]) for b in [*held, *rest]]
    assert sorted(firsts) == [float(x) for x in range(0, 24, 2)]
    assert float(held[0][1, 5, 5]) == 1.0  # still valid after the sender died
    it.close()
    del held, rest
    assert not _wait_gone(pids)


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_a_worker_killed_more_than_max_restarts_times_ends_the_iteration():
    ds = fl.Dataset.range(200).batch(2).multiprocess(2)
    it = iter(ds)
    next(it)
    seen = set(_pids(it))
    for death in range(1, MAX_RESTARTS + 2):
        os.kill(_stage(it).worker_pids[0], signal.SIGKILL)
        _, error = _next_or_error(it, limit=8)
        assert isinstance(error, fl.WorkerProcessError), repr(error)
        seen.update(p for p in _stage(it).worker_pids if p is not None)
        if death <= MAX_RESTARTS:
            assert "worker 0" in _notes(error) and "restart" in _notes(error)
    assert f"died {MAX_RESTARTS + 1} times" in _notes(error)
    assert is_fatal(error)  # ignore_errors() raises it: the stream cannot go on
    _assert_raised_again(it, error)
    it.close()
    assert len(seen) == MAX_RESTARTS + 2 and not _wait_gone(seen)


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_close_right_after_a_death_ends_the_restarted_worker_too():
    it = iter(fl.Dataset.range(100).batch(2).multiprocess(2))
    next(it)
    pids = _pids(it)
    os.kill(pids[0], signal.SIGKILL)
    _, error = _next_or_error(it, limit=8)
    assert isinstance(error, fl.WorkerProcessError)
    restarted = _stage(it).worker_pids  # the replacement is already starting
    it.close()
    assert not _wait_gone([*pids, *restarted], deadline=1.0)  # close() waited for them


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_a_checkpoint_taken_right_after_a_death_restores_exactly():
    ds = fl.Dataset.range(40).map(lambda x: x * 3).batch(2).multiprocess(2)
    it = iter(ds)
    got = [_value(next(it)) for _ in range(3)]
    pids = _pids(it)
    os.kill(pids[1], signal.SIGKILL)
    more, error = _next_or_error(it, limit=8)
    assert isinstance(error, fl.WorkerProcessError)
    state = it.state_dict()  # the worker is being restarted from its last position
    rest = [_value(x) for x in it]
    assert got + more + rest == [_value(b) for b in fl.Dataset.range(40).map(
        lambda x: x * 3).batch(2)]
    it.close()
    with iter(ds) as restored:
        restored.load_state_dict(state)
        assert [_value(x) for x in restored] == rest
    assert not _wait_gone(pids)


class PickyError(ValueError):
    """An exception that does not survive pickling (its ``__init__`` takes two arguments)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code {code}: {detail}")
        self.lock = threading.Lock()


def raise_picky(x):
    if int(x) == 2:
        raise PickyError(7, "picky")
    return x


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_an_exception_that_does_not_pickle_still_arrives_as_its_base_type():
    with iter(fl.Dataset.range(5).map(raise_picky).multiprocess(2)) as it:
        outcomes = _outcomes(it)
    assert outcomes[:2] == [0, 1] and outcomes[3:] == [3, 4]
    kind, message = outcomes[2]
    assert issubclass(kind, ValueError) and message == "code 7: picky"


class _CrashOnLoad:
    """Unpickled in a worker, kills it (once per ``marker`` file): a worker that dies
    before it has built its pipeline and reported its start."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (_load_or_crash, (self.marker,))


def _load_or_crash(marker: str):
    from feedline.placement.worker_loop import in_worker_process

    if in_worker_process():
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))  # exactly one worker
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    return _CrashOnLoad(marker)


def _crash_once_at(element: int, marker: str, how: str):
    """A map function that ends its own worker process at ``element``, the first time."""

    def f(x):
        if int(x) == element:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return x
            if how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGSEGV)
        return x

    return f


@pytest.mark.timeout(60)
@pytest.mark.parametrize("deterministic", [True, False], ids=["ordered", "unordered"])
@pytest.mark.slow
def test_a_worker_crashing_in_a_user_function_is_restarted_and_loses_nothing(
        tmp_path, deterministic):
    how = "exit" if deterministic else "segv"
    ds = fl.Dataset.range(30).map(_crash_once_at(13, str(tmp_path / "crashed"), how))
    it = iter(ds.multiprocess(2, deterministic=deterministic))
    got, error = _next_or_error(it, limit=40)
    assert isinstance(error, fl.WorkerProcessError) and error.worker == 1, repr(error)
    assert error.exitcode == (3 if deterministic else -signal.SIGSEGV)
    assert ("exited with code 3" if deterministic else "SIGSEGV") in str(error)
    pids = _pids(it)
    got += [_value(x) for x in it]
    if deterministic:
        assert got == list(range(30))
        assert got[:13] == list(range(13))
    else:
        assert sorted(got) == list(range(30))
    it.close()
    assert not _wait_gone(pids)


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_a_worker_that_dies_before_it_started_is_restarted(tmp_path):
    # Found by this suite: an IndexError (its PositionTracker had no snapshot yet) instead
    # of a WorkerProcessError and a restart from the start of its shard.
    crash = _CrashOnLoad(str(tmp_path / "crashed"))
    ds = fl.Dataset.range(12).map(lambda x: (crash, x)[1]).multiprocess(2)
    with iter(ds) as it:
        got = []
        with pytest.raises(fl.WorkerProcessError):
            for _ in range(4):
                got.append(_value(next(it)))
        assert got + [_value(x) for x in it] == list(range(12))


def _exit_at(index: int, code: int = 3):
    """A map function that ends its worker process at element ``index``, every time."""

    def f(x):
        if int(x) == index:
            os._exit(code)
        return x

    return f


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_ignore_errors_gets_every_element_but_the_one_that_kills_its_worker():
    # Issue 29.1: 7 of 999 elements came out, and no error (the worker died at element 7
    # MAX_RESTARTS + 1 times, then the iteration ended as if complete).
    ds = fl.Dataset.range(100).map(_exit_at(7)).multiprocess(2)
    with iter(ds.ignore_errors()) as it:
        values = [int(x) for x in it]
        pids = [p for p in _stage(it).worker_pids if p is not None]
        # The death (the worker restarted, losing nothing) and element 7's own error.
        assert errors_ignored(it) == 2
    assert values == [x for x in range(100) if x != 7]
    assert not _wait_gone(pids)


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_an_element_that_kills_its_worker_is_its_own_error_in_its_place():
    it = iter(fl.Dataset.range(20).map(_exit_at(7)).multiprocess(2, name="mp_stage"))
    outcomes = []
    errors = []
    for _ in range(40):
        try:
            outcomes.append(_value(next(it)))
        except StopIteration:
            break
        except fl.WorkerProcessError as error:
            errors.append(error)
            outcomes.append("error")
    pids = [p for p in _stage(it).worker_pids if p is not None]
    it.close()
    # Element 7 is worker 1's element 3. Its first death restarts the worker (nothing
    # lost); watched, the map call that kills its process is element 7's error, in place.
    assert outcomes == [*range(7), "error", "error", *range(8, 20)]
    death, element = errors
    assert death.worker == 1 and death.exitcode == 3 and not is_fatal(death)
    assert "exited with code 3" in str(death) and "restarted" in _notes(death)
    assert "element 3 of its shard" in _notes(death)
    assert not is_fatal(element)
    assert str(element).startswith("map(_exit_at.<locals>.f): the worker process (pid ")
    assert "exited with code 3" in str(element)
    assert ("raised in map(_exit_at.<locals>.f) at input element 7 (element 3 of worker 1's "
            "shard)") in _notes(element)
    assert "worker process 1 of mp_stage" in _notes(element)
    assert not _wait_gone(pids)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_elements_that_kill_their_worker_in_every_shard_each_cost_only_themselves():
    def f(x):
        if int(x) in (4, 14, 15):  # worker 0's, then two in a row of worker 1's
            os.kill(os.getpid(), signal.SIGSEGV)
        return x

    ds = fl.Dataset.range(24).map(f).batch(2).multiprocess(2).ignore_errors()
    with iter(ds) as it:
        batches = [_value(b) for b in it]
        pids = [p for p in _stage(it).worker_pids if p is not None]
    # A failed batch is dropped, the next starts after the failing element (as in one
    # process); so the elements are all but the three, each once (batches differ after a
    # failure: autoshard's documented exception under the "batch" policy).
    assert sorted(x for b in batches for x in b) == [x for x in range(24)
                                                    if x not in (4, 14, 15)]
    assert not _wait_gone(pids)


def _exit_in_predicate_at(index: int):
    def keep(x):
        if int(x) == index:
            os._exit(5)
        return True

    return keep


@pytest.mark.timeout(120)
@pytest.mark.parametrize("with_map", [False, True], ids=["no_map", "map_before"])
@pytest.mark.slow
def test_a_death_outside_map_functions_ends_the_stream_with_a_fatal_error(with_map):
    # A filter's predicate kills the worker at element 7 every time: no map call can be
    # isolated around it, so the worker cannot get past it. That must be an error that
    # ignore_errors() raises, never an end that looks complete.
    ds = fl.Dataset.range(20)
    if with_map:
        ds = ds.map(lambda x: x + 0)
    ds = ds.filter(_exit_in_predicate_at(7)).multiprocess(2)
    it = iter(ds.ignore_errors())
    values = []
    with pytest.raises(fl.WorkerProcessError) as raised:
        for x in it:
            values.append(int(x))
    error = raised.value
    assert is_fatal(error) and error.worker == 1 and error.exitcode == 5
    assert "died again computing element 3 of its shard" in _notes(error)
    assert ("not a map function" if with_map else "no map function") in _notes(error)
    assert values == list(range(7))
    pids = [p for p in _stage(it).worker_pids if p is not None]
    _assert_raised_again(it, error)
    it.close()
    assert not _wait_gone(pids)


def _slow_at(index: int, marker: str):
    """A map function that writes a line to ``marker`` and waits 1.5 s at element ``index``
    (in whichever process runs it), so that a test can kill the process computing it."""

    def f(x):
        if int(x) == index:
            with open(marker, "a") as out:
                out.write(f"{os.getpid()}\n")
            time.sleep(1.5)
        return x

    return f


def _wait_for_lines(path: Path, count: int) -> None:
    end = time.monotonic() + DEADLINE
    while not (path.exists() and len(path.read_text().splitlines()) >= count):
        assert time.monotonic() < end, f"{path} never reached {count} lines"
        time.sleep(0.02)


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_outside_kills_while_watching_an_element_are_not_its_fault(tmp_path):
    # Issue 41.3: a worker killed from outside (SIGKILL) twice, the second time while it
    # watched the element its predecessor died on, ended the run as a "poison element"
    # ("what kills it is not a map function"). A signal sent from outside says nothing
    # about the element: the worker is restarted again, and nothing is lost.
    marker = tmp_path / "computing"
    ds = fl.Dataset.range(20).map(_slow_at(7, str(marker))).multiprocess(2)
    it = iter(ds)
    got = [_value(next(it)) for _ in range(7)]
    errors = []
    for kill in (1, 2):
        _wait_for_lines(marker, kill)  # worker 1 (then its watched restart) is computing 7
        pid = _stage(it).worker_pids[1]
        os.kill(pid, signal.SIGKILL)
        more, error = _next_or_error(it, limit=2)
        got += more
        errors.append(error)
    pids = [p for p in _stage(it).worker_pids if p is not None]
    got += [_value(x) for x in it]
    it.close()
    assert got == list(range(20))
    for error in errors:
        assert isinstance(error, fl.WorkerProcessError) and error.worker == 1
        assert error.exitcode == -signal.SIGKILL and not is_fatal(error)
        assert "restarted" in _notes(error), _notes(error)
    assert not _wait_gone(pids)


class CustomError(ValueError):
    """An importable exception class of the user's."""


def raise_custom(x):
    if int(x) == 2:
        raise CustomError(f"custom {int(x)}")
    return x


def _raise_local_class_at(index: int):
    class LocalError(Exception):
        """Defined in a function: plain pickle cannot send it, cloudpickle can."""

    def f(x):
        if int(x) == index:
            raise LocalError(f"local failure at {int(x)}")
        return x

    return f, LocalError


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_errors_arrive_as_their_own_class_with_the_worker_traceback():
    # Issue 29.10: they arrived as RestoredValueError-like classes.
    local_fn, local_error = _raise_local_class_at(3)
    ds = fl.Dataset.range(6).map(raise_custom).map(local_fn).multiprocess(2)
    with iter(ds) as it:
        outcomes = []
        for _ in range(6):
            try:
                outcomes.append(int(next(it)))
            except Exception as error:  # noqa: BLE001 - checked below
                outcomes.append(error)
    custom, local = outcomes[2], outcomes[3]
    assert outcomes[:2] + outcomes[4:] == [0, 1, 4, 5]
    assert type(custom) is CustomError and str(custom) == "custom 2"
    assert type(local) is local_error and str(local) == "local failure at 3"
    for error, function in ((custom, "raise_custom"), (local, "local_fn")):
        notes = _notes(error)
        assert "worker process" in notes and "Traceback" in notes
        assert f"in {function.split('_')[0]}" in notes or "in f" in notes


def _forged(it, **changes) -> dict:
    """``it``'s state with the multiprocess stage's fields changed, sealed again (as a
    forger who knows the format would)."""
    root = pipeline_state.open_sealed(it.state_dict(), it._fingerprint())
    root.update(changes)
    return pipeline_state.seal(root, it._fingerprint())


@pytest.mark.timeout(60)
def test_a_forged_state_cannot_start_more_workers_than_the_pipeline_allows():
    # Issue 29.8: a state asking for 48 workers started 48.
    ds = fl.Dataset.range(100).multiprocess(fl.AUTOTUNE)
    allowed = fl.Options().autotune_parallelism()
    with iter(ds) as it:
        forged = _forged(it, num_workers=48, ended=[False] * 48)
        zero = _forged(it, num_workers=0, ended=[])
    for state, saved in ((forged, 48), (zero, 0)):
        with iter(ds) as it:
            with pytest.raises(fl.CheckpointError) as raised:
                it.load_state_dict(state)
            assert not _children()
        message = str(raised.value)
        assert f"num_workers is {saved}" in message and f"allows 1 to {allowed}" in message


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_a_state_of_more_workers_than_autotune_starts_here_restores_when_allowed():
    # Saved where AUTOTUNE started more workers (a bigger machine): refused, unless the
    # options allow that many.
    ds = fl.Dataset.range(40).batch(2).multiprocess(fl.AUTOTUNE)
    allowed = fl.Options().autotune_parallelism()
    bigger = allowed + 1
    with iter(ds.with_options(fl.Options(threading=fl.ThreadingOptions(
            max_parallelism=bigger)))) as it:
        _stage(it)._reset_merge(bigger)  # as AUTOTUNE does on a machine with more CPUs
        head = [_value(next(it)) for _ in range(3)]
        state = it.state_dict()
    assert head == [[0, 1], [2, 3], [4, 5]]
    with iter(ds) as it:
        with pytest.raises(fl.CheckpointError, match=f"num_workers is {bigger}.*allows 1 to "
                           f"{allowed}.*max_parallelism={bigger}"):
            it.load_state_dict(state)
        assert not _children()
    options = fl.Options(threading=fl.ThreadingOptions(max_parallelism=bigger))
    with iter(ds.with_options(options)) as it:
        it.load_state_dict(state)
        rest = [_value(b) for b in it]
        assert len(_stage(it).worker_pids) == bigger
    merged = head + rest
    assert sorted(x for b in merged for x in b) == list(range(40))


# ---------------------------------------------------------------------------- close, timeouts
@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["sleep", "event", "ignore_sigterm"])
@pytest.mark.slow
def test_close_ends_a_worker_stuck_forever_in_a_user_function(how):
    ds = fl.Dataset.range(10).map(_stuck_at(3, how)).multiprocess(2).with_options(QUICK)
    it = iter(ds)
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    pids = _pids(it)
    time.sleep(0.2)  # let worker 1 enter the function for element 3 (not needed to pass)
    started = time.monotonic()
    it.close()
    assert time.monotonic() - started < DEADLINE  # bounded: close_timeout, TERM, KILL
    assert not _wait_gone(pids, deadline=1.0)  # close() returned: they are gone already
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_close_from_another_thread_ends_a_next_blocked_on_a_slow_worker():
    ds = fl.Dataset.range(10).map(_stuck_at(3)).multiprocess(2).with_options(QUICK)
    it = iter(ds)
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    pids = _pids(it)
    outcome: list = []
    entered = threading.Event()

    def consume():
        entered.set()
        try:
            outcome.append(next(it))
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    entered.wait()
    time.sleep(0.3)  # the consumer is (most likely) waiting in next(); either way must end
    it.close()
    consumer.join(DEADLINE)
    assert not consumer.is_alive(), "next() still blocked after close()"
    assert len(outcome) == 1 and isinstance(outcome[0], StopIteration), outcome
    assert not _wait_gone(pids)


@pytest.mark.timeout(60)
def test_element_timeout_on_a_stuck_worker_names_the_stage():
    options = fl.Options(threading=fl.ThreadingOptions(element_timeout=1.0, close_timeout=0.5))
    ds = fl.Dataset.range(10).map(_stuck_at(3)).multiprocess(2, name="slow_stage")
    it = iter(ds.with_options(options))
    values: list[int] = []
    for _ in range(30):  # the wait for a first element includes starting the worker
        try:
            values.append(int(next(it)))
        except TimeoutError:
            pass
        if len(values) == 3:
            break
    assert values == [0, 1, 2]
    pids = _pids(it)
    with pytest.raises(TimeoutError, match="slow_stage"):
        next(it)
    it.close()
    assert not _wait_gone(pids)


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this test, as in an interactive session, whatever
    this process inherited: a shell starts a background job (``pytest &``, CI's runners)
    with SIGINT ignored, where a Ctrl-C test would wait for its whole timeout instead."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.timeout(60)
def test_ctrl_c_during_close_still_ends_a_stuck_worker(ctrl_c_raises, monkeypatch):
    # In a REPL or a notebook the process lives on after Ctrl-C: close() interrupted while
    # it waits for a stuck worker must not leave that worker running.
    from feedline.placement import worker_loop

    options = fl.Options(threading=fl.ThreadingOptions(close_timeout=30.0))
    it = iter(fl.Dataset.range(10).map(_stuck_at(3)).multiprocess(2).with_options(options))
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    pids = _pids(it)
    real_end, interrupted = worker_loop.end_process, []

    def end_process(process, wait, *args):
        if not interrupted:  # Ctrl-C as close() starts waiting up to 30 s for a worker
            interrupted.append(process.pid)
            os.kill(os.getpid(), signal.SIGINT)
        real_end(process, wait, *args)

    monkeypatch.setattr(worker_loop, "end_process", end_process)
    with pytest.raises(KeyboardInterrupt):
        it.close()
    assert len(interrupted) == 1
    it.close()
    del it
    assert not _wait_gone(pids, deadline=2.0)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_element_timeout_is_an_error_in_place_and_the_late_element_still_comes():
    def late(x):
        if int(x) == 3:
            time.sleep(2.5)
        return x

    options = fl.Options(threading=fl.ThreadingOptions(element_timeout=1.0))
    it = iter(fl.Dataset.range(8).map(late).multiprocess(2).with_options(options))
    outcomes = []
    for _ in range(20):
        try:
            outcomes.append(int(next(it)))
        except TimeoutError as error:
            assert "element_timeout" in str(error)
            outcomes.append("timeout")
        except StopIteration:
            break
    pids = _pids(it)
    it.close()
    # Starting the workers may take longer than 1 s too: timeouts before element 0 are fine.
    assert [o for o in outcomes if o != "timeout"] == list(range(8))
    assert "timeout" in outcomes[outcomes.index(2):outcomes.index(3)]
    assert not _wait_gone(pids)


@pytest.mark.timeout(60)
def test_close_racing_a_consumer_thread_and_a_death_always_ends_cleanly():
    options = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.3))
    ds = fl.Dataset.range(10**9).batch(8).multiprocess(2).with_options(options)
    all_pids = []
    for delay in (0.0, 0.002, 0.02):
        it = iter(ds)
        next(it)
        all_pids += _pids(it)
        ended: list = []

        def consume(it=it, ended=ended):
            try:
                while True:
                    try:
                        next(it)
                    except fl.WorkerProcessError:
                        pass
            except BaseException as error:  # noqa: BLE001 - checked below
                ended.append(error)

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        time.sleep(0.05)
        os.kill(all_pids[-1], signal.SIGKILL)
        time.sleep(delay)
        it.close()  # while the consumer may be seeing the death or restarting the worker
        consumer.join(DEADLINE)
        assert not consumer.is_alive()
        assert len(ended) == 1 and isinstance(ended[0], StopIteration), ended
        all_pids += [p for p in _stage(it).worker_pids if p is not None]
    assert not _wait_gone(all_pids)


@pytest.mark.timeout(60)
def test_ctrl_c_while_next_waits_then_iterating_on_loses_nothing(ctrl_c_raises, tmp_path):
    # A notebook: the user interrupts a next() waiting for a slow worker, then goes on.
    gate = str(tmp_path / "gate")
    os.mkfifo(gate)

    def late(x):
        if int(x) == 3:
            with open(gate) as fifo:  # blocks until the test opens the other end
                fifo.read()
        return x

    it = iter(fl.Dataset.range(10).map(late).multiprocess(2))
    got = [int(next(it)) for _ in range(3)]
    pids = _pids(it)
    pool = _stage(it)._pool
    real_receive = pool.receive

    def receive(indices, timeout):  # Ctrl-C as next() waits for element 3
        pool.receive = real_receive
        os.kill(os.getpid(), signal.SIGINT)
        return real_receive(indices, timeout)

    pool.receive = receive
    with pytest.raises(KeyboardInterrupt):
        next(it)
    with open(gate, "w"):  # element 3 is made now
        pass
    assert got + [int(x) for x in it] == list(range(10))
    it.close()
    assert not _wait_gone(pids)


class _InterruptOnce:
    """A socket whose first call of ``method`` raises ``KeyboardInterrupt``: Ctrl-C landing
    at that point of a receive."""

    def __init__(self, sock, method: str) -> None:
        self._sock, self._method, self.armed = sock, method, True

    def __getattr__(self, name):
        attr = getattr(self._sock, name)
        if name != self._method or not self.armed:
            return attr

        def interrupted(*args, **kwargs):
            self.armed = False
            raise KeyboardInterrupt

        return interrupted


def _outcomes_after_interrupt(it, limit: int = 15) -> list:
    out = []
    for _ in range(limit):
        try:
            out.append(_value(next(it)))
        except StopIteration:
            break
        except KeyboardInterrupt:
            out.append("interrupted")
        except Exception as error:  # noqa: BLE001 - recorded
            out.append(type(error).__name__)
    return out


@pytest.mark.timeout(60)
def test_ctrl_c_before_a_message_is_read_loses_nothing():
    it = iter(fl.Dataset.range(20).batch(2).multiprocess(2))
    got = [_value(next(it))]
    channel = _stage(it)._pool._channels[0]
    channel._socket = _InterruptOnce(channel._socket, "recvmsg")  # reads the length prefix
    got += _outcomes_after_interrupt(it)
    it.close()
    assert got == [[0, 1], [2, 3], "interrupted", *[[i, i + 1] for i in range(4, 20, 2)]]


@pytest.mark.timeout(60)
def test_ctrl_c_in_the_middle_of_a_message_loses_nothing():
    it = iter(fl.Dataset.range(20).batch(2).multiprocess(2))
    got = [_value(next(it))]
    channel = _stage(it)._pool._channels[0]
    channel._socket = _InterruptOnce(channel._socket, "recv_into")  # reads the body
    got += _outcomes_after_interrupt(it)
    it.close()
    assert got == [[0, 1], [2, 3], "interrupted", *[[i, i + 1] for i in range(4, 20, 2)]]


@pytest.mark.timeout(60)
def test_ctrl_c_just_after_a_message_was_received_loses_nothing():
    it = iter(fl.Dataset.range(20).batch(2).multiprocess(2))
    got = [_value(next(it))]
    pool = _stage(it)._pool
    real, armed = pool.receive, [True]

    def receive(indices, timeout):
        index = real(indices, timeout)
        if armed[0] and pool.inbox[index][-1][0] == "item":
            armed[0] = False
            raise KeyboardInterrupt  # the message is in the inbox already
        return index

    pool.receive = receive
    got += _outcomes_after_interrupt(it)
    it.close()
    assert got == [[0, 1], "interrupted", *[[i, i + 1] for i in range(2, 20, 2)]]


@pytest.mark.timeout(60)
def test_dropped_iterator_is_collected_and_ends_its_workers():
    ds = fl.Dataset.range(100).map(_stuck_at(7)).multiprocess(2).with_options(QUICK)
    it = iter(ds)
    next(it)
    pids = _pids(it)
    del it
    gc.collect()
    assert not _wait_gone(pids)


@pytest.mark.timeout(60)
def test_dropped_iterator_whose_error_is_kept_is_still_collected():
    it = iter(fl.Dataset.range(100).map(check_element).multiprocess(2))
    pids = _pids_after(it, 3)
    try:
        next(it)
    except ValueError as error:
        kept = error
    del it
    gc.collect()
    assert not _wait_gone(pids)
    assert "bad element 3" in str(kept)


def _pids_after(it, count: int) -> list[int]:
    for _ in range(count):
        next(it)
    return _pids(it)


# ---------------------------------------------------------------------------- pickling
@pytest.mark.timeout(60)
def test_a_pipeline_that_does_not_pickle_is_a_clear_type_error_and_starts_nothing():
    lock = threading.Lock()
    ds = fl.Dataset.range(4).map(lambda x: (lock, x)[1]).multiprocess(2)
    it = iter(ds)
    with pytest.raises(TypeError, match="cannot be sent to worker processes") as raised:
        next(it)
    assert "lock" in str(raised.value)
    assert not _children()
    it.close()


class _RefusesPickle:
    def __reduce__(self):
        raise pickle.PicklingError("this object refuses to be pickled")


def _unsendable_at(bad: dict[int, str]):
    def f(x):
        # Object arrays throughout: a dataset's dtypes are fixed (as in tf.data).
        kind = bad.get(int(x))
        holder = np.empty(1, dtype=object)
        holder[0] = (int(x) if kind is None else
                     threading.Lock() if kind == "lock" else _RefusesPickle())
        return holder

    return f


@pytest.mark.timeout(60)
def test_an_element_that_does_not_pickle_back_is_an_error_in_its_place():
    ds = fl.Dataset.range(10).map(_unsendable_at({3: "lock"})).multiprocess(2)
    it = iter(ds)
    outcomes = _outcomes(it)
    assert outcomes[:3] == [[0], [1], [2]] and outcomes[4:] == [[x] for x in range(4, 10)]
    kind, message = outcomes[3]
    assert issubclass(kind, TypeError) and "cannot be sent to the main process" in message
    assert "element 1 of this worker's shard" in message and "lock" in message
    it.close()


@pytest.mark.timeout(60)
def test_an_element_whose_pickling_raises_pickling_error_costs_only_itself():
    ds = fl.Dataset.range(10).map(_unsendable_at({3: "reduce"})).multiprocess(2)
    it = iter(ds)
    outcomes = _outcomes(it)
    assert len(outcomes) == 10, outcomes  # nothing of worker 1's shard after it is lost
    assert outcomes[:3] == [[0], [1], [2]] and outcomes[4:] == [[x] for x in range(4, 10)]
    assert "refuses to be pickled" in outcomes[3][1]
    it.close()


# ---------------------------------------------------------------------------- scripts
_PIPELINE = """
import os, sys, time
import feedline as fl

def slow(x):
    time.sleep(0.01)
    return x

def stuck(x):
    if int(x) == 5:
        time.sleep(1000)
    return x

def pids(it):
    stack = [it._root]
    while stack:
        node = stack.pop()
        if hasattr(node, "worker_pids"):
            return node.worker_pids
        stack.extend(getattr(node, "_inputs", []))
    raise SystemExit("no multiprocess stage")
"""


def _finish(process: subprocess.Popen, timeout: float = 60.0) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(f"the script did not exit: {err}") from None
    return process.returncode, out, err


@pytest.mark.timeout(90)
@pytest.mark.parametrize("stuck", [
    pytest.param(False, id="running"),
    pytest.param(True, id="stuck_worker", marks=pytest.mark.slow)])
def test_interpreter_exit_without_close_ends_the_workers(tmp_path, stuck):
    process = _run_script(tmp_path, _PIPELINE + f"""
ds = fl.Dataset.range(1000).map({"stuck" if stuck else "slow"}).multiprocess(2)
it = iter(ds)
print([int(next(it)) for _ in range(4)])
print("PIDS", *pids(it), flush=True)
# exits here, it never closed
""")
    worker_pids = _read_pids(process)
    code, _, err = _finish(process)  # bounded: it must exit by itself
    assert code == 0, err
    assert not _wait_gone(worker_pids)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_interpreter_exit_while_a_daemon_thread_waits_in_next_ends_the_workers(tmp_path):
    process = _run_script(tmp_path, _PIPELINE + """
import threading
it = iter(fl.Dataset.range(1000).map(stuck).multiprocess(2))
print([int(next(it)) for _ in range(4)])
print("PIDS", *pids(it), flush=True)

def consume():
    for _ in it:  # blocks forever on element 5
        pass

threading.Thread(target=consume, daemon=True).start()
time.sleep(0.3)
print("EXITING", flush=True)
""")
    worker_pids = _read_pids(process)
    code, out, err = _finish(process)  # bounded: it must exit by itself
    assert code == 0 and "EXITING" in out, err
    assert not _wait_gone(worker_pids)


@pytest.mark.timeout(90)
def test_uncaught_exception_at_top_level_ends_the_workers(tmp_path):
    process = _run_script(tmp_path, _PIPELINE + """
it = iter(fl.Dataset.range(1000).map(slow).multiprocess(2))
next(it)
print("PIDS", *pids(it), flush=True)
raise RuntimeError("the training script crashed")
""")
    worker_pids = _read_pids(process)
    code, _, err = _finish(process)
    assert code == 1 and "the training script crashed" in err
    assert not _wait_gone(worker_pids)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("group", "fn"), [
    pytest.param(False, "slow", id="parent_only"),
    pytest.param(True, "stuck", id="process_group_while_waiting_for_a_stuck_worker",
                 marks=pytest.mark.slow)])
def test_ctrl_c_interrupts_the_consumer_and_ends_the_workers(tmp_path, group, fn):
    # Ctrl-C as a script started from a terminal gets it: a test run started in the
    # background of a shell without job control ignores SIGINT, and children inherit that.
    process = _run_script(tmp_path, _PIPELINE + f"""
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
it = iter(fl.Dataset.range(10**6).map({fn}).batch(2).multiprocess(2))
next(it)
try:
    print("PIDS", *pids(it), flush=True)
    while True:
        next(it)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    raise
""")
    worker_pids = _read_pids(process)
    # Ctrl-C in a terminal signals the whole foreground process group; the workers ignore it
    if group:
        os.killpg(process.pid, signal.SIGINT)
    else:
        os.kill(process.pid, signal.SIGINT)
    code, out, err = _finish(process)
    assert "INTERRUPTED" in out and "KeyboardInterrupt" in err, err
    assert code == -signal.SIGINT, (code, err)
    assert not _wait_gone(worker_pids)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("sig", "stuck"), [
    pytest.param(signal.SIGKILL, False, id="sigkill_running"),
    pytest.param(signal.SIGKILL, True, id="sigkill_stuck_worker"),
    pytest.param(signal.SIGTERM, True, id="sigterm_stuck_worker", marks=pytest.mark.slow)])
def test_workers_end_by_themselves_when_the_parent_is_killed(tmp_path, sig, stuck):
    # No atexit, no close(): the workers must notice their parent is gone, even one stuck
    # in a user function that never returns to read its socket.
    process = _run_script(tmp_path, _PIPELINE + f"""
it = iter(fl.Dataset.range(10**6).map({"stuck" if stuck else "slow"}).multiprocess(2))
print([int(next(it)) for _ in range(4)])
print("PIDS", *pids(it), flush=True)
time.sleep(1000)
""")
    worker_pids = _read_pids(process)
    try:
        os.kill(process.pid, sig)
        process.wait(DEADLINE)  # not communicate(): the workers share its stdout
        left = _wait_gone(worker_pids)
    finally:
        _kill(p for p in worker_pids if _alive(p))  # never leave them to the next test
        process.stdout.close()
        process.stderr.close()
    assert not left, f"workers {left} outlived their parent"


@pytest.mark.timeout(90)
def test_a_script_without_a_main_guard_runs_its_top_level_code_once(tmp_path):
    marker = tmp_path / "top_level_runs.txt"
    process = _run_script(tmp_path, f"""
import feedline as fl
with open({str(marker)!r}, "a") as f:  # a side effect at import: workers must not rerun it
    f.write("ran\\n")

def plus_one(x):
    return x + 1

ds = fl.Dataset.range(12).map(plus_one).batch(3).multiprocess(2)
print([b.tolist() for b in ds])
print([b.tolist() for b in ds.repeat(2).take(5)])
""", name="no_guard.py")
    code, out, err = _finish(process)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == "[[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]"
    assert lines[1] == "[[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12], [1, 2, 3]]"
    assert marker.read_text() == "ran\n"


def test_a_shut_down_pool_restarts_no_worker():
    # A consumer thread restarting a dead worker while another thread closes the pipeline:
    # once the pool is shut down, a restart starts nothing (no process left running).
    from feedline.placement.worker_loop import WorkerPool

    pool = WorkerPool(fl.Dataset.range(10), fl.Options(), 2, "racing", 1.0)
    pool.send(0, ("stop",))  # starts worker 0
    assert pool.pids()[0] is not None
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.restart(0)
    assert pool.pids() == [None, None]
