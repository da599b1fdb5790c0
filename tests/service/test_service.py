"""The service on a local Ray cluster (loopback only): both processing modes, failures of
workers and of the dispatcher, shared jobs, coordinated reads, checkpoints, autoscaling."""

import ipaddress
import json
import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

import feedline as fl
from feedline.service.client import WORKER_BUFFER
from feedline.service.journal import JOURNAL_FILE
from feedline.service.ray_support import token_authentication

ray = pytest.importorskip("ray", minversion="2.52")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster():
    # Ray offers 8 logical CPUs so that the autoscaling test's own cluster fits beside this
    # one (workers reserve a CPU each); the machine has what it has.
    with fl.service.LocalCluster(num_workers=2, ray_cpus=8, log_to_driver=False) as local:
        yield local
        # GCS, raylet, agents, the dispatcher and workers (their restarts too)
        processes = psutil.Process().children(recursive=True)
    assert not ray.is_initialized()  # the cluster that started Ray ended it
    _, alive = psutil.wait_procs(processes, timeout=60)
    assert not alive, [process.cmdline() for process in alive]


def _ints(dataset):
    return sorted(int(x) for x in dataset)


def _slow_square(x):
    time.sleep(0.002)
    return x * x


def _worker_status(cluster, name):
    return ray.get(cluster.worker(name).status.remote())


def _wait_until(condition, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_distributed_epoch_gives_every_element_once(cluster):
    offset = 7  # a closure: Python functions run on the workers
    ds = fl.Dataset.range(100).map(lambda x: x + offset).apply(
        fl.service.distribute("distributed_epoch", cluster))
    assert ds.cardinality() == 100
    assert _ints(ds) == list(range(7, 107))


def test_distributed_epoch_keeps_global_batches_whole(cluster):
    ds = fl.Dataset.range(50).batch(8).apply(
        fl.service.distribute("distributed_epoch", cluster, compression="zstd"))
    batches = sorted(batch.tolist() for batch in ds)
    assert batches == [list(range(start, min(start + 8, 50))) for start in range(0, 50, 8)]


def test_parallel_epochs_runs_the_whole_pipeline_on_every_worker(cluster):
    ds = fl.Dataset.range(20).map(lambda x: {"x": x, "y": np.full(3, x)}).apply(
        fl.service.distribute("parallel_epochs", cluster))
    elements = list(ds)
    assert sorted(int(e["x"]) for e in elements) == sorted(list(range(20)) * 2)
    assert all(e["y"].tolist() == [e["x"]] * 3 for e in elements)


def test_each_pass_is_a_job_of_its_own(cluster):
    ds = fl.Dataset.range(10).apply(fl.service.distribute("distributed_epoch", cluster))
    assert [_ints(ds), _ints(ds)] == [list(range(10))] * 2


def test_an_error_of_the_pipeline_is_raised_in_its_place_and_iteration_goes_on(cluster):
    def check(x):
        if x == 13:
            raise ValueError(f"bad element {x}")
        return x

    iterator = iter(fl.Dataset.range(30).map(check).apply(
        fl.service.distribute("distributed_epoch", cluster)))
    values, errors = [], []
    while True:
        try:
            values.append(int(next(iterator)))
        except StopIteration:
            break
        except ValueError as error:
            errors.append(error)
    assert sorted(values) == [x for x in range(30) if x != 13]
    assert len(errors) == 1 and "bad element 13" in str(errors[0])
    assert any("in service worker" in note and "check" in note
               for note in errors[0].__notes__)


class _Unpicklable:
    """Pickles here, but refuses to unpickle on a worker."""

    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise RuntimeError("cannot be rebuilt on this worker")


def test_a_pipeline_that_cannot_run_on_workers_is_a_service_error(cluster):
    poison = _Unpicklable()
    ds = fl.Dataset.range(5).map(lambda x: (x, poison) and x).apply(
        fl.service.distribute("distributed_epoch", cluster))
    iterator = iter(ds)
    with pytest.raises(fl.ServiceError, match="cannot be rebuilt on this worker"):
        next(iterator)
    with pytest.raises(fl.ServiceError):  # it stays failed: never a hang, never half data
        next(iterator)


def test_a_worker_killed_mid_epoch_loses_and_duplicates_nothing(cluster):
    ds = fl.Dataset.range(400).map(_slow_square).apply(
        fl.service.distribute("distributed_epoch", cluster, num_splits=8))
    iterator = iter(ds)
    seen = [int(next(iterator)) for _ in range(60)]
    victim = cluster.workers()[0]
    pid = _worker_status(cluster, victim)["pid"]
    os.kill(pid, signal.SIGKILL)
    seen += [int(x) for x in iterator]
    assert sorted(seen) == [x * x for x in range(400)]
    def restarted():
        try:
            return _worker_status(cluster, victim)["pid"] != pid
        except ray.exceptions.RayActorError:  # still restarting
            return False

    _wait_until(restarted)  # Ray restarted it


def test_a_dispatcher_restart_loses_and_duplicates_nothing(cluster):
    ds = fl.Dataset.range(300).map(_slow_square).apply(
        fl.service.distribute("distributed_epoch", cluster, num_splits=10,
                              max_outstanding_requests=2))
    iterator = iter(ds)
    seen = [int(next(iterator)) for _ in range(40)]
    ray.kill(cluster.dispatcher, no_restart=False)  # Ray restarts it; it replays its journal
    seen += [int(x) for x in iterator]
    assert sorted(seen) == [x * x for x in range(300)]
    assert cluster.statistics()["restarted"] is True
    assert cluster.workers() == [f"{cluster.name}-worker-0", f"{cluster.name}-worker-1"]


def _shared(cluster, name, **settings):
    # Each trainer builds its own pipeline; passes are counted per pipeline object.
    return fl.Dataset.range(200).map(_slow_square).apply(
        fl.service.distribute("distributed_epoch", cluster, job_name=name, **settings))


def test_consumers_sharing_a_job_get_each_element_once_between_them(cluster):
    first, second = iter(_shared(cluster, "shared")), iter(_shared(cluster, "shared"))
    taken: list[list[int]] = [[], []]

    def read(index, iterator):
        taken[index] = [int(x) for x in iterator]

    threads = [threading.Thread(target=read, args=(i, it)) for i, it in enumerate([first,
                                                                                  second])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(taken[0] + taken[1]) == [x * x for x in range(200)]


def test_coordinated_reads_give_each_round_from_one_worker(cluster):
    def consumer(index):
        return iter(fl.Dataset.range(12).apply(fl.service.distribute(
            "parallel_epochs", cluster, job_name="coordinated", consumer_index=index,
            num_consumers=2)))

    consumers = [consumer(0), consumer(1)]
    rounds = []
    while True:  # trainers in lock-step
        try:
            rounds.append([int(next(c)) for c in consumers])
        except StopIteration:
            break
    # Round r is worker r % 2's local round r // 2: its elements 2*(r//2) and 2*(r//2)+1.
    assert rounds == [[2 * (r // 2), 2 * (r // 2) + 1] for r in range(12)]


def test_a_checkpoint_replays_exactly_what_followed_it(cluster):
    ds = fl.Dataset.range(120).map(_slow_square).apply(
        fl.service.distribute("distributed_epoch", cluster, num_splits=6))
    iterator = iter(ds)
    before = [int(next(iterator)) for _ in range(35)]
    state = iterator.state_dict()  # the model checkpoint of "step 35"
    [next(iterator) for _ in range(50)]  # training went on, then crashed
    iterator.close()
    restored = iter(ds)
    restored.load_state_dict(state)
    after = [int(x) for x in restored]
    assert sorted(before + after) == [x * x for x in range(120)]


def test_a_parallel_epochs_checkpoint_resumes_every_workers_pass(cluster):
    ds = fl.Dataset.range(30).apply(fl.service.distribute("parallel_epochs", cluster))
    iterator = iter(ds)
    before = [int(next(iterator)) for _ in range(17)]
    state = iterator.state_dict()
    iterator.close()
    restored = iter(ds)
    restored.load_state_dict(state)
    after = [int(x) for x in restored]
    assert sorted(before + after) == sorted(list(range(30)) * 2)


def test_workers_hold_a_bounded_number_of_items_ahead(cluster):
    ds = fl.Dataset.range(10**9).apply(fl.service.distribute(
        "parallel_epochs", cluster, max_outstanding_requests=1))
    iterator = iter(ds)
    next(iterator)
    names = cluster.workers()

    def settled():
        statuses = [_worker_status(cluster, name) for name in names]
        return all(s["buffered"] == WORKER_BUFFER for s in statuses)

    _wait_until(settled)
    for name in names:
        status = _worker_status(cluster, name)
        # What the consumer fetched (one fetch of at most WORKER_BUFFER in flight per
        # task, plus what it holds) and what the worker holds: never the infinite pass.
        assert status["produced"] <= 3 * WORKER_BUFFER
    iterator.close()
    _wait_until(lambda: all(_worker_status(cluster, n)["threads"] == 0 for n in names))


@pytest.mark.slow
def test_the_autoscaler_adds_a_worker_when_consumers_wait(cluster):
    # End to end: consumers report their waits, the dispatcher's own timer decides, a worker
    # actor starts. When it retires one, and from which figures, is decided from the reports
    # alone: tests/service/test_autoscaler_decisions.py (a timer's race here otherwise).
    with fl.service.LocalCluster(num_workers=1, min_workers=1, max_workers=2,
                                 autoscale_interval=0.25) as scaling:
        ds = fl.Dataset.range(10**9).map(lambda x: time.sleep(0.005) or x).apply(
            fl.service.distribute("distributed_epoch", scaling, num_splits=64))
        iterator = iter(ds)
        deadline = time.monotonic() + 120  # a bound against a hang, not a measure
        while len(scaling.workers()) < 2:  # consuming as fast as it can: it waits
            assert time.monotonic() < deadline
            for _ in range(20):
                next(iterator)
        added = [d for d in scaling.statistics()["decisions"] if d["action"] == "add"]
        assert [len(d["workers"]) for d in added] == [1]
        assert scaling.workers() == [scaling.workers()[0], *added[0]["workers"]]
        iterator.close()
    assert ray.is_initialized()  # Ray belongs to the module's cluster, which goes on


def test_an_element_timeout_raises_and_the_element_keeps_its_place(cluster):
    options = fl.Options(threading=fl.ThreadingOptions(element_timeout=0.3))
    ds = fl.Dataset.range(2).map(lambda x: time.sleep(1.5) or x).apply(
        fl.service.distribute("distributed_epoch", cluster, num_splits=1)).with_options(options)
    iterator = iter(ds)
    with pytest.raises(TimeoutError, match="no element from the service's workers"):
        next(iterator)
    taken = []
    while len(taken) < 2:
        try:
            taken.append(int(next(iterator)))
        except TimeoutError:
            continue
    assert taken == [0, 1]
    with pytest.raises(StopIteration):
        next(iterator)


@pytest.mark.slow
def test_a_task_left_unread_is_ended_and_its_consumer_restarts_it_losing_nothing(cluster):
    with fl.service.LocalCluster(num_workers=1, abandoned_task_timeout=0.5) as short:
        ds = fl.Dataset.range(200).apply(
            fl.service.distribute("distributed_epoch", short, num_splits=1))
        iterator = iter(ds)
        seen = [int(next(iterator)) for _ in range(3)]
        name = short.workers()[0]
        # The consumer stalls (as one that crashed): the worker ends its task.
        _wait_until(lambda: ray.get(short.worker(name).status.remote())["tasks"] == 0)
        seen += [int(x) for x in iterator]
        assert sorted(seen) == list(range(200))


def test_a_consumer_leaving_a_shared_job_gives_back_what_it_did_not_hand_out(cluster):
    for attempt in range(3):
        leaving = iter(_shared(cluster, f"leaving-{attempt}", num_splits=40))
        taken = [int(next(leaving)) for _ in range(7 + attempt * 5)]
        leaving.close()  # splits it received in full but handed out in part go back
        taken += [int(x) for x in _shared(cluster, f"leaving-{attempt}", num_splits=40)]
        assert sorted(taken) == [x * x for x in range(200)]


def test_every_pass_of_a_named_job_gives_every_element(cluster):
    ds = _shared(cluster, "passes")
    assert [sorted(int(x) for x in ds) for _ in range(2)] == [[x * x for x in range(200)]] * 2


def test_a_seeded_shuffle_reshuffles_each_pass_as_locally(cluster):
    local = fl.Dataset.range(10).shuffle(10, seed=3)
    served = local.apply(fl.service.distribute("distributed_epoch", cluster, num_splits=1))
    assert [int(x) for x in served.repeat(2)] == [int(x) for x in local.repeat(2)]


def test_an_unseeded_shuffle_loses_nothing_when_a_worker_dies(cluster):
    ds = fl.Dataset.range(300).shuffle(50).map(_slow_square).apply(
        fl.service.distribute("distributed_epoch", cluster, num_splits=4))
    iterator = iter(ds)
    seen = [int(next(iterator)) for _ in range(30)]
    os.kill(_worker_status(cluster, cluster.workers()[1])["pid"], signal.SIGKILL)
    seen += [int(x) for x in iterator]
    assert sorted(seen) == [x * x for x in range(300)]


@pytest.mark.slow
def test_a_checkpoint_restores_on_a_cluster_of_another_size(cluster):
    def pipeline(service):
        return fl.Dataset.range(120).apply(fl.service.distribute("distributed_epoch", service))

    iterator = iter(pipeline(cluster))
    before = [int(next(iterator)) for _ in range(30)]
    state = iterator.state_dict()
    iterator.close()
    with fl.service.LocalCluster(num_workers=3) as bigger:  # splits stay the saved ones
        restored = iter(pipeline(bigger))
        restored.load_state_dict(state)
        after = [int(x) for x in restored]
    assert sorted(before + after) == list(range(120))


def _exit_at_three(x):
    if x == 3:
        raise SystemExit("the user function exits")
    return x


def test_a_function_raising_system_exit_ends_the_iteration_with_a_service_error(cluster):
    iterator = iter(fl.Dataset.range(10).map(_exit_at_three).apply(
        fl.service.distribute("distributed_epoch", cluster, num_splits=1)))
    taken = []
    with pytest.raises(fl.ServiceError, match="SystemExit: the user function exits"):
        taken.extend(int(x) for x in iterator)
    assert taken == [0, 1, 2]


class _Unsendable:
    def __reduce__(self):
        raise TypeError("this element cannot be pickled")


def test_an_element_ray_cannot_send_is_a_service_error_not_a_silent_loss(cluster):
    def make(x):
        return np.array([_Unsendable() if x == 5 else x], dtype=object)

    iterator = iter(fl.Dataset.range(40).map(make).apply(
        fl.service.distribute("distributed_epoch", cluster, num_splits=2)))
    with pytest.raises(fl.ServiceError, match="could not send items"):
        for _ in iterator:
            pass
    with pytest.raises(fl.ServiceError):
        next(iterator)


def test_a_shared_pass_ends_on_workers_when_its_last_consumer_closes(cluster):
    def consumer():
        return iter(fl.Dataset.range(10**9).apply(
            fl.service.distribute("parallel_epochs", cluster, job_name="closing")))

    first, second = consumer(), consumer()
    next(first)
    next(second)
    names = cluster.workers()
    first.close()
    # The workers hear of the close in their own time (a busy machine: later); the second
    # consumer's task reads on.
    _wait_until(lambda: all(_worker_status(cluster, n)["tasks"] == 1 for n in names))
    next(second)
    second.close()
    _wait_until(lambda: all(_worker_status(cluster, n)["threads"] == 0 for n in names))


def test_a_ray_address_uses_the_clusters_feedline_dispatcher_starting_it_once(
        cluster, monkeypatch):
    from feedline.service.cluster import connect
    from feedline.service.ray_support import DISPATCHER_NAME, NAMESPACE

    # Ray runs already (the module's cluster): "auto" joins it. One worker per CPU, and
    # this Ray offers 8 logical CPUs on a 2-core machine: pretend it offers one.
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 1.0})
    ds = fl.Dataset.range(30).apply(fl.service.distribute("distributed_epoch", "auto"))
    try:
        assert _ints(ds) == list(range(30))
        dispatcher = ray.get_actor(DISPATCHER_NAME, namespace=NAMESPACE)
        # One worker to start with; "auto" lets the autoscaler add more while consumers
        # wait (on a busy machine they do), up to 4 per CPU.
        workers = ray.get(dispatcher.workers.remote())
        assert f"{DISPATCHER_NAME}-worker-0" in workers and len(workers) <= 4, workers
        assert ray.get(connect("auto").max_workers.remote()) == 4  # found, not made again
    finally:
        dispatcher = ray.get_actor(DISPATCHER_NAME, namespace=NAMESPACE)
        ended = ray.get(dispatcher.stop.remote())
        ray.kill(dispatcher, no_restart=True)
    # The workers it had (the first, and any the autoscaler added) ended with it.
    assert 1 <= len(ended) <= 4 and all(
        name.startswith(f"{DISPATCHER_NAME}-worker-") for name in ended), ended


def _is_loopback(address):
    return ipaddress.ip_address(address).is_loopback or \
        address.startswith("::ffff:127.")  # IPv4 loopback on a dual-stack socket


def _command_name(process: psutil.Process) -> list[str]:
    """The program a process runs, or nothing for one that ended since it was listed (Ray
    starts and stops helper processes at any time; an ended one has an empty command line)."""
    try:
        return process.cmdline()[:1]
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def test_the_cluster_listens_on_the_loopback_interface_only(cluster):
    own = psutil.Process()
    processes = {process.pid: process for process in [own, *own.children(recursive=True)]}
    listening = [(connection.laddr.ip, connection.laddr.port, connection.pid)
                 for connection in psutil.net_connections("inet")
                 if connection.status == psutil.CONN_LISTEN and connection.pid in processes]
    assert [entry for entry in listening if not _is_loopback(entry[0])] == []
    names = {name for _, _, pid in listening for name in _command_name(processes[pid])}
    # Every kind of server of the cluster was seen (so none was missed listening elsewhere).
    assert {name.rsplit("/", 1)[-1] for name in names} >= {"gcs_server", "raylet",
                                                           "ray::DispatcherCore",
                                                           "ray::WorkerCore"}
    assert {_worker_status(cluster, name)["pid"] for name in cluster.workers()} <= \
        {pid for _, _, pid in listening}
    # Ray >= 2.60 turns its token authentication on for the clusters ray.init() starts.
    if tuple(int(part) for part in ray.__version__.split(".")[:2]) >= (2, 60) and \
            "RAY_AUTH_MODE" not in os.environ:
        assert token_authentication()


def _service_logs(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "feedline.service"]


@pytest.mark.slow
def test_a_damaged_journal_is_a_service_error_naming_it_up_to_the_trainer(
        cluster, tmp_path, monkeypatch, caplog):
    # Also: a LocalCluster on a Ray without token authentication says so.
    monkeypatch.setattr("feedline.service.ray_support.token_authentication", lambda: False)
    with caplog.at_level("WARNING", logger="feedline.service"):
        damaged = fl.service.LocalCluster(num_workers=1, journal_dir=str(tmp_path))
    assert any("runs without Ray's token authentication: anyone who can reach its ports "
               "can run code on it" in message for message in _service_logs(caplog))
    prefix = f"{damaged.name}-worker-"
    try:
        iterator = iter(fl.Dataset.range(100).apply(fl.service.distribute(
            "distributed_epoch", damaged, num_splits=4, max_outstanding_requests=1)))
        assert int(next(iterator)) == 0
        journal = tmp_path / JOURNAL_FILE
        lines = len(journal.read_text().splitlines())
        with open(journal, "a") as file:  # a crafted event: job 99 was never created
            file.write(json.dumps({"op": "done", "job": 99, "split": 0}) + "\n")
        ray.kill(damaged.dispatcher, no_restart=False)  # its restart replays the journal
        with pytest.raises(fl.ServiceError) as caught:
            list(iterator)
        message = str(caught.value)
        assert message.startswith("the service's dispatcher cannot run: ServiceError: "
                                  f"{journal}: line {lines + 1}: 'done' event of job 99, "
                                  "which no earlier line creates"), message
        assert isinstance(caught.value.__cause__, ray.exceptions.RayActorError)
    finally:
        damaged.shutdown()  # ends the workers its dispatcher no longer can
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith(prefix)]
    assert any("the dispatcher did not stop its workers" in message
               for message in _service_logs(caplog))
    with pytest.raises(fl.ServiceError, match=f"cannot run: ServiceError: {journal}: line"):
        fl.service.LocalCluster(num_workers=1, journal_dir=str(tmp_path))
