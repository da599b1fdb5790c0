"""Write the golden ArrayRecord files of tests/data/array_record/ with the array-record package.

Run once (``.venv/bin/python tests/formats/record_array_record.py``); the files are committed.
Two shards written by ``ArrayRecordWriter`` itself with different options, and ``expected.json``:
every record of each shard as hex, plus what ``ArrayRecordDataSource`` (the class Grain
re-exports as ``grain.ArrayRecordDataSource``) returns for a fixed list of global indices
over both shards, so random reads are compared with Grain's reader.
"""

import json
import pathlib
import random

HERE = pathlib.Path(__file__).resolve().parents[1] / "data" / "array_record"
SHARDS = [
    # (file name, writer options, records)
    ("records-00000-of-00002.array_record", "group_size:1",
     [b"", b"first", b"\x00\xff" * 3] + [b"record-%03d" % i for i in range(3, 40)]),
    ("records-00001-of-00002.array_record", "group_size:4,uncompressed",
     [bytes(range(i % 7, i % 7 + 20)) + b"|shard1-%02d" % i for i in range(23)]),
]


def main() -> None:
    # Imported here: pytest imports this module for doctests where the package may be absent.
    from array_record.python.array_record_data_source import ArrayRecordDataSource
    from array_record.python.array_record_module import ArrayRecordWriter

    HERE.mkdir(parents=True, exist_ok=True)
    expected = {"shards": []}
    for name, options, records in SHARDS:
        writer = ArrayRecordWriter(str(HERE / name), options)
        for record in records:
            writer.write(record)
        writer.close()
        expected["shards"].append({"file": name, "options": options,
                                   "records": [r.hex() for r in records]})
    paths = [str(HERE / name) for name, _, _ in SHARDS]
    source = ArrayRecordDataSource(paths)
    rng = random.Random(28)
    indices = [rng.randrange(len(source)) for _ in range(40)] + [0, len(source) - 1]
    expected["data_source"] = {"len": len(source), "indices": indices,
                               "records": [r.hex() for r in source.__getitems__(indices)]}
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
