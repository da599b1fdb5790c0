"""Where this input pipeline stands among the pipelines of a data-parallel job.

:class:`InputContext` is tf.distribute's ``InputContext``: how many input pipelines feed the
job (usually one per host or per process), which one this is, and how many replicas (devices)
train in lock step. :class:`AutoShardPolicy` (defined with the options that carry it) says
how ``Dataset.distribute`` splits the input among pipelines.
"""

from __future__ import annotations

import dataclasses

from feedline.core.options import AutoShardPolicy
from feedline.core.validation import as_int

__all__ = ["AutoShardPolicy", "InputContext"]


@dataclasses.dataclass(frozen=True)
class InputContext:
    """This input pipeline's place in a data-parallel job (``tf.distribute.InputContext``).

    Attributes:
        num_input_pipelines: How many input pipelines feed the job (often one per process).
        input_pipeline_id: Which one this is, in ``[0, num_input_pipelines)``.
        num_replicas_in_sync: Replicas (devices) that each take one per-replica batch per
            step; a multiple of ``num_input_pipelines`` (default: one per pipeline).

    Example:
        >>> ctx = InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=8)
        >>> ctx.get_per_replica_batch_size(256), ctx.replicas_per_pipeline
        (32, 4)
    """

    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_replicas_in_sync: int | None = None

    def __post_init__(self) -> None:
        pipelines = as_int(self.num_input_pipelines, "InputContext(num_input_pipelines)")
        pipeline_id = as_int(self.input_pipeline_id, "InputContext(input_pipeline_id)")
        replicas = pipelines if self.num_replicas_in_sync is None else as_int(
            self.num_replicas_in_sync, "InputContext(num_replicas_in_sync)")
        if pipelines < 1:
            raise ValueError(f"InputContext: num_input_pipelines must be >= 1, got {pipelines}")
        if not 0 <= pipeline_id < pipelines:
            raise ValueError(
                f"InputContext: input_pipeline_id must be in [0, {pipelines}), got {pipeline_id}")
        if replicas < 1 or replicas % pipelines:
            raise ValueError(
                f"InputContext: num_replicas_in_sync ({replicas}) must be a positive multiple "
                f"of num_input_pipelines ({pipelines}): each pipeline feeds the same number "
                "of replicas")
        object.__setattr__(self, "num_input_pipelines", pipelines)
        object.__setattr__(self, "input_pipeline_id", pipeline_id)
        object.__setattr__(self, "num_replicas_in_sync", replicas)

    @property
    def _replicas(self) -> int:
        # Never None once built: __post_init__ puts the pipelines' count in its place.
        return self.num_replicas_in_sync or self.num_input_pipelines

    @property
    def replicas_per_pipeline(self) -> int:
        """Replicas this pipeline feeds each step."""
        return self._replicas // self.num_input_pipelines

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """The batch each replica takes per step when the job takes ``global_batch_size``.

        Raises:
            ValueError: ``global_batch_size`` does not split evenly over the replicas.

        Example:
            >>> InputContext(num_replicas_in_sync=4).get_per_replica_batch_size(64)
            16
        """
        size = as_int(global_batch_size, "get_per_replica_batch_size(global_batch_size)")
        if size < 1 or size % self._replicas:
            raise ValueError(
                f"the global batch size ({size}) must be a positive multiple of the number "
                f"of replicas in sync ({self.num_replicas_in_sync})")
        return size // self._replicas

    def get_per_pipeline_batch_size(self, global_batch_size: int) -> int:
        """The batch this pipeline produces per step: its replicas' batches together.

        Example:
            >>> InputContext(2, 0, 4).get_per_pipeline_batch_size(64)
            32
        """
        return self.get_per_replica_batch_size(global_batch_size) * self.replicas_per_pipeline
