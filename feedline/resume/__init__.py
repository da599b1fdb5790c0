"""Resuming checkpoints elsewhere: :func:`merge_states` re-deals the states of N replicas
of a streaming pipeline to M (:mod:`feedline.resume.elastic`)."""

from feedline.resume.elastic import merge_states

__all__ = ["merge_states"]
