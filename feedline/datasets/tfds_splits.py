"""TFDS's split syntax: ``"train"``, ``"train[:10%]"``, ``"train[10%:]+test"``,
``"train[:1000]"``, ``"train[-10:]"``, ``"train[1shard]"``, ``"all"``, and
:class:`ReadInstruction` (with ``rounding="pct1_dropremainder"``), resolved to the shards and
the records in each to read, as ``tfds.core.splits`` (TFDS 4.9) does.

Percent boundaries round as TFDS: ``"closest"`` is ``int(round(pct * n / 100))`` (Python's
round, half to even); ``"pct1_dropremainder"`` is ``pct * (n // 100)``. A boundary past the
split's size is an error, as in TFDS; negative ones count from the end.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FileInstruction", "ReadInstruction", "file_instructions", "parse_split"]

_SUB_SPEC = re.compile(r"^(?P<split_name>[\w-]+)(\[(?P<split_selector>[\d\w%:.-]+)\])?$")
_SLICE = re.compile(r"^((?P<val>-?[\d_.]+)(?P<unit>(?:%|shard))?)?$")
_ADD = re.compile(r"\s*\+\s*")
_HELP = ("expected 'split', 'split[from:to]' with integers, percents ('10%') or shards "
         "('2shard'), 'split[Nshard]', or several joined by '+'")


@dataclasses.dataclass(frozen=True)
class ReadInstruction:
    """One split, optionally sliced (``tfds.core.ReadInstruction``).

    Args:
        split_name: The split (``"train"``); ``"all"`` is every split.
        from_: First position (``None``: the start); negative counts from the end.
        to: End position, excluded (``None``: the end).
        unit: ``"abs"`` (records), ``"%"`` or ``"shard"``.
        rounding: For ``"%"``: ``"closest"`` or ``"pct1_dropremainder"``.

    Instructions add up: ``ReadInstruction("train", to=10, unit="%") + "test"``.

    Example:
        >>> ReadInstruction("train", 10, 20, unit="%").to_absolute({"train": [50, 50]})
        [('train', 10, 20)]
    """

    split_name: str
    from_: int | float | None = None
    to: int | float | None = None
    unit: str = "abs"
    rounding: str = "closest"

    def __post_init__(self) -> None:
        if self.unit not in ("%", "abs", "shard"):
            raise ValueError(f"Unit should be one of ['%', 'abs', 'shard']. Got {self.unit!r}")
        if self.rounding not in ("closest", "pct1_dropremainder"):
            raise ValueError("Rounding should be one of ['closest', 'pct1_dropremainder']. "
                             f"Got: {self.rounding!r}")
        if self.unit == "%" and (abs(self.from_ or 0) > 100 or abs(self.to or 0) > 100):
            raise ValueError("When unit=%, percent slice boundaries should be in [-100, 100]. "
                             f"Got: {self}")

    def __add__(self, other: Any) -> _Sum:
        return _Sum([self]) + other

    def to_absolute(self, shard_lengths: Mapping[str, Sequence[int]]
                    ) -> list[tuple[str, int, int]]:
        """``[(split, from, to)]`` in records; ``shard_lengths`` maps every split to its
        shards' lengths."""
        if self.split_name == "all":
            return [inst for name in shard_lengths
                    for inst in ReadInstruction(name).to_absolute(shard_lengths)]
        if self.split_name not in shard_lengths:
            raise KeyError(self.split_name)
        lengths = list(shard_lengths[self.split_name])
        n = sum(lengths)
        from_, to = self.from_, self.to
        if self.unit == "%":
            if self.rounding == "closest":
                def pct(b: float) -> int:
                    return int(round(b * n / 100.0))
            else:
                if n < 100:
                    raise ValueError('Using "pct1_dropremainder" rounding on a split with less '
                                     "than 100 elements is forbidden: it always results in an "
                                     "empty dataset.")

                def pct(b: float) -> int:
                    return int(b * math.trunc(n / 100.0))
            from_ = 0 if from_ is None else pct(from_)
            to = n if to is None else pct(to)
        elif self.unit == "shard":
            from_ = 0 if from_ is None else sum(lengths[:int(from_)])
            if to is not None and to <= 0:
                to = len(lengths) + int(to)
            to = n if to is None else sum(lengths[:int(to)])
        else:
            from_ = 0 if from_ is None else int(from_)
            to = n if to is None else int(to)
        if abs(from_) > n or abs(to) > n:
            raise ValueError(f"Requested slice [{from_ or ''}:{to or ''}] incompatible with "
                             f"{n} examples.")
        if from_ < 0:
            from_ = n + from_
        if to < 0:
            to = n + to
        return [(self.split_name, from_, to)]

    def __str__(self) -> str:
        unit = "" if self.unit == "abs" else self.unit
        if self.from_ is None and self.to is None:
            return self.split_name
        a = "" if self.from_ is None else f"{self.from_:g}{unit}"
        b = "" if self.to is None else f"{self.to:g}{unit}"
        return f"{self.split_name}[{a}:{b}]"


@dataclasses.dataclass(frozen=True)
class _Sum:
    parts: list[ReadInstruction]

    def __add__(self, other: Any) -> _Sum:
        if isinstance(other, str):
            other = parse_split(other)
        if isinstance(other, ReadInstruction):
            return _Sum([*self.parts, other])
        if isinstance(other, _Sum):
            return _Sum([*self.parts, *other.parts])
        raise TypeError(f"Adding split {self!r} with non-split value: {other!r}")

    def to_absolute(self, shard_lengths: Mapping[str, Sequence[int]]
                    ) -> list[tuple[str, int, int]]:
        return [inst for part in self.parts for inst in part.to_absolute(shard_lengths)]

    def __str__(self) -> str:
        return "+".join(str(p) for p in self.parts)


def _one(spec: str, whole: str) -> ReadInstruction:
    match = _SUB_SPEC.match(spec)
    if not match:
        raise ValueError(f"malformed split {whole!r}: {spec!r} is not a split; {_HELP}")
    name, selector = match["split_name"], match["split_selector"]
    if name == "all":
        if selector:
            raise ValueError(f"malformed split {whole!r}: 'all' cannot be sliced (as in TFDS)")
        return ReadInstruction("all")
    if selector is None:
        return ReadInstruction(name)
    slices = [_SLICE.match(x) for x in selector.split(":")]
    if not all(slices) or not any(s.group(0) for s in slices if s is not None) \
            or len(slices) > 2:
        raise ValueError(f"malformed split {whole!r}: bad slice [{selector}]; {_HELP}")
    if len(slices) == 1:
        (first,) = slices
        assert first is not None
        unit = first["unit"] or "abs"
        if unit != "shard":
            raise ValueError(f"malformed split {whole!r}: [{selector}] selects one position; "
                             "only shards can be selected alone ('train[2shard]'), records "
                             "and percents need a slice ('train[:10]')")
        from_: Any = first["val"]
        to: Any = int(from_) + 1
    else:
        first, second = slices
        assert first is not None and second is not None
        unit = first["unit"] or second["unit"] or "abs"
        from_, to = first["val"], second["val"]
    try:
        if from_ is not None:
            from_ = float(from_) if unit == "%" else int(from_)
        if to is not None:
            to = float(to) if unit == "%" else int(to)
    except ValueError:
        raise ValueError(f"malformed split {whole!r}: [{selector}] needs integers"
                         f"{' or numbers before %' if unit == '%' else ''}") from None
    return ReadInstruction(name, from_, to, unit=unit)


def parse_split(spec: Any) -> ReadInstruction | _Sum:
    """The instruction a split string (or :class:`ReadInstruction`) stands for.

    Raises:
        ValueError: a malformed expression, saying what was expected.

    Example:
        >>> str(parse_split("train[10%:] + test[:5]"))
        'train[10%:]+test[:5]'
        >>> parse_split("train[:10%]").to_absolute({"train": [105]})
        [('train', 0, 10)]
    """
    if isinstance(spec, (ReadInstruction, _Sum)):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"split must be a string or a ReadInstruction; found "
                        f"{type(spec).__name__}")
    parts = _ADD.split(spec.strip())
    if not spec.strip() or not all(parts):
        raise ValueError(f"malformed split {spec!r}: {_HELP}")
    result: Any = None
    for part in parts:
        one = _one(part, spec)
        result = _Sum([one]) if result is None else result + one
    return result


@dataclasses.dataclass(frozen=True)
class FileInstruction:
    """Read ``take`` records (``-1``: to the end) after skipping ``skip`` in one shard."""

    filename: str
    skip: int
    take: int
    examples_in_shard: int

    @property
    def num_examples(self) -> int:
        return self.examples_in_shard - self.skip if self.take == -1 else self.take


def file_instructions(from_: int, to: int, filenames: Sequence[str],
                      shard_lengths: Sequence[int]) -> list[FileInstruction]:
    """The shards (with records to skip and take) holding records ``[from_, to)`` of a split,
    as TFDS's ``shard_utils.get_file_instructions``: shards outside the range are not read.

    Example:
        >>> [(i.filename, i.skip, i.take) for i in
        ...  file_instructions(3, 7, ["a", "b", "c"], [4, 4, 4])]
        [('a', 3, -1), ('b', 0, 3)]
    """
    out = []
    start = end = 0
    for filename, length in zip(filenames, shard_lengths):
        if not length:
            continue
        end += length
        if from_ < end and to > start:
            skip = from_ - start if from_ > start else 0
            take = to - start - skip if to < end else -1
            if take != 0:
                out.append(FileInstruction(filename, skip, take, length))
        start += length
    return out
