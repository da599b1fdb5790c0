"""repeat with failing elements and other execution settings (the rest is in
test_prefetch_repeat.py)."""

import pytest

import feedline as fl
from feedline.testing import Failed, check_checkpointing, fail_at


def test_checkpointing_restores_failing_elements_in_every_epoch():
    ds = fail_at(fl.Dataset.range(4), [1]).repeat(3)
    reference = check_checkpointing(ds, constant_state_size=True, epochs=1)
    assert reference.count(Failed("InjectedError")) == 3


@pytest.mark.timeout(120)
def test_states_load_into_other_prefetch_buffer_sizes():
    def build(buffer_size):
        return fail_at(fl.Dataset.range(5), [2]).prefetch(buffer_size).repeat(2)

    check_checkpointing(build(1), variants=[build(3)], epochs=1)
