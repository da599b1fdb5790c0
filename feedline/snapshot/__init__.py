"""Materialized pipelines: ``save``/``load`` and ``snapshot``, on crash-safe chunk stores."""
