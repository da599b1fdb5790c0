import numpy as np

import feedline as fl


def test_repr_shows_the_pipeline_and_key_arguments():
    ds = (fl.Dataset.range(10).map(abs, num_parallel_calls=2).filter(lambda x: x > 1)
          .shuffle(100, seed=3).batch(4, drop_remainder=True).prefetch(2))
    assert repr(ds) == ("<feedline.Dataset range(0, 10).map(abs, num_parallel_calls=2)"
                        ".filter(<lambda>).shuffle(100, seed=3).batch(4, drop_remainder=True)"
                        ".prefetch(2)>")


def test_repr_of_sources_and_several_inputs():
    a, b = fl.Dataset.range(3), fl.Dataset.range(2, 10, 2)
    assert repr(fl.Dataset.zip((a, b.take(1)))) == \
        "<feedline.Dataset zip((range(0, 3), range(2, 10, 2).take(1)))>"
    assert repr(a.concatenate(b)) == \
        "<feedline.Dataset concatenate(range(0, 3), range(2, 10, 2))>"
    assert repr(fl.Dataset.from_tensor_slices(np.zeros((5, 2), np.float32))) == \
        "<feedline.Dataset from_tensor_slices(array(shape=(5, 2), dtype=float32))>"
    assert repr(a.repeat(2).window(2)) == \
        "<feedline.Dataset range(0, 3).repeat(count=2).window(2, shift=2)>"


def test_repr_of_a_long_pipeline_is_cut():
    ds = fl.Dataset.range(3)
    for _ in range(400):
        ds = ds.map(abs)
    text = repr(ds)
    assert len(text) <= 2100 and text.startswith("<feedline.Dataset ...")
    assert text.endswith(".map(abs)>")
