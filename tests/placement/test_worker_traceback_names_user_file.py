"""A worker process's traceback names the user's file and the line that raised (issue 43's
leftover, issue 39 placement): functions sent by value (closures, lambdas, a script's own
functions) carry their code by ``marshal`` (:mod:`feedline.core.pickling`), where plain
cloudpickle wrote ``<dynamic-code>`` as their file."""

from __future__ import annotations

import gc
import inspect
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from process_helpers import wait_gone

import feedline as fl

pytestmark = pytest.mark.timeout(120)

_WORKER_MODULES = ("feedline.placement.process_executor", "feedline.placement.worker_loop")


def _feedline_workers() -> list[int]:
    """The pids of this process's live feedline workers (either kind)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and any(
                    module in part for part in child.cmdline() for module in _WORKER_MODULES):
                found.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def _line_of(fn: Callable[..., Any], text: str) -> int:
    """The line number, in its file, of the first line of ``fn``'s source holding ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _make_check() -> Callable[[int], int]:
    # A closure: cloudpickle sends it by value (a module-level function goes by reference
    # and was never affected).
    def check(x: int) -> int:
        if x == 2:
            raise ValueError(f"bad element {x}")
        return x

    return check


def _first_error(it: Iterator[Any]) -> BaseException:
    """The exception ``next(it)`` raises first (the elements before it are consumed)."""
    for _ in range(10):
        try:
            next(it)
        except ValueError as error:
            return error
    raise AssertionError("no element raised")


@pytest.fixture
def workers_ended():
    """The pids of the workers a test saw, which must all have ended once it is done."""
    seen: list[int] = []
    yield seen
    gc.collect()
    assert seen, "the test ran no worker process"
    assert wait_gone(seen, 20) == []


@pytest.mark.parametrize("stage", [
    pytest.param(lambda ds, fn: ds.map(fn, num_parallel_calls=2, executor="process"),
                 id="map-process-executor"),
    pytest.param(lambda ds, fn: ds.map(fn).multiprocess(2), id="multiprocess-worker-loop"),
])
def test_a_closure_raising_in_a_worker_names_this_file_and_line(stage, workers_ended):
    check = _make_check()
    it = iter(stage(fl.Dataset.range(5), check))
    try:
        error = _first_error(it)
        workers_ended.extend(_feedline_workers())
    finally:
        it.close()
    notes = "\n".join(error.__notes__)
    where = f'File "{__file__}", line {_line_of(check, "raise ValueError")}, in check'
    assert where in notes, notes
    assert "<dynamic-code>" not in notes


SCRIPT = textwrap.dedent("""
    import json, sys
    import psutil
    import feedline as fl

    def parse(x):
        if x == 3:
            raise KeyError(f"no field in record {x}")
        return x

    it = iter(fl.Dataset.range(6).map(parse, num_parallel_calls=2, executor="process"))
    try:
        for _ in range(6):
            next(it)
    except KeyError as error:
        notes = "\\n".join(error.__notes__)
    pids = [p.pid for p in psutil.Process().children(recursive=True)]
    it.close()
    print(json.dumps({"notes": notes, "pids": pids}))
""")


def test_a_script_s_function_raising_in_a_worker_names_the_script_and_line(tmp_path):
    # The case users meet: a function of ``__main__``, which cloudpickle sends by value.
    script = tmp_path / "user_pipeline.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=100, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    line = 1 + next(i for i, text in enumerate(SCRIPT.splitlines()) if "raise KeyError" in text)
    assert f'File "{script}", line {line}, in parse' in report["notes"], report["notes"]
    # Its workers ended with it.
    assert report["pids"] and wait_gone(report["pids"], 20) == []
