"""feedline.image flips and rotations against tf.image's (recorded by record_golden.py): exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline import image as fli
from feedline.image._random import generator_for

GOLDEN = np.load(Path(__file__).with_name("golden_codecs_geometry.npz"))


@pytest.mark.parametrize("name", ["rgb", "gray"])
def test_flips_rot90_transpose_equal_tensorflow(name):
    image = GOLDEN[f"src/{name}"]
    np.testing.assert_array_equal(fli.flip_left_right(image), GOLDEN[f"flip_left_right/{name}"])
    np.testing.assert_array_equal(fli.flip_up_down(image), GOLDEN[f"flip_up_down/{name}"])
    np.testing.assert_array_equal(fli.transpose(image), GOLDEN[f"transpose/{name}"])
    for k in (0, 1, 2, 3, -1, 5):
        np.testing.assert_array_equal(fli.rot90(image, k), GOLDEN[f"rot90/{name}/{k}"])


def test_batches_and_copies():
    batch = GOLDEN["src/batch"]
    np.testing.assert_array_equal(fli.rot90(batch, 1), GOLDEN["rot90/batch/1"])
    flipped = fli.flip_left_right(batch)
    np.testing.assert_array_equal(flipped, batch[:, :, ::-1])
    assert flipped.flags.c_contiguous and not np.shares_memory(flipped, batch)
    assert fli.transpose(batch).shape == (2, 23, 17, 3)
    np.testing.assert_array_equal(fli.flip_up_down(batch), batch[:, ::-1])


@pytest.mark.parametrize("random_flip, flip", [
    (fli.random_flip_left_right, fli.flip_left_right),
    (fli.random_flip_up_down, fli.flip_up_down)])
def test_random_flips(random_flip, flip):
    image = GOLDEN["src/rgb"]
    batch = np.stack([image] * 400)
    flipped = random_flip(batch, seed=(3, 4))
    np.testing.assert_array_equal(flipped, random_flip(batch, seed=(3, 4)))  # equal seeds
    is_flipped = np.array([np.array_equal(one, flip(image)) for one in flipped])
    kept = np.array([np.array_equal(one, image) for one in flipped])
    assert (is_flipped | kept).all()  # each image is the deterministic op's result or itself
    # Per-image draws, each a fair coin: 400 draws give 200 +- 3 sigma (30).
    assert 170 <= is_flipped.sum() <= 230
    # The same seed for one image gives the first draw of the batch.
    assert np.array_equal(random_flip(image, seed=(3, 4)), flipped[0])
    assert not np.array_equal(random_flip(batch, seed=(3, 5)), flipped)


def test_random_flip_takes_a_generator_and_leaves_the_input_alone():
    image = GOLDEN["src/rgb"]
    before = image.copy()
    rng = np.random.default_rng(0)
    results = {fli.random_flip_left_right(image, seed=rng).tobytes() for _ in range(20)}
    assert len(results) == 2
    np.testing.assert_array_equal(image, before)


def test_wrong_rank_names_the_shape():
    for op in (fli.flip_left_right, fli.flip_up_down, fli.rot90, fli.transpose,
               fli.random_flip_left_right, fli.random_flip_up_down):
        with pytest.raises(fl.InvalidArgumentError, match=r"got shape \(4, 5\)"):
            op(np.zeros((4, 5)))


DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64,
          np.float16, np.int64, np.uint32, np.uint64, np.bool_]
SHAPES = [(2, 5, 7, 3), (1, 4, 6, 1), (3, 2, 9, 4), (1, 3, 5, 600), (2, 0, 3, 3), (1, 2, 3, 0)]


@pytest.mark.parametrize("with_opencv", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_left_right_is_numpys_reversal_for_every_dtype_and_channel_count(
        monkeypatch, dtype, with_opencv):
    # OpenCV copies its own dtypes and up to 512 channels; the rest (and every dtype without
    # OpenCV) moves whole pixels through NumPy: both must be the plain reversal, exactly.
    from feedline.image import flips

    if not with_opencv:
        monkeypatch.setattr(flips, "_cv2", lambda: None)
    rng = np.random.default_rng(7)
    for shape in SHAPES:
        batch = (rng.random(shape) * 100).astype(dtype)
        flipped = fli.flip_left_right(batch)
        assert flipped.dtype == batch.dtype and flipped.shape == batch.shape
        assert flipped.flags.c_contiguous
        np.testing.assert_array_equal(flipped, batch[:, :, ::-1])
        np.testing.assert_array_equal(fli.flip_left_right(batch[0]), batch[0][:, ::-1])
    strided = rng.integers(0, 255, (4, 10, 12, 3), dtype=np.uint8)[:, ::2, 1::2]
    np.testing.assert_array_equal(fli.flip_left_right(strided), strided[:, :, ::-1])
    chosen = fli.random_flip_left_right(strided, seed=(1, 2))
    flags = generator_for((1, 2)).random(4) < 0.5  # one draw per image, as the op
    np.testing.assert_array_equal(chosen[flags], strided[flags][:, :, ::-1])
    np.testing.assert_array_equal(chosen[~flags], strided[~flags])
