"""feedline against TensorFlow, case by case: tf.data's kernel tests ported (issue 26).

Every case of ``tfcases`` is built with feedline and its result compared, exactly, with
what TensorFlow produced for the same case (``expected/<module>.json``, recorded by
``record_expected.py`` in the TF environment; TensorFlow is not needed here). Known
differences are ``xfail(strict=True)`` with their reason (``tfcases/deviations.py``,
listed in DEVIATIONS.md): when feedline is fixed, the case passes and the xfail must go.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the tfcases package sits beside this file
    sys.path.insert(0, str(HERE))

from tfcases import MODULES  # noqa: E402
from tfcases.deviations import deviations  # noqa: E402
from tfcases.harness import canonical  # noqa: E402
from tfcases.ns_fl import NS  # noqa: E402
from tfcases.runner import run_case  # noqa: E402

SUITES = {name: importlib.import_module(f"tfcases.{name}").SUITE for name in MODULES}


def _expected(module: str) -> dict:
    path = HERE / "expected" / f"{module}.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())["results"]


EXPECTED = {name: _expected(name) for name in MODULES}
DEVIATIONS = deviations([f"{m}::{c.name}" for m, s in SUITES.items() for c in s.cases])


def _params() -> list:
    out = []
    for module, suite in SUITES.items():
        for case in suite.cases:
            marks = []
            reason = DEVIATIONS.get(f"{module}::{case.name}")
            if reason is not None:
                marks.append(pytest.mark.xfail(strict=True, reason=f"deviation: {reason}"))
            out.append(pytest.param(module, case, id=f"{module}::{case.name}", marks=marks))
    return out


def _short(result: dict, limit: int = 1500) -> str:
    text = canonical(result)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


@pytest.mark.parametrize(("module", "case"), _params())
@pytest.mark.slow
def test_case(module, case):
    expected = EXPECTED[module].get(case.name)
    assert expected is not None, (
        f"no TF result recorded for {module}::{case.name}: run "
        f"benchmarks/.venvs/tf/bin/python tests/conformance/record_expected.py {module}")
    actual = run_case(case, NS)
    assert canonical(actual) == canonical(expected), (
        f"{module}::{case.name}\n  TF:       {_short(expected)}\n  feedline: {_short(actual)}")


def test_no_stale_records():
    """Every recorded result belongs to a case (renamed or removed cases are re-recorded)."""
    stale = [f"{m}::{n}" for m, results in EXPECTED.items() for n in results
             if n not in {c.name for c in SUITES[m].cases}]
    assert not stale, f"recorded results without a case: {stale[:10]}"


def test_deviations_name_cases():
    """Every deviation pattern matches a case, and DEVIATIONS.md lists each deviating case."""
    from tfcases.deviations import ROWS, expand

    names = [f"{m}::{c.name}" for m, s in SUITES.items() for c in s.cases]
    unused = [p for row in ROWS for p in row.patterns if not expand([p], names)]
    assert not unused, f"deviation patterns matching no case: {unused}"
    text = (HERE / "DEVIATIONS.md").read_text()
    missing = [name for name in DEVIATIONS if f"`{name}`" not in text]
    assert not missing, f"DEVIATIONS.md does not list: {missing}"


def test_skipped_table_is_current():
    """SKIPPED.md is the table record_expected.py generates from the modules' skip lists."""
    from record_expected import skipped_table

    assert (HERE / "SKIPPED.md").read_text() == skipped_table(), (
        "SKIPPED.md is out of date: run record_expected.py (or regenerate the table)")
