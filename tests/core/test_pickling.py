"""feedline.core.pickling: functions sent by value keep their file name (issue 43: a worker's
traceback named ``<dynamic-code>``, cloudpickle's placeholder, not the user's script)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from feedline.core.pickling import dumps

SCRIPT = textwrap.dedent("""
    import pickle, sys, traceback
    import cloudpickle
    from feedline.core.pickling import dumps

    def helper(x):
        raise ValueError(f"bad record {x}")

    def parse(x):
        return helper(x) + 1

    for name, pickled in [("feedline", dumps(parse)), ("cloudpickle", cloudpickle.dumps(parse))]:
        try:
            pickle.loads(pickled)(3)
        except ValueError as error:
            files = [frame.filename for frame in traceback.extract_tb(error.__traceback__)[1:]]
            print(name, files)
""")


@pytest.mark.timeout(120)
def test_a_script_s_functions_keep_its_file_name(tmp_path):
    script = tmp_path / "user_pipeline.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=100, check=True)
    assert result.stdout.splitlines() == [
        f"feedline {[str(script), str(script)]}",
        "cloudpickle ['<dynamic-code>', '<dynamic-code>']",  # what workers showed before
    ]


def test_values_round_trip_as_with_cloudpickle():
    offset = np.float32(2)
    value = {"f": lambda x: x * offset, "data": np.arange(3), "nested": [(1, b"x")]}
    buffers = []
    back = pickle.loads(dumps(value, buffer_callback=buffers.append), buffers=buffers)
    assert back["f"](np.float32(3)) == np.float32(6)
    assert back["data"].tolist() == [0, 1, 2] and back["nested"] == [(1, b"x")]
    assert back["f"].__code__.co_filename == __file__


class _Marker:
    """A constant that pickles but that ``marshal`` cannot write."""

    def __eq__(self, other):
        return isinstance(other, _Marker)

    __hash__ = object.__hash__


def test_code_that_marshal_cannot_write_still_pickles_as_cloudpickle_sends_it():
    def f():
        return None

    f.__code__ = f.__code__.replace(co_consts=(_Marker(),))
    back = pickle.loads(dumps(f))
    assert back() == _Marker()
