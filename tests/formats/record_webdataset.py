"""Write the golden WebDataset shards of tests/data/webdataset/ and what webdataset reads.

Run once in an environment with the ``webdataset`` package and Pillow (the TensorFlow
environment of the benchmarks: ``benchmarks/.venvs/tf/bin/python -m pip install webdataset``;
``benchmarks/.venvs/tf/bin/python tests/formats/record_webdataset.py``). The files are
committed, so the tests need neither package.

* ``shard-00000.tar``, ``shard-00001.tar``: written by webdataset's own ``TarWriter`` (its
  default encoder: ``png`` from an array, ``cls`` from an int, ``json`` from a dict, ``txt``
  from a str), fixed mtime so the files are reproducible.
* ``shard-00002.tar.gz``: the same writer, gzip-compressed (``compress=True``).
* ``edge.tar``: written by plain ``tarfile`` (GNU format): names over 100 characters (GNU
  long-name headers), a PAX-format member, a folder entry, a symbolic link, ``__meta__``-style
  files webdataset skips, a member without an extension, upper-case and multi-dot
  extensions, keys in folders whose names hold dots, an empty member.

* ``decode.tar`` (``record_webdataset.py decode`` writes only it and ``decode.json``): one
  small image per sample in each mode and format the image decoders meet (PNG in L, LA, RGB,
  RGBA and palette modes, GIF, BMP, JPEG in RGB and L, lossless WebP, PPM, PGM), written by
  Pillow; ``decode.json`` holds what ``webdataset.WebDataset(url).decode(spec)`` gives for
  each of webdataset's image specs (dtype, shape, values; torch tensors as their NumPy
  values), with webdataset's version.

``expected.json`` holds, for each shard, the samples webdataset's own loader
(``webdataset.WebDataset(url, shardshuffle=False)``, no decoding) yields: every field in
its order, the values as hex, ``__url__`` as the file name; and the pixels of the images.
"""

import io
import json
import pathlib
import tarfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parents[1] / "data" / "webdataset"
MTIME = 1_700_000_000


def image(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (3 + seed % 3, 4, 3), dtype=np.uint8)


def write_shard(path: pathlib.Path, first: int, count: int, compress: bool = False) -> None:
    import webdataset as wds  # here: pytest imports this module where it is absent

    with wds.TarWriter(str(path), mtime=MTIME, compress=compress) as sink:
        for i in range(first, first + count):
            sink.write({"__key__": f"sample{i:04d}", "png": image(i), "cls": i % 3,
                        "txt": f"caption {i}", "json": {"id": i, "tags": ["a", str(i)]}})


def add(tar: tarfile.TarFile, name: str, data: bytes, **extra) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), MTIME, 0o644
    for key, value in extra.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data))


def write_edge(path: pathlib.Path) -> None:
    long_dir = "a-folder-whose-name-is-long-enough-to-need-a-gnu-long-name-header/" * 2
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, "__meta__", b"skipped: top-level __x__ names")
        folder = tarfile.TarInfo("data.v1")
        folder.type, folder.mtime, folder.mode = tarfile.DIRTYPE, MTIME, 0o755
        tar.addfile(folder)
        add(tar, "data.v1/one.txt", b"first sample")
        add(tar, "data.v1/one.JSON", b'{"upper": true}')
        add(tar, "data.v1/one.seg.png", b"\x89PNG not really")
        add(tar, "data.v1/README", b"no extension: skipped")
        link = tarfile.TarInfo("data.v1/one.lnk")
        link.type, link.linkname, link.mtime = tarfile.SYMTYPE, "one.txt", MTIME
        tar.addfile(link)
        add(tar, long_dir + "two.txt", b"a sample in a long folder")
        add(tar, long_dir + "two.bin", bytes(range(256)) * 3)
        add(tar, "__skip__/three.txt", b"skipped: a __x__/ folder")
        add(tar, "three.txt", b"")
        add(tar, "three.cls", b"7")
    # A PAX member appended in its own archive format would need a second writer; instead a
    # second file in PAX format with non-ASCII names.
    with tarfile.open(path.with_name("pax.tar"), "w", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "ünïcode/ключ.txt", "значение".encode())
        add(tar, "ünïcode/ключ.cls", b"1")
        add(tar, "x" * 120 + ".txt", b"long pax name")


def read_back(path: pathlib.Path) -> list[dict]:
    import webdataset as wds

    samples = []
    for sample in wds.WebDataset(str(path), shardshuffle=False):
        # __url__ is the path given (here absolute): kept as the file name. __local_path__
        # (webdataset's copy of a local __url__) is left out: feedline does not add it.
        sample.pop("__local_path__", None)
        sample["__url__"] = pathlib.Path(sample["__url__"]).name
        samples.append({k: (v.hex() if isinstance(v, bytes) else v) for k, v in sample.items()})
    return samples


def decode_images() -> list[tuple[str, bytes]]:
    """``(member name, encoded image)`` for decode.tar: every mode and format the decoders
    meet, 3 x 4 pixels, random values (seeded)."""
    from PIL import Image

    rng = np.random.default_rng(43)
    rgba = rng.integers(0, 256, (3, 4, 4), dtype=np.uint8)
    pictures = [("png", Image.fromarray(rgba[:, :, 0], "L")),
                ("png", Image.fromarray(rgba[:, :, :2], "LA")),
                ("png", Image.fromarray(rgba[:, :, :3], "RGB")),
                ("png", Image.fromarray(rgba, "RGBA")),
                ("png", Image.fromarray(rgba[:, :, :3], "RGB").quantize(5)),
                ("gif", Image.fromarray(rgba[:, :, :3], "RGB").quantize(7)),
                ("bmp", Image.fromarray(rgba[:, :, :3], "RGB")),
                ("jpg", Image.fromarray(rgba[:, :, :3], "RGB")),
                ("jpg", Image.fromarray(rgba[:, :, 1], "L")),
                ("webp", Image.fromarray(rgba, "RGBA")),
                ("ppm", Image.fromarray(rgba[:, :, :3], "RGB")),
                ("pgm", Image.fromarray(rgba[:, :, 2], "L"))]
    images = []
    for i, (field, picture) in enumerate(pictures):
        buffer = io.BytesIO()
        options = {"lossless": True} if field == "webp" else {"quality": 90} \
            if field == "jpg" else {}
        picture.save(buffer, format={"jpg": "JPEG", "pgm": "PPM"}.get(field, field.upper()),
                     **options)
        images.append((f"image{i:02d}.{field}", buffer.getvalue()))
    return images


def record_decoded() -> None:
    import webdataset as wds
    from webdataset.autodecode import imagespecs

    path = HERE / "decode.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in decode_images():
            add(tar, name, data)
    decoded: dict = {"webdataset": wds.__version__}
    for spec in imagespecs:
        if spec.startswith("pil"):
            continue  # PIL images: feedline refuses these specs
        outputs = []
        for sample in wds.WebDataset(str(path), shardshuffle=False).decode(spec):
            field = next(k for k in sample if not k.startswith("__"))
            value = sample[field]
            value = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
            outputs.append({"key": sample["__key__"], "field": field, "dtype": str(value.dtype),
                            "shape": list(value.shape), "values": value.tolist()})
        decoded[spec] = outputs
    (HERE / "decode.json").write_text(json.dumps(decoded) + "\n")


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    write_shard(HERE / "shard-00000.tar", 0, 5)
    write_shard(HERE / "shard-00001.tar", 5, 3)
    write_shard(HERE / "shard-00002.tar.gz", 8, 2, compress=True)
    write_edge(HERE / "edge.tar")
    expected = {name: read_back(HERE / name) for name in
                ("shard-00000.tar", "shard-00001.tar", "shard-00002.tar.gz", "edge.tar",
                 "pax.tar")}
    expected["images"] = {str(i): image(i).tolist() for i in range(10)}
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False)
                                        + "\n")


if __name__ == "__main__":
    import sys

    record_decoded() if sys.argv[1:] == ["decode"] else main()
