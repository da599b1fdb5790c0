"""Every reader on fsspec URLs: the memory file system and a real local HTTP server."""

import gzip
import http.server
import os
import re
import threading

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")  # fsspec's HTTP file system needs it


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with HTTP range requests, as S3, GCS and web servers do (fsspec reads
    remote files in ranged blocks and seeks by asking for a range)."""

    def log_message(self, *args):  # keep the test output clean
        pass

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _serve(self, body):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404, "not found")
            return
        with open(path, "rb") as f:
            data = f.read()
        start, end = 0, len(data)
        requested = self.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", requested.strip()) if requested else None
        if match:
            self.server.ranges.append(requested)
            first, last = match.groups()
            if first == "":
                start = max(0, len(data) - int(last))
            else:
                start = int(first)
                end = min(len(data), int(last) + 1) if last else len(data)
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if body:
            self.wfile.write(data[start:end])


@pytest.fixture
def http_dir(tmp_path):
    """``(directory, base_url, server)``: a ThreadingHTTPServer on 127.0.0.1 serving a
    temporary directory, shut down and joined at teardown."""
    root = tmp_path / "www"
    root.mkdir()

    def handler(*args, **kwargs):
        return _RangeHandler(*args, directory=str(root), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.ranges = []
    thread = threading.Thread(target=server.serve_forever, name="test-http-server", daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        assert not thread.is_alive()


def memory(path, data):
    fsspec.filesystem("memory").pipe(path, data)
    return f"memory://{path}"


# ------------------------------------------------------------------------ memory file system
def test_memory_text_and_checkpointing():
    a = memory("/remote/t/a.txt", b"one\r\ntwo\n")
    b = memory("/remote/t/b.txt", b"three")
    assert check_checkpointing(fl.TextLineDataset([a, b], buffer_size=2)) == \
        [b"one", b"two", b"three"]


def test_memory_compressed_text():
    path = memory("/remote/t/c.gz", gzip.compress(b"x\ny\n"))
    assert list(fl.TextLineDataset(path, "GZIP")) == [b"x", b"y"]


def test_memory_fixed_length_and_checkpointing():
    path = memory("/remote/f/a.bin", b"HEADER012345FOOTER")
    ds = fl.FixedLengthRecordDataset(path, 2, 6, 6)
    assert check_checkpointing(ds) == [b"01", b"23", b"45"]


def test_memory_csv_and_checkpointing():
    path = memory("/remote/c/a.csv", b'k,v\n1,"a,b"\n2,\n')
    ds = fl.CsvDataset(path, [0, b"-"], header=True)
    assert check_checkpointing(ds) == [(1, b"a,b"), (2, b"-")]


def test_memory_make_csv_dataset_with_glob():
    memory("/remote/mc/a.csv", b"x,y\n1,a\n")
    memory("/remote/mc/b.csv", b"x,y\n2,b\n")
    ds = fl.make_csv_dataset("memory:///remote/mc/*.csv", 2, num_epochs=1, shuffle=False)
    [batch] = list(ds)
    assert batch["x"].tolist() == [1, 2] and batch["y"].tolist() == [b"a", b"b"]


def test_memory_parquet_and_checkpointing():
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    with fsspec.open("memory://remote/p/a.parquet", "wb") as f:
        pq.write_table(pa.table({"x": [1, 2, 3]}), f, row_group_size=2)
    ds = fl.ParquetDataset("memory://remote/p/a.parquet")
    assert [b["x"].tolist() for b in check_checkpointing(ds)] == [[1, 2], [3]]


def test_memory_missing_file_names_the_url():
    with pytest.raises(FileNotFoundError, match="memory://remote/none.txt"):
        list(fl.TextLineDataset("memory://remote/none.txt"))


# ------------------------------------------------------------------------------ HTTP server
def test_http_text_reads_and_restores_with_a_range_request(http_dir):
    root, url, server = http_dir
    (root / "a.txt").write_bytes(b"".join(b"line %d\r\n" % i for i in range(100)))
    ds = fl.TextLineDataset(f"{url}/a.txt")
    assert list(ds) == [b"line %d" % i for i in range(100)]
    with iter(ds) as it:
        for _ in range(60):
            next(it)
        state = it.state_dict()
    offset = state["root"]["position"]["offset"]
    server.ranges.clear()
    with iter(ds) as restored:
        restored.load_state_dict(state)
        assert next(restored) == b"line 60"
    # Restoring seeks: the first bytes asked for are the ones at the saved offset.
    assert server.ranges and server.ranges[0].startswith(f"bytes={offset}-")


def test_http_text_checkpointing_and_compression(http_dir):
    root, url, _ = http_dir
    (root / "a.txt").write_bytes(b"a\nb\n")
    (root / "b.txt.gz").write_bytes(gzip.compress(b"c\r\nd"))
    check_checkpointing(fl.TextLineDataset([f"{url}/a.txt"]))
    assert check_checkpointing(fl.TextLineDataset(f"{url}/b.txt.gz", "GZIP")) == [b"c", b"d"]


def test_http_fixed_length_uses_the_size_from_the_server(http_dir):
    root, url, _ = http_dir
    (root / "good.bin").write_bytes(b"HH" + b"abcdef" + b"F")
    (root / "bad.bin").write_bytes(b"HH" + b"abcdefg" + b"F")
    ds = fl.FixedLengthRecordDataset(f"{url}/good.bin", 3, 2, 1)
    assert check_checkpointing(ds) == [b"abc", b"def"]
    # tf.data: an uncompressed file of the wrong size is an InvalidArgumentError (issue 26)
    with pytest.raises(fl.InvalidArgumentError, match="bad.bin") as info:
        list(fl.FixedLengthRecordDataset(f"{url}/bad.bin", 3, 2, 1))
    assert (info.value.offset, info.value.record_index) == (8, 2)


def test_http_csv(http_dir):
    root, url, _ = http_dir
    (root / "a.csv").write_bytes(b'k,v\n1,"multi\nline"\n2,x\n')
    ds = fl.CsvDataset(f"{url}/a.csv", [np.int64, b""], header=True)
    assert check_checkpointing(ds) == [(1, b"multi\nline"), (2, b"x")]
    (root / "bad.csv").write_bytes(b"1,x\nno,y\n")
    with pytest.raises(fl.formats.csv.CsvError, match=r"bad.csv: line 2, column 0"):
        list(fl.CsvDataset(f"{url}/bad.csv", [np.int64, b""]))


def test_http_make_csv_dataset(http_dir):
    root, url, _ = http_dir
    (root / "a.csv").write_bytes(b"x,y\n1,2.5\n3,4\n")
    ds = fl.make_csv_dataset(f"{url}/a.csv", 2, label_name="y", num_epochs=1, shuffle=False)
    [(features, label)] = list(ds)
    assert features["x"].tolist() == [1, 3] and label.tolist() == [2.5, 4.0]


def test_http_parquet(http_dir):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root, url, _ = http_dir
    pq.write_table(pa.table({"x": list(range(5)), "s": list("abcde")}),
                   str(root / "a.parquet"), row_group_size=2)
    ds = fl.ParquetDataset(f"{url}/a.parquet", batch_size=3)
    out = check_checkpointing(ds)
    assert [b["x"].tolist() for b in out] == [[0, 1, 2], [3, 4]]
    assert out[1]["s"].tolist() == [b"d", b"e"]


def test_http_tfrecord(http_dir):
    root, url, _ = http_dir
    with fl.TFRecordWriter(str(root / "a.tfrecord")) as writer:
        for record in [b"first", b"", b"third"]:
            writer.write(record)
    ds = fl.TFRecordDataset(f"{url}/a.tfrecord")
    assert check_checkpointing(ds) == [b"first", b"", b"third"]


def test_http_missing_file_names_the_url(http_dir):
    _, url, _ = http_dir
    for ds in [fl.TextLineDataset(f"{url}/missing.txt"),
               fl.CsvDataset(f"{url}/missing.txt", [b""]),
               fl.FixedLengthRecordDataset(f"{url}/missing.txt", 4)]:
        with pytest.raises(FileNotFoundError, match=re.escape(f"{url}/missing.txt")):
            list(ds)


def test_http_names_from_a_dataset_with_parallel_reads(http_dir):
    pytest.importorskip("feedline.transforms.interleave")
    root, url, _ = http_dir
    for i in range(3):
        (root / f"{i}.txt").write_bytes(b"%d-a\n%d-b\n" % (i, i))
    names = fl.Dataset.from_tensor_slices([f"{url}/{i}.txt".encode() for i in range(3)])
    ds = fl.TextLineDataset(names, num_parallel_reads=2)
    assert list(ds) == [b"0-a", b"1-a", b"0-b", b"1-b", b"2-a", b"2-b"]
    check_checkpointing(ds)
