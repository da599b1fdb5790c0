"""The image tests' collection: the record_*.py scripts run under TensorFlow's interpreter only
(they write the golden files), so pytest's doctest collection must not import them."""

collect_ignore_glob = ["record_*.py"]
