"""``feedline.image``: tf.image and tf.io image operations on NumPy arrays, one image or a batch.

Every operation takes one image ``[H, W, C]`` or a batch ``[N, H, W, C]``; decoders take one
encoded image (``bytes``) or a batch of them, and refuse one that would decode larger than
:func:`set_decode_limits` allows (a decompression bomb). Random operations take ``seed`` (an
int, a pair, a NumPy generator or None) and draw per image. Native libraries (``pip install
'feedline[image]'``) are imported on first use.

:func:`backend` names the library each codec uses: simplejpeg and OpenCV where installed, else
Pillow (free-threaded CPython has wheels of Pillow only).

On a GPU: :func:`decode_jpeg_to_device` decodes a batch with nvJPEG, and
:mod:`feedline.image.device` has the same crops, flips, resizes and conversions on torch
tensors (same names, seeds and pixels; ``pip install 'feedline[gpu-image]'``).
"""

from feedline.image._backend import backend
from feedline.image.bounding_box import (
    sample_distorted_bounding_box,
    stateless_sample_distorted_bounding_box,
)
from feedline.image.codecs import (
    DEFAULT_MAX_ANIMATION_BYTES,
    DEFAULT_MAX_PIXELS,
    DecodeLimits,
    decode_and_crop_jpeg,
    decode_gif,
    decode_image,
    decode_jpeg,
    decode_limits,
    decode_png,
    decode_webp,
    encode_jpeg,
    encode_png,
    extract_jpeg_shape,
    is_jpeg,
    set_decode_limits,
)
from feedline.image.color import (
    adjust_brightness,
    adjust_contrast,
    adjust_gamma,
    adjust_hue,
    adjust_saturation,
    grayscale_to_rgb,
    hsv_to_rgb,
    random_brightness,
    random_contrast,
    random_hue,
    random_saturation,
    rgb_to_grayscale,
    rgb_to_hsv,
)
from feedline.image.color_spaces import rgb_to_yiq, rgb_to_yuv, yiq_to_rgb, yuv_to_rgb
from feedline.image.crop_and_resize import crop_and_resize
from feedline.image.cropping import (
    central_crop,
    crop_to_bounding_box,
    pad_to_bounding_box,
    random_crop,
    random_resized_crop_window,
    resize_with_crop_or_pad,
)
from feedline.image.device import decode_jpeg_to_device
from feedline.image.dtype import convert_image_dtype, normalize, per_image_standardization
from feedline.image.extract_patches import extract_patches
from feedline.image.flips import (
    flip_left_right,
    flip_up_down,
    random_flip_left_right,
    random_flip_up_down,
    rot90,
    transpose,
)
from feedline.image.jpeg_quality import adjust_jpeg_quality, stateless_random_jpeg_quality
from feedline.image.resize import METHODS, random_resized_crop, resize, resize_with_pad
from feedline.image.stateless import (
    stateless_random_brightness,
    stateless_random_contrast,
    stateless_random_crop,
    stateless_random_flip_left_right,
    stateless_random_flip_up_down,
    stateless_random_hue,
    stateless_random_saturation,
)
from feedline.image.total_variation import total_variation

__all__ = [
    "DEFAULT_MAX_ANIMATION_BYTES",
    "DEFAULT_MAX_PIXELS",
    "DecodeLimits",
    "METHODS",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_gamma",
    "adjust_hue",
    "adjust_jpeg_quality",
    "adjust_saturation",
    "backend",
    "central_crop",
    "convert_image_dtype",
    "crop_and_resize",
    "crop_to_bounding_box",
    "decode_and_crop_jpeg",
    "decode_gif",
    "decode_image",
    "decode_jpeg",
    "decode_jpeg_to_device",
    "decode_limits",
    "decode_png",
    "decode_webp",
    "device",
    "encode_jpeg",
    "encode_png",
    "extract_jpeg_shape",
    "extract_patches",
    "flip_left_right",
    "flip_up_down",
    "grayscale_to_rgb",
    "hsv_to_rgb",
    "is_jpeg",
    "normalize",
    "pad_to_bounding_box",
    "per_image_standardization",
    "random_brightness",
    "random_contrast",
    "random_crop",
    "random_flip_left_right",
    "random_flip_up_down",
    "random_hue",
    "random_resized_crop",
    "random_resized_crop_window",
    "random_saturation",
    "resize",
    "resize_with_crop_or_pad",
    "resize_with_pad",
    "rgb_to_grayscale",
    "rgb_to_hsv",
    "rgb_to_yiq",
    "rgb_to_yuv",
    "rot90",
    "sample_distorted_bounding_box",
    "set_decode_limits",
    "stateless_random_brightness",
    "stateless_random_contrast",
    "stateless_random_crop",
    "stateless_random_flip_left_right",
    "stateless_random_flip_up_down",
    "stateless_random_hue",
    "stateless_random_jpeg_quality",
    "stateless_random_saturation",
    "stateless_sample_distorted_bounding_box",
    "total_variation",
    "transpose",
    "yiq_to_rgb",
    "yuv_to_rgb",
]
