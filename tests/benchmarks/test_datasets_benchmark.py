"""benchmarks/datasets.py: the digest and checks that decide whether a run counts, argument
parsing, the table, tiny data sets read back by feedline, and (with the peers'
environments) a tiny end-to-end run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import datasets as bench
from benchmarks import datasets_data as data

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / "benchmarks" / ".venvs"
TINY = data.Sizes.tiny()


def _has_env(system: str, module: str) -> bool:
    python = VENVS / system / "bin" / "python"
    return python.exists() and subprocess.run([str(python), "-c", f"import {module}"],
                                              capture_output=True, check=False,
                                              timeout=120).returncode == 0


# ------------------------------------------------------------------------------ digest
def _rows(n: int) -> list[dict]:
    return [{"id": np.int64(i), "v": np.arange(3, dtype=np.float32) + i,
             "b": b"x" * (i % 4)} for i in range(n)]


def test_digest_is_order_free_and_the_same_by_rows_or_by_columns():
    rows = _rows(1100)  # more than one flush of rows
    by_rows, shuffled, by_columns = bench.Digest(), bench.Digest(), bench.Digest()
    for row in rows:
        by_rows.add_row(row)
    for k in np.random.default_rng(0).permutation(len(rows)):
        shuffled.add_row(rows[k])
    for start in range(0, len(rows), 300):  # batches of uneven sizes
        part = rows[start:start + 300]
        assert by_columns.add_columns({
            "id": np.array([r["id"] for r in part]), "v": np.stack([r["v"] for r in part]),
            "b": [r["b"] for r in part]}) == len(part)
    assert by_rows.result() == shuffled.result() == by_columns.result()
    assert by_rows.result()["count"] == 1100


def test_digest_sees_a_changed_byte_a_swap_between_rows_and_a_missing_row():
    base = bench.Digest()
    base.add_columns({"a": np.array([1, 2]), "s": [b"p", b"q"]})
    changed = bench.Digest()
    changed.add_columns({"a": np.array([1, 2]), "s": [b"p", b"r"]})
    swapped = bench.Digest()  # the same column values, paired differently
    swapped.add_columns({"a": np.array([1, 2]), "s": [b"q", b"p"]})
    fewer = bench.Digest()
    fewer.add_columns({"a": np.array([1]), "s": [b"p"]})
    digests = {d.result()["digest"] for d in (base, changed, swapped, fewer)}
    assert len(digests) == 4


def test_digest_of_a_dtype_change_and_of_ragged_rows():
    a, b = bench.Digest(), bench.Digest()
    a.add_columns({"x": np.array([[1, 2]], np.int32)})
    b.add_columns({"x": np.array([[1, 2]], np.int64)})
    assert a.result() != b.result()
    ragged, single = bench.Digest(), bench.Digest()
    ragged.add_row({"x": np.arange(2), "k": b"a"})
    ragged.add_row({"x": np.arange(3), "k": b"b"})
    single.add_columns({"x": np.arange(2)[None], "k": [b"a"]})
    single.add_columns({"x": np.arange(3)[None], "k": [b"b"]})
    assert ragged.result() == single.result()


def test_tolerant_fields_enter_by_shape_and_mean():
    a, b = bench.Digest(frozenset({"img"})), bench.Digest(frozenset({"img"}))
    a.add_row({"img": np.full((2, 2, 3), 10, np.uint8), "k": b"a"})
    b.add_row({"img": np.full((2, 2, 3), 11, np.uint8), "k": b"a"})
    ra, rb = a.result(), b.result()
    assert ra["digest"] == rb["digest"] and (ra["means"], rb["means"]) == (10.0, 11.0)
    c = bench.Digest(frozenset({"img"}))
    c.add_row({"img": np.full((2, 3, 3), 10, np.uint8), "k": b"a"})
    assert c.result()["digest"] != ra["digest"]


def test_canonical_forms_of_each_system_agree():
    # feedline's WebDataset sample vs the webdataset package's (str key and text, int class).
    ours = {"__key__": b"s1", "__url__": b"u", "jpg": b"J", "cls": b"7", "txt": b"hi"}
    theirs = {"__key__": "s1", "__url__": "u", "__local_path__": "u", "jpg": b"J", "cls": b"7",
              "txt": "hi"}
    assert bench.wds_canonical(ours, False) == bench.wds_canonical(theirs, False)
    decoded = bench.wds_canonical({**theirs, "jpg": np.zeros((1, 1, 3), np.uint8), "cls": 7},
                                  True)
    assert decoded["cls"] == np.int64(7) and decoded["cls"].dtype == np.int64
    # Hugging Face rows: feedline's bytes and NumPy scalars vs datasets' str, int and list.
    a = bench.Digest()
    a.add_row(bench.hf_canonical({"id": np.int64(1), "text": b"t", "label": np.int64(2),
                                  "vector": np.array([0.5, 1.0], np.float32)}))
    b = bench.Digest()
    b.add_columns(bench.hf_columns({"id": [1], "text": np.array(["t"]), "label": [2],
                                    "vector": [[0.5, 1.0]]}))
    assert a.result() == b.result()
    # TFDS: an encoded image (bytes) in a batch as NumPy's object array.
    c = bench.Digest()
    c.add_columns(bench.tfds_columns({"id": np.array([3]), "label": np.array([1]),
                                      "vector": np.zeros((1, 16), np.float32),
                                      "image": np.array([b"png"], dtype=object)}))
    d = bench.Digest()
    d.add_row(bench.tfds_canonical({"id": 3, "label": 1, "vector": np.zeros(16),
                                    "image": b"png"}))
    assert c.result() == d.result()


# ------------------------------------------------------------------------------ checks
def _record(**kw):
    base = {"ok": True, "capped": False, "elements": 10, "rate": 100.0, "cpu_s": 0.1,
            "digest": {"count": 10, "digest": "00ff"}}
    base.update(kw)
    return base


def test_check_counts_a_run_only_when_its_output_is_right():
    expected = {"count": 10, "digest": "00ff"}
    assert bench.check(_record(), expected, 10) == "ok"
    assert bench.check(_record(), None, 10) == "ok"  # checked later, by agreement
    assert bench.check(_record(digest={"count": 9, "digest": "00ff"}), expected, 10) == \
        "WRONG OUTPUT: 9 elements, expected 10"
    assert bench.check(_record(digest={"count": 10, "digest": "0100"}), expected, 10) == \
        "WRONG OUTPUT: digest 0100, expected 00ff"
    assert bench.check(_record(capped=True, elements=4), expected, 10) == \
        "capped at 4 of 10: not checked"
    failed = bench.check({"ok": False, "error": "Traceback ...\nValueError: boom\n"},
                         expected, 10)
    assert failed == "failed: ValueError: boom"
    pixels = {"count": 10, "digest": "00ff", "means": 1000.0}
    near = _record(digest={"count": 10, "digest": "00ff", "means": 1015.0})
    far = _record(digest={"count": 10, "digest": "00ff", "means": 1030.0})
    assert bench.check(near, pixels, 10) == "ok"  # 1.5 grey levels per image
    assert bench.check(far, pixels, 10).startswith("WRONG OUTPUT: pixel means differ by 3.000")


def test_agreement_flags_every_checked_run_when_digests_differ():
    same = [{"status": "ok", "digest": {"digest": "a"}}, {"status": "ok",
                                                           "digest": {"digest": "a"}}]
    bench.agree(same)
    assert [r["status"] for r in same] == ["ok", "ok"]
    differ = [{"status": "ok", "digest": {"digest": "a"}},
              {"status": "ok", "digest": {"digest": "b"}},
              {"status": "capped at 1 of 2: not checked", "digest": {"digest": "c"}}]
    bench.agree(differ)
    assert [r["status"] for r in differ] == [
        "WRONG OUTPUT: the systems' digests differ"] * 2 + ["capped at 1 of 2: not checked"]


def test_summary_uses_checked_runs_only_and_the_table_gives_ratios_and_goals():
    runs = [_record(rate=r, status="ok") for r in (100.0, 300.0, 200.0)]
    runs.append(_record(rate=10_000.0, status="WRONG OUTPUT: x"))
    summary = bench.summarize(runs)
    assert summary["rate"] == 200.0 and (summary["low"], summary["high"]) == (100.0, 300.0)
    assert summary["cpu_ms_per_1k"] == pytest.approx(10_000.0) and summary["runs"] == 3
    assert bench.summarize([_record(status="failed: x")]) is None
    peer = {"rate": 100.0, "low": 90.0, "high": 110.0, "cpu_ms_per_1k": 20.0, "runs": 3}
    rows = [
        {"workload": "tfds", "label": "decoded", "goal": 1.5, "peer_label": "tfds + tf.data",
         "feedline": summary, "peer": peer, "feedline_problem": "", "peer_problem": ""},
        {"workload": "webdataset", "label": "bytes", "goal": 1.0, "peer_label": "webdataset",
         "feedline": {**summary, "rate": 50.0}, "peer": peer, "feedline_problem": "",
         "peer_problem": ""},
        {"workload": "huggingface", "label": "rows", "goal": None, "peer_label": "HF datasets",
         "feedline": summary, "peer": None, "feedline_problem": "",
         "peer_problem": "unavailable: install failed"},
    ]
    text = bench.markdown(rows, 3)
    assert ("| tfds | decoded | 200 (100–300); 10,000 CPU ms | tfds + tf.data | 100 (90–110);"
            " 20 CPU ms | **2.00x** | ≥ 1.5x met |") in text
    assert "| **0.50x** | ≥ 1x **not met** |" in text
    assert "| HF datasets | unavailable: install failed | – | – |" in text


def test_arguments():
    args = bench.parse_args([])
    assert args.only == list(bench.WORKLOADS) and args.rounds == 3 and not args.small
    assert args.max_seconds == 60.0 and args.worker is None
    args = bench.parse_args(["--only", "tfds, array-record", "--small", "--rounds", "1",
                             "--max-seconds", "0"])
    assert args.only == ["tfds", "array_record"] and args.small and args.max_seconds == 0
    for bad in (["--only", "parquet"], ["--only", ","], ["--rounds", "0"],
                ["--max-seconds", "-1"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_every_comparison_names_variants_both_systems_run():
    for workload, _, ours, theirs, _ in bench.COMPARISONS:
        assert ours in bench.VARIANTS[(workload, "feedline")]
        assert theirs in bench.VARIANTS[(workload, bench.PEER[workload])]


# ------------------------------------------------------------------------------ data
def test_sizes_and_folders():
    assert data.Sizes.small().tfds_examples == data.Sizes().tfds_examples // 10
    assert data.folder_of("webdataset", TINY, 5, Path("/c")) == Path(
        "/c/datasets-webdataset-30-2-s5")


def test_tiny_array_record_data_read_by_feedline_as_expected(tmp_path):
    pytest.importorskip("array_record")
    meta = data.generate("array_record", TINY, 3, tmp_path)
    assert len(meta["files"]) == 2 and meta["count"] == 200
    assert sorted(np.load(meta["indices"]).tolist()) == list(range(200))
    assert data.generate("array_record", TINY, 3, tmp_path) == meta  # cached
    for variant in ("global_shuffle", "same_indices"):
        [record] = bench.worker({"workload": "array_record", "system": "feedline",
                                 "variants": [variant], "meta": meta, "seed": 3,
                                 "max_seconds": 0})
        assert bench.check(record, meta["expected"], 200) == "ok", record


def test_tiny_webdataset_data_read_by_feedline_as_expected(tmp_path):
    meta = data.generate("webdataset", TINY, 3, tmp_path)
    assert [Path(f).name for f in meta["files"]] == ["shard-000000.tar", "shard-000001.tar"]
    records = bench.worker({"workload": "webdataset", "system": "feedline",
                            "variants": ["bytes", "decoded"], "meta": meta, "seed": 3,
                            "max_seconds": 0})
    for record in records:
        expected = meta["expected"][record["variant"]]
        assert bench.check(record, expected, 30) == "ok", record
    # feedline decodes as TensorFlow, the reference as Pillow: means close, not equal.
    decoded = records[1]["digest"]["means"]
    assert decoded != meta["expected"]["decoded"]["means"]
    # A wrong reading is caught: the first shard alone.
    short = {**meta, "files": meta["files"][:1]}
    [record] = bench.worker({"workload": "webdataset", "system": "feedline",
                             "variants": ["bytes"], "meta": short, "seed": 3,
                             "max_seconds": 0})
    assert bench.check(record, meta["expected"]["bytes"], 30) == \
        "WRONG OUTPUT: 15 elements, expected 30"


def test_a_failing_run_is_a_failed_record_not_a_crash(tmp_path):
    meta = {"files": [str(tmp_path / "missing.tar")], "count": 1}
    [record] = bench.worker({"workload": "webdataset", "system": "feedline",
                             "variants": ["bytes"], "meta": meta, "seed": 0,
                             "max_seconds": 0})
    assert not record["ok"] and "missing.tar" in record["error"]
    assert bench.check(record, None, 1).startswith("failed: ")


@pytest.mark.slow
@pytest.mark.skipif(not _has_env("tf", "tensorflow_datasets"),
                    reason="no TensorFlow environment with tensorflow-datasets")
def test_tiny_tfds_directory_written_by_tfds_and_read_by_feedline(tmp_path):
    meta = data.generate("tfds", TINY, 3, tmp_path)
    assert meta["count"] == 60 and len(meta["files"]) == 2
    assert (tmp_path / data.folder_of("tfds", TINY, 3, tmp_path).name / data.TFDS_NAME /
            data.TFDS_VERSION / "dataset_info.json").is_file()
    records = bench.worker({"workload": "tfds", "system": "feedline",
                            "variants": ["decoded", "encoded"], "meta": meta, "seed": 3,
                            "max_seconds": 0})
    assert bench.check(records[0], meta["expected"]["decoded"], 60) == "ok", records[0]
    assert bench.check(records[1], None, 60) == "ok", records[1]


@pytest.mark.slow
@pytest.mark.skipif(not _has_env("datasets", "datasets"), reason="no datasets environment")
def test_tiny_huggingface_folder_written_by_datasets_and_read_by_feedline(tmp_path):
    pytest.importorskip("pyarrow")
    meta = data.generate("huggingface", TINY, 3, tmp_path)
    assert meta["count"] == 50 and len(meta["files"]) == 2
    records = bench.worker({"workload": "huggingface", "system": "feedline",
                            "variants": ["rows", "batches"], "meta": meta, "seed": 3,
                            "max_seconds": 0})
    for record in records:
        assert bench.check(record, meta["expected"], 50) == "ok", record


@pytest.mark.slow
@pytest.mark.skipif(not (_has_env("grain", "grain") and _has_env("webdataset", "webdataset")),
                    reason="no grain or webdataset environment")
def test_tiny_end_to_end_run_with_peers(tmp_path):
    out = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.datasets", "--tiny", "--rounds", "1",
         "--only", "array_record,webdataset", "--cache", str(tmp_path), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["ok"] and len(result["records"]) == 8
    assert {r["status"] for r in result["records"]} == {"ok"}
    assert "| array_record | global shuffle pipeline, batch 256 |" in done.stdout
    assert "| webdataset | samples as bytes |" in done.stdout
