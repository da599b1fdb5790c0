"""normalize's cached constants keep the sign of a zero mean (bit for bit with NumPy)."""

from __future__ import annotations

import numpy as np

from feedline.image import dtype as image_dtype


def test_normalize_keeps_the_sign_of_a_zero_mean():
    # The cached constants were keyed by value: -0.0 == 0.0, so a call with mean=-0.0 got
    # the constants of an earlier mean=0.0 (a zero pixel with a negative std came out +0.0
    # instead of -0.0, unlike the NumPy computation it is meant to match bit for bit).
    image = np.zeros((1, 1, 2), np.uint8)
    for dtype in (np.float32, np.float64):
        positive = image_dtype.normalize(image, 0.0, -1.0, dtype)
        negative = image_dtype.normalize(image, -0.0, -1.0, dtype)
        assert np.signbit(positive).tolist() == [[[False, False]]]
        assert np.signbit(negative).tolist() == [[[True, True]]]
        assert image_dtype.normalize(image, [-0.0, 0.0], -1.0, dtype).tobytes() == \
            np.array([-0.0, 0.0], dtype).tobytes()
