"""feedline: fast, checkpointable input pipelines with tf.data's semantics, without TensorFlow.

Example:
    >>> import feedline as fl
    >>> ds = fl.Dataset.range(8).shuffle(8, seed=1).map(lambda x: x * 2).batch(4)
    >>> sorted(int(v) for batch in ds for v in batch)
    [0, 2, 4, 6, 8, 10, 12, 14]
"""

import importlib as _importlib

# Every operation module: each attaches the Dataset methods that build it (core.registry).
from feedline import _operations  # noqa: F401
from feedline.core.constants import AUTOTUNE, INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.error_records import RestoredError
from feedline.core.errors import (
    CheckpointError,
    DataLossError,
    FeedlineError,
    InvalidArgumentError,
    OutOfRangeError,
    ServiceError,
    StopIterationError,
    StructureError,
    WorkerProcessError,
)
from feedline.core.functions import late_bound
from feedline.core.input_context import InputContext
from feedline.core.options import (
    AutoShardPolicy,
    AutotuneOptions,
    DistributeOptions,
    OptimizationOptions,
    Options,
    ProfilingOptions,
    ThreadingOptions,
)
from feedline.core.state_file import load_state, save_state
from feedline.core.structure import DatasetSpec, NoneTensorSpec, TensorSpec
from feedline.core.structure import RaggedTensorSpec, SparseTensorSpec
from feedline.distribute.distribute import StepSchedule, steps_per_epoch
from feedline.formats.array_record import ArrayRecordDataset, write_array_record
from feedline.formats.batched_features import make_batched_features_dataset
from feedline.formats.csv import CsvDataset, make_csv_dataset
from feedline.formats.example import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RaggedValues,
    SparseFeature,
    SparseValues,
    VarLenFeature,
    decode_example,
    decode_sequence_example,
    encode_example,
    encode_sequence_example,
    parse_example,
    parse_sequence_example,
    parse_single_example,
    parse_single_sequence_example,
)
from feedline.formats.fixed_length import FixedLengthRecordDataset
from feedline.formats.huggingface import HuggingFaceDataset
from feedline.formats.parquet import ParquetDataset
from feedline.formats.text import TextLineDataset
from feedline.formats.tfrecord import TFRecordDataset, TFRecordWriter, write_tfrecord
from feedline.formats.webdataset import WebDataset
from feedline.pipeline import PipelineIterator
from feedline.profiling.report import profile
from feedline.resume.elastic import merge_states
from feedline.snapshot.info import SnapshotInfo, snapshot_info
from feedline.sources.sql import SqlDataset
from feedline.transforms.group_by_reducer import Reducer

__version__ = "0.1.0"

__all__ = [
    "AUTOTUNE",
    "ArrayRecordDataset",
    "AutoShardPolicy",
    "AutotuneOptions",
    "CheckpointError",
    "CsvDataset",
    "DataLossError",
    "Dataset",
    "DatasetSpec",
    "DistributeOptions",
    "FeedlineError",
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "FixedLengthRecordDataset",
    "HuggingFaceDataset",
    "INFINITE",
    "InputContext",
    "InvalidArgumentError",
    "NoneTensorSpec",
    "OptimizationOptions",
    "Options",
    "OutOfRangeError",
    "ParquetDataset",
    "PipelineIterator",
    "ProfilingOptions",
    "RaggedFeature",
    "RaggedTensorSpec",
    "RaggedValues",
    "Reducer",
    "RestoredError",
    "ServiceError",
    "SnapshotInfo",
    "SparseFeature",
    "SparseTensorSpec",
    "SparseValues",
    "SqlDataset",
    "StepSchedule",
    "StopIterationError",
    "StructureError",
    "TFRecordDataset",
    "TFRecordWriter",
    "TensorSpec",
    "TextLineDataset",
    "ThreadingOptions",
    "UNKNOWN",
    "VarLenFeature",
    "WebDataset",
    "WorkerProcessError",
    "datasets",
    "decode_example",
    "decode_sequence_example",
    "encode_example",
    "encode_sequence_example",
    "image",
    "late_bound",
    "load_state",
    "make_batched_features_dataset",
    "make_csv_dataset",
    "merge_states",
    "parse_example",
    "parse_sequence_example",
    "parse_single_example",
    "parse_single_sequence_example",
    "profile",
    "save_state",
    "service",
    "snapshot_info",
    "steps_per_epoch",
    "write_array_record",
    "write_tfrecord",
]

# Imported on first use (``fl.datasets``, ``from feedline import image``): every worker
# process imports feedline, and these three were a third of its import time.
_SUBPACKAGES_ON_DEMAND = ("datasets", "image", "service")


def __getattr__(name: str) -> object:
    if name in _SUBPACKAGES_ON_DEMAND:
        return _importlib.import_module(f"feedline.{name}")
    raise AttributeError(f"module 'feedline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBPACKAGES_ON_DEMAND))
