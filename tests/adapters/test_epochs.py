"""The loaders' shared host side: epochs, in-flight batches and elastic states."""

import json

import pytest

import feedline as fl
from feedline.adapters.epochs import EpochFeeder


def ints(batch):
    return [int(v) for v in batch]


def test_in_flight_batches_are_kept_as_data_when_the_pipeline_cannot_rewind():
    ds = fl.Dataset.range(20).filter(lambda x: x % 3 != 0).batch(2)
    feeder = EpochFeeder(ds)
    feeder.start()
    first, second, third = feeder.pull(), feeder.pull(), feeder.pull()
    feeder.handed_out()
    state = json.loads(json.dumps(feeder.state_dict()))
    assert state["in_flight"] is not None and state["steps"] == 1
    again = EpochFeeder(ds)
    again.load_state_dict(state)
    again.start()
    assert [ints(again.pull()) for _ in range(3)] == [ints(second), ints(third), [10, 11]]
    with pytest.raises(fl.CheckpointError, match="cannot resume on 2"):
        EpochFeeder(ds, num_input_pipelines=2).load_state_dict(state)
    feeder.close()
    again.close()
    assert ints(first) == [1, 2]


def test_a_pipeline_read_by_index_is_rewound_instead():
    ds = fl.Dataset.range(40).global_shuffle(seed=2).batch(4)
    shares = [ds.distribute(fl.InputContext(2, i)) for i in range(2)]
    feeders = [EpochFeeder(share, 2) for share in shares]
    seen = []
    for feeder in feeders:
        feeder.start()
        seen += ints(feeder.pull())
        feeder.handed_out()
        feeder.pull()  # in flight: not received by the training loop
        feeder.pull()
    states = [json.loads(json.dumps(f.state_dict())) for f in feeders]
    assert states[0] == states[1] and states[0]["in_flight"] is None
    for feeder in feeders:
        feeder.close()
    alone = EpochFeeder(ds.distribute(fl.InputContext()), 1)
    alone.load_state_dict(states[1])
    alone.start()
    while True:
        try:
            seen += ints(alone.pull())
        except StopIteration:
            break
        alone.handed_out()
    alone.close()
    assert sorted(seen) == list(range(40))


def test_epochs_count_and_reshuffle():
    ds = fl.Dataset.range(6).global_shuffle(seed=1)
    feeder = EpochFeeder(ds)
    orders = []
    for _ in range(2):
        feeder.start()
        order = []
        while True:
            try:
                order.append(int(feeder.pull()))
            except StopIteration:
                break
            feeder.handed_out()
        feeder.end_epoch()
        orders.append(order)
    assert feeder.epoch == 2 and orders[0] != orders[1]
    assert sorted(orders[0]) == sorted(orders[1]) == list(range(6))


def test_damaged_states_are_refused():
    feeder = EpochFeeder(fl.Dataset.range(3))
    with pytest.raises(fl.CheckpointError, match="not a feedline loader state"):
        feeder.load_state_dict({"epoch": 1})
    with pytest.raises(fl.CheckpointError, match="damaged loader state"):
        feeder.load_state_dict({"format": 1, "epoch": "x", "steps": 0})
