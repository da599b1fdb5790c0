"""``feedline.image``: tf.image and tf.io image operations on NumPy arrays, one image or a batch."""

from feedline.image.codecs import (
    decode_and_crop_jpeg,
    decode_gif,
    decode_image,
    decode_jpeg,
    decode_png,
    encode_jpeg,
    encode_png,
    extract_jpeg_shape,
    is_jpeg,
)

__all__ = [
    "decode_and_crop_jpeg",
    "decode_gif",
    "decode_image",
    "decode_jpeg",
    "decode_png",
    "encode_jpeg",
    "encode_png",
    "extract_jpeg_shape",
    "is_jpeg",
]
