"""The error that parsing a damaged or mismatched tf.train.Example raises."""

from __future__ import annotations

from feedline.core.errors import FeedlineError


class ExampleParseError(FeedlineError, ValueError):
    """A record does not match the feature spec, or is not a valid serialized proto.

    Attributes:
        feature: The feature's name (``None`` when the whole record is unreadable).
        record_index: Index of the record within the batch.
        expected: What the spec asked for.
        found: What the record holds.
    """

    def __init__(self, message: str, *, feature: str | None = None,
                 record_index: int | None = None, expected: str | None = None,
                 found: str | None = None) -> None:
        super().__init__(message)
        self.feature = feature
        self.record_index = record_index
        self.expected = expected
        self.found = found
