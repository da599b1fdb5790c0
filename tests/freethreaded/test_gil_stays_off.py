"""On a free-threaded CPython, importing feedline and every one of its modules leaves the GIL off.

CPython turns the GIL back on, for the whole process, when it loads an extension module that
does not declare ``Py_mod_gil`` (feedline's own C paths, or a dependency built without it).
The imports run in a fresh interpreter, with ``PYTHON_GIL`` removed from its environment, so
nothing this test process loaded first (pytest's plugins) decides the answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

pytestmark = pytest.mark.skipif(not FREE_THREADED,
                                reason="needs a free-threaded CPython (3.13t or later)")

# Imports every feedline module in turn; after each, whether the GIL came back on. A module
# whose import needs an optional package that is missing is listed apart, with the package.
_WALK = r"""
import importlib, json, pkgutil, sys, warnings
warnings.simplefilter("ignore")
import feedline
report = {"after_feedline": sys._is_gil_enabled(), "enabled_by": None, "imported": [],
          "skipped": {}}
for info in pkgutil.walk_packages(feedline.__path__, "feedline."):
    try:
        importlib.import_module(info.name)
    except ImportError as error:
        missing = getattr(error, "name", None) or ""
        if missing == "feedline" or missing.startswith("feedline."):
            raise
        report["skipped"][info.name] = f"{type(error).__name__}: {error}"
        continue
    report["imported"].append(info.name)
    if sys._is_gil_enabled() and report["enabled_by"] is None:
        report["enabled_by"] = info.name
report["gil_enabled"] = sys._is_gil_enabled()
print(json.dumps(report))
"""


def _import_everything() -> dict:
    env = {key: value for key, value in os.environ.items() if key != "PYTHON_GIL"}
    done = subprocess.run([sys.executable, "-c", _WALK], capture_output=True, text=True,
                          check=False, timeout=600, env=env, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_feedline_and_every_module_keeps_the_gil_off():
    report = _import_everything()
    assert report["after_feedline"] is False, "import feedline turned the GIL on"
    assert report["enabled_by"] is None, (
        f"importing {report['enabled_by']} turned the GIL on (skipped for missing packages: "
        f"{report['skipped']})")
    assert report["gil_enabled"] is False
    # The walk reached the package's C paths and its main layers, not only a few modules.
    imported = set(report["imported"])
    for name in ("feedline.formats.tfrecord", "feedline.transforms.shuffle",
                 "feedline.image.codecs", "feedline.snapshot.chunks",
                 "feedline.profiling.collect"):
        assert name in imported, (name, report["skipped"].get(name))


def test_every_built_c_extension_is_loaded_without_the_gil():
    """Each of feedline's C extensions that was built for this interpreter imports with the GIL
    still off (the walk above would also pass if one had not been built)."""
    root = Path(__file__).resolve().parents[2] / "feedline"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = sorted(".".join(path.relative_to(root.parent).with_name(
        path.name[:-len(suffix)]).parts) for path in root.rglob(f"*{suffix}"))
    assert built, f"no C extension built for this interpreter ({suffix}) under {root}"
    script = ("import importlib, json, sys\n"
              f"names = {built!r}\n"
              "out = {}\n"
              "for name in names:\n"
              "    importlib.import_module(name)\n"
              "    out[name] = sys._is_gil_enabled()\n"
              "print(json.dumps(out))\n")
    env = {key: value for key, value in os.environ.items() if key != "PYTHON_GIL"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False, timeout=120, env=env, cwd=root.parent)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout) == {name: False for name in built}
