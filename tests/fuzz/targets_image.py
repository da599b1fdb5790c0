"""Fuzz targets: feedline.image's decoders (JPEG, PNG, GIF, BMP, WebP, and decode_image on all).

The children decode under the limits below (set in the child when its corpus is built): a
mutant may declare any size, and each decode stays within them, so a target's peak memory is
documented by them. Half of the inputs go through a structure-aware step first, chosen and
seeded by the input's CRC (deterministic): PNG chunks get their CRCs recomputed (else libpng
stops at the first damaged byte's chunk), and header fields (sizes, components, sampling,
bit depths, compression, LZW code sizes, RIFF chunk sizes and VP8X flags) get interesting
values.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from pathlib import Path

import numpy as np
from fuzz_harness import FuzzTarget

import feedline as fl
from feedline import image as fli

MAX_PIXELS = 1 << 22
"""The fuzzing children's decode limit on one image's pixels (4 Mpx)."""
MAX_ANIMATION_BYTES = 64 << 20
"""The fuzzing children's decode limit on an animation's frames together (64 MiB)."""
MEMORY_CAP_MIB = 512
"""The documented peak RSS of a child decoding any mutant under those limits."""

_SIDES = (0, 1, 2, 7, 8, 9, 15, 16, 17, 255, 256, 1000, 2047, 2048, 4096, 65535, 0x7FFF,
          0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def _limits() -> None:
    fli.set_decode_limits(max_pixels=MAX_PIXELS, max_animation_bytes=MAX_ANIMATION_BYTES)


def _pil():
    from PIL import Image

    return Image


def _save(image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, **options)
    return buffer.getvalue()


def _pictures(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Small pictures with structure (gradients, edges) and noise, uint8 RGB."""
    y, x = np.mgrid[0:37, 0:45]
    gradient = np.stack([x * 5, y * 6, (x + y) * 3], axis=-1).astype(np.uint8)
    noise = rng.integers(0, 256, (24, 19, 3), dtype=np.uint8)
    return {"gradient": gradient, "noise": noise}


# --------------------------------------------------------------------------- corpora
def jpeg_corpus(folder: Path) -> list[bytes]:
    _limits()
    image = _pil()
    pictures = _pictures(np.random.default_rng(1))
    rgb = image.fromarray(pictures["gradient"])
    out = [
        _save(rgb, format="JPEG", quality=90),  # 4:2:0
        _save(rgb, format="JPEG", quality=75, subsampling=0),  # 4:4:4
        _save(image.fromarray(pictures["noise"]), format="JPEG", quality=50, subsampling=1),
        _save(rgb.convert("L"), format="JPEG", quality=85),
        _save(rgb, format="JPEG", quality=80, progressive=True),
        _save(rgb, format="JPEG", quality=80, optimize=True, restart_marker_blocks=2),
        _save(rgb.convert("CMYK"), format="JPEG", quality=90),  # Adobe CMYK
        fli.encode_jpeg(pictures["noise"], quality=95, chroma_downsampling=False),
    ]
    return out


def _png_rgb16(pixels: np.ndarray) -> list[bytes]:
    """A 16-bit RGB PNG of ``pixels``, where the PNG backend writes and reads 16-bit color
    (OpenCV); none where it does not (Pillow, on free-threaded builds, which have no OpenCV
    wheel: ``decode_png`` refuses such a file with ``InvalidArgumentError``, which a valid
    corpus input must not raise)."""
    try:
        return [fli.encode_png(pixels)]
    except fl.InvalidArgumentError:
        return []


def png_corpus(folder: Path) -> list[bytes]:
    _limits()
    image = _pil()
    pictures = _pictures(np.random.default_rng(2))
    rgb = image.fromarray(pictures["gradient"])
    wide = pictures["gradient"].astype(np.uint16) * 257
    alpha = np.concatenate([pictures["noise"], pictures["noise"][..., :1]], axis=-1)
    palette = rgb.convert("P", palette=image.Palette.ADAPTIVE, colors=16)
    return [
        fli.encode_png(pictures["gradient"]),
        fli.encode_png(alpha),
        *_png_rgb16(wide),
        fli.encode_png(wide[..., :1]),  # 16-bit gray
        fli.encode_png(pictures["noise"][..., :1], compression=9),
        _save(rgb.convert("LA"), format="PNG"),
        _save(palette, format="PNG"),
        _save(palette, format="PNG", transparency=3),
        _save(rgb.convert("1"), format="PNG"),
    ]


def gif_corpus(folder: Path) -> list[bytes]:
    _limits()
    image = _pil()
    pictures = _pictures(np.random.default_rng(3))
    rgb = image.fromarray(pictures["gradient"])
    frames = [rgb.rotate(angle).convert("P", palette=image.Palette.ADAPTIVE, colors=32)
              for angle in (0, 90, 180)]
    small = [image.new("P", (9, 7), index) for index in (1, 2, 3)]
    return [
        _save(rgb, format="GIF"),
        _save(frames[0], format="GIF", save_all=True, append_images=frames[1:], duration=40,
              loop=0, disposal=2),  # local palettes, disposal to background
        _save(frames[0], format="GIF", save_all=True, append_images=frames[1:], duration=40,
              transparency=0, disposal=1, optimize=True),  # frames cropped to what changed
        _save(image.fromarray(pictures["noise"]).convert("P"), format="GIF", interlace=True),
        _save(small[0], format="GIF", save_all=True, append_images=small[1:], disposal=3),
    ]


def _rle8_bmp() -> bytes:
    """A 4 x 2 8-bit RLE BMP: two runs, an end of line, an end of bitmap."""
    pixels = b"\x04\x01\x00\x00\x04\x02\x00\x01"
    palette = b"".join(bytes([index * 60, 255 - index * 60, 7, 0]) for index in range(4))
    info = struct.pack("<IiiHHIIiiII", 40, 4, 2, 1, 8, 1, len(pixels), 2835, 2835, 4, 0)
    offset = 14 + len(info) + len(palette)
    header = struct.pack("<2sIHHI", b"BM", offset + len(pixels), 0, 0, offset)
    return header + info + palette + pixels


def _top_down(data: bytes) -> bytes:
    """A bottom-up BMP as a top-down one (negative height, rows reversed)."""
    out = bytearray(data)
    width, height = struct.unpack("<ii", data[18:26])
    bits = struct.unpack("<H", data[28:30])[0]
    offset = struct.unpack("<I", data[10:14])[0]
    stride = (width * bits + 31) // 32 * 4
    rows = [data[offset + row * stride:offset + (row + 1) * stride] for row in range(height)]
    out[22:26] = struct.pack("<i", -height)
    out[offset:offset + stride * height] = b"".join(reversed(rows))
    return bytes(out)


def bmp_corpus(folder: Path) -> list[bytes]:
    _limits()
    image = _pil()
    pictures = _pictures(np.random.default_rng(4))
    rgb = image.fromarray(pictures["gradient"])
    bgr24 = _save(rgb, format="BMP")
    return [
        bgr24,
        _top_down(bgr24),
        _save(image.fromarray(np.concatenate(
            [pictures["noise"], pictures["noise"][..., :1]], axis=-1)), format="BMP"),
        _save(rgb.convert("P", palette=image.Palette.ADAPTIVE, colors=16), format="BMP"),
        _save(rgb.convert("L"), format="BMP"),
        _save(rgb.convert("1"), format="BMP"),
        _rle8_bmp(),
    ]


def webp_corpus(folder: Path) -> list[bytes]:
    _limits()
    image = _pil()
    pictures = _pictures(np.random.default_rng(5))
    rgb = image.fromarray(pictures["gradient"])
    rgba = image.fromarray(np.concatenate(
        [pictures["noise"], pictures["noise"][..., :1]], axis=-1))
    frames = [rgb.rotate(angle) for angle in (0, 90, 180)]
    return [
        _save(rgb, format="WEBP", quality=80),  # VP8
        _save(rgba, format="WEBP", quality=60),  # VP8X + ALPH + VP8
        _save(rgb, format="WEBP", lossless=True),  # VP8L
        _save(rgba, format="WEBP", lossless=True, exact=True),
        _save(frames[0], format="WEBP", save_all=True, append_images=frames[1:], duration=40,
              quality=70),  # VP8X + ANIM + ANMF
        _save(frames[0], format="WEBP", save_all=True, append_images=frames[1:], duration=40,
              lossless=True),
    ]


def image_corpus(folder: Path) -> list[bytes]:
    return [*jpeg_corpus(folder)[::2], *png_corpus(folder)[::2], *gif_corpus(folder)[:3],
            *bmp_corpus(folder)[::2], *webp_corpus(folder)[::2]]


# --------------------------------------------------------------------------- structure
def _choice(data: bytes) -> random.Random | None:
    """A generator seeded by the input for half of the inputs; None for the other half."""
    rng = random.Random(zlib.crc32(data))
    return rng if rng.random() < 0.5 else None


def _put(out: bytearray, at: int, size: int, value: int, order: str) -> None:
    if at + size <= len(out):
        out[at:at + size] = (value % (1 << (8 * size))).to_bytes(size, order)


def _side(rng: random.Random) -> int:
    return rng.choice(_SIDES) if rng.random() < 0.7 else rng.randrange(1, 3000)


def png_structure(data: bytes) -> bytes:
    rng = _choice(data)
    if rng is None:
        return data
    out = bytearray(data)
    if rng.random() < 0.5:  # an IHDR field: width, height, depth, color type, interlace...
        at, size = rng.choice([(16, 4), (20, 4), (24, 1), (25, 1), (26, 1), (27, 1), (28, 1)])
        value = _side(rng) if size == 4 else rng.choice([0, 1, 2, 3, 4, 5, 6, 8, 16, 255])
        _put(out, at, size, value, "big")
    # Every chunk's CRC recomputed: the damage reaches the chunk's parser.
    at = 8
    while at + 12 <= len(out):
        length = int.from_bytes(out[at:at + 4], "big")
        end = at + 8 + length
        if end + 4 > len(out):
            break
        out[end:end + 4] = struct.pack(">I", zlib.crc32(bytes(out[at + 4:end])))
        at = end + 4
    return bytes(out)


def jpeg_structure(data: bytes) -> bytes:
    rng = _choice(data)
    if rng is None:
        return data
    out = bytearray(data)
    frames = [at for at in range(len(out) - 1) if out[at] == 0xFF and out[at + 1] in (
        0xC0, 0xC1, 0xC2)]
    if not frames:
        return data
    at = frames[0]
    field = rng.randrange(4)
    if field == 0:  # the height or the width
        _put(out, at + 5 + 2 * rng.randrange(2), 2, _side(rng), "big")
    elif field == 1:  # the number of components
        _put(out, at + 9, 1, rng.choice([0, 1, 2, 3, 4, 5, 255]), "big")
    elif field == 2:  # a component's sampling factors
        _put(out, at + 11 + 3 * rng.randrange(4), 1,
             rng.choice([0x00, 0x11, 0x12, 0x21, 0x22, 0x41, 0x14, 0x44, 0xFF]), "big")
    else:  # the precision
        _put(out, at + 4, 1, rng.choice([0, 8, 12, 16, 255]), "big")
    return bytes(out)


def gif_structure(data: bytes) -> bytes:
    rng = _choice(data)
    if rng is None:
        return data
    out = bytearray(data)
    descriptors = [at for at in range(13, len(out) - 10) if out[at] == 0x2C]
    choice = rng.randrange(4)
    if choice == 0 or not descriptors:  # the logical screen
        _put(out, 6 + 2 * rng.randrange(2), 2, _side(rng), "little")
    else:
        at = rng.choice(descriptors)
        if choice == 1:  # a frame's position or size
            _put(out, at + 1 + 2 * rng.randrange(4), 2, _side(rng), "little")
        elif choice == 2:  # a frame's flags (local palette, interlace, palette size)
            _put(out, at + 9, 1, rng.randrange(256), "little")
        else:  # the LZW minimum code size after the descriptor
            _put(out, at + 10, 1, rng.choice([0, 1, 2, 8, 11, 12, 255]), "little")
    return bytes(out)


def bmp_structure(data: bytes) -> bytes:
    rng = _choice(data)
    if rng is None:
        return data
    out = bytearray(data)
    at, size = rng.choice([(10, 4), (14, 4), (18, 4), (22, 4), (26, 2), (28, 2), (30, 4),
                           (34, 4), (46, 4)])
    if at in (18, 22):
        value = _side(rng) * rng.choice([1, -1])
    elif at == 28:
        value = rng.choice([0, 1, 2, 4, 8, 15, 16, 24, 32, 64, 255])
    elif at == 30:
        value = rng.choice([0, 1, 2, 3, 4, 5, 6, 255])
    else:
        value = rng.choice([0, 12, 40, 56, 64, 108, 124, 0x7FFFFFFF, 0xFFFFFFFF,
                            rng.randrange(256)])
    _put(out, at, size, value, "little")
    return bytes(out)


def webp_structure(data: bytes) -> bytes:
    rng = _choice(data)
    if rng is None:
        return data
    out = bytearray(data)
    kind = bytes(out[12:16])
    choice = rng.randrange(3)
    if choice == 0:  # the RIFF size or the first chunk's size
        _put(out, rng.choice([4, 16]), 4, rng.choice([0, 1, 8, 0x7FFFFFFF, 0xFFFFFFFF,
                                                       len(out), len(out) - 7]), "little")
    elif kind == b"VP8X":  # the flags (animation, alpha...) or the canvas size
        if choice == 1:
            _put(out, 20, 1, rng.randrange(256), "little")
        else:
            _put(out, rng.choice([24, 27]), 3, _side(rng) - 1, "little")
    elif kind == b"VP8 ":  # a side (14 bits and a 2-bit scale)
        _put(out, rng.choice([26, 28]), 2, _side(rng), "little")
    elif kind == b"VP8L":  # the packed sides, alpha bit and version
        _put(out, 21, 4, rng.getrandbits(32), "little")
    return bytes(out)


_STRUCTURES = {b"\xff\xd8": jpeg_structure, b"\x89P": png_structure, b"GI": gif_structure,
               b"BM": bmp_structure, b"RI": webp_structure}


# --------------------------------------------------------------------------- reads
def read_jpeg(data: bytes, scratch: Path) -> None:
    data = jpeg_structure(data)
    rng = random.Random(len(data))
    fli.extract_jpeg_shape(data)
    fli.decode_jpeg(data, channels=rng.choice([0, 3, 1]), ratio=rng.choice([1, 1, 2, 8]),
                    dct_method=rng.choice(["", "INTEGER_ACCURATE"]))
    fli.decode_and_crop_jpeg(data, [0, 0, 1, 1])


def read_png(data: bytes, scratch: Path) -> None:
    data = png_structure(data)
    rng = random.Random(len(data))
    fli.decode_png(data, channels=rng.choice([0, 1, 3, 4]),
                   dtype=rng.choice([np.uint8, np.uint16]))


def read_gif(data: bytes, scratch: Path) -> None:
    fli.decode_gif(gif_structure(data))


def read_bmp(data: bytes, scratch: Path) -> None:
    data = bmp_structure(data)
    fli.decode_image(data, channels=random.Random(len(data)).choice([0, 1, 3, 4]))


def read_webp(data: bytes, scratch: Path) -> None:
    data = webp_structure(data)
    fli.decode_webp(data, channels=random.Random(len(data)).choice([0, 0, 3, 4]))


def read_image(data: bytes, scratch: Path) -> None:
    structure = _STRUCTURES.get(data[:2])
    if structure is not None:
        data = structure(data)
    rng = random.Random(len(data))
    fli.decode_image(data, dtype=rng.choice([np.uint8, np.uint16, np.float32]),
                     expand_animations=rng.random() < 0.5)


def names_the_operation(error: BaseException, scratch: Path | None) -> str | None:
    """Decoders take bytes, not files: an error says which operation and what it found (or,
    refusing what its backend cannot decode, which backend that is: Pillow's 16-bit color
    where OpenCV, with no free-threaded wheel, is missing)."""
    message = str(error)
    if message.startswith(("decode_", "extract_jpeg_shape", "element ")) and (
            "got " in message or "decode limit" in message or "decoder here: " in message):
        return None
    return "the error does not name the operation and what it found"


def _target(corpus, read) -> FuzzTarget:
    return FuzzTarget(corpus=corpus, read=read, allowed=(fl.FeedlineError,),
                      where=names_the_operation, memory_cap_mib=MEMORY_CAP_MIB)


TARGETS = {
    "jpeg": _target(jpeg_corpus, read_jpeg),
    "png": _target(png_corpus, read_png),
    "gif": _target(gif_corpus, read_gif),
    "bmp": _target(bmp_corpus, read_bmp),
    "webp": _target(webp_corpus, read_webp),
    "image": _target(image_corpus, read_image),
}
