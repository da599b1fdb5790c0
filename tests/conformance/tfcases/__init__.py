"""Conformance cases ported from TensorFlow's tf.data kernel tests, one module per TF file.

Each module defines ``SUITE`` (:class:`tfcases.harness.Suite`): its cases, built by the same
functions under TensorFlow (to record the expected results) and feedline (to test).
"""

MODULES = [
    "batch",
    "map",
    "flat_map",
    "interleave",
    "shuffle",
    "repeat",
    "take",
    "skip",
    "shard",
    "window",
    "padded_batch",
    "unbatch",
    "rebatch",
    "scan",
    "unique",
    "take_while",
    "enumerate",
    "zip",
    "concatenate",
    "range",
    "from_tensors",
    "from_tensor_slices",
    "from_generator",
    "reduce",
    "cardinality",
    "prefetch",
    "cache",
    "ignore_errors",
    "sample_from_datasets",
    "choose_from_datasets",
    "list_files",
    "text_line",
    "tf_record",
    "fixed_length",
    "as_numpy_iterator",
    "len",
    "random",
    "counter",
    "group_by_window",
    "bucket_by_sequence_length",
]
"""The case modules, in the order the tables list them."""
