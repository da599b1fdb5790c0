"""Worker processes never outlive their parent (issue 29, item 2).

A parent killed (``SIGKILL``) or terminated (``SIGTERM``) runs no cleanup of its own; its
workers must end anyway, even one inside a long C call that holds the GIL (a catastrophic
regular expression here): a Python thread watching the parent never runs then, so the
kernel must end them (``PR_SET_PDEATHSIG``, :mod:`feedline.placement.ipc.spawn`). Each test
proves every worker it saw has ended, and leaves no process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import psutil
import pytest
from process_helpers import alive, feedline_mappings, wait_gone

import feedline as fl
from feedline.placement.ipc.spawn import start_worker

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 20.0  # seconds the workers get to end: generous, only a bound against hangs

_SCRIPT = """
import os, re, sys, time
import feedline as fl

def catastrophic(x):
    if int(x) == 1:
        print("ENTERED", os.getpid(), flush=True)
        # Exponential backtracking inside the regex engine, which never releases the GIL.
        re.match(r"(a+)+$", "a" * 64 + "b")
    return x

if sys.argv[1] == "multiprocess":
    ds = fl.Dataset.range(4).map(catastrophic).multiprocess(2)
else:
    ds = fl.Dataset.range(4).map(catastrophic, num_parallel_calls=2, executor="process")
it = iter(ds)
print("FIRST", int(next(it)), flush=True)
time.sleep(1000)
"""


def _children_of(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _start_and_wait_for_the_c_call(tmp_path: Path, kind: str
                                   ) -> tuple[subprocess.Popen[str], list[int], int]:
    """Run the script; return it, its workers' pids, and the pid of the worker that is
    inside the regex."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    process = subprocess.Popen([sys.executable, str(script), kind], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                               start_new_session=True)
    entered = first = None
    timer = threading.Timer(100.0, process.kill)  # a script that never gets there
    timer.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            words = line.split()
            if words[:1] == ["ENTERED"]:
                entered = int(words[1])
            elif words[:1] == ["FIRST"]:
                first = int(words[1])
            if entered is not None and first is not None:
                break
    finally:
        timer.cancel()
    assert entered is not None and first == 0, process.stderr.read() if process.stderr else ""
    workers = _children_of(process.pid)
    assert entered in workers, (entered, workers)
    return process, workers, entered


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["multiprocess", "process_executor"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_workers_end_when_the_parent_dies_while_one_holds_the_gil_in_c(tmp_path, kind, sig):
    process, workers, busy = _start_and_wait_for_the_c_call(tmp_path, kind)
    try:
        os.kill(process.pid, sig)
        process.wait(DEADLINE)
        left = wait_gone(workers, DEADLINE)
    finally:
        for pid in workers:  # never leave one to the next test
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()
    assert process.returncode == -sig
    assert not left, f"workers {left} outlived their parent (the busy one: {busy})"


@pytest.mark.timeout(60)
def test_a_worker_started_by_a_thread_that_ends_lives_on():
    # The kernel's parent-death signal follows the *thread* that started a process: a
    # worker started by a consumer thread that then exits must not die with it.
    started: list[subprocess.Popen[bytes]] = []
    entry = "import sys, time; time.sleep(60)"
    thread = threading.Thread(target=lambda: started.append(start_worker(entry)),
                              name="short-lived-consumer")
    thread.start()
    thread.join()
    process = started[0]
    try:
        # Still alive well after the thread that started it ended.
        assert wait_gone([process.pid], 0.5) == [process.pid] and process.poll() is None
    finally:
        process.kill()
        process.wait()
        process.channel.close()
    assert not alive(process.pid)


@pytest.mark.timeout(60)
def test_a_pipeline_iterated_on_another_thread_after_its_first_thread_ended():
    # Workers started by one consumer thread keep serving the pipeline after that thread is
    # gone (a data loader that hands its iterator to another thread).
    it = iter(fl.Dataset.range(8).map(abs, num_parallel_calls=2, executor="process"))
    first: list[int] = []
    starter = threading.Thread(target=lambda: first.append(int(next(it))))
    starter.start()
    starter.join()
    pids = [p.pid for p in psutil.Process().children(recursive=True)]
    assert pids
    assert first + [int(x) for x in it] == list(range(8))
    it.close()
    assert not wait_gone(pids, DEADLINE)
    assert feedline_mappings() == []
