"""AUTOTUNE's choice between threads and worker processes for a whole pipeline."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import feedline as fl
from feedline.placement import auto, policy
from feedline.placement.auto import AutoProcessesIterator
from feedline.placement.multiprocess import MultiprocessIterator
from feedline.testing import check_checkpointing, fail_at

pytestmark = pytest.mark.timeout(120)

AUTO = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2))
FORCED = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2, processes=True))
NEVER = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2, processes=False))


def _pipeline(n: int = 40, options: fl.Options = AUTO) -> fl.Dataset:
    return fl.Dataset.range(n).map(lambda x: x * 2).batch(4).prefetch(fl.AUTOTUNE) \
        .with_options(options)


def _expected(n: int = 40) -> list[list[int]]:
    return [[2 * x for x in range(i, min(i + 4, n))] for i in range(0, n, 4)]


def _root(it: fl.PipelineIterator) -> AutoProcessesIterator:
    root = it._root
    assert isinstance(root, AutoProcessesIterator)
    return root


@pytest.fixture
def trial(monkeypatch):
    """Make the trial report ``busy`` cores, ending the data or not, for elements that cost
    this process more than receiving them from a worker would (the test pipelines' are
    cheap: :data:`~feedline.placement.policy.SHARDS_MIN_RECEIVE_GAIN`)."""
    monkeypatch.setattr(policy, "SHARDS_MIN_RECEIVE_GAIN", 0.0)

    def set_trial(busy: float, ended: bool = False) -> None:
        original = AutoProcessesIterator._trial

        def fake(self):
            original(self)
            return busy, ended
        monkeypatch.setattr(AutoProcessesIterator, "_trial", fake)
    return set_trial


def test_only_a_pipeline_ending_with_prefetch_autotune_is_considered():
    for ds in (fl.Dataset.range(8).prefetch(2), fl.Dataset.range(8).batch(2)):
        with iter(ds) as it:
            assert not isinstance(it._root, AutoProcessesIterator)
    # With processes off or one CPU it is considered, and stays on threads without a trial
    # (a state saved in processes elsewhere still restores there: see the last test).
    for options, reason in ((NEVER, "AutotuneOptions(processes=False)"),
                            (fl.Options(autotune=fl.AutotuneOptions(cpu_budget=1)),
                             "one CPU to run on")):
        with iter(_pipeline(options=options)) as it:
            assert [b.tolist() for b in it] == _expected()
            decision = _root(it).decision
            assert (decision.mode, decision.reason, decision.cores_busy) == ("threads", reason, None)


@pytest.mark.slow
def test_gil_bound_trial_moves_to_processes_and_keeps_every_element_in_order(trial):
    trial(busy=1.0)
    with iter(_pipeline()) as it:
        assert [b.tolist() for b in it] == _expected()
        decision = _root(it).decision
    assert (decision.mode, decision.workers, decision.cpu_budget) == ("processes", 2, 2)
    assert "1.00 of 2 cores" in decision.reason


def test_threads_that_keep_the_cores_busy_stay(trial):
    trial(busy=1.9)
    with iter(_pipeline()) as it:
        assert [b.tolist() for b in it] == _expected()
        assert _root(it).decision.mode == "threads"
        assert "1.90 of 2 cores" in _root(it).decision.reason


def test_data_ending_during_the_trial_stays_on_threads(trial):
    trial(busy=1.0, ended=True)
    with iter(_pipeline(8)) as it:
        assert [b.tolist() for b in it] == _expected(8)
        assert _root(it).decision.reason == "the data ended during the trial"


@pytest.mark.slow
def test_a_move_that_would_reorder_needs_deterministic_false(trial, tmp_path):
    trial(busy=1.0)
    paths = []
    for f in range(2):
        path = str(tmp_path / f"{f}.tfrecord")
        fl.write_tfrecord(fl.Dataset.from_tensor_slices(
            np.array([b"%d-%d" % (f, i) for i in range(20)], dtype=object)), path)
        paths.append(path)
    ds = fl.TFRecordDataset(paths).batch(3).prefetch(fl.AUTOTUNE)
    with iter(ds.with_options(AUTO)) as it:
        ordered = [b.tolist() for b in it]
        assert _root(it).decision.mode == "threads"
        assert "would change the element order" in _root(it).decision.reason
    unordered = fl.Options(deterministic=False, autotune=fl.AutotuneOptions(cpu_budget=2))
    with iter(ds.with_options(unordered)) as it:
        moved = [b.tolist() for b in it]
        assert _root(it).decision.mode == "processes"
    assert sorted(x for b in moved for x in b) == sorted(x for b in ordered for x in b)


@pytest.mark.slow
def test_forced_processes_skip_the_trial_and_restore_exactly():
    ds = _pipeline(options=FORCED)
    it = iter(ds)
    first = [next(it).tolist() for _ in range(4)]
    assert _root(it).decision.mode == "processes" and _root(it).decision.cores_busy is None
    state = it.state_dict()
    assert state["root"]["type"] == "multiprocess"
    rest = [b.tolist() for b in it]
    it.close()
    assert first + rest == _expected()
    with iter(ds) as restored:
        restored.load_state_dict(state)
        assert [b.tolist() for b in restored] == rest
        assert _root(restored).decision.reason == "restored from a state saved in processes"


def test_a_threads_state_restores_on_threads(monkeypatch):
    monkeypatch.setattr(policy, "PIPELINE_MIN_GAIN", 1e9)  # never moves
    it = iter(_pipeline())
    first = [next(it).tolist() for _ in range(3)]
    state = it.state_dict()
    assert state["root"]["type"] == "prefetch"
    it.close()
    with iter(_pipeline(options=FORCED)) as restored:
        restored.load_state_dict(state)
        assert [b.tolist() for b in restored] == _expected()[3:]
        assert _root(restored).decision.mode == "threads"
    assert first == _expected()[:3]


def test_checkpoints_while_trial_outputs_are_delivered(monkeypatch):
    monkeypatch.setattr(policy, "PIPELINE_MIN_GAIN", 1e9)
    monkeypatch.setattr(auto, "TRIAL_SECONDS", 0.0)
    monkeypatch.setattr(auto, "TRIAL_MIN_ELEMENTS", 5)
    ds = fail_at(fl.Dataset.range(30), [2, 11]).map(lambda x: x + 1).batch(2) \
        .prefetch(fl.AUTOTUNE).with_options(AUTO)
    check_checkpointing(ds, steps=[0, 1, 2, 4, 6, 9], epochs=1)


def test_errors_of_the_trial_arrive_in_place(trial):
    trial(busy=1.9)
    ds = fail_at(fl.Dataset.range(10), [1]).batch(2).prefetch(fl.AUTOTUNE).with_options(AUTO)
    outcomes = []
    with iter(ds) as it:
        while True:
            try:
                outcomes.append(next(it).tolist())
            except StopIteration:
                break
            except Exception as error:  # noqa: BLE001 - recorded as an outcome
                outcomes.append(type(error).__name__)
    with iter(ds.with_options(NEVER)) as it:
        reference = []
        while True:
            try:
                reference.append(next(it).tolist())
            except StopIteration:
                break
            except Exception as error:  # noqa: BLE001
                reference.append(type(error).__name__)
    assert outcomes == reference and any(isinstance(o, str) for o in outcomes)


def test_a_pipeline_that_does_not_pickle_stays_on_threads():
    lock = threading.Lock()

    def locked(x):
        with lock:
            return x
    ds = fl.Dataset.range(12).map(locked).batch(3).prefetch(fl.AUTOTUNE).with_options(FORCED)
    with iter(ds) as it:
        assert [b.tolist() for b in it] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
        decision = _root(it).decision
    assert decision.mode == "threads" and "does not pickle" in decision.reason


def test_sharding_by_element_over_a_stored_source_stays_on_threads(trial, tmp_path):
    # One TFRecord file for two workers: each would read all of it and keep every other
    # record, so the move cannot pay (a saved dataset read back is the same case).
    path = str(tmp_path / "one.tfrecord")
    fl.write_tfrecord(fl.Dataset.from_tensor_slices([b"%d" % i for i in range(40)]), path)
    trial(busy=1.0)
    ds = fl.TFRecordDataset(path).map(lambda r: int(r) * 2).batch(4).prefetch(fl.AUTOTUNE)
    with iter(ds.with_options(AUTO)) as it:
        assert [b.tolist() for b in it] == _expected()
        decision = _root(it).decision
    assert decision.mode == "threads"
    assert "every worker read all of tfrecord" in decision.reason


def test_a_saved_dataset_read_back_stays_on_threads(trial, tmp_path):
    fl.Dataset.range(40).map(lambda x: x * 2).save(str(tmp_path / "saved"))
    trial(busy=1.0)
    ds = fl.Dataset.load(str(tmp_path / "saved")).batch(4).prefetch(fl.AUTOTUNE)
    with iter(ds.with_options(AUTO)) as it:
        assert [b.tolist() for b in it] == _expected()
        assert _root(it).decision.mode == "threads"


ONE_CPU_ALLOWING_TWO = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=1),
                                  threading=fl.ThreadingOptions(max_parallelism=2))


ONE_CPU = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=1))


@pytest.mark.parametrize("restoring, where", [
    (ONE_CPU_ALLOWING_TWO, "processes"), (NEVER, "here"), (ONE_CPU, "here")],
    ids=["allowing-two", "processes-off", "one-cpu"])
@pytest.mark.slow
def test_a_state_saved_in_processes_restores_exactly_wherever_it_may_run(restoring, where):
    # The README's promise: the CPU count (or the choice) may change between save and
    # restore. A state saved in 2 processes continues in 2 processes where the options
    # allow them, and in this process (the 2 shards run here, merged as the workers' would
    # be) where they do not (issue 41.8: one CPU was a CheckpointError).
    ds = fl.Dataset.range(40).map(lambda x: x * 3).prefetch(fl.AUTOTUNE)
    expected = [3 * i for i in range(40)]
    in_processes = fl.Options(autotune=fl.AutotuneOptions(processes=True, cpu_budget=2))
    saving = ds.with_options(in_processes)
    for taken in (7, 8, 40):
        with iter(saving) as it:
            head = [int(next(it)) for _ in range(taken)]
            assert it.process_decision.mode == "processes"
            state = it.state_dict()
        assert state["root"]["num_workers"] == 2
        with iter(ds.with_options(restoring)) as again:
            again.load_state_dict(state)
            moved = isinstance(_root(again)._inner, MultiprocessIterator)
            assert moved == (where == "processes")
            assert again.process_decision.reason == (
                "restored from a state saved in processes" if moved else
                "restored in this process from a state saved in 2 worker processes (this "
                "run may not start them)")
            middle = [int(next(again)) for _ in range(min(3, 40 - taken))]
            mid_state = again.state_dict()
            rest = [int(x) for x in again]
            assert head + middle + rest == expected
        # A state taken after such a restore restores again, in processes where allowed.
        for options in (restoring, in_processes):
            with iter(ds.with_options(options)) as third:
                third.load_state_dict(mid_state)
                assert [int(x) for x in third] == rest
    with iter(ds.with_options(restoring)) as fresh:
        assert [int(x) for x in fresh] == expected
        assert fresh.process_decision.mode == "threads"


def _outcomes(it, limit=None):
    """Batches as lists and errors as their class names, in order, up to ``limit``."""
    out = []
    while limit is None or len(out) < limit:
        try:
            out.append(next(it).tolist())
        except StopIteration:
            break
        except Exception as error:  # noqa: BLE001 - an outcome like any other
            out.append(type(error).__name__)
    return out


def _double_but_9_and_10(x):
    if int(x) in (9, 10):
        raise KeyError(f"element {int(x)}")
    return x * 2


@pytest.mark.slow
def test_a_state_saved_in_processes_keeps_its_errors_in_this_process():
    # Errors pending in a worker's position are raised in place after the restore here.
    ds = fl.Dataset.range(30).map(_double_but_9_and_10).batch(3).prefetch(fl.AUTOTUNE)


    in_processes = fl.Options(autotune=fl.AutotuneOptions(processes=True, cpu_budget=2))
    for taken in (2, 3, 4, 6):
        with iter(ds.with_options(in_processes)) as it:
            reference = _outcomes(it)
            assert it.process_decision.mode == "processes"
        assert "KeyError" in reference
        with iter(ds.with_options(in_processes)) as it:
            head = _outcomes(it, taken)
            state = it.state_dict()
        with iter(ds.with_options(ONE_CPU)) as again:
            again.load_state_dict(state)
            assert not isinstance(_root(again)._inner, MultiprocessIterator)
            assert head + _outcomes(again) == reference


# ---------------------------------------------------------------- the feeder placement
FOUR = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=4))


def _two_files(tmp_path, records: int = 30) -> list[str]:
    """Two TFRecord files of ``records`` records ``b"<file>-<i>"``."""
    paths = []
    for f in range(2):
        path = str(tmp_path / f"{f}.tfrecord")
        fl.write_tfrecord(fl.Dataset.from_tensor_slices(
            np.array([b"%d-%d" % (f, i) for i in range(records)], dtype=object)), path)
        paths.append(path)
    return paths


def _interleaved(paths: list[str]) -> fl.Dataset:
    # Sharding by file would change this order: only a feeder keeps it.
    return fl.Dataset.from_tensor_slices(paths).interleave(
        fl.TFRecordDataset, cycle_length=2, num_parallel_calls=2) \
        .shuffle(8, seed=3).batch(4).prefetch(fl.AUTOTUNE)


def _records(it) -> list[list[bytes]]:
    return [b.tolist() for b in it]


def test_an_unshardable_pipeline_moves_whole_to_one_feeder_process_in_its_order(
        trial, tmp_path, monkeypatch):
    monkeypatch.setattr(policy, "FEEDER_SPARE_CORES", 0.5)  # the budget is this machine's
    paths = _two_files(tmp_path)
    threads = _interleaved(paths)
    reference = [_records(iter(threads.with_options(NEVER))) for _ in range(2)]
    assert reference[0] != reference[1]  # each run of an object is its next epoch
    ds = _interleaved(paths)
    trial(busy=1.0)
    for epoch in range(2):  # in the feeder too
        with iter(ds.with_options(FOUR)) as it:
            assert _records(it) == reference[epoch]
            decision = _root(it).decision
            assert isinstance(_root(it)._inner, MultiprocessIterator)
    assert (decision.mode, decision.workers) == ("feeder", 1)
    assert "would change the element order" in decision.reason
    assert "one feeder process" in decision.reason and "kept 1.00 of" in decision.reason


def test_a_feeder_needs_spare_cores_beside_the_training_loop(trial, tmp_path, monkeypatch):
    ds = _interleaved(_two_files(tmp_path))
    trial(busy=1.0)  # 2 - 1.0 < FEEDER_SPARE_CORES: the feeder would compete with the loop
    with iter(ds.with_options(AUTO)) as it:
        _records(it)
        decision = _root(it).decision
    assert decision.mode == "threads" and "too few left for a feeder" in decision.reason
    trial(busy=0.2)  # little CPU here: nothing worth moving
    monkeypatch.setattr(policy, "FEEDER_SPARE_CORES", 0.5)
    with iter(ds.with_options(FOUR)) as it:
        _records(it)
        decision = _root(it).decision
    assert decision.mode == "threads" and "only 0.20 cores busy" in decision.reason


@pytest.mark.slow
def test_forced_processes_on_an_unshardable_pipeline_use_a_feeder_and_restore_exactly(tmp_path):
    paths = _two_files(tmp_path)
    with iter(_interleaved(paths).with_options(NEVER)) as it:  # a fresh object: epoch 0
        reference = _records(it)
    ds = _interleaved(paths)
    with iter(ds.with_options(FORCED)) as it:
        head = [next(it).tolist() for _ in range(5)]
        assert _root(it).decision.mode == "feeder"
        state = it.state_dict()
    assert state["root"]["type"] == "multiprocess" and state["root"]["num_workers"] == 1
    assert head == reference[:5]
    with iter(ds.with_options(FORCED)) as again:
        again.load_state_dict(state)
        assert _records(again) == reference[5:]


@pytest.mark.parametrize("restoring", [NEVER, fl.Options(autotune=fl.AutotuneOptions(
    cpu_budget=1))], ids=["processes-off", "one-cpu"])
@pytest.mark.slow
def test_a_feeder_state_restores_on_threads_exactly(tmp_path, restoring):
    # Checkpoints are positions, not placements: the feeder's position is the pipeline's
    # own, so threads continue it exactly (no process started to restore it).
    paths = _two_files(tmp_path)
    with iter(_interleaved(paths).with_options(NEVER)) as it:  # a fresh object: epoch 0
        reference = _records(it)
    for taken in (1, 3, len(reference)):
        ds = _interleaved(paths)  # its first run is epoch 0, as the reference's
        with iter(ds.with_options(FORCED)) as it:
            head = [next(it).tolist() for _ in range(taken)]
            state = it.state_dict()
        with iter(ds.with_options(restoring)) as again:
            again.load_state_dict(state)
            assert not isinstance(_root(again)._inner, MultiprocessIterator)
            assert _root(again).decision.reason == \
                "restored on threads from a state saved in a feeder process"
            mid = again.state_dict()
            rest = _records(again)
            assert head + rest == reference
        with iter(ds.with_options(restoring)) as third:  # a state taken right after
            third.load_state_dict(mid)                     # the restore restores too
            assert _records(third) == reference[taken:]


def test_a_feeder_state_restores_its_pending_errors_on_threads(tmp_path):
    ds = fail_at(fl.Dataset.range(20), [6, 7]).batch(2).prefetch(fl.AUTOTUNE)

    with iter(ds.with_options(NEVER)) as it:
        reference = _outcomes(it)
    assert "InjectedError" in reference or any(isinstance(o, str) for o in reference)
    with iter(ds.with_options(fl.Options(autotune=fl.AutotuneOptions(
            cpu_budget=2, processes=True)))) as it:
        head = _outcomes(it, 3)
        state = it.state_dict()
    with iter(ds.with_options(NEVER)) as again:
        again.load_state_dict(state)
        assert head + _outcomes(again) == reference


def _double(x):
    return x * 2


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_a_map_already_in_worker_processes_keeps_the_pipeline_here_without_a_trial(monkeypatch):
    # A trial would see this process idle (the map's work is in its pool's processes) and
    # move the whole pipeline into processes that each start a pool of their own.
    monkeypatch.setattr(AutoProcessesIterator, "_trial",
                        lambda self: pytest.fail("no trial for a map in processes"))
    ds = fl.Dataset.range(40).map(_double, num_parallel_calls=2, executor="process") \
        .batch(4).prefetch(fl.AUTOTUNE).with_options(AUTO)
    with iter(ds) as it:
        assert [b.tolist() for b in it] == _expected()
        decision = _root(it).decision
    assert (decision.mode, decision.workers, decision.cores_busy) == ("threads", 0, None)
    assert decision.reason == "map(_double): calls already in worker processes " \
                              "(executor='process')"
    # processes=True still forces the move.
    forced = fl.Dataset.range(40).map(_double, num_parallel_calls=2, executor="process") \
        .batch(4).prefetch(fl.AUTOTUNE).with_options(FORCED)
    with iter(forced) as it:
        assert [b.tolist() for b in it] == _expected()
        assert _root(it).decision.mode == "processes"


def test_a_map_autotune_moved_to_processes_during_the_trial_keeps_the_pipeline_here(
        trial, monkeypatch):
    from feedline.placement.map_executor import ExecutorChoice
    from feedline.placement.policy import ExecutorDecision

    trial(busy=0.05)  # this process idle: its map's calls ran elsewhere

    original = AutoProcessesIterator._trial_unless_it_ends

    def with_a_process_decision(self, budget):
        choice = ExecutorChoice.__new__(ExecutorChoice)
        choice.decision = ExecutorDecision("map(f)", "process", "measured")
        self._ctx.remembered[("executor choice", "map(f)")] = choice
        return original(self, budget)

    monkeypatch.setattr(AutoProcessesIterator, "_trial_unless_it_ends", with_a_process_decision)
    with iter(_pipeline()) as it:
        assert [b.tolist() for b in it] == _expected()
        decision = _root(it).decision
    assert (decision.mode, decision.cores_busy) == ("threads", 0.05)
    assert decision.reason == "map(f): calls moved to worker processes by AUTOTUNE during " \
                              "the trial"
