"""The fast decode path of fl.datasets.load (tfds_features.record_plan: the C Example parser
and a plan compiled per dataset) gives decode_record's values, types and errors, record for
record; anything it does not decode itself falls back to decode_record."""

import numpy as np
import pytest
from tfds_golden import ROOT, assert_same

import feedline as fl
import feedline.datasets.tfds as tfds_module
from feedline.datasets.tfds_features import (
    FALLBACK,
    FeaturesDict,
    Image,
    Tensor,
    Text,
    _image_fast,
    decode_record,
    flat_infos,
    load_features,
    record_plan,
)
from feedline.formats.example import cbridge
from feedline.formats.example_proto import decode_example, encode_example

pytestmark = pytest.mark.skipif(cbridge.extension is None,
                                reason="the C Example parser is not compiled")

# Leaves of fl_features the plan cannot read (ragged, a sequence of dicts, a dynamically
# shaped tensor): a dataset with any of them decodes through decode_record.
_NOT_PLANNED = {"ragged", "seq", "tensor_bytes"}


def _slow(feature, record):
    info = feature.serialized_info()
    return decode_record(feature, flat_infos(info), info, decode_example(record))


def _records(directory):
    return [bytes(r) for path in sorted(directory.glob("*.tfrecord-*"))
            for r in fl.TFRecordDataset(str(path))]


def _assert_writable_same(fast, slow, path=""):
    assert_same(fast, slow, path)
    if isinstance(slow, dict):
        for key in slow:
            _assert_writable_same(fast[key], slow[key], f"{path}/{key}")
    elif isinstance(slow, np.ndarray):
        assert fast.flags.writeable == slow.flags.writeable, path


def test_plan_covers_every_planned_leaf_of_the_golden_features():
    features = load_features(str(ROOT / "fl_features" / "1.0.0"))
    planned = {name for name, f in features.items()
               if record_plan(FeaturesDict({name: f})) is not None}
    assert planned == set(features.keys()) - _NOT_PLANNED
    assert record_plan(features) is None  # one leaf it cannot read: the whole record falls back


@pytest.mark.parametrize("directory", ["fl_features/1.0.0", "fl_order/small/1.0.0",
                                       "fl_order/big/1.1.0"])
def test_plan_equals_decode_record_on_every_golden_record(directory):
    features = load_features(str(ROOT / directory))
    planned = FeaturesDict({name: f for name, f in features.items()
                            if name not in _NOT_PLANNED})
    plan = record_plan(planned)
    assert plan is not None
    records = _records(ROOT / directory)
    assert records
    for index, record in enumerate(records):
        fast = plan(record)
        assert fast is not FALLBACK, index
        _assert_writable_same(fast, _slow(planned, record), f"{directory}[{index}]")


def _cases():
    """(features, record) pairs the plan must answer as decode_record does."""
    rgb = fl.image.encode_png(np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3))
    gray = fl.image.encode_png(np.arange(20, dtype=np.uint8).reshape(4, 5, 1))
    typed = FeaturesDict({
        "b": Tensor((), np.dtype("bool")), "u8": Tensor((2,), np.dtype("uint8")),
        "u64": Tensor((), np.dtype("uint64")), "i32": Tensor((None,), np.dtype("int32")),
        "f64": Tensor((), np.dtype("float64")), "f16": Tensor((None, 2), np.dtype("float16")),
        "s": Tensor((2,), np.dtype(object)), "t": Text()})
    record = encode_example({"b": [3], "u8": [1, 300], "u64": [-1], "i32": [], "f64": [0.1],
                             "f16": [1.5, 2.5, 3.5, 4.5], "s": [b"x", b"y"], "t": [b"z"]})
    yield typed, record
    yield FeaturesDict({"i32": Tensor((None,), np.dtype("int32"))}), encode_example({})
    yield FeaturesDict({"s": Tensor((None,), np.dtype(object))}), encode_example({})
    images = FeaturesDict({"rgb": Image((None, None, 3)), "gray": Image((4, 5, 1))})
    yield images, encode_example({"rgb": [rgb], "gray": [gray]})
    yield images, encode_example({"rgb": [gray], "gray": [rgb]})  # converted by decode_image


@pytest.mark.parametrize("case", range(5))
def test_plan_equals_decode_record_on_crafted_records(case):
    features, record = list(_cases())[case]
    fast = record_plan(features)(record)
    assert fast is not FALLBACK
    _assert_writable_same(fast, _slow(features, record))


@pytest.mark.parametrize("record", [
    encode_example({"x": [1]}),                      # "y" missing
    encode_example({"x": [1, 2], "y": [b"a"]}),      # two values for a scalar
    encode_example({"x": [1.5], "y": [b"a"]}),       # floats for an int feature: cast
    encode_example({"x": [1], "y": [b"a"]}) + b"\xff",  # damaged wire data
    b"not an example",
])
def test_unusual_records_fall_back_to_decode_record(record):
    features = FeaturesDict({"x": Tensor((), np.dtype("int64")), "y": Text()})
    assert record_plan(features)(record) is FALLBACK
    decoder = tfds_module._Decoder(features, None, False, False)
    try:
        wanted = ("value", _slow(features, record))
    except KeyError as error:
        wanted = ("error", ValueError, f"a record lacks feature {error.args[0]!r}")
    except Exception as error:  # noqa: BLE001 - whichever error decode_record raises
        wanted = ("error", type(error), str(error))
    if wanted[0] == "value":
        assert_same(decoder(record), wanted[1])
    else:
        with pytest.raises(wanted[1]) as raised:
            decoder(record)
        assert wanted[2] in str(raised.value)


def test_variable_length_that_does_not_fit_falls_back():
    features = FeaturesDict({"v": Tensor((None, 2), np.dtype("float32"))})
    record = encode_example({"v": [1.0, 2.0, 3.0]})
    assert record_plan(features)(record) is FALLBACK
    with pytest.raises(ValueError, match="3 values do not fit the shape"):
        tfds_module._Decoder(features, None, False, False)(record)


def _png_variants():
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)

    def png(array, *params):
        ok, data = cv2.imencode(".png", array, list(params))
        assert ok
        return data.tobytes()

    with_trns = bytearray(png(rgb[..., ::-1]))
    # A tRNS chunk after IHDR (RGB: one 16-bit sample per channel), CRC left to libpng's
    # benign-error handling as decode_image sees it too.
    import zlib

    chunk = b"tRNS" + bytes([0, 1, 0, 2, 0, 3])
    trns = len(chunk[4:]).to_bytes(4, "big") + chunk + zlib.crc32(chunk).to_bytes(4, "big")
    with_trns[33:33] = trns
    return {
        "rgb8": png(rgb[..., ::-1]),
        "gray8": png(rgb[..., 0]),
        "rgba8": png(np.concatenate([rgb, rgb[..., :1]], axis=-1)),
        "rgb16": png((rgb.astype(np.uint16) * 257)[..., ::-1]),
        "rgb_trns": bytes(with_trns),
        "truncated": png(rgb[..., ::-1])[:40],
        "jpeg": fl.image.encode_jpeg(rgb),
    }


@pytest.mark.parametrize("channels", [1, 3])
def test_png_fast_path_gives_decode_image_pixels_and_errors(channels):
    feature = Image((None, None, channels))
    fast = _image_fast(feature)
    for name, data in _png_variants().items():
        try:
            wanted = feature.decode(data)
        except Exception as error:  # noqa: BLE001 - the error must be the same
            with pytest.raises(type(error)) as raised:
                fast(data)
            assert str(raised.value) == str(error), name
            continue
        got = fast(data)
        assert got.dtype == wanted.dtype and got.shape == wanted.shape, name
        assert np.array_equal(got, wanted), name
        assert got.flags.c_contiguous and got.flags.writeable, name


def test_decoder_without_the_c_parser_gives_the_same(monkeypatch):
    features = FeaturesDict({"x": Tensor((2,), np.dtype("int16")), "t": Text()})
    record = encode_example({"x": [1, 2], "t": [b"a"]})
    fast = tfds_module._Decoder(features, None, False, False)
    assert fast.plan is not None
    monkeypatch.setattr(cbridge, "extension", None)
    slow = tfds_module._Decoder(features, None, False, False)
    assert slow.plan is None
    assert_same(fast(record), slow(record))


def test_decoder_pickles_without_its_plan():
    import pickle

    features = FeaturesDict({"x": Tensor((), np.dtype("int64"))})
    decoder = tfds_module._Decoder(features, None, False, False)
    state = decoder.__getstate__()
    assert "plan" not in state and "info" not in state
    copy = pickle.loads(pickle.dumps(decoder))
    assert copy.plan is not None
    assert copy(encode_example({"x": [7]})) == {"x": 7}
