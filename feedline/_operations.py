"""Every operation module, imported for what importing it does: each attaches the
:class:`~feedline.Dataset` methods that build it (:mod:`feedline.core.registry`).

``feedline/__init__`` imports this module, and importing any ``feedline.x`` imports the
package first, so no ``Dataset`` method can be called before its operation is attached. A
new operation module is listed here; ``tests/core/test_registry.py`` checks that every
``Dataset`` method that builds one finds it.
"""

# ruff: noqa: F401 - imported for what importing does

import feedline.core.spec_inference
import feedline.distribute.distribute
import feedline.placement.multiprocess
import feedline.snapshot.save_load
import feedline.sources.counter
import feedline.sources.from_list
import feedline.sources.generator
import feedline.sources.list_files
import feedline.sources.random
import feedline.sources.range
import feedline.sources.sample
import feedline.sources.tensor_slices
import feedline.sources.tensors
import feedline.sources.zip
import feedline.transforms.assert_cardinality
import feedline.transforms.batch
import feedline.transforms.bucket_by_sequence_length
import feedline.transforms.cache
import feedline.transforms.concatenate
import feedline.transforms.enumerate
import feedline.transforms.filter
import feedline.transforms.flat_map
import feedline.transforms.get_single_element
import feedline.transforms.global_shuffle
import feedline.transforms.group_by_reducer
import feedline.transforms.group_by_window
import feedline.transforms.ignore_errors
import feedline.transforms.interleave
import feedline.transforms.map
import feedline.transforms.pack_sequences
import feedline.transforms.pad_to_cardinality
import feedline.transforms.padded_batch
import feedline.transforms.pipeline_repr
import feedline.transforms.prefetch
import feedline.transforms.ragged_batch
import feedline.transforms.rebatch
import feedline.transforms.reduce
import feedline.transforms.rejection_resample
import feedline.transforms.repeat
import feedline.transforms.scan
import feedline.transforms.shard
import feedline.transforms.shuffle
import feedline.transforms.skip
import feedline.transforms.snapshot
import feedline.transforms.sparse_batch
import feedline.transforms.take
import feedline.transforms.take_while
import feedline.transforms.unbatch
import feedline.transforms.unique
import feedline.transforms.window
import feedline.transforms.with_options
