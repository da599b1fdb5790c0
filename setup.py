"""Declares the optional C fast paths of ``parse_example``, of TFRecord random access, of
shuffle, of feedline.image's normalize and of the statistics probe;
everything else is in pyproject.toml.

The extensions are optional: if it does not compile (no C compiler, no Python headers), the
install still succeeds and feedline uses its pure-Python (protobuf) path. Setting
``FEEDLINE_PURE_PYTHON=1`` while installing skips building it; at run time the same variable
makes feedline ignore a built one (see feedline/formats/example/cbridge.py).
"""

import os
import sys

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("FEEDLINE_PURE_PYTHON", "") in ("", "0"):
    ext_modules.append(Extension("feedline.formats._example_fast",
                                 ["feedline/formats/_example_fast.c"], optional=True))
    if sys.byteorder == "little":  # it reads TFRecord's little-endian integers directly
        ext_modules.append(Extension("feedline.formats._tfrecord_fast",
                                     ["feedline/formats/_tfrecord_fast.c"], optional=True))
    ext_modules.append(Extension("feedline.transforms._shuffle_fast",
                                 ["feedline/transforms/_shuffle_fast.c"], optional=True))
    # Two roundings, as NumPy's multiply then add: no fused multiply-add (MSVC never fuses
    # under its default /fp:precise).
    no_fma = [] if sys.platform == "win32" else ["-ffp-contract=off"]
    ext_modules.append(Extension("feedline.image._normalize_fast",
                                 ["feedline/image/_normalize_fast.c"], optional=True,
                                 extra_compile_args=no_fma))
    ext_modules.append(Extension("feedline.profiling._probe",
                                 ["feedline/profiling/_probe.c"], optional=True))

setup(ext_modules=ext_modules)
