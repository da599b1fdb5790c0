"""The public surface is curated: sorted ``__all__``, every name real, nothing private leaks."""

import feedline


def test_all_is_sorted_and_unique():
    assert feedline.__all__ == sorted(set(feedline.__all__))


def test_every_exported_name_exists():
    missing = [name for name in feedline.__all__ if not hasattr(feedline, name)]
    assert missing == []


def test_no_unlisted_public_names():
    modules = {"core", "sources", "transforms", "formats", "execution", "placement", "optimize",
               "testing", "demo", "cli", "autotune", "profiling", "adapters", "distribute",
               "snapshot", "service", "torch", "jax",  # torch and jax: optional, imported on demand
               "datasets",  # the dataset loaders (image_folder, TFDS directories)
               "pipeline",  # the runner (its PipelineIterator is exported)
               "resume"}  # elastic resume (merge_states)
    public = {name for name in vars(feedline) if not name.startswith("_")} - modules
    assert public - set(feedline.__all__) == set()
