"""The names that stage digests give feedline's operations.

A stage's digest (:mod:`feedline.core.fingerprint`) names its operation. Naming it by where
its class lives (``module:qualname``) made every move of a class a change of every checkpoint
of the pipelines using it, unless the moved class carried its old name; it is named by its
operation instead: the class's name, or the ``OPERATION_NAME`` the class declares (a class
renamed keeps its old one). The operations that existed when digests named modules keep
their digests: :data:`DIGESTED_IN` gives the module each was digested in, so a checkpoint
written before the change restores after it, and after any later move.
"""

from __future__ import annotations

from types import MappingProxyType

DIGESTED_IN: MappingProxyType[str, str] = MappingProxyType({
    "ArrayRecordDataset": "feedline.formats.array_record",
    "AssertCardinalityDataset": "feedline.transforms.assert_cardinality",
    "AutoProcessesDataset": "feedline.placement.auto",
    "BatchDataset": "feedline.transforms.batch",
    "BlockShardDataset": "feedline.distribute.autoshard",
    "BucketBySequenceLengthDataset": "feedline.transforms.bucket_by_sequence_length",
    "CacheDataset": "feedline.transforms.cache",
    "ChooseFromDatasetsDataset": "feedline.sources.sample",
    "ConcatenateDataset": "feedline.transforms.concatenate",
    "CounterDataset": "feedline.sources.counter",
    "CsvDataset": "feedline.formats.csv",
    "Dataset": "feedline.core.dataset",
    "DistributedDataset": "feedline.service.client",
    "ElementListDataset": "feedline.transforms.window",
    "EnumerateDataset": "feedline.transforms.enumerate",
    "FailAtDataset": "feedline.testing.failures",
    "FileReaderDataset": "feedline.formats._file_reader",
    "FilterDataset": "feedline.transforms.filter",
    "FixedLengthRecordDataset": "feedline.formats.fixed_length",
    "FlatMapDataset": "feedline.transforms.flat_map",
    "FusedInlineDataset": "feedline.optimize.map_fusion",
    "GeneratorDataset": "feedline.sources.generator",
    "GlobalShuffleDataset": "feedline.transforms.global_shuffle",
    "GroupByReducerDataset": "feedline.transforms.group_by_reducer",
    "GroupByWindowDataset": "feedline.transforms.group_by_window",
    "HuggingFaceDataset": "feedline.formats.huggingface",
    "IgnoreErrorsDataset": "feedline.transforms.ignore_errors",
    "IndexShardDataset": "feedline.distribute.index_shard",
    "InterleaveDataset": "feedline.transforms.interleave",
    "ListDataset": "feedline.sources.from_list",
    "MapAndBatchDataset": "feedline.transforms.map_and_batch",
    "MapDataset": "feedline.transforms.map",
    "MultiprocessDataset": "feedline.transforms.multiprocess",
    "OptionsDataset": "feedline.transforms.with_options",
    "PackSequencesDataset": "feedline.transforms.pack_sequences",
    "PaddedBatchDataset": "feedline.transforms.padded_batch",
    "ParquetDataset": "feedline.formats.parquet",
    "PrefetchDataset": "feedline.transforms.prefetch",
    "RaggedBatchDataset": "feedline.transforms.ragged_batch",
    "RandomDataset": "feedline.sources.random",
    "RangeDataset": "feedline.sources.range",
    "RebatchDataset": "feedline.transforms.rebatch",
    "RejectionResampleDataset": "feedline.transforms.rejection_resample",
    "RepeatDataset": "feedline.transforms.repeat",
    "SampleFromDatasetsDataset": "feedline.sources.sample",
    "ScanDataset": "feedline.transforms.scan",
    "ShardDataset": "feedline.transforms.shard",
    "ShuffleDataset": "feedline.transforms.shuffle",
    "SkipDataset": "feedline.transforms.skip",
    "SnapshotDataset": "feedline.transforms.snapshot",
    "SparseBatchDataset": "feedline.transforms.sparse_batch",
    "SqlDataset": "feedline.sources.sql",
    "StoreShardDataset": "feedline.snapshot.save_load",
    "TFRecordDataset": "feedline.formats.tfrecord",
    "TakeDataset": "feedline.transforms.take",
    "TakeWhileDataset": "feedline.transforms.take_while",
    "TensorSlicesDataset": "feedline.sources.tensor_slices",
    "TensorsDataset": "feedline.sources.tensors",
    "TextLineDataset": "feedline.formats.text",
    "UnaryDataset": "feedline.core.unary",
    "UnbatchDataset": "feedline.transforms.unbatch",
    "UniqueDataset": "feedline.transforms.unique",
    "VectorizedRangeDataset": "feedline.optimize.map_vectorization",
    "WebDataset": "feedline.formats.webdataset",
    "WindowDataset": "feedline.transforms.window",
    "ZipDataset": "feedline.sources.zip",
    "_InferredInput": "feedline.core.spec_inference",
    "_RejectDataset": "feedline.transforms.rejection_resample",
    "_ShardDataset": "feedline.datasets.tfds",
    "_SkippingCsvDataset": "feedline.formats.csv",
})
"""Operation name -> the module its stage digests name (``module:qualname`` as of Dec 2026).
Never edit an entry: each one is in the digests of saved checkpoints, caches and snapshots.
An operation added later is not listed; its digests name the operation alone."""


def stage_name(cls: type) -> str:
    """The name of ``cls``'s operation in stage digests.

    feedline's own operations are named by operation (so moving a class changes no digest);
    a user's class by ``module:qualname``, as its code is the user's to move.

    Example:
        >>> from feedline.transforms.batch import BatchDataset
        >>> stage_name(BatchDataset)
        'feedline.transforms.batch:BatchDataset'
        >>> stage_name(type("MineDataset", (BatchDataset,), {"__module__": "my_project.data"}))
        'my_project.data:MineDataset'
    """
    module = getattr(cls, "__module__", None) or "?"
    if module != "feedline" and not module.startswith("feedline."):
        return f"{module}:{cls.__qualname__}"
    name = cls.__dict__.get("OPERATION_NAME") or cls.__qualname__
    legacy = DIGESTED_IN.get(name)
    return f"{legacy}:{name}" if legacy is not None else name
