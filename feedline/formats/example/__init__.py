"""Parse serialized tf.train.Example / SequenceExample protos into NumPy arrays, as tf.io does.

Feature specs mirror TensorFlow's: :class:`FixedLenFeature`, :class:`VarLenFeature`,
:class:`FixedLenSequenceFeature`, :class:`RaggedFeature`, :class:`SparseFeature`. Outputs are
NumPy arrays of dtype int64, float32 or object (holding ``bytes``). Where TensorFlow returns a
``RaggedTensor``, feedline returns :class:`RaggedValues` (flat values + row splits); a
``SparseFeature`` gives :class:`SparseValues` (indices, values, dense shape), as TensorFlow's
``SparseTensor``. For a ``VarLenFeature``, where TensorFlow returns a ``SparseTensor``,
feedline returns :class:`RaggedValues` from :func:`parse_example` (pad it with
:meth:`RaggedValues.to_padded`, the equivalent of ``tf.sparse.to_dense``) and a 1-D array from
:func:`parse_single_example`; pass ``var_len_as_sparse=True`` to get TensorFlow's
:class:`SparseValues` instead.

Batches are the fast path: :func:`parse_example` decodes the whole batch with one call into
the C (upb) protobuf implementation, then gathers each feature into one NumPy array with C-level
iteration (``np.fromiter`` over the repeated fields), so the cost per record is a few attribute
lookups per feature, not a Python loop over values. Parse records in batches
(``dataset.batch(n).map(lambda b: parse_example(b, spec))``) rather than one at a time.

Faster still, when the optional C extension ``feedline.formats._example_fast`` was compiled at
install time, :func:`parse_example` and :func:`parse_single_example` first walk the wire format
directly (20 to 30 times faster on batches of small records, with the GIL released). On
anything unusual (damaged bytes, a missing feature, a wrong type or count, unusual but valid
encodings) it steps aside and the protobuf path above produces the result or the error, so both
paths give the same results and the same errors (one exception: the C path keeps a float's exact
bits, as TensorFlow does, where protobuf's Python floats may turn a signaling NaN into a quiet
one). Set the environment variable ``FEEDLINE_PURE_PYTHON=1`` (before importing feedline) to
always use the protobuf path; it also skips building the extension at install.

Damaged input raises :class:`ExampleParseError` (a ``ValueError``) naming the feature, what was
expected, what was found and the record's index within the batch.

One difference from TensorFlow: when one Example holds the same feature key twice (only
possible in hand-made bytes), protobuf keeps the last occurrence where TensorFlow's parser keeps
the first.

Modules, one concern each: :mod:`.specs` (feature specs), :mod:`.ragged` (:class:`RaggedValues`),
:mod:`.sparse` (:class:`SparseValues`), :mod:`.composite` (``RaggedFeature`` and
``SparseFeature`` results built from the parsed features),
:mod:`.decode` (the protobuf path, which decides every error), :mod:`.cbridge` (the optional C
extension), :mod:`.api` (the public parsing functions), :mod:`.errors`; encoding and the proto
classes are in :mod:`feedline.formats.example_proto`. Import the public names from here.
"""

from feedline.formats.example.api import (
    parse_example,
    parse_sequence_example,
    parse_single_example,
    parse_single_sequence_example,
)
from feedline.formats.example.errors import ExampleParseError
from feedline.formats.example.ragged import RaggedValues
from feedline.formats.example.sparse import SparseValues
from feedline.formats.example.specs import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    VarLenFeature,
)
from feedline.formats.example_proto import (
    decode_example,
    decode_sequence_example,
    encode_example,
    encode_sequence_example,
)

# Fingerprints (checkpoints, cache files) and pickles name a class by its module: these keep
# the one they had before this package was split out of one module (RaggedValues sets its own).
for _cls in (ExampleParseError, FixedLenFeature, FixedLenSequenceFeature, VarLenFeature,
             RaggedFeature, SparseFeature, *(
                 getattr(RaggedFeature, kind) for kind in (
                     "RowSplits", "RowLengths", "RowStarts", "RowLimits", "ValueRowIds",
                     "UniformRowLength"))):
    _cls.__module__ = __name__
del _cls

__all__ = [
    "ExampleParseError", "FixedLenFeature", "FixedLenSequenceFeature", "RaggedFeature",
    "RaggedValues", "SparseFeature", "SparseValues", "VarLenFeature", "decode_example", "decode_sequence_example", "encode_example",
    "encode_sequence_example", "parse_example", "parse_sequence_example",
    "parse_single_example", "parse_single_sequence_example",
]
