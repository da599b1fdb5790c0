"""``feedline.image.device``: decode JPEGs and augment batches on a PyTorch device (a CUDA GPU).

The pipeline ships encoded JPEG bytes, which are 5-10x smaller than pixels; the training
process decodes a whole batch on the GPU with nvJPEG and crops, flips and normalizes it there,
so the batch lands on the device without the host's cores decoding it. The operations mirror
:mod:`feedline.image`'s names and arguments, on torch tensors instead of NumPy arrays::

    loader = feedline.torch.Loader(ds.batch(256))     # elements: {"jpeg": bytes, "label": int}
    for batch in loader:
        images = fli.decode_jpeg_to_device(batch["jpeg"], 3, device="cuda")
        images = fli.device.random_resized_crop(images, (224, 224), seed=step)
        images = fli.device.random_flip_left_right(images, seed=step)
        x = fli.device.normalize(images, 255 * mean, 255 * std, data_format="NCHW")

Choices, and why:

- **Decoding**: ``torchvision.io.decode_jpeg`` with a list of encoded images and a CUDA device
  is one batched nvJPEG call (the hardware JPEG engines of A100/H100 for baseline files); the
  alternative, DALI, is a second framework with its own pipeline and a CUDA-specific wheel.
  ``decoder="host"`` decodes with :func:`feedline.image.decode_jpeg` (libjpeg-turbo, tf.io's
  pixels) and copies the batch to the device: the path without torchvision, and the one the
  CPU tests check exactly. nvJPEG's pixels are not libjpeg's (its IDCT and chroma upsampling
  differ); the tests measure how far apart they are on a GPU (see ``tests/image/test_device.py``).
- **Randomness**: each random operation draws its boxes and coins on the host with the same
  NumPy code and the same seeds as :mod:`feedline.image` (:func:`feedline.image._random.
  generator_for`), then applies them on the device: the same seed gives the same crops and
  flips on either path, and a restored pipeline makes the same ones again.
- **Pixels**: crops and flips are exact; ``convert_image_dtype`` and ``normalize`` do the same
  float operations in the same order as the NumPy path (bit-identical on the CPU and on CUDA,
  whose separate multiply and add kernels round as NumPy does); bilinear resizing does
  tf.image.resize's float32 arithmetic in its order (half-pixel centres, edges clamped to the
  crop window): equal to TensorFlow's recorded outputs, and within 2e-3 (on 0..255) of
  :func:`feedline.image.resize`, whose OpenCV kernel rounds differently (measured).
- **One batched kernel per operation**: a crop, a flip or a bilinear resize of a stacked batch
  is one gather with per-image index tensors, whatever the batch size; images of different
  sizes (a list, as decoding a mixed batch gives) are cropped one by one and stacked.
- **No synchronisation with the GPU**: every small host array (crop offsets, flags, sampling
  weights) goes to a CUDA device through pinned memory with ``non_blocking=True``; a pageable
  copy would wait for the training step already queued on the stream.

The batch layout is NHWC (as :mod:`feedline.image`); ``data_format="NCHW"`` on
:func:`normalize` and :func:`convert_image_dtype` gives ``[N, C, H, W]`` as a view in
channels-last memory, which a channels-last model takes without a copy.

PyTorch and torchvision are imported on first use: ``pip install 'feedline[gpu-image]'``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from feedline.core.errors import InvalidArgumentError
from feedline.image._random import Seed, generator_for

if TYPE_CHECKING:  # pragma: no cover - annotations only
    import torch

__all__ = [
    "central_crop",
    "convert_image_dtype",
    "crop_to_bounding_box",
    "decode_jpeg_to_device",
    "flip_left_right",
    "normalize",
    "random_crop",
    "random_flip_left_right",
    "random_resized_crop",
    "resize",
]

_EXTRA = "pip install 'feedline[gpu-image]'"
Images = Any
"""A torch tensor ``[H, W, C]`` or ``[N, H, W, C]`` (a NumPy array is taken as a CPU tensor), or
a sequence of ``[H, W, C]`` tensors, which may differ in size where an operation resizes or
crops them to one size."""


# ----------------------------------------------------------------------------- libraries
@functools.cache
def _torch() -> ModuleType:
    try:
        import torch
    except ImportError as error:
        raise ImportError(f"feedline.image.device needs PyTorch: {_EXTRA} ({error})") from error
    return torch


@functools.cache
def _torchvision_io() -> ModuleType:
    torch = _torch()
    try:
        import torchvision.io as module
    except ImportError as error:
        raise ImportError(f"feedline.image.device's torchvision decoder needs torchvision: "
                          f"{_EXTRA} (or decoder='host' to decode on the CPU) ({error})"
                          ) from error
    except (RuntimeError, OSError) as error:
        # A torchvision built for another torch (a CUDA wheel beside a CPU-only torch) fails
        # while registering its operators.
        raise ImportError(
            f"torchvision is installed but does not load with this PyTorch (torch "
            f"{torch.__version__}): install the torchvision release built for it ({_EXTRA}), "
            f"or decode with decoder='host' ({type(error).__name__}: {error})") from error
    return module


def _device(device: Any, op: str) -> torch.device:
    torch = _torch()
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise InvalidArgumentError(f"{op}: device must name a torch device ('cuda', 'cuda:1', "
                                   f"'cpu'); got {device!r}") from error
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{op}(device={str(resolved)!r}): CUDA is not available in this "
                           f"PyTorch (torch {torch.__version__}: no GPU, or a CPU-only build); "
                           "pass device='cpu' to run on the CPU")
    return resolved


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array on ``device``; to CUDA through pinned memory without waiting for the
    stream (a pageable copy would wait for the step already queued on it)."""
    torch = _torch()
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cpu":
        return tensor
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


# ----------------------------------------------------------------------------- JPEG headers
_JPEG_MAGIC = b"\xff\xd8\xff"
# Start-of-frame markers: C0-CF except DHT (C4), JPG (C8) and DAC (CC).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])  # TEM, RST0-7: no length field


def _preview(data: bytes) -> str:
    return f"{len(data)} bytes starting with {data[:8]!r}"


def _jpeg_info(data: bytes, op: str) -> tuple[int, int, int]:
    """``(height, width, components)`` of a JPEG, after checking that it is whole.

    Walks the marker segments up to the first scan, then looks for the end-of-image marker
    after it. nvJPEG does not always fail on a truncated stream, and a scan's entropy-coded
    data cannot contain FF D9 (an FF there is stuffed with 00), so a stream cut anywhere
    after its headers lacks it. For a whole file the search stops at its last two bytes.
    """
    if not data.startswith(_JPEG_MAGIC):
        raise InvalidArgumentError(f"{op}: expected JPEG data (starting with FF D8 FF); got "
                                   f"{_preview(data)}")
    size = len(data)
    pos = 2
    frame = None
    while True:
        if pos + 4 > size:
            raise InvalidArgumentError(f"{op}: truncated JPEG header (it ends at byte {size} "
                                       f"before the first scan); got {_preview(data)}")
        if data[pos] != 0xFF:
            raise InvalidArgumentError(f"{op}: damaged JPEG header: no marker at byte {pos} "
                                       f"(0x{data[pos]:02x}); got {_preview(data)}")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker == 0x00 or marker == 0xD8:  # a stuffed byte or a second start of image
            raise InvalidArgumentError(f"{op}: damaged JPEG header: FF {marker:02X} at byte "
                                       f"{pos} is not a segment marker; got {_preview(data)}")
        length = (data[pos + 2] << 8) | data[pos + 3]
        end = pos + 2 + length
        if length < 2 or end > size:
            raise InvalidArgumentError(f"{op}: truncated JPEG header (a segment at byte {pos} "
                                       f"runs past the end, byte {size}); got {_preview(data)}")
        if marker in _SOF and length >= 8:
            height = (data[pos + 5] << 8) | data[pos + 6]
            width = (data[pos + 7] << 8) | data[pos + 8]
            frame = (height, width, data[pos + 9])
        elif marker == 0xDA:  # start of scan
            break
        pos = end
    if frame is None or frame[0] == 0 or frame[1] == 0:
        raise InvalidArgumentError(f"{op}: damaged JPEG header: no frame size before the first "
                                   f"scan; got {_preview(data)}")
    if data.rfind(b"\xff\xd9", end) < 0:
        raise InvalidArgumentError(f"{op}: truncated JPEG data (no end-of-image marker after "
                                   f"the scan that starts at byte {pos}); got {_preview(data)}")
    return frame


def _encoded_items(contents: object, op: str) -> tuple[list[bytes], bool]:
    """``contents`` as a list of encoded images, and whether it was one image."""
    if isinstance(contents, (bytes, bytearray, memoryview)):
        return [bytes(contents)], True
    if isinstance(contents, np.ndarray) and contents.ndim == 0:
        return _encoded_items(contents.item(), op)
    if isinstance(contents, str):
        raise InvalidArgumentError(f"{op}: expected encoded image bytes, got a str "
                                   f"({contents[:20]!r}...); read the file's bytes first")
    if isinstance(contents, np.ndarray) and contents.ndim != 1:
        raise InvalidArgumentError(f"{op}: a batch of encoded images is 1-D; got shape "
                                   f"{contents.shape}")
    if not isinstance(contents, (Sequence, np.ndarray)):
        raise InvalidArgumentError(f"{op}: expected encoded image bytes or a batch of them; got "
                                   f"{type(contents).__name__}")
    items = []
    for index, item in enumerate(contents):
        if not isinstance(item, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"{op}: element {index} of the batch is not encoded "
                                       f"image bytes ({type(item).__name__})")
        items.append(bytes(item))
    if not items:
        raise InvalidArgumentError(f"{op}: the batch of encoded images is empty")
    return items, False


# ----------------------------------------------------------------------------- decoding
def decode_jpeg_to_device(contents: object, channels: int = 0, *, device: Any = "cuda",
                          decoder: str = "auto", dct_method: str = "") -> Any:
    """Decode JPEG images onto a torch device: a batch is one nvJPEG call on a CUDA GPU.

    Args:
        contents: One JPEG-encoded image (``bytes``) or a batch of them (a sequence or a 1-D
            object array, as ``Dataset.batch`` makes of ``bytes`` elements).
        channels: 0 for the file's own (1 for grayscale, 3 otherwise), 1 or 3, as
            :func:`feedline.image.decode_jpeg`.
        device: The torch device of the result (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
        decoder: ``"torchvision"``: ``torchvision.io.decode_jpeg`` on ``device`` (nvJPEG on
            a GPU, all the batch's images in one call; libjpeg on the CPU). ``"host"``:
            :func:`feedline.image.decode_jpeg` on this CPU (tf.io's pixels), then one copy to
            ``device``. ``"auto"``: torchvision on a CUDA device, the host elsewhere.
        dct_method: The host decoder's IDCT, as :func:`feedline.image.decode_jpeg`'s; the
            torchvision decoder has its own and takes only ``""``.

    Returns:
        One image ``[H, W, channels]`` uint8 on ``device``; for a batch, ``[N, H, W, channels]``
        when its images agree in size, else a list of ``[H, W, channels]`` tensors (crop or
        resize them to one size with this module's operations, which take such lists).

    Raises:
        InvalidArgumentError: an element that is not a whole JPEG (named by its index), a
            CMYK JPEG, a bad ``channels``, ``decoder`` or ``device``.
        ImportError: PyTorch or (for the torchvision decoder) torchvision is missing.
        RuntimeError: ``device`` is CUDA and this PyTorch has no CUDA.

    Example:
        >>> from feedline.image import encode_jpeg
        >>> data = encode_jpeg(np.full((16, 24, 3), 200, np.uint8))
        >>> batch = decode_jpeg_to_device([data, data], 3, device="cpu")
        >>> tuple(batch.shape), batch.dtype, batch.device.type
        ((2, 16, 24, 3), torch.uint8, 'cpu')
        >>> [tuple(image.shape) for image in decode_jpeg_to_device(
        ...     [data, encode_jpeg(np.zeros((8, 8, 1), np.uint8))], device="cpu")]
        [(16, 24, 3), (8, 8, 1)]
    """
    op = "decode_jpeg_to_device"
    channels = 0 if channels is None else int(channels)
    if channels not in (0, 1, 3):
        raise InvalidArgumentError(f"{op}: channels must be one of (0, 1, 3); got {channels}")
    if decoder not in ("auto", "torchvision", "host"):
        raise InvalidArgumentError(f"{op}: decoder is 'auto', 'torchvision' or 'host'; got "
                                   f"{decoder!r}")
    from feedline.image.codecs import _dct_fast

    _dct_fast(dct_method, op)  # checked here, not blamed on an element
    target = _device(device, op)
    items, single = _encoded_items(contents, op)
    if decoder == "auto":
        decoder = "torchvision" if target.type == "cuda" else "host"
    if decoder == "host":
        images = _decode_host(items, single, channels, dct_method, target, op)
    else:
        if dct_method != "":
            raise InvalidArgumentError(f"{op}: dct_method applies to decoder='host'; "
                                       f"torchvision's decoder has its own IDCT (got "
                                       f"{dct_method!r})")
        images = _decode_torchvision(items, single, channels, target, op)
    if single:
        return images[0].contiguous()
    return _stack_if_equal(images)


def _stack_if_equal(images: list[torch.Tensor]) -> Any:
    shape = images[0].shape
    if all(image.shape == shape for image in images):
        return _torch().stack(images)
    return images


def _decode_host(items: list[bytes], single: bool, channels: int, dct_method: str,
                 device: torch.device, op: str) -> list[torch.Tensor]:
    from feedline.image.codecs import decode_jpeg

    arrays = []
    for index, data in enumerate(items):
        try:
            arrays.append(decode_jpeg(data, channels, dct_method=dct_method))
        except InvalidArgumentError as error:
            message = str(error).replace("decode_jpeg:", f"{op}:", 1)
            if single:
                raise InvalidArgumentError(message) from None
            raise InvalidArgumentError(f"element {index} of the batch: {message}") from None
    if len({array.shape for array in arrays}) == 1:
        # One copy of the whole batch, then views of it: a stacked result is contiguous.
        return list(_to_device(np.stack(arrays), device))
    return [_to_device(array, device) for array in arrays]


@functools.cache
def _probe(device: str) -> None:
    """Decode a tiny JPEG once per device, so that a torchvision unable to decode there
    (built without nvJPEG, or without its image library) is reported as such, not blamed on
    the first element of a batch."""
    from feedline.image.codecs import encode_jpeg

    torch = _torch()
    data = bytearray(encode_jpeg(np.zeros((8, 8, 3), np.uint8)))
    try:
        _torchvision_io().decode_jpeg([torch.frombuffer(data, dtype=torch.uint8)],
                                      device=device)
    except RuntimeError as error:
        import torchvision

        raise RuntimeError(f"decode_jpeg_to_device: torchvision {torchvision.__version__} "
                           f"cannot decode JPEGs on {device} ({error}); use decoder='host'"
                           ) from error


def _decode_torchvision(items: list[bytes], single: bool, channels: int,
                        device: torch.device, op: str) -> list[torch.Tensor]:
    from feedline.image.codecs import _check_pixels

    frames = []
    for index, data in enumerate(items):
        try:
            frame = _jpeg_info(data, op)
            # nvJPEG allocates what the header declares: a bomb is refused before it runs.
            _check_pixels(op, frame[0], frame[1])
            if frame[2] == 4:
                raise InvalidArgumentError(f"{op}: CMYK JPEGs are not supported (as in "
                                           "feedline.image.decode_jpeg); convert the file to "
                                           "RGB")
        except InvalidArgumentError as error:
            if single:
                raise
            raise InvalidArgumentError(f"element {index} of the batch: {error}") from None
        frames.append(frame)
    torch = _torch()
    io = _torchvision_io()
    _probe(str(device))
    # One writable buffer for the batch (torch warns on read-only bytes), the inputs its views.
    buffer = torch.frombuffer(bytearray().join(items), dtype=torch.uint8)
    tensors, start = [], 0
    for data in items:
        tensors.append(buffer[start:start + len(data)])
        start += len(data)
    # channels=0 decodes as RGB and keeps one plane of the grayscale files (their three
    # planes are equal): one call for the batch needs one mode.
    mode = io.ImageReadMode.GRAY if channels == 1 else io.ImageReadMode.RGB
    try:
        planes = io.decode_jpeg(tensors, mode=mode, device=device)
    except RuntimeError as error:
        if isinstance(error, torch.cuda.OutOfMemoryError):
            raise
        _blame(io, tensors, items, mode, device, single, op, error)
        raise
    images = []
    for plane, frame in zip(planes, frames, strict=True):
        if channels == 0 and frame[2] == 1:
            plane = plane[:1]
        images.append(plane.permute(1, 2, 0))
    return images


def _blame(io: ModuleType, tensors: list[torch.Tensor], items: list[bytes], mode: Any,
           device: torch.device, single: bool, op: str, error: RuntimeError) -> None:
    """Raise an InvalidArgumentError naming the element that failed the batch's decode, if
    one fails alone (torchvision reports a failed batch, not which image failed it)."""
    for index, tensor in enumerate(tensors):
        try:
            io.decode_jpeg([tensor], mode=mode, device=device)
        except RuntimeError as alone:
            message = (f"{op}: invalid JPEG data (torchvision: {alone}); got "
                       f"{_preview(items[index])}")
            if single:
                raise InvalidArgumentError(message) from error
            raise InvalidArgumentError(f"element {index} of the batch: {message}") from error


# ----------------------------------------------------------------------------- batches
def _as_tensor(value: Any, op: str) -> torch.Tensor:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object or value.dtype.kind not in "biuf":
            raise InvalidArgumentError(f"{op}: an image is a numeric array; got dtype "
                                       f"{value.dtype}")
        # from_numpy shares memory; a read-only array (shared memory) is copied once.
        return torch.from_numpy(value if value.flags.writeable else value.copy())
    raise InvalidArgumentError(f"{op}: an image is a torch tensor [height, width, channels] or "
                               f"a batch [batch, height, width, channels]; got "
                               f"{type(value).__name__}")


def _images(images: Images, op: str) -> tuple[torch.Tensor | list[torch.Tensor], bool]:
    """A stacked batch ``[N, H, W, C]`` or a list of ``[H, W, C]`` images, and whether the
    input was one image."""
    if isinstance(images, (list, tuple)):
        if not images:
            raise InvalidArgumentError(f"{op}: the batch of images is empty")
        tensors = [_as_tensor(image, op) for image in images]
        for index, tensor in enumerate(tensors):
            if tensor.ndim != 3:
                raise InvalidArgumentError(f"{op}: element {index} of the batch has shape "
                                           f"{tuple(tensor.shape)}; an image is [height, "
                                           "width, channels]")
            if tensor.device != tensors[0].device or tensor.dtype != tensors[0].dtype:
                raise InvalidArgumentError(
                    f"{op}: the images of a batch share one device and dtype (element 0: "
                    f"{tensors[0].dtype} on {tensors[0].device}, element {index}: "
                    f"{tensor.dtype} on {tensor.device})")
            if tensor.shape[-1] != tensors[0].shape[-1]:
                raise InvalidArgumentError(
                    f"{op}: the images of a batch have one channel count (element 0: "
                    f"{tensors[0].shape[-1]}, element {index}: {tensor.shape[-1]})")
        return tensors, False
    tensor = _as_tensor(images, op)
    if tensor.ndim == 3:
        return tensor[None], True
    if tensor.ndim == 4:
        return tensor, False
    raise InvalidArgumentError(f"{op}: an image has shape [height, width, channels] or a batch "
                               f"[batch, height, width, channels]; got shape "
                               f"{tuple(tensor.shape)}")


def _stacked(images: Images, op: str) -> tuple[torch.Tensor, bool]:
    """A batch that must be one tensor: a list is stacked when its images agree in size."""
    batch, single = _images(images, op)
    if isinstance(batch, list):
        for index, image in enumerate(batch):
            if image.shape != batch[0].shape:
                raise InvalidArgumentError(
                    f"{op}: the images of a batch have different shapes (element 0: "
                    f"{tuple(batch[0].shape)}, element {index}: {tuple(image.shape)}); crop or "
                    "resize them to one size first (crop_to_bounding_box, random_crop, "
                    "central_crop, resize and random_resized_crop take such a list)")
        batch = _torch().stack(batch)
    return batch, single


def _shapes(batch: torch.Tensor | list[torch.Tensor]) -> list[tuple[int, int]]:
    if isinstance(batch, list):
        return [(int(image.shape[0]), int(image.shape[1])) for image in batch]
    return [(int(batch.shape[1]), int(batch.shape[2]))] * int(batch.shape[0])


def _restore(batch: torch.Tensor, single: bool) -> torch.Tensor:
    return batch[0] if single else batch


def _gather(batch: torch.Tensor | list[torch.Tensor], rows: np.ndarray,
            cols: np.ndarray) -> torch.Tensor:
    """``out[n, i, j] = image_n[rows[n, i], cols[n, j]]``."""
    height = rows.shape[1]
    indices = _to_device(np.concatenate([rows, cols], axis=1), batch[0].device)
    return _gather_on_device(batch, indices[:, :height], indices[:, height:])


def _gather_on_device(batch: torch.Tensor | list[torch.Tensor], rows: torch.Tensor,
                      cols: torch.Tensor) -> torch.Tensor:
    """:func:`_gather` with the indices already on the device: one gather for a stacked
    batch, one per image for a list."""
    torch = _torch()
    if isinstance(batch, list):
        return torch.stack([image[row[:, None], col[None, :]]
                            for image, row, col in zip(batch, rows, cols, strict=True)])
    picks = torch.arange(batch.shape[0], device=batch.device)[:, None, None]
    return batch[picks, rows[:, :, None], cols[:, None, :]]


def _window_indices(tops: np.ndarray, lefts: np.ndarray, height: int,
                    width: int) -> tuple[np.ndarray, np.ndarray]:
    rows = tops[:, None] + np.arange(height, dtype=np.int64)
    cols = lefts[:, None] + np.arange(width, dtype=np.int64)
    return rows, cols


# ----------------------------------------------------------------------------- crops
def crop_to_bounding_box(images: Images, offset_height: int | Sequence[int],
                         offset_width: int | Sequence[int], target_height: int,
                         target_width: int) -> torch.Tensor:
    """The box with top-left corner ``(offset_height, offset_width)``, as
    :func:`feedline.image.crop_to_bounding_box`, on the images' device.

    Args:
        images: ``[H, W, C]``, ``[N, H, W, C]`` or a list of ``[H, W, C]`` tensors.
        offset_height: The box's top row: one for every image, or one per image (``[N]``).
        offset_width: The box's left column: one for every image, or one per image.
        target_height: The box's height.
        target_width: The box's width.

    Returns:
        ``[target_height, target_width, C]`` (``[N, ...]`` for a batch), a new tensor.

    Raises:
        InvalidArgumentError: a box that is empty or not inside its image.

    Example:
        >>> import torch
        >>> images = torch.arange(2 * 3 * 4).reshape(2, 3, 4, 1)
        >>> crop_to_bounding_box(images, [0, 1], [2, 0], 2, 2)[..., 0].tolist()
        [[[2, 3], [6, 7]], [[16, 17], [20, 21]]]
    """
    op = "crop_to_bounding_box"
    batch, single = _images(images, op)
    shapes = _shapes(batch)
    height, width = int(target_height), int(target_width)
    tops = _per_image(offset_height, len(shapes), op, "offset_height")
    lefts = _per_image(offset_width, len(shapes), op, "offset_width")
    for index, ((image_height, image_width), top, left) in enumerate(zip(shapes, tops, lefts)):
        if (height <= 0 or width <= 0 or top < 0 or left < 0 or top + height > image_height
                or left + width > image_width):
            where = "" if single else f"image {index}: "
            raise InvalidArgumentError(
                f"{op}: {where}the box [offset_height={top}, offset_width={left}, "
                f"target_height={height}, target_width={width}] is empty or not inside the "
                f"image of size {(image_height, image_width)}")
    return _restore(_gather(batch, *_window_indices(tops, lefts, height, width)), single)


def _per_image(value: int | Sequence[int], count: int, op: str, name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "iu" and not (array.dtype.kind == "f" and np.all(
            array == np.floor(array))):
        raise InvalidArgumentError(f"{op}: {name} is an int or one int per image; got {value!r}")
    array = array.astype(np.int64).reshape(-1)
    if array.size == 1:
        return np.repeat(array, count)
    if array.size != count:
        raise InvalidArgumentError(f"{op}: {name} has {array.size} values for a batch of "
                                   f"{count} images")
    return array


def central_crop(images: Images, central_fraction: float) -> torch.Tensor:
    """The central ``central_fraction`` of each side, as :func:`feedline.image.central_crop`.

    Args:
        images: ``[H, W, C]``, ``[N, H, W, C]`` or a list of ``[H, W, C]`` tensors (whose
            crops must come out one size).
        central_fraction: In ``(0, 1]``; the crop starts at
            ``int((side - side * central_fraction) / 2)`` and is symmetric, as TensorFlow's.

    Returns:
        The crops, a new tensor (the input itself for 1.0 and a tensor).

    Raises:
        InvalidArgumentError: ``central_fraction`` outside ``(0, 1]``, or a list whose crops
            differ in size.

    Example:
        >>> import torch
        >>> central_crop(torch.arange(16).reshape(4, 4, 1), 0.5)[..., 0].tolist()
        [[5, 6], [9, 10]]
    """
    op = "central_crop"
    if not 0.0 < central_fraction <= 1.0:
        raise InvalidArgumentError(f"{op}: central_fraction must be within (0, 1]; got "
                                   f"{central_fraction}")
    batch, single = _images(images, op)
    if central_fraction == 1.0 and not isinstance(batch, list):
        return _restore(batch, single)
    boxes = []
    for height, width in _shapes(batch):
        top = int((height - height * central_fraction) / 2)
        left = int((width - width * central_fraction) / 2)
        boxes.append((top, left, height - 2 * top, width - 2 * left))
    if len({box[2:] for box in boxes}) != 1:
        raise InvalidArgumentError(f"{op}: the images' central crops differ in size "
                                   f"({sorted({box[2:] for box in boxes})}); resize first")
    tops, lefts = (np.array(values, np.int64) for values in list(zip(*boxes))[:2])
    return _restore(_gather(batch, *_window_indices(tops, lefts, *boxes[0][2:])), single)


def random_crop(images: Images, size: Sequence[int], seed: Seed = None) -> torch.Tensor:
    """A crop of ``size`` at a uniformly random position in each image, as
    :func:`feedline.image.random_crop`: the same seed gives the same offsets.

    Args:
        images: ``[H, W, C]``, ``[N, H, W, C]`` or a list of ``[H, W, C]`` tensors.
        size: ``(height, width)`` (TensorFlow's full-rank form is accepted, as there).
        seed: An int, a pair of ints, a NumPy generator or None.

    Returns:
        The crops, ``[height, width, C]`` (``[N, ...]`` for a batch).

    Raises:
        InvalidArgumentError: ``size`` larger than an image or of the wrong length.

    Example:
        >>> import torch
        >>> from feedline import image as host
        >>> batch = np.arange(2 * 5 * 5).reshape(2, 5, 5, 1)
        >>> crops = random_crop(torch.from_numpy(batch), (2, 3), seed=7)
        >>> tuple(crops.shape), bool((crops.numpy() == host.random_crop(batch, (2, 3), 7)).all())
        ((2, 2, 3, 1), True)
    """
    from feedline.image.cropping import _crop_size

    op = "random_crop"
    batch, single = _images(images, op)
    shapes = _shapes(batch)
    channels = int(batch[0].shape[-1])
    rng = generator_for(seed)
    tops, lefts = np.empty(len(shapes), np.int64), np.empty(len(shapes), np.int64)
    if not isinstance(batch, list):
        height, width = _crop_size(op, tuple(batch.shape), single, size)
    for index, (image_height, image_width) in enumerate(shapes):
        if isinstance(batch, list):
            height, width = _crop_size(op, (1, image_height, image_width, channels), True, size)
        # The host op's draws, in its order: one image at a time.
        tops[index] = rng.integers(0, image_height - height + 1)
        lefts[index] = rng.integers(0, image_width - width + 1)
    return _restore(_gather(batch, *_window_indices(tops, lefts, height, width)), single)


# ----------------------------------------------------------------------------- flips
def flip_left_right(images: Images, flags: Sequence[bool] | np.ndarray | None = None
                    ) -> torch.Tensor:
    """Mirror the columns, as :func:`feedline.image.flip_left_right`; with ``flags``, only the
    flagged images of a batch.

    Args:
        images: ``[H, W, C]`` or ``[N, H, W, C]`` (a list of equal-size images is stacked).
        flags: ``None`` to flip every image, or one bool per image (host values: drawn
            ahead, as a pipeline's augmentation parameters are).

    Returns:
        The images, the chosen ones mirrored, a new tensor.

    Example:
        >>> import torch
        >>> flip_left_right(torch.arange(6).reshape(2, 1, 3, 1), [True, False])[..., 0].tolist()
        [[[2, 1, 0]], [[3, 4, 5]]]
    """
    op = "flip_left_right"
    batch, single = _stacked(images, op)
    count = int(batch.shape[0])
    if flags is None:
        return _restore(batch.flip(2), single)
    chosen = np.asarray(flags).reshape(-1)
    if chosen.size != count:
        raise InvalidArgumentError(f"{op}: {chosen.size} flags for a batch of {count} images")
    return _restore(_flip_some(batch, chosen.astype(bool)), single)


def _flip_some(batch: torch.Tensor, flips: np.ndarray) -> torch.Tensor:
    count, height, width = (int(side) for side in batch.shape[:3])
    columns = np.arange(width, dtype=np.int64)
    cols = np.where(flips[:, None], width - 1 - columns, columns)
    rows = np.broadcast_to(np.arange(height, dtype=np.int64), (count, height))
    return _gather(batch, rows, cols)


def random_flip_left_right(images: Images, seed: Seed = None) -> torch.Tensor:
    """Mirror the columns with probability 1/2, each image on its own draw, as
    :func:`feedline.image.random_flip_left_right`: the same seed flips the same images.

    Args:
        images: ``[H, W, C]`` or ``[N, H, W, C]`` (a list of equal-size images is stacked).
        seed: An int, a pair of ints, a NumPy generator or None.

    Returns:
        The images, some mirrored, a new tensor.

    Example:
        >>> import torch
        >>> from feedline import image as host
        >>> batch = np.arange(8 * 3).reshape(8, 1, 3, 1)
        >>> flipped = random_flip_left_right(torch.from_numpy(batch), seed=(1, 2))
        >>> bool((flipped.numpy() == host.random_flip_left_right(batch, (1, 2))).all())
        True
    """
    op = "random_flip_left_right"
    batch, single = _stacked(images, op)
    # One draw per image, in order, as the host op draws.
    flips = generator_for(seed).random(int(batch.shape[0])) < 0.5
    return _restore(_flip_some(batch, flips), single)


# ----------------------------------------------------------------------------- resizing
def _linear_taps(starts: np.ndarray, lengths: np.ndarray, out_size: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per image, the two source indices and the weight of the second for each output
    position along one axis, inside the window ``[start, start + length)`` of each image:
    tf.image.resize's bilinear sampling (half-pixel centres, float32 arithmetic)."""
    scale = lengths.astype(np.float32) / np.float32(out_size)
    source = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale[:, None] \
        - np.float32(0.5)
    below = np.floor(source)
    weight = (source - below).astype(np.float32)
    last = (lengths - 1)[:, None]
    lower = np.clip(below.astype(np.int64), 0, last)
    upper = np.clip(np.ceil(source).astype(np.int64), 0, last)
    return lower + starts[:, None], upper + starts[:, None], weight


def _resample(batch: torch.Tensor | list[torch.Tensor], windows: np.ndarray,
              size: tuple[int, int], method: str, antialias: bool, op: str) -> torch.Tensor:
    """Resize each image's window ``(top, left, height, width)`` to ``size``."""
    from feedline.image.resize import _nearest_indices

    torch = _torch()
    height, width = size
    if antialias:
        raise InvalidArgumentError(f"{op}: antialias=True is not supported on the device; use "
                                   "feedline.image's host op")
    if method == "nearest":
        rows = np.stack([top + _nearest_indices(h, height) for top, _, h, _ in windows])
        cols = np.stack([left + _nearest_indices(w, width) for _, left, _, w in windows])
        return _gather(batch, rows, cols)
    if method != "bilinear":
        raise InvalidArgumentError(f"{op}: method is 'bilinear' or 'nearest' on the device; got "
                                   f"{method!r}")
    top, left, window_height, window_width = windows.T
    row0, row1, row_weight = _linear_taps(top, window_height, height)
    col0, col1, col_weight = _linear_taps(left, window_width, width)
    # Two copies to the device for the whole batch: the taps, then their weights.
    device = batch[0].device
    taps = _to_device(np.concatenate([row0, row1, col0, col1], axis=1), device)
    row0, row1, col0, col1 = torch.split(taps, [height, height, width, width], dim=1)
    weights = _to_device(np.concatenate([row_weight, col_weight], axis=1), device)
    fy = weights[:, :height, None, None]
    fx = weights[:, None, height:, None]

    def pixels(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        return _gather_on_device(batch, rows, cols).to(torch.float32)

    # TensorFlow's order and form: along x in the two source rows, then along y.
    top_left = pixels(row0, col0)
    top_row = top_left + (pixels(row0, col1) - top_left) * fx
    bottom_left = pixels(row1, col0)
    bottom_row = bottom_left + (pixels(row1, col1) - bottom_left) * fx
    return top_row + (bottom_row - top_row) * fy


def _size_pair(size: Sequence[int], op: str) -> tuple[int, int]:
    from feedline.image._shape import size_pair

    height, width = size_pair(size, op)
    if height == 0 or width == 0:
        raise InvalidArgumentError(f"{op}: size must be positive; got {tuple(size)}")
    return height, width


def resize(images: Images, size: Sequence[int], method: str = "bilinear",
           antialias: bool = False) -> torch.Tensor:
    """Resize images to ``size``, as :func:`feedline.image.resize` (``"bilinear"`` and
    ``"nearest"``, without antialiasing).

    Args:
        images: ``[H, W, C]``, ``[N, H, W, C]`` or a list of ``[H, W, C]`` tensors of any sizes.
        size: ``(height, width)``, both positive.
        method: ``"bilinear"`` (tf.image's half-pixel centres) or ``"nearest"`` (tf.image's
            indices, exact).
        antialias: False only (the host op has the antialiased forms).

    Returns:
        float32 images of ``size`` (``"nearest"`` keeps the dtype).

    Raises:
        InvalidArgumentError: a bad size, method or ``antialias=True``.

    Example:
        >>> import torch
        >>> image = torch.arange(16, dtype=torch.uint8).reshape(4, 4, 1)
        >>> resize(image, (2, 2))[..., 0].tolist()
        [[2.5, 4.5], [10.5, 12.5]]
    """
    op = "resize"
    batch, single = _images(images, op)
    windows = np.array([(0, 0, h, w) for h, w in _shapes(batch)], np.int64)
    return _restore(_resample(batch, windows, _size_pair(size, op), method, antialias, op),
                    single)


def random_resized_crop(images: Images, size: Sequence[int],
                        scale: tuple[float, float] = (0.08, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3), method: str = "bilinear",
                        antialias: bool = False, seed: Seed = None) -> torch.Tensor:
    """Inception-style crop, as :func:`feedline.image.random_resized_crop`: the same seed draws
    the same windows (:func:`feedline.image.random_resized_crop_window`), resized on the device.

    Args:
        images: ``[H, W, C]``, ``[N, H, W, C]`` or a list of ``[H, W, C]`` tensors of any sizes
            (each image draws its own window).
        size: ``(height, width)`` of the result.
        scale: The range of the window's area as a fraction of the image's.
        ratio: The range of the window's width / height.
        method: ``"bilinear"`` or ``"nearest"`` (see :func:`resize`).
        antialias: False only.
        seed: An int, a pair of ints, a NumPy generator or None.

    Returns:
        ``[height, width, C]`` float32 (``[N, ...]`` for a batch; ``"nearest"`` keeps the dtype).

    Example:
        >>> import torch
        >>> from feedline import image as host
        >>> batch = np.random.default_rng(0).integers(0, 256, (2, 40, 60, 3), np.uint8)
        >>> crops = random_resized_crop(torch.from_numpy(batch), (8, 8), seed=3)
        >>> expected = host.random_resized_crop(batch, (8, 8), seed=3)
        >>> tuple(crops.shape), float(abs(crops.numpy() - expected).max()) < 2e-3
        ((2, 8, 8, 3), True)
    """
    from feedline.image.cropping import random_resized_crop_window

    op = "random_resized_crop"
    batch, single = _images(images, op)
    height, width = _size_pair(size, op)
    channels = int(batch[0].shape[-1])
    rng = generator_for(seed)
    windows = np.array([random_resized_crop_window((h, w, channels), scale, ratio, rng)
                        for h, w in _shapes(batch)], np.int64).reshape(-1, 4)
    return _restore(_resample(batch, windows, (height, width), method, antialias, op), single)


# ----------------------------------------------------------------------------- dtypes
_TORCH_DTYPES = ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
                 "float64")


def _torch_dtype(dtype: Any, op: str) -> torch.dtype:
    torch = _torch()
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str) and dtype == "bfloat16":
        name = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    if name not in _TORCH_DTYPES:
        raise InvalidArgumentError(f"{op}: dtype is one of {', '.join(_TORCH_DTYPES)} on the "
                                   f"device; got {dtype!r}")
    return getattr(torch, name)


def _layout(batch: torch.Tensor, single: bool, data_format: str, op: str) -> torch.Tensor:
    if data_format == "NHWC":
        return _restore(batch, single)
    if data_format == "NCHW":
        # A view: [N, C, H, W] in channels-last memory, what a channels-last model takes.
        return _restore(batch.permute(0, 3, 1, 2), single)
    raise InvalidArgumentError(f"{op}: data_format is 'NHWC' or 'NCHW'; got {data_format!r}")


def _float_to_int_limits(source: torch.dtype, target: torch.dtype) -> tuple[float, float]:
    """The saturating clamp's limits in the float ``source`` dtype, as the host op's
    (``saturate_cast``, TensorFlow's): a limit the source cannot hold steps one ulp toward
    zero, so that the cast never overflows."""
    torch = _torch()
    floats, ints = torch.finfo(source), torch.iinfo(target)
    limits = []
    for bound in (max(floats.min, ints.min), min(floats.max, ints.max)):
        value = torch.tensor(float(bound), dtype=torch.float64).to(source)
        # Compared in float64, as the host op (TensorFlow) compares them: int64's 2**63 - 1
        # is 2**63 there, and that limit is kept.
        if abs(float(value)) > abs(float(bound)):
            value = torch.nextafter(value, torch.zeros((), dtype=source))
        limits.append(float(value))
    return limits[0], limits[1]


def convert_image_dtype(images: Images, dtype: Any, saturate: bool = False, *,
                        data_format: str = "NHWC") -> torch.Tensor:
    """Convert ``images`` to ``dtype``, scaling their values, as
    :func:`feedline.image.convert_image_dtype` (``tf.image.convert_image_dtype``), bit for bit.

    Args:
        images: ``[H, W, C]`` or ``[N, H, W, C]`` (a list of equal-size images is stacked).
        dtype: A torch dtype (or a NumPy one): uint8, int8/16/32/64, float16, bfloat16,
            float32, float64.
        saturate: Clamp before casting, so that out-of-range values cannot wrap around.
        data_format: ``"NHWC"``, or ``"NCHW"`` for ``[N, C, H, W]`` (a view, channels-last).

    Returns:
        The converted images (the input itself when already of ``dtype`` and NHWC).

    Example:
        >>> import torch
        >>> convert_image_dtype(torch.tensor([[[0, 51, 255]]], dtype=torch.uint8), torch.float32)
        tensor([[[0.0000, 0.2000, 1.0000]]])
    """
    torch = _torch()
    op = "convert_image_dtype"
    batch, single = _stacked(images, op)
    source = batch.dtype
    target = _torch_dtype(dtype, op)
    _torch_dtype(source, op)
    if source == target:
        if data_format == "NHWC" and isinstance(images, torch.Tensor):
            return images  # as the host op: not copied
        return _layout(batch, single, data_format, op)
    if source.is_floating_point and target.is_floating_point:
        out = batch.to(target)
    elif source.is_floating_point:
        info = torch.iinfo(target)
        scaled = batch * torch.tensor(info.max + 0.5, dtype=source)
        if saturate:
            low, high = _float_to_int_limits(source, target)
            scaled = scaled.clamp(low, high)
        out = scaled.to(target)
    else:
        scale_in = int(torch.iinfo(source).max)
        if target.is_floating_point:
            out = batch.to(target) * torch.tensor(1.0 / scale_in, dtype=target)
        else:
            scale_out = int(torch.iinfo(target).max)
            # The saturating clamp's limits, inside both ranges (a limit outside the source's
            # would wrap in its dtype).
            low = max(torch.iinfo(source).min, torch.iinfo(target).min)
            high = min(scale_in, scale_out)
            if scale_in > scale_out:
                out = torch.floor_divide(batch, (scale_in + 1) // (scale_out + 1))
                if saturate:
                    out = out.clamp(low, high)
                out = out.to(target)
            else:
                if saturate:
                    batch = batch.clamp(low, high)
                out = batch.to(target) * ((scale_out + 1) // (scale_in + 1))
    return _layout(out, single, data_format, op)


_AFFINE_CACHE: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = {}


def normalize(images: Images, mean: float | Sequence[float], std: float | Sequence[float],
              dtype: Any = None, *, data_format: str = "NHWC") -> torch.Tensor:
    """``(x - mean) / std`` per channel, integer images scaled to ``[0, 1]`` first, as
    :func:`feedline.image.normalize`: ``x * (1 / (MAX * std)) + (-mean / std)`` in ``dtype``,
    the same two roundings (bit-identical to the host op for float32 and float64).

    Args:
        images: ``[H, W, C]`` or ``[N, H, W, C]`` (a list of equal-size images is stacked).
        mean: One value, or one per channel (``[0, 1]`` units for integer images).
        std: One value, or one per channel; each non-zero.
        dtype: The floating point dtype of the result (default float32; bfloat16 and float16
            work too).
        data_format: ``"NHWC"``, or ``"NCHW"`` for ``[N, C, H, W]`` (a view, channels-last).

    Returns:
        The normalized images on their device.

    Raises:
        InvalidArgumentError: a ``mean``/``std`` length that is neither 1 nor the channel
            count, a zero ``std``, a non-float ``dtype`` or a bad ``data_format``.

    Example:
        >>> import torch
        >>> normalize(torch.tensor([[[0, 128, 255]]], dtype=torch.uint8), mean=0.5, std=0.5)
        tensor([[[-1.0000,  0.0039,  1.0000]]])
    """
    from feedline.image.dtype import _affine, _values_key

    torch = _torch()
    op = "normalize"
    batch, single = _stacked(images, op)
    target = _torch_dtype(torch.float32 if dtype is None else dtype, op)
    if not target.is_floating_point:
        raise InvalidArgumentError(f"{op}: dtype must be a floating point dtype; got {target}")
    _torch_dtype(batch.dtype, op)
    channels = int(batch.shape[-1])
    unit = float(torch.iinfo(batch.dtype).max) if not batch.dtype.is_floating_point else 1.0
    key = (_values_key(mean), _values_key(std), channels, unit, target, batch.device)
    constants = _AFFINE_CACHE.get(key)
    if constants is None:
        # The host op's constants in float64, rounded once to the target dtype; kept on the
        # device, so that a training step sends nothing for them.
        scale64, shift64 = _affine(key[0], key[1], channels, unit, np.dtype(np.float64))
        constants = tuple(torch.from_numpy(values.copy()).to(target).to(batch.device)
                          for values in (scale64, shift64))
        if len(_AFFINE_CACHE) > 64:
            _AFFINE_CACHE.clear()
        _AFFINE_CACHE[key] = constants
    scale, shift = constants
    out = batch.to(target)
    if out.data_ptr() == batch.data_ptr():
        out = out.clone()  # the input was already of dtype: never normalize it in place
    out.mul_(scale).add_(shift)
    return _layout(out, single, data_format, op)

