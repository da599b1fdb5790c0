"""Options and their parts are validated at construction, naming the field and the type."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: fl.Options(autotune=True), "Options.autotune must be AutotuneOptions, got True"),
        (lambda: fl.Options(threading=5), "Options.threading must be ThreadingOptions, got 5"),
        (lambda: fl.Options(seed="x"), "Options.seed must be int or None, got 'x'"),
        (lambda: fl.Options(seed=1.5), "Options.seed must be int or None, got 1.5"),
        (lambda: fl.Options(deterministic="yes"), "Options.deterministic must be bool or None"),
        (lambda: fl.Options(deterministic=1), "Options.deterministic must be bool or None"),
        (lambda: fl.AutotuneOptions(enabled=None), "AutotuneOptions.enabled must be bool"),
        (lambda: fl.AutotuneOptions(cpu_budget=2.0), "AutotuneOptions.cpu_budget must be int or None"),
        (lambda: fl.AutotuneOptions(cpu_budget=True), "AutotuneOptions.cpu_budget must be int or None"),
        (lambda: fl.ThreadingOptions(element_timeout="1"), "ThreadingOptions.element_timeout"),
        (lambda: fl.Options(profiling=fl.ProfilingOptions(statistics="on")),
         "ProfilingOptions.statistics must be bool"),
    ],
)
def test_a_wrongly_typed_field_is_a_type_error_naming_it(build, message):
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: fl.AutotuneOptions(cpu_budget=-3), "AutotuneOptions.cpu_budget must be None or > 0, got -3"),
        (lambda: fl.AutotuneOptions(ram_budget=0), "AutotuneOptions.ram_budget must be None or > 0, got 0"),
        (lambda: fl.ThreadingOptions(max_parallelism=0), "ThreadingOptions.max_parallelism must be None or > 0"),
    ],
)
def test_an_out_of_range_field_is_a_value_error_naming_it(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_valid_options_are_kept_as_given():
    options = fl.Options(seed=np.int64(7), deterministic=False,
                         threading=fl.ThreadingOptions(element_timeout=2),
                         autotune=fl.AutotuneOptions(cpu_budget=2, processes=None))
    assert options.seed == 7 and options.deterministic is False
    assert options.threading.element_timeout == 2 and options.autotune.cpu_budget == 2
    from feedline.core.options import AutoShardPolicy, DistributeOptions

    assert DistributeOptions(auto_shard_policy=1).auto_shard_policy is AutoShardPolicy.FILE
    with pytest.raises(TypeError, match="DistributeOptions.auto_shard_policy"):
        DistributeOptions(auto_shard_policy=7)


def test_merged_options_stay_valid():
    merged = fl.Options(seed=1).merge(fl.Options(deterministic=True))
    assert (merged.seed, merged.deterministic) == (1, True)


@pytest.mark.parametrize("options, field", [
    (fl.Options(), "deterministic"), (fl.ThreadingOptions(), "max_parallelism"),
    (fl.AutotuneOptions(), "cpu_budget"), (fl.OptimizationOptions(), "map_fusion"),
    (fl.ProfilingOptions(), "statistics")])
def test_assigning_a_field_says_how_to_make_options_instead(options, field):
    # tf.data's habit (options.deterministic = False) raised a bare "cannot assign to field".
    import dataclasses
    import pickle

    with pytest.raises(dataclasses.FrozenInstanceError,
                       match=f"cannot assign to field '{field}': feedline's "
                             f"{type(options).__name__} are immutable values; make a new "
                             "one instead"):
        setattr(options, field, None)
    assert pickle.loads(pickle.dumps(options)) == options  # values still copy and travel
