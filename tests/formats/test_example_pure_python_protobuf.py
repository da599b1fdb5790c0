"""Damaged records under protobuf's pure-Python parser (the one free-threaded builds get): a
key that is not UTF-8 raises UnicodeDecodeError there, not DecodeError; feedline names the
record either way."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SCRIPT = r'''
from feedline.formats.example import ExampleParseError, VarLenFeature, parse_example
from google.protobuf.internal import api_implementation

assert api_implementation.Type() == "python", api_implementation.Type()
good = b"\x0a\x0b\x0a\x09\x0a\x01i\x12\x04\x1a\x02\x0a\x00"
bad_key = b"\x0a\x0b\x0a\x09\x0a\x01\xff\x12\x04\x1a\x02\x0a\x00"
try:
    parse_example([good, bad_key], {"i": VarLenFeature("int64")})
except ExampleParseError as error:
    print("record", error.record_index)
'''


@pytest.mark.timeout(120)
def test_a_key_that_is_not_utf8_names_its_record_under_pure_python_protobuf():
    env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "record 1"
