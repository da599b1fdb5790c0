"""The device image ops saturate a float to int64 as the host op does, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("source", [np.float32, np.float64])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_device_float_to_int64_saturates_as_the_host_op(source):
    # The saturating clamp's upper limit for int64: the host op (TensorFlow's) compares it in
    # float64, where 2**63 - 1 rounds to 2**63, and keeps it; the device op compared it
    # exactly and stepped one ulp down, so its results differed from the host op's for every
    # value from 1.0 up ("bit for bit" with feedline.image.convert_image_dtype).
    torch = pytest.importorskip("torch")
    from feedline import image as host
    from feedline.image import device as dv

    image = np.array([[[-3.0, -1.0, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0e4]]], source)
    got = dv.convert_image_dtype(torch.from_numpy(image), torch.int64, saturate=True).numpy()
    expected = host.convert_image_dtype(image, np.int64, saturate=True)
    assert got.tolist() == expected.tolist()
