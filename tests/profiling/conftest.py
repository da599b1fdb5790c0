"""A realistic profile report, built by hand, for the renderers' tests.

The pipeline it describes reads TFRecords, decodes JPEGs on 4 threads, batches 64, augments
the batch inline and prefetches::

    interleave(TFRecordDataset) -> map(decode_jpeg, 4 threads) -> batch -> map(augment)
        -> prefetch

It ran 2 s on 2 cores: 312 batches (156 a second), the consumer waited 60.7% of its time,
and ``map(decode_jpeg)`` is the bottleneck.
"""

from __future__ import annotations

import pytest

from feedline.profiling.records import (
    Advice,
    Bottleneck,
    ConsumerStatistics,
    PipelineStatistics,
    ProfileReport,
    Span,
    StageStatistics,
    TimelinePoint,
    TuningDecision,
)

BATCHES = 312
RECORDS = BATCHES * 64
BATCH_BYTES = 64 * 32 * 32 * 3 + 64 * 8  # uint8 images and int64 labels

# Elements handed out in each 50 ms between samples: 8 rounds of this sum to 312.
INCREMENTS = (7, 9, 8, 6, 9) * 8
# Fill shares sampled: prefetch(8) drains as the decoding falls behind; the decoder's buffer
# of 16 is nearly always empty (its consumer takes every element as soon as it is ready).
PREFETCH_FILL = (0.5, 0.375, 0.25, 0.125) + (0.0, 0.125, 0.0) * 12 + (0.0,)
DECODE_FILL = (0.0625, 0.0, 0.125, 0.0) * 10 + (0.0,)


def sample_stages() -> tuple[StageStatistics, ...]:
    return (
        StageStatistics(id=0, parent=None, name="prefetch", operation="prefetch",
                        elements=BATCHES, bytes=BATCHES * BATCH_BYTES, self_seconds=0.041,
                        input_seconds=1.912, wait_seconds=1.204, parallelism=1,
                        asynchronous=True, buffer_size=8, buffer_mean=0.0625,
                        executor="threads"),
        StageStatistics(id=1, parent=0, name="map(augment)", operation="map",
                        elements=BATCHES, bytes=BATCHES * BATCH_BYTES, self_seconds=0.35,
                        input_seconds=1.55, wait_seconds=1.9, parallelism=1,
                        asynchronous=False),
        StageStatistics(id=2, parent=1, name="batch", operation="batch", elements=BATCHES,
                        bytes=BATCHES * BATCH_BYTES, self_seconds=0.09, input_seconds=1.46,
                        wait_seconds=1.55, parallelism=1, asynchronous=False),
        StageStatistics(id=3, parent=2, name="map(decode_jpeg)", operation="map",
                        elements=RECORDS, bytes=RECORDS * 3080, self_seconds=5.52,
                        input_seconds=0.61, wait_seconds=1.44, parallelism=4,
                        asynchronous=True, buffer_size=16, buffer_mean=0.046875,
                        executor="threads"),
        StageStatistics(id=4, parent=3, name="interleave(TFRecordDataset)",
                        operation="interleave", elements=RECORDS, bytes=RECORDS * 2048,
                        self_seconds=0.58, input_seconds=0.02, wait_seconds=0.61,
                        parallelism=1, asynchronous=False),
    )


def sample_timeline() -> tuple[TimelinePoint, ...]:
    points, elements = [], 0
    for index in range(41):
        if index:
            elements += INCREMENTS[index - 1]
        points.append(TimelinePoint(seconds=round(index * 0.05, 2), elements=elements,
                                    buffers={0: PREFETCH_FILL[index], 3: DECODE_FILL[index]}))
    return tuple(points)


def sample_statistics() -> PipelineStatistics:
    return PipelineStatistics(
        seconds=2.0,
        stages=sample_stages(),
        consumer=ConsumerStatistics(calls=BATCHES, wait_seconds=1.204, between_seconds=0.78),
        timeline=sample_timeline(),
        spans=(
            Span(stage=0, start=0.0001, duration=0.0042, thread="MainThread", process=1000),
            Span(stage=3, start=0.0002, duration=0.0011, thread="feedline-map-0",
                 process=1000),
        ),
        tuning=(
            TuningDecision(seconds=0.75, stage="map(decode_jpeg)", setting="workers", old=4,
                           new=3, reason="4 workers used 1.6 cores of 2: one fewer keeps up"),
        ),
    )


def sample_report() -> ProfileReport:
    return ProfileReport(
        statistics=sample_statistics(),
        input_bound=True,
        bottleneck=Bottleneck(stage=3, name="map(decode_jpeg)", share=0.74,
                              speedup_without=2.9),
        advice=(
            Advice(kind="processes", stage=3,
                   message="run map(decode_jpeg) in processes: it holds the GIL 92% of its "
                           "time, so its 4 threads run one at a time",
                   rewrite='map(decode_jpeg, num_parallel_calls=fl.AUTOTUNE, '
                           'executor="processes")',
                   predicted_speedup=2.4, verified_speedup=2.18),
            Advice(kind="vectorize", stage=1,
                   message="map(augment) runs per batch already; vectorize map(decode_jpeg) "
                           "after batch",
                   rewrite=".batch(64).map(decode_jpeg_batch)", predicted_speedup=1.15),
        ),
        cores=2,
        notes=("a short run: 2.0 s measured",),
    )


@pytest.fixture
def report() -> ProfileReport:
    """The sample report (a new one per test; records are frozen anyway)."""
    return sample_report()
