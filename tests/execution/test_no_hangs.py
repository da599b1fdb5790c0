"""No hangs, ever: a user function that blocks forever cannot stop ``close()``, ``break`` +
garbage collection or interpreter exit, and ``element_timeout`` names the stuck element."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading

import pytest

import feedline as fl
from feedline.testing import no_leaked_threads

TIMEOUT = 60
QUICK = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.2))


def blocking_at(index: int, release: threading.Event, entered: threading.Event | None = None):
    def fn(x):
        if int(x) == index:
            if entered is not None:
                entered.set()
            release.wait()  # "forever": until the test releases it at its end
        return x

    return fn


PIPELINES = {
    "prefetch": lambda fn: fl.Dataset.range(10).map(fn).prefetch(2),
    "parallel-map": lambda fn: fl.Dataset.range(10).map(fn, num_parallel_calls=2),
    "parallel-batch": lambda fn: fl.Dataset.range(10).map(fn).prefetch(1)
    .batch(2, num_parallel_calls=2),
    "parallel-interleave": lambda fn: fl.Dataset.range(2).interleave(
        lambda i: fl.Dataset.range(5).map(lambda y: i * 5 + y).map(fn), cycle_length=2,
        num_parallel_calls=2),
}
STAGES = {"prefetch": "prefetch", "parallel-map": "map", "parallel-batch": "prefetch",
          "parallel-interleave": "interleave"}
# Where each pipeline's reading thread gets stuck once the first next() has returned (the
# batch stage pulls its input on the consumer's thread: it has two batches by then).
STUCK_AT = {"prefetch": 1, "parallel-map": 1, "parallel-batch": 4, "parallel-interleave": 1}


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("kind", sorted(PIPELINES))
def test_close_returns_while_a_function_blocks_and_warns_naming_the_stage(kind):
    release, entered = threading.Event(), threading.Event()
    with no_leaked_threads():
        try:
            it = iter(PIPELINES[kind](blocking_at(STUCK_AT[kind], release, entered))
                      .with_options(QUICK))
            next(it)  # element 0 (or a batch/interleave's first): the reader gets stuck
            # A task queued but not yet started is cancelled by close(), with no warning: wait
            # until a thread is inside the function.
            assert entered.wait(TIMEOUT)
            with pytest.warns(RuntimeWarning, match=STAGES[kind]):
                it.close()
            with pytest.raises(StopIteration):
                next(it)
        finally:
            release.set()  # the abandoned thread returns and ends


@pytest.mark.timeout(TIMEOUT)
def test_break_and_garbage_collection_do_not_hang():
    release, entered = threading.Event(), threading.Event()
    with no_leaked_threads():
        try:
            ds = fl.Dataset.range(10).map(blocking_at(2, release, entered),
                                          num_parallel_calls=2)

            def break_out() -> None:
                for x in ds.with_options(QUICK):
                    if int(x) == 1:
                        assert entered.wait(TIMEOUT)  # a thread is inside element 2's call
                        break
                gc.collect()

            # The abandoned iterator is collected, so closed, within close_timeout.
            with pytest.warns(RuntimeWarning, match="map"):
                break_out()
        finally:
            release.set()


@pytest.mark.timeout(TIMEOUT)
def test_interpreter_exit_does_not_hang_on_a_blocked_function():
    script = textwrap.dedent("""
        import threading, warnings
        import feedline as fl
        warnings.simplefilter("ignore")
        never = threading.Event()
        def stuck(x):
            if int(x) == 3:
                never.wait()
            return x
        options = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.5))
        it = iter(fl.Dataset.range(10).map(stuck, num_parallel_calls=2).prefetch(2)
                  .with_options(options))
        print(int(next(it)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("kind, stage, element", [
    ("prefetch", "prefetch", "element 2"),
    ("parallel-map", "map", "input element 2"),
])
def test_element_timeout_names_the_stage_and_element_and_keeps_its_place(kind, stage, element):
    release = threading.Event()
    # Long enough that elements 0 and 1 never hit it on a loaded machine; element 2 waits
    # until the test releases it.
    options = fl.Options(threading=fl.ThreadingOptions(element_timeout=1.0))
    with no_leaked_threads():
        try:
            with iter(PIPELINES[kind](blocking_at(2, release)).with_options(options)) as it:
                assert [int(next(it)) for _ in range(2)] == [0, 1]
                with pytest.raises(TimeoutError, match=f"{stage}.*{element}"):
                    next(it)
                release.set()
                # The element kept its place: the next call waits for it again.
                assert [int(x) for x in it] == list(range(2, 10))
        finally:
            release.set()


def test_timeouts_are_validated():
    with pytest.raises(ValueError, match="element_timeout"):
        fl.ThreadingOptions(element_timeout=0)
    with pytest.raises(ValueError, match="close_timeout"):
        fl.ThreadingOptions(close_timeout=-1)
