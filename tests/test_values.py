"""The Python tuple id (crr.types.tuple_id) is bit-identical to the SQL one, and no two values that
DuckDB tells apart share an id (nor one with NULL).

The SQL side evaluates ``tuple_id_sql`` in DuckDB over the same Python values bound as parameters and
cast to the column type, i.e. over exactly what an INSERT with those parameters stores.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import struct
import uuid
from decimal import Decimal
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crr.errors import TypeMismatchError
from crr.types import (
    Column, encode_field, field_sql, key_hash, key_hash_sql, tuple_encoding, tuple_encoding_sql, tuple_id,
    TypeFamily, tuple_id_sql, type_family,
)

CON = duckdb.connect()
CON.execute("SET TimeZone = 'UTC'")

NEG_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000001))[0]
INT_RANGES = {
    "TINYINT": (-2**7, 2**7 - 1), "SMALLINT": (-2**15, 2**15 - 1), "INTEGER": (-2**31, 2**31 - 1),
    "BIGINT": (-2**63, 2**63 - 1), "HUGEINT": (-2**127, 2**127 - 1), "UTINYINT": (0, 2**8 - 1),
    "USMALLINT": (0, 2**16 - 1), "UINTEGER": (0, 2**32 - 1), "UBIGINT": (0, 2**64 - 1), "UHUGEINT": (0, 2**128 - 1),
}
DECIMALS = {"DECIMAL(1,0)": (1, 0), "DECIMAL(4,2)": (4, 2), "DECIMAL(18,3)": (18, 3), "DECIMAL(38,0)": (38, 0),
            "DECIMAL(38,10)": (38, 10), "DECIMAL(3,3)": (3, 3), "DECIMAL(38,38)": (38, 38)}
TZ = "TIMESTAMP WITH TIME ZONE"

# Special values of every type: each list holds values DuckDB tells apart, except where noted.
SPECIAL: dict[str, list[Any]] = {
    **{t: [lo, hi, 0, -1, None] if lo else [0, hi, hi - 1, 1, None] for t, (lo, hi) in INT_RANGES.items()},
    "DECIMAL(4,2)": [Decimal("99.99"), Decimal("-99.99"), Decimal("0.01"), Decimal("-0.01"), Decimal("0"), 5, None],
    "DECIMAL(3,3)": [Decimal("0.5"), Decimal("-0.5"), Decimal("0.999"), Decimal("-0.999"), Decimal("0"), None],
    "DECIMAL(38,38)": [Decimal("0." + "9" * 38), Decimal("-0." + "9" * 38), Decimal("-1E-37"), Decimal("0"), None],
    "DECIMAL(38,0)": [10**38 - 1, -(10**38 - 1), Decimal("1E+37"), 0, None],
    "DECIMAL(38,10)": [Decimal("9" * 28 + "." + "9" * 10), Decimal("-1E-10"), Decimal("1.5"), Decimal("-1.5"), None],
    "DECIMAL(1,0)": [9, -9, 0, None],
    "DOUBLE": [0.0, float("nan"), float("inf"), float("-inf"), 5e-324, -5e-324, 1.7976931348623157e308,
               -1.7976931348623157e308, 1.0, 1e16, 1e-5, 0.1, None],
    "FLOAT": [0.0, float("nan"), float("inf"), float("-inf"), 1e-45, 3.4028234663852886e38, -3.4028234663852886e38,
              0.1, 1.0, None],
    "VARCHAR": ["", "|", ":", "1:a|b", "N", "héllo|x", "😀", "a\u0000b", "\u0000", " ", None],
    "BOOLEAN": [True, False, None],
    "DATE": [dt.date(2024, 2, 29), "infinity", "-infinity", dt.date.max, dt.date.min, "0001-01-01 (BC)",
             "0044-03-15 (BC)", "5877642-06-25 (BC)", "5881580-07-10", "10000-01-01", dt.date(1970, 1, 1), None],
    "TIMESTAMP": [dt.datetime(2024, 1, 1, 10, 0, 0, 123456), "infinity", "-infinity", dt.datetime.max, dt.datetime.min,
                  "290309-12-22 (BC) 00:00:00", "294247-01-10 04:00:54.775806", dt.datetime(1970, 1, 1),
                  dt.datetime(1969, 12, 31, 23, 59, 59, 999999), None],
    TZ: [dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone(dt.timedelta(hours=2))), "infinity", "-infinity",
         dt.datetime.max.replace(tzinfo=dt.timezone.utc), dt.datetime.min.replace(tzinfo=dt.timezone.utc),
         "290309-12-22 (BC) 00:00:00+00", "294247-01-10 04:00:54.775806+00", None],
    "TIME": [dt.time(0, 0), "24:00:00", dt.time(23, 59, 59, 999999), dt.time(12, 0, 0, 1), dt.time(23, 59, 59, 500000),
             None],
    "BLOB": [b"", b"\x00", b"\x00\x00", b"\xff", bytes(range(256)), b"|", None],
    "UUID": [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1), uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), None],
}
# pairs DuckDB holds equal: they must share an id
EQUAL = [("DOUBLE", 0.0, -0.0), ("DOUBLE", float("nan"), NEG_NAN), ("FLOAT", 0.0, -0.0),
         ("DECIMAL(4,2)", Decimal("0"), Decimal("-0.00")), ("DECIMAL(4,2)", Decimal("0.125"), Decimal("0.13")),
         ("UUID", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", uuid.UUID(int=2**128 - 1)),
         ("DATE", "Infinity", "infinity"), ("FLOAT", 0.1, 0.10000000149011612), ("INTEGER", True, 1),
         ("TIMESTAMP", dt.date(2020, 5, 5), dt.datetime(2020, 5, 5)),
         (TZ, dt.datetime(2024, 1, 1, 8, tzinfo=dt.timezone.utc), "2024-01-01 10:00:00+02")]


def sql_row(types: list[str], values: list[Any], relation: str = "r") -> tuple[int, int, str]:
    """(tuple id, key hash, encoding) that DuckDB computes for the row the values bind to."""
    cols = [Column(f"c{i}", t) for i, t in enumerate(types)]
    casts = ", ".join(f"CAST(${i + 1} AS {t}) AS c{i}" for i, t in enumerate(types))
    return CON.execute(f"""SELECT {tuple_id_sql(relation, cols)}, {key_hash_sql(relation, cols)},
                                  {tuple_encoding_sql(relation, cols)} FROM (SELECT {casts})""", values).fetchone()


def py_row(types: list[str], values: list[Any], relation: str = "r") -> tuple[int, int, str]:
    """The same, computed by crr in Python."""
    cols = [Column(f"c{i}", t) for i, t in enumerate(types)]
    return tuple_id(relation, cols, values), key_hash(relation, cols, values), tuple_encoding(relation, cols, values)


SPECIAL_CASES = [(t, v) for t, vs in SPECIAL.items() for v in vs] + [(t, v) for t, a, b in EQUAL for v in (a, b)]


@pytest.mark.parametrize("type_, value", SPECIAL_CASES, ids=[f"{t}:{v!r}"[:60] for t, v in SPECIAL_CASES])
def test_python_id_equals_sql_id_for_special_values(type_: str, value: Any) -> None:
    assert py_row([type_], [value]) == sql_row([type_], [value])


def test_all_special_values_in_one_row() -> None:
    types = list(SPECIAL)
    for k in range(3):
        values = [SPECIAL[t][k % len(SPECIAL[t])] for t in types]
        assert py_row(types, values, "wide 'r'|x") == sql_row(types, values, "wide 'r'|x")


@pytest.mark.parametrize("type_", list(SPECIAL))
def test_distinct_values_get_distinct_ids_and_equal_values_equal_ids(type_: str) -> None:
    """Ids partition the values exactly as DuckDB's GROUP BY does (NULL is a value of its own)."""
    col = [Column("v", type_)]
    CON.execute(f"CREATE OR REPLACE TEMP TABLE sv (v {type_})")
    for v in SPECIAL[type_]:
        CON.execute(f"INSERT INTO sv VALUES (CAST($1 AS {type_}))", [v])
    groups = CON.execute(f"SELECT count(DISTINCT {tuple_id_sql('r', col)}) FROM sv GROUP BY v").fetchall()
    assert groups and all(n == 1 for (n,) in groups)  # equal values share an id
    ids = CON.execute(f"SELECT count(DISTINCT {tuple_id_sql('r', col)}) FROM sv").fetchone()[0]
    assert ids == len(groups) == len(SPECIAL[type_])  # the lists hold pairwise distinct values
    assert len({tuple_id("r", col, [v]) for v in SPECIAL[type_]}) == len(SPECIAL[type_])


@pytest.mark.parametrize("type_, a, b", EQUAL)
def test_values_duckdb_holds_equal_share_an_id(type_: str, a: Any, b: Any) -> None:
    assert CON.execute(f"SELECT CAST($1 AS {type_}) = CAST($2 AS {type_})", [a, b]).fetchone()[0]
    col = [Column("v", type_)]
    assert tuple_id("r", col, [a]) == tuple_id("r", col, [b]) == sql_row([type_], [b])[0]


def test_infinite_timestamps_do_not_hash_like_null_or_each_other() -> None:
    for t in ("TIMESTAMP", TZ, "DATE"):
        ids = {sql_row([t], [v])[0] for v in ("infinity", "-infinity", None)}
        assert len(ids) == 3, t
    assert encode_field("infinity", "TIMESTAMP") == "tinfinity"
    assert encode_field("-infinity", TZ) == "z-infinity"
    assert encode_field(None, "TIMESTAMP") == "N"


def test_documented_encodings() -> None:
    """The module docstring's examples, and the md5_number byte order (little-endian digest)."""
    cases = [("INTEGER", -42, "i-42"), ("DECIMAL(10,2)", Decimal("1.5"), "n1.50"), ("DECIMAL(3,3)", Decimal("-0.5"), "n-0.500"),
             ("DECIMAL(5,0)", 7, "n7"), ("DOUBLE", 1.0, "f1.0"), ("DOUBLE", 1e16, "f1e+16"), ("DOUBLE", 1e-5, "f1e-05"),
             ("DOUBLE", -0.0, "f0"), ("DOUBLE", NEG_NAN, "fnan"), ("DOUBLE", float("-inf"), "f-inf"),
             ("FLOAT", 0.1, "f0.10000000149011612"), ("VARCHAR", "héll", "s5:héll"), ("BOOLEAN", False, "b0"),
             ("DATE", "0044-03-15 (BC)", "d0044-03-15 (BC)"), ("DATE", "-infinity", "d-infinity"),
             ("TIMESTAMP", dt.datetime(1970, 1, 1, 0, 0, 1), "t1000000"), ("TIME", "24:00:00", "h24:00:00"),
             ("TIME", dt.time(1, 2, 3, 450000), "h01:02:03.45"), ("BLOB", b"", "x"), ("BLOB", b"\x0a\xff", "x0AFF"),
             ("UUID", uuid.UUID(int=255), "u00000000-0000-0000-0000-0000000000ff")]
    for t, v, enc in cases:
        assert encode_field(v, t) == enc, (t, v)
        assert sql_row([t], [v])[2] == "1:r|" + enc, (t, v)
    cols = [Column("x", "INTEGER"), Column("y", "VARCHAR")]
    assert tuple_encoding("r", cols, [1, "a"]) == "1:r|i1|s1:a"
    assert tuple_id("r", cols, [1, "a"]) == int.from_bytes(hashlib.md5(b"1:r|i1|s1:a").digest(), "little")
    assert key_hash("r", cols[:1], [1]) == int.from_bytes(hashlib.md5(b"5:key:r|i1").digest(), "little")
    assert CON.execute("SELECT md5_number('1:r|i1|s1:a')").fetchone()[0] == tuple_id("r", cols, [1, "a"])


def test_families_and_null_placement_give_distinct_ids() -> None:
    one = [("INTEGER", 1), ("VARCHAR", "1"), ("DOUBLE", 1.0), ("DECIMAL(2,0)", 1), ("BOOLEAN", True),
           ("VARCHAR", "i1"), ("VARCHAR", "N"), ("VARCHAR", ""), ("BLOB", b""), ("VARCHAR", None),
           ("DATE", dt.date(2024, 1, 1)), ("VARCHAR", "2024-01-01"), ("TIMESTAMP", dt.datetime(1970, 1, 1)),
           (TZ, dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)), ("TIME", dt.time(0)), ("BLOB", b"1")]
    ids = [sql_row([t], [v])[0] for t, v in one]
    assert len(set(ids)) == len(one)
    pairs = [["a", None], [None, "a"], [None, None], ["", None], [None, ""], ["a|s0:", ""], ["a", "|s0:"]]
    ids = [sql_row(["VARCHAR", "VARCHAR"], p)[0] for p in pairs]
    assert len(set(ids)) == len(pairs)
    assert sql_row(["INTEGER"], [1], "r")[0] != sql_row(["INTEGER"], [1], "s")[0]
    assert sql_row(["INTEGER"], [1], "r")[0] != sql_row(["INTEGER"], [1], "key:r")[1]


def test_float_encodes_like_the_double_it_widens_to() -> None:
    f, d = [Column("v", "FLOAT")], [Column("v", "DOUBLE")]
    assert tuple_id("r", f, [0.5]) == tuple_id("r", d, [0.5])
    assert tuple_id("r", f, [0.1]) == tuple_id("r", d, [0.10000000149011612]) != tuple_id("r", d, [0.1])
    assert sql_row(["FLOAT"], [0.1])[0] == sql_row(["DOUBLE"], [0.10000000149011612])[0]


def test_decimal_field_sql_without_type_matches_with_type() -> None:
    for t, v in [("DECIMAL(3,3)", Decimal("-0.5")), ("DECIMAL(10,2)", Decimal("-0.5")), ("DECIMAL(38,38)", Decimal("1E-37"))]:
        with_type, without = (CON.execute(f"SELECT {field_sql('x', TypeFamily.DECIMAL, ty)} FROM (SELECT CAST($1 AS {t}) AS x)",
                                          [v]).fetchone()[0] for ty in (t, None))
        assert with_type == without == encode_field(v, t)


@pytest.mark.parametrize("type_, value", [
    ("INTEGER", 2**31), ("UTINYINT", -1), ("INTEGER", "1"), ("INTEGER", 1.0), ("DECIMAL(4,2)", 0.5),
    ("DECIMAL(4,2)", Decimal("100")), ("DECIMAL(4,2)", Decimal("99.995")), ("DECIMAL(4,2)", Decimal("NaN")),
    ("DECIMAL(38,0)", Decimal("1." + "1" * 40)), ("DECIMAL(38,38)", Decimal("1E-38")), ("DOUBLE", Decimal("1.5")), ("DOUBLE", 2**53 + 1), ("FLOAT", 1e300),
    ("VARCHAR", b"a"), ("VARCHAR", "\ud800"), ("BOOLEAN", 1), ("DATE", dt.datetime(2024, 1, 1)), ("DATE", "2023-02-29"),
    ("DATE", "0000-01-01 (BC)"), ("DATE", "5881580-07-11"), ("TIMESTAMP", dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)),
    (TZ, dt.datetime(2024, 1, 1)), (TZ, dt.date(2024, 1, 1)), ("TIMESTAMP", "2024-01-01 10:00:00+00"),
    (TZ, "2024-01-01 10:00:00"), ("TIMESTAMP", "294247-01-10 04:00:54.775807"), ("TIMESTAMP", "+infinity"),
    ("TIME", dt.time(1, tzinfo=dt.timezone.utc)), ("TIME", "24:00:01"), ("TIME", "12:60:00"), ("BLOB", "ab"),
    ("UUID", "not-a-uuid"), ("UUID", 5),
])
def test_values_duckdb_would_not_store_as_given_are_refused(type_: str, value: Any) -> None:
    with pytest.raises(TypeMismatchError):
        encode_field(value, type_)


def test_value_count_and_type_are_checked() -> None:
    with pytest.raises(TypeMismatchError):
        tuple_id("r", [Column("a", "INTEGER")], [1, 2])
    with pytest.raises(TypeMismatchError):
        tuple_id("r", [Column("a", "INTERVAL")], [None])
    assert type_family("TIMESTAMP WITH TIME ZONE") is TypeFamily.TIMESTAMPTZ
    assert type_family("decimal(3, 3)") is TypeFamily.DECIMAL


@pytest.mark.parametrize("rows, words", [
    ([(1, "a"), ("x", "b")], "the values of a column do not share one type"),  # Arrow cannot build the column
    ([(1, "a"), (2**70, "b")], "column a; nothing was written"),  # an integer past 64 bits, out of INTEGER's range
])
def test_insert_many_refuses_values_that_share_no_type_and_writes_nothing(rows: list, words: str) -> None:
    """Fails if ``insert_many`` let pyarrow's own exception out (ArrowInvalid, OverflowError: not a
    CrrError), or wrote some rows before refusing."""
    import crr

    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE t (a INTEGER, b VARCHAR)")
    with pytest.raises(TypeMismatchError, match=f"insert_many into t: .*{words}"):
        site.insert_many("t", rows)
    assert site.execute("SELECT count(*) FROM t") == [(0,)] and site.cursor == 0


# -- property-based -----------------------------------------------------------------------------------

def _decimal_strategy(width: int, scale: int) -> st.SearchStrategy:
    top = Decimal(f"{10**width - 1}E-{scale}")
    exact = st.decimals(min_value=-top, max_value=top, places=scale, allow_nan=False, allow_infinity=False)
    ints = st.integers(-(10**(width - scale) - 1), 10**(width - scale) - 1)
    if width + 2 > 38:
        return exact | ints
    # more places than the column has: DuckDB rounds half away from zero, as crr must (or both refuse)
    finer = st.decimals(min_value=-top, max_value=top, places=scale + 2, allow_nan=False, allow_infinity=False)
    return exact | finer | ints


def _text(sql: str, arg: int) -> str:
    return CON.execute(f"SELECT CAST({sql} AS VARCHAR)", [arg]).fetchone()[0]


# DuckDB's DATE range in days and TIMESTAMP range in microseconds since the epoch
DAYS = CON.execute("SELECT DATE '5877642-06-25 (BC)' - DATE '1970-01-01', DATE '5881580-07-10' - DATE '1970-01-01'").fetchone()
MICROS = (-9223372022400000000, 9223372036854775806)
INFINITIES = st.sampled_from(["infinity", "-infinity"])

STRATEGIES: dict[str, st.SearchStrategy] = {
    **{t: st.integers(lo, hi) for t, (lo, hi) in INT_RANGES.items()},
    **{t: _decimal_strategy(w, s) for t, (w, s) in DECIMALS.items()},
    "DOUBLE": st.floats() | st.integers(-2**53, 2**53),
    "FLOAT": st.floats(width=32) | st.floats() | st.integers(-2**53, 2**53),
    "VARCHAR": st.text(),
    "BOOLEAN": st.booleans(),
    "DATE": st.dates() | INFINITIES | st.integers(*DAYS).map(lambda d: _text("DATE '1970-01-01' + $1::INTEGER", d)),
    "TIMESTAMP": st.datetimes() | st.dates() | INFINITIES
    | st.integers(*MICROS).map(lambda us: _text("make_timestamp($1::BIGINT)", us)),
    TZ: st.datetimes(timezones=st.timezones()) | INFINITIES
    | st.integers(*MICROS).map(lambda us: _text("make_timestamp($1::BIGINT)::TIMESTAMPTZ", us)),
    "TIME": st.times() | st.just("24:00:00"),
    "BLOB": st.binary(),
    "UUID": st.uuids() | st.integers(0, 2**128 - 1).map(lambda i: uuid.UUID(int=i)),
}


def _same_or_both_refused(types: list[str], values: list[Any]) -> bool:
    """Python and SQL agree on the row's id, key hash and encoding, or both refuse it; True if accepted."""
    try:
        py = py_row(types, values)
    except TypeMismatchError:
        if any(isinstance(v, Decimal) and CON.execute("SELECT typeof($1)", [v]).fetchone()[0] == "DOUBLE"
               for v in values):
            return False  # refused because DuckDB would round it through a DOUBLE when binding it
        with pytest.raises(duckdb.Error):
            sql_row(types, values)
        return False
    assert py == sql_row(types, values)
    return True


@pytest.mark.parametrize("type_", list(STRATEGIES))
def test_python_id_equals_sql_id_hypothesis(type_: str) -> None:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(STRATEGIES[type_] | st.none(), min_size=1, max_size=3))
    def check(values: list[Any]) -> None:
        if not _same_or_both_refused([type_] * len(values), values):
            return
        # distinct values (as DuckDB sees them) never share an id
        col = [Column("v", type_)]
        CON.execute(f"CREATE OR REPLACE TEMP TABLE hv (v {type_})")
        for v in values:
            CON.execute(f"INSERT INTO hv VALUES (CAST($1 AS {type_}))", [v])
        groups = CON.execute(f"SELECT count(DISTINCT {tuple_id_sql('r', col)}) FROM hv GROUP BY v").fetchall()
        assert all(n == 1 for (n,) in groups)
        assert CON.execute(f"SELECT count(DISTINCT {tuple_id_sql('r', col)}) FROM hv").fetchone()[0] == len(groups)

    check()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list(STRATEGIES)), min_size=1, max_size=6).flatmap(
    lambda types: st.tuples(st.just(types), st.tuples(*(STRATEGIES[t] | st.none() for t in types)))))
def test_python_id_equals_sql_id_for_mixed_rows(row: tuple[list[str], tuple]) -> None:
    types, values = row
    _same_or_both_refused(types, list(values))
