"""WebDataset(decode=...): webdataset's image spec names with webdataset's meaning, checked
against what webdataset 1.0.2's own decoder gave for each (tests/data/webdataset/decode.json,
written by record_webdataset.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

import feedline as fl

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "webdataset"
DECODED = json.loads((GOLDEN / "decode.json").read_text())
SHARD = str(GOLDEN / "decode.tar")
SPECS = [name for name in DECODED if name != "webdataset"]
# webdataset's documented definitions (autodecode.imagespecs): layout, dtype, channels.
DEFINED = {"l8": ("hw", np.uint8, 1), "rgb8": ("hwc", np.uint8, 3),
           "rgba8": ("hwc", np.uint8, 4), "l": ("hw", np.float32, 1),
           "rgb": ("hwc", np.float32, 3), "rgba": ("hwc", np.float32, 4),
           "torchl8": ("hw", np.uint8, 1), "torchrgb8": ("chw", np.uint8, 3),
           "torchrgba8": ("chw", np.uint8, 4), "torchl": ("hw", np.float32, 1),
           "torchrgb": ("chw", np.float32, 3), "torch": ("chw", np.float32, 3),
           "torchrgba": ("chw", np.float32, 4)}


def test_every_webdataset_spec_is_covered():
    assert sorted(SPECS) == sorted(DEFINED)


@pytest.mark.parametrize("spec", sorted(DEFINED))
def test_decode_spec_as_webdataset_defines_it(spec):
    layout, dtype, channels = DEFINED[spec]
    samples = list(fl.WebDataset(SHARD, decode=spec))
    expected = DECODED[spec]
    assert [s["__key__"].decode() for s in samples] == [e["key"] for e in expected]
    for sample, want in zip(samples, expected, strict=True):
        got = sample[want["field"]]
        height, width = 3, 4
        shape = {"hw": (height, width), "hwc": (height, width, channels),
                 "chw": (channels, height, width)}[layout]
        where = f"{spec}: {want['key']}.{want['field']}"
        assert (got.dtype, got.shape) == (np.dtype(dtype), shape), where
        assert (str(got.dtype), list(got.shape)) == (want["dtype"], want["shape"]), where
        if dtype == np.float32:
            assert 0.0 <= got.min() and got.max() <= 1.0, where
        values = np.array(want["values"], dtype)
        if want["field"] == "jpg":
            # feedline decodes JPEG as TensorFlow does (its default integer-fast IDCT),
            # webdataset through Pillow (the accurate one): on these noise images they are
            # up to 3 levels of 255 apart; every other format is equal.
            scale = 255.0 if dtype == np.float32 else 1.0
            np.testing.assert_allclose(got.astype(np.float64) * scale,
                                       values.astype(np.float64) * scale, atol=3.0 + 1e-4,
                                       err_msg=where)
        else:
            np.testing.assert_array_equal(got, values, err_msg=where)


def test_pil_specs_are_refused_clearly_and_unknown_names_listed():
    for name, instead in [("pil", "rgb8"), ("pilrgb", "rgb8"), ("pilrgba", "rgba8"),
                          ("pill", "l8")]:
        with pytest.raises(ValueError, match=f"decode='{name}' gives PIL images.*"
                                             f"decode='{instead}'"):
            fl.WebDataset(SHARD, decode=name)
    with pytest.raises(ValueError, match=r"one of webdataset's image specs \[.*'rgb8'"):
        fl.WebDataset(SHARD, decode="jpg")


def test_feedline_image_spec_keeps_each_image_own_channels():
    got = {s["__key__"].decode(): next(v for k, v in s.items() if k[:2] != "__")
           for s in fl.WebDataset(SHARD, decode="image")}
    assert {key: value.shape[-1] for key, value in got.items()} == {
        "image00": 1, "image01": 2, "image02": 3, "image03": 4, "image04": 3, "image05": 3,
        "image06": 3, "image07": 3, "image08": 1, "image09": 4, "image10": 3, "image11": 1}
    assert all(value.dtype == np.uint8 and value.ndim == 3 for value in got.values())


def test_channels_first_images_batch():
    batch = next(iter(fl.WebDataset(SHARD, decode="torchrgb8", fields=["png"]).batch(5)))
    assert batch["png"].shape == (5, 3, 3, 4) and batch["png"].dtype == np.uint8


@pytest.mark.parametrize("extension", ["jpg", "webp"])
def test_decoded_images_are_held_to_feedline_image_pixel_limits(tmp_path, extension):
    # Issue 41.4: WebP went to Pillow, whose bomb limit is only a warning below twice its
    # size; every format WebDataset decodes is held to feedline.image's caps.
    import io
    import tarfile

    from PIL import Image

    from feedline.image import set_decode_limits

    encoded = io.BytesIO()
    Image.new("RGB", (40, 30), (10, 20, 30)).save(encoded, format="WEBP" if extension ==
                                                  "webp" else "JPEG")
    path = tmp_path / "shard.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(f"s0.{extension}")
        info.size = len(encoded.getvalue())
        tar.addfile(info, io.BytesIO(encoded.getvalue()))
    assert next(iter(fl.WebDataset(str(path), decode="rgb8")))[extension].shape == (30, 40, 3)
    previous = set_decode_limits(max_pixels=1000)
    try:
        with pytest.raises(fl.InvalidArgumentError, match="max_pixels") as refused:
            next(iter(fl.WebDataset(str(path), decode="rgb8")))
    finally:
        set_decode_limits(previous.max_pixels, previous.max_animation_bytes)
    assert refused.value.path == str(path) and refused.value.record_index == 0
