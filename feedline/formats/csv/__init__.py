"""CSV files: :class:`CsvDataset` (typed columns, tf.data's ``CsvDataset``) and
:func:`make_csv_dataset` (batched feature dicts with type inference, tf.data's
``make_csv_dataset``).

Records are split by Python's :mod:`csv` module in strict mode (RFC 4180 quoting, ``""``
inside quotes, quoted fields may hold the delimiter and line breaks). Files are read as bytes:
string fields come out as the exact bytes of the file, whatever their encoding.

Columns are counted from 0 (as ``select_cols`` counts them), lines from 1. Errors name the
file, the line the record starts on, the record index within the file and the column.

Modules, one concern each: :mod:`.records` (records as :mod:`csv` splits them, fields over
its size limit included), :mod:`.columns` (column specs and field parsers), :mod:`.dataset`
(:class:`CsvDataset`), :mod:`.make` (:func:`make_csv_dataset`), :mod:`.errors`. Import the
public names from here.
"""

from feedline.formats.csv.dataset import CsvDataset, _SkippingCsvDataset
from feedline.formats.csv.errors import CsvError
from feedline.formats.csv.make import _ToFeatures, make_csv_dataset

__all__ = ["CsvDataset", "CsvError", "make_csv_dataset"]

# Fingerprints (checkpoints, cache files) and pickles name a class by its module: these keep
# the one they had before this package was split out of one module.
for _cls in (CsvDataset, CsvError, _SkippingCsvDataset, _ToFeatures):
    _cls.__module__ = __name__
del _cls
