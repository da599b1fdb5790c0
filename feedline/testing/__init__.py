"""Public helpers for testing pipelines and the operations built on feedline.

:func:`check_checkpointing` is the conformance test every transformation's tests call;
:func:`fail_at` makes chosen elements fail, to check that failures survive checkpoints;
:func:`take_outcomes` records a run as elements and :class:`Failed` markers;
:func:`assert_elements_equal` compares nested NumPy elements exactly;
:func:`no_leaked_threads` proves a block of code leaves no feedline thread running.
"""

from feedline.testing.checkpoint import check_checkpointing, state_size
from feedline.testing.elements import assert_elements_equal, elements_equal
from feedline.testing.failures import Failed, InjectedError, fail_at, take_outcomes
from feedline.testing.threads import feedline_threads, no_leaked_threads

__all__ = [
    "Failed",
    "InjectedError",
    "assert_elements_equal",
    "check_checkpointing",
    "elements_equal",
    "fail_at",
    "feedline_threads",
    "no_leaked_threads",
    "state_size",
    "take_outcomes",
]
