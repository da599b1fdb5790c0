"""Seeds and random generators shared by every random stage.

Generators are NumPy ``PCG64``; their states are saved in checkpoints as JSON (128-bit
integers as decimal strings, which JSON readers parsing numbers as doubles would round).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from feedline.core.dataset import Dataset
    from feedline.core.iterator import IteratorContext


def rng_state_to_json(generator: np.random.Generator) -> dict[str, Any]:
    """The ``PCG64`` state of ``generator`` with its 128-bit integers as decimal strings
    (JSON readers that parse numbers as doubles would otherwise round them)."""
    return pcg64_state_to_json(generator.bit_generator.state)


def pcg64_state_to_json(state: dict[str, Any]) -> dict[str, Any]:
    """A ``PCG64`` bit generator's ``state`` dict as :func:`rng_state_to_json` writes it.

    Example:
        >>> g = np.random.Generator(np.random.PCG64(7))
        >>> pcg64_state_to_json(g.bit_generator.state) == rng_state_to_json(g)
        True
    """
    return {"state": str(state["state"]["state"]), "inc": str(state["state"]["inc"]),
            "has_uint32": int(state["has_uint32"]), "uinteger": int(state["uinteger"])}


def rng_from_json(saved: dict[str, Any]) -> np.random.Generator:
    """A generator in the state saved by :func:`rng_state_to_json`.

    Example:
        >>> g = np.random.Generator(np.random.PCG64(7)); saved = rng_state_to_json(g)
        >>> float(g.random()) == float(rng_from_json(saved).random())
        True
    """
    bit_generator = np.random.PCG64()
    bit_generator.state = {"bit_generator": "PCG64",
                           "state": {"state": int(saved["state"]), "inc": int(saved["inc"])},
                           "has_uint32": int(saved["has_uint32"]),
                           "uinteger": int(saved["uinteger"])}
    return np.random.Generator(bit_generator)


def fallback_seed() -> int:
    """A fresh random seed, drawn once when a dataset without a seed is built.

    Drawing it when the dataset is built (not per iterator) makes every iterator of the
    same dataset object agree, which restoring a saved state relies on.
    """
    return int(np.random.SeedSequence().entropy) % (1 << 63)


def resolve_seed(node: Dataset, seed: int | None, fallback: int, ctx: IteratorContext,
                 tag: int) -> list[int]:
    """The words seeding ``node``'s generator: its own seed, else the pipeline's
    ``Options.seed`` mixed with ``tag`` (the kind of stage) and the size of the graph upstream
    of ``node`` (so that two stages sharing ``Options.seed`` draw differently, the same way on
    every run), else ``fallback``."""
    if seed is not None:
        return [seed]
    if ctx.options.seed is not None:
        return [tag, int(ctx.options.seed), len(upstream_nodes(node))]
    return [fallback]


def make_rng(*seed_words: int) -> np.random.Generator:
    """A PCG64 generator seeded from integers (negative ones are folded into uint64).

    Example:
        >>> int(make_rng(3).integers(100)) == int(make_rng(3).integers(100))
        True
    """
    words = [int(w) % (1 << 64) for w in seed_words]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))


def upstream_nodes(node: Dataset) -> list[Dataset]:
    """Every node of the graph ending at ``node`` (a stable count for seed mixing)."""
    from feedline.core.dataset import _upstream_first

    return _upstream_first(node)
