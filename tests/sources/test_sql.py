"""SqlDataset against tf.data's sql_dataset_test: the same database, the values it asserts."""

import sqlite3

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing

S = bytes  # tf.string


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "tftest.sqlite")
    conn = sqlite3.connect(path)
    c = conn.cursor()
    c.execute("CREATE TABLE students (id INTEGER NOT NULL PRIMARY KEY, first_name VARCHAR(100), "
              "last_name VARCHAR(100), motto VARCHAR(100), school_id VARCHAR(100), "
              "favorite_nonsense_word VARCHAR(100), desk_number INTEGER, income INTEGER, "
              "favorite_number INTEGER, favorite_big_number INTEGER, favorite_negative_number "
              "INTEGER, favorite_medium_sized_number INTEGER, brownie_points INTEGER, "
              "account_balance INTEGER, registration_complete INTEGER)")
    c.executemany(
        "INSERT INTO students (first_name, last_name, motto, school_id, favorite_nonsense_word, "
        "desk_number, income, favorite_number, favorite_big_number, favorite_negative_number, "
        "favorite_medium_sized_number, brownie_points, account_balance, registration_complete) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [("John", "Doe", "Hi!", "123", "n\0nsense", 9, 0, 2147483647, 9223372036854775807, -2,
          32767, 0, 0, 1),
         ("Jane", "Moe", "Hi again!", "1000", "nonsense\0", 127, -20000, -2147483648,
          -9223372036854775808, -128, -32768, 255, 65535, 0)])
    c.execute("CREATE TABLE people (id INTEGER NOT NULL PRIMARY KEY, first_name VARCHAR(100), "
              "last_name VARCHAR(100), state VARCHAR(100))")
    c.executemany("INSERT INTO PEOPLE (first_name, last_name, state) VALUES (?, ?, ?)",
                  [("Benjamin", "Franklin", "Pennsylvania"), ("John", "Doe", "California")])
    c.execute("CREATE TABLE townspeople (id INTEGER NOT NULL PRIMARY KEY, first_name "
              "VARCHAR(100), last_name VARCHAR(100), victories FLOAT, accolades FLOAT, "
              "triumphs FLOAT)")
    c.executemany("INSERT INTO townspeople (first_name, last_name, victories, accolades, "
                  "triumphs) VALUES (?, ?, ?, ?, ?)",
                  [("George", "Washington", 20.00, 1331241.321342132321324589798264627463827647382647382643874,  # noqa: E501
                    9007199254740991.0),
                   ("John", "Adams", -19.95, 1331241321342132321324589798264627463827647382647382643874.0,  # noqa: E501
                    9007199254740992.0)])
    c.execute("CREATE TABLE data (col1 INTEGER)")
    c.executemany("INSERT INTO DATA VALUES (?)", [(0,), (1,), (2,)])
    conn.commit()
    conn.close()
    return path


def rows(db, query, types, driver="sqlite"):
    return list(fl.SqlDataset(driver, db, query, types))


def plain(rows):
    return [tuple(v if isinstance(v, bytes) else v.item() for v in row) for row in rows]


STUDENTS = "FROM students ORDER BY first_name DESC"


def test_read_result_set(db):
    ds = fl.SqlDataset("sqlite", db, f"SELECT first_name, last_name, motto {STUDENTS}",
                       (S, S, S)).repeat(2)
    expected = [(b"John", b"Doe", b"Hi!"), (b"Jane", b"Moe", b"Hi again!")] * 2
    assert list(ds) == expected and list(ds) == expected  # two iterations


def test_join_null_terminators_reuse_and_empty(db):
    assert rows(db, "SELECT students.first_name, state, motto FROM students INNER JOIN people "
                "ON students.first_name = people.first_name AND students.last_name = "
                "people.last_name", (S, S, S)) == [(b"John", b"California", b"Hi!")]
    assert rows(db, f"SELECT first_name, last_name, favorite_nonsense_word {STUDENTS}",
                (S, S, S)) == [(b"John", b"Doe", b"n\0nsense"), (b"Jane", b"Moe", b"nonsense\0")]
    assert rows(db, "SELECT first_name, last_name, state FROM people ORDER BY first_name DESC",
                (S, S, S)) == [(b"John", b"Doe", b"California"),
                               (b"Benjamin", b"Franklin", b"Pennsylvania")]
    assert rows(db, "SELECT first_name, last_name, motto FROM students WHERE first_name = "
                "'Nonexistent'", (S, S, S)) == []


def test_errors(db):
    with pytest.raises(fl.InvalidArgumentError, match="'sqlfake' is not supported"):
        fl.SqlDataset("sqlfake", db, "SELECT 1", (S,))
    for query in (f"SELECT first_name, last_name, fake_column {STUDENTS}",
                  f"SELEmispellECT first_name, last_name, motto {STUDENTS}"):
        with pytest.raises(fl.InvalidArgumentError, match="SQLite refused the query") as info:
            rows(db, query, (S, S, S))
        assert db in str(info.value)
    with pytest.raises(fl.InvalidArgumentError, match=r"number of columns in query \(2\) must "
                                                      r"match the number of elements in "
                                                      r"output_types \(3\)"):
        rows(db, f"SELECT first_name, last_name {STUDENTS}", (S, S, S))
    # An INSERT has no columns, and the database is opened read-only: nothing is written.
    with pytest.raises(fl.InvalidArgumentError):
        rows(db, "INSERT INTO students (first_name, last_name, motto) VALUES ('Foo', 'Bar', "
             "'Baz'), ('Fizz', 'Buzz', 'Fizzbuzz')", (S, S, S))
    assert len(rows(db, "SELECT first_name FROM students", S)) == 2
    with pytest.raises(FileNotFoundError, match="no such database"):
        rows(db + ".missing", "SELECT 1", S)
    for unsupported in (np.complex64, np.float32, np.uint32):  # as tf.data's list
        with pytest.raises(fl.InvalidArgumentError, match="Each element of `output_types`"):
            fl.SqlDataset("sqlite", db, "SELECT 1", (unsupported,))


@pytest.mark.parametrize("columns, dtype, expected", [
    ("first_name, desk_number", np.int8, [(b"John", 9), (b"Jane", 127)]),
    ("desk_number, favorite_negative_number", (np.int8, np.int8), [(9, -2), (127, -128)]),
    ("first_name, desk_number", np.int16, [(b"John", 9), (b"Jane", 127)]),
    ("first_name, favorite_medium_sized_number", np.int16, [(b"John", 32767),
                                                           (b"Jane", -32768)]),
    ("first_name, income", np.int32, [(b"John", 0), (b"Jane", -20000)]),
    ("first_name, favorite_number", np.int32, [(b"John", 2147483647), (b"Jane", -2147483648)]),
    ("first_name, school_id", np.int32, [(b"John", 123), (b"Jane", 1000)]),
    ("first_name, favorite_big_number", np.int64, [(b"John", 9223372036854775807),
                                                   (b"Jane", -9223372036854775808)]),
    ("first_name, brownie_points", np.uint8, [(b"John", 0), (b"Jane", 255)]),
    ("first_name, account_balance", np.uint16, [(b"John", 0), (b"Jane", 65535)]),
    ("first_name, registration_complete", np.bool_, [(b"John", True), (b"Jane", False)]),
    ("first_name, favorite_medium_sized_number", np.bool_, [(b"John", True), (b"Jane", True)]),
])
def test_integer_and_bool_columns(db, columns, dtype, expected):
    types = dtype if isinstance(dtype, tuple) else (S, dtype)
    out = rows(db, f"SELECT {columns} {STUDENTS}", types)
    assert plain(out) == expected
    assert all(row[-1].dtype == np.dtype(types[-1]) for row in out)


def test_int8_negative_and_zero(db):
    out = rows(db, "SELECT first_name, income, favorite_negative_number FROM students WHERE "
               "first_name = 'John' ORDER BY first_name DESC", (S, np.int8, np.int8))
    assert plain(out) == [(b"John", 0, -2)]


def test_float64_columns(db):
    town = "FROM townspeople ORDER BY first_name"
    assert plain(rows(db, f"SELECT first_name, last_name, victories {town}", (S, S, np.float64))
                 ) == [(b"George", b"Washington", 20.0), (b"John", b"Adams", -19.95)]
    assert plain(rows(db, f"SELECT first_name, last_name, accolades {town}",
                      (S, S, np.float64))) == [(b"George", b"Washington", 1331241.3213421323),
                                               (b"John", b"Adams", 1.3312413213421324e+57)]
    triumphs = plain(rows(db, f"SELECT first_name, last_name, triumphs {town}",
                          (S, S, np.float64)))
    assert triumphs[0] != (b"George", b"Washington", 9007199254740992.0)
    assert triumphs[1] != (b"John", b"Adams", 9007199254740991.0)


def test_single_type_gives_scalars_and_batches(db):
    ds = fl.SqlDataset("sqlite", db, "SELECT * FROM data", np.int32).map(lambda x: x)
    assert [b.tolist() for b in ds.batch(2)] == [[0, 1], [2]]
    assert ds.element_spec == fl.TensorSpec((), np.dtype(np.int32))


def test_checkpointing(db):
    ds = fl.SqlDataset("sqlite", db, f"SELECT first_name, last_name, motto {STUDENTS}",
                       (S, S, S)).repeat(4)
    assert len(check_checkpointing(ds)) == 8


def test_sqlite_conversions_of_other_column_kinds(db):
    # sqlite3_column_int64 / _double semantics: REAL truncated (saturated beyond 64 bits),
    # text read as its leading number, NULL as 0.
    out = rows(db, "SELECT victories, accolades, '12abc', NULL, NULL, 'x' FROM townspeople "
               "ORDER BY first_name", (np.int32, np.int64, np.int16, np.float64, S, np.float64))
    assert plain(out) == [(20, 1331241, 12, 0.0, b"", 0.0),
                          (-19, 9223372036854775807, 12, 0.0, b"", 0.0)]
