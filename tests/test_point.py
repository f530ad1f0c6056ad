"""The point write path (crr.point): ids from carried texts, equivalence with the batch path, and the
number of statements a write runs (the figures crr/point.py documents)."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import re
import struct
import uuid
import zoneinfo
from typing import Any, Callable

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import crr
from crr import point
from crr.types import INT_RANGE, Column, text_value_sql, tuple_encoding_sql, tuple_id_of_texts, tuple_id_sql, value_text_sql
from tests.conftest import app, aug, general_merges
from tests.test_values import SPECIAL, STRATEGIES

# -- ids from texts ------------------------------------------------------------------------------------

CASES = [(t, v) for t, vs in SPECIAL.items() for v in vs]


def _sql_and_text_ids(con: duckdb.DuckDBPyConnection, type_: str, value: Any) -> tuple[int, int, bool]:
    """(SQL id of the value, id from its carried text, whether the text casts back to the same value)."""
    col = Column("x", type_)
    sql_id, text = con.execute(f"""SELECT {tuple_id_sql('r', [col])}, {value_text_sql('x', type_)}
                                   FROM (SELECT CAST($1 AS {type_}) AS x)""", [value]).fetchone()
    back = con.execute(f"""SELECT {tuple_id_sql('r', [col])}, x IS NOT DISTINCT FROM CAST($2 AS {type_})
                           FROM (SELECT {text_value_sql('$1', type_)} AS x)""", [text, value]).fetchone()
    assert back[0] == sql_id
    return sql_id, tuple_id_of_texts("r", [col], [text]), back[1]


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
@pytest.mark.parametrize("type_, value", CASES, ids=[f"{t}:{v!r}"[:60] for t, v in CASES])
def test_id_from_text_equals_sql_id_and_text_casts_back(type_: str, value: Any, zone: str) -> None:
    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{zone}'")
    sql_id, text_id, same = _sql_and_text_ids(con, type_, value)
    assert text_id == sql_id
    assert same


@pytest.mark.parametrize("type_", list(STRATEGIES))
def test_id_from_text_equals_sql_id_hypothesis(type_: str) -> None:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'America/St_Johns'")  # a half-hour offset in every TIMESTAMPTZ text

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(STRATEGIES[type_])
    def check(value: Any) -> None:
        try:
            con.execute(f"SELECT CAST($1 AS {type_})", [value])
        except duckdb.Error:
            return  # DuckDB refuses the value itself
        sql_id, text_id, same = _sql_and_text_ids(con, type_, value)
        assert text_id == sql_id
        assert same

    check()


PARAM_TYPES = [t for t in STRATEGIES if t in INT_RANGE or t in ("VARCHAR", "BOOLEAN")]


@pytest.mark.parametrize("type_", PARAM_TYPES)
def test_insert_parameters_written_as_text_by_python_equal_duckdbs_text(type_: str) -> None:
    """:func:`crr.point.param_texts` gives, for every value it takes, the text the rows statement
    would give, and takes no value DuckDB refuses (those run the statement, which refuses them)."""
    con = duckdb.connect()
    taken = []

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.one_of(STRATEGIES[type_], st.integers(), st.booleans(), st.text(), st.none(), st.floats()))
    def check(value: Any) -> None:
        texts = point.param_texts([Column("x", type_)], ((0,),), [value])
        try:
            duck = con.execute(f"SELECT {value_text_sql('x', type_)} FROM (SELECT CAST($1 AS {type_}) AS x)",
                               [value]).fetchall()
        except (duckdb.Error, UnicodeError):
            assert texts is None, value
            return
        if texts is not None:
            taken.append(value)
            assert texts == duck, value

    check()
    assert point.param_texts([Column("x", type_)], ((0,),), [None]) == [(None,)]
    assert taken  # some values do take the Python path


LITERAL_TYPES = ["INTEGER", "BIGINT", "TINYINT", "UTINYINT", "VARCHAR", "BOOLEAN", "DOUBLE", "FLOAT", "DATE", "TIMESTAMP",
                 "TIMESTAMP WITH TIME ZONE", "UUID", "TIME", "BLOB", "DECIMAL(5,2)", "DECIMAL(3,3)"]


def _literal(value: Any) -> str:
    """``value`` written as a SQL literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (datetime.date, datetime.time, uuid.UUID)):  # as a string: DuckDB casts it to the column's type
        value = str(value)
    if isinstance(value, (bytes, bytearray)):  # each byte escaped, as a BLOB column reads a string
        value = "".join(f"\\x{b:02x}" for b in value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value) if isinstance(value, decimal.Decimal) else repr(value)


_ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                      st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")))
_OF_TYPE = {"VARCHAR": st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")),
            "BOOLEAN": st.booleans(), "DOUBLE": st.floats(), "FLOAT": st.floats() | st.floats(width=32), "DATE": st.dates(),
            "TIMESTAMP": st.datetimes() | st.datetimes(timezones=st.timezones()), "UUID": st.uuids(),
            "TIME": st.times() | st.times(timezones=st.timezones()), "BLOB": st.binary(),
            "TIMESTAMP WITH TIME ZONE": st.datetimes(timezones=st.timezones()) | st.datetimes(),
            "DECIMAL(5,2)": st.decimals(allow_nan=False, allow_infinity=False) | st.decimals(-1000, 1000, places=3),
            "DECIMAL(3,3)": st.decimals(-1, 1, places=4)}
_NEGATIVE_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000001))[0]  # -nan, another payload


def _cell(type_: str) -> st.SearchStrategy:
    """(type, value, whether a parameter): mostly a value of the column's type, as literals are."""
    return st.tuples(st.just(type_), st.one_of(_OF_TYPE.get(type_, st.integers(-300, 300)), _ANY_VALUE), st.booleans())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(LITERAL_TYPES).flatmap(_cell), min_size=1, max_size=4))
@example([("INTEGER", -5, False), ("VARCHAR", " it's ", False), ("BOOLEAN", False, False), ("VARCHAR", "p", True)])
@example([("BIGINT", 2**63 - 1, False), ("TINYINT", 300, False)])
@example([("DOUBLE", -0.0, True), ("DOUBLE", _NEGATIVE_NAN, True), ("DOUBLE", 1e16, True), ("DOUBLE", 5e-324, True)])
@example([("DOUBLE", float("-inf"), True), ("DOUBLE", 0.1, True), ("DOUBLE", 2.0**70, True), ("INTEGER", 2.5, True)])
@example([("TIMESTAMP", datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone(datetime.timedelta(hours=1))), True),
          ("TIMESTAMP", datetime.datetime(2024, 1, 1, 12, 0, 0, 250), True)])
@example([("DATE", datetime.datetime(2024, 1, 2, 3), True)])  # a datetime for a DATE: the rows statement
@example([("FLOAT", 0.1, True), ("FLOAT", -1e-46, True), ("FLOAT", 1 + 2**-24, True), ("FLOAT", _NEGATIVE_NAN, True)])
@example([("FLOAT", 3.4028235677973366e38, True)])  # rounds past the largest float: DuckDB refuses it
@example([("TIMESTAMP WITH TIME ZONE", datetime.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin")),
           True), ("INTEGER", 1, True)])
@example([("TIMESTAMP WITH TIME ZONE", datetime.datetime(2024, 10, 27, 2, 30), True)])  # naive: the rows statement
@example([("DECIMAL(3,3)", decimal.Decimal("-0.0005"), True), ("DECIMAL(5,2)", decimal.Decimal("2.675"), True),
          ("DECIMAL(5,2)", 7, True)])
@example([("DECIMAL(5,2)", decimal.Decimal("1000"), True)])  # out of range: DuckDB refuses it
@example([("TIME", datetime.time(1, 2, 3, 400, tzinfo=datetime.timezone.utc), True), ("BLOB", b"\x00|'", True),
          ("BLOB", bytearray(b"ab"), True), ("TIME", datetime.time(0), True)])
def test_an_insert_of_literals_and_parameters_writes_what_the_rows_statement_writes(cells) -> None:
    """:func:`crr.point.param_texts` reads literals of an INSERT's VALUES too (crr.sql.dml.Constant):
    a literal it took as another value than DuckDB does (a string's quotes, a negative number) gives
    another tuple id, APP row or error than the same INSERT run through the rows statement."""
    columns = [(f"c{i}", t) for i, (t, _, _) in enumerate(cells)]
    values = ", ".join("?" if as_param else _literal(v) for _, v, as_param in cells)
    params = [v for _, v, as_param in cells if as_param]
    sql = f"INSERT INTO t VALUES ({values})"
    outcomes = []
    for python_texts in (True, False):
        site = crr.Site()
        site.execute(f"CREATE REPLICATED TABLE t ({', '.join(f'{n} {t}' for n, t in columns)})")
        try:
            if python_texts:
                site.execute(sql, params)
            else:
                with pytest.MonkeyPatch.context() as mp:
                    mp.setattr("crr.site_dml.param_texts", lambda *a: None)
                    site.execute(sql, params)
        except crr.CrrError as e:
            outcomes.append(type(e).__name__)
            continue
        outcomes.append(_bits((site.execute("SELECT * FROM t"), site.provenance("t"))))
    assert outcomes[0] == outcomes[1], (sql, params)


def _bits(value: Any) -> Any:
    """``value`` with each float as its bit pattern, so NaNs compare (and the signs of zeros count)."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, (list, tuple)):
        return type(value)(_bits(v) for v in value)
    if isinstance(value, dict):
        return {_bits(k): _bits(v) for k, v in value.items()}
    return value


_DOUBLES = st.one_of(st.floats(), st.integers(0, 2**64 - 1).map(lambda bits: struct.unpack("<d", struct.pack("<Q", bits))[0]))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["DOUBLE", "FLOAT"]), st.lists(_DOUBLES, min_size=1, max_size=40))
@example("DOUBLE", [0.0, -0.0, _NEGATIVE_NAN, float("nan"), float("inf"), float("-inf"), 5e-324, 1e16, 1e15, 1e-5, 1e-4, 0.1])
@example("FLOAT", [0.0, -1e-46, _NEGATIVE_NAN, float("-inf"), 0.1, 1.4e-45, 7e-46, 3.4028235e38, 3.4028235677973366e38,
                   1e39, 16777217.0, 1 + 2**-24, 1 + 3 * 2**-24])
def test_python_writes_duckdbs_text_of_every_double_and_float(duckdb_type: str, values: list[float]) -> None:
    """A DOUBLE or FLOAT parameter's text, as the point path carries it (:func:`crr.types.value_text_sql`:
    DuckDB's text of the stored value, a FLOAT widened to a double, a zero as 0.0 and a NaN as nan),
    is Python's: any bit pattern, subnormals, infinities and NaNs of either sign; for a FLOAT,
    rounded as DuckDB's cast rounds (ties to even), and none where the cast overflows (the
    statement then runs, and DuckDB refuses the value). A text that differed would give the row
    another tuple id than the rows statement (and another site)."""
    con = duckdb.connect()
    con.register("doubles", pa.table({"x": pa.array(values, pa.float64())}))
    stored = f"TRY_CAST(x AS {duckdb_type})"  # NULL where the cast overflows
    duckdb_texts = [text for (text,) in con.execute(f"SELECT {value_text_sql(stored, duckdb_type)} FROM doubles").fetchall()]
    python_texts = [point._param_text(duckdb_type, v) for v in values]
    assert [None if text is point._NOT_SIMPLE else text for text in python_texts] == duckdb_texts


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 38).flatmap(lambda width: st.tuples(st.just(width), st.integers(0, width))),
       st.lists(st.decimals(allow_nan=False, allow_infinity=False) | st.integers(-2**64, 2**64)
                | st.decimals(-10**6, 10**6, places=6), min_size=1, max_size=20))
@example((3, 3), [decimal.Decimal("0.5"), decimal.Decimal("-0.5"), decimal.Decimal("-0.0004"), decimal.Decimal("0.9995"), 0])
@example((5, 2), [decimal.Decimal("-0.005"), decimal.Decimal("999.995"), decimal.Decimal("1E+2"), 999, -1000, 2**63])
@example((38, 0), [decimal.Decimal("9" * 38), decimal.Decimal("9" * 39), decimal.Decimal("1" + "0" * 38)])
def test_python_writes_duckdbs_text_of_decimals(width_scale: tuple[int, int], values: list) -> None:
    """A Decimal (or a 64-bit int) parameter of a DECIMAL(p,s) column: Python's text is DuckDB's text of
    the value it binds to (s digits after the point, rounded half away from zero; no 0 before the
    point when p = s), and Python takes no value DuckDB refuses (out of range) or binds otherwise
    (a Decimal wider than 38 digits binds as a DOUBLE)."""
    duckdb_type = f"DECIMAL({width_scale[0]},{width_scale[1]})"
    con = duckdb.connect()
    taken = 0
    for value in values:
        text = point._param_text(duckdb_type, value)
        if text is point._NOT_SIMPLE:
            continue
        taken += 1
        assert con.execute(f"SELECT CAST(CAST(? AS {duckdb_type}) AS VARCHAR)", [value]).fetchone() == (text,), value
    fits = [v for v in values if isinstance(v, int) and abs(v) < 10 ** (width_scale[0] - width_scale[1]) and abs(v) < 2**63]
    assert taken >= len(fits)  # integers in range are always taken


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["DOUBLE", "FLOAT"]), st.lists(st.integers(-2**60, 2**60) | st.integers(-2**25, 2**25),
                                                      min_size=1, max_size=30))
@example("FLOAT", [0, -0, 2**24, -2**24, 2**24 + 1, 16777217, 2**53])
@example("DOUBLE", [2**53, -2**53, 2**53 + 1, 10**17])
def test_python_writes_duckdbs_text_of_an_int_for_a_double_or_float(duckdb_type: str, values: list[int]) -> None:
    """An int parameter of a DOUBLE or FLOAT column that the type holds exactly (up to 2**53 and 2**24):
    Python's text is DuckDB's text of the value the parameter binds to; a larger one is left to the
    rows statement (DuckDB rounds it once, from the integer)."""
    con = duckdb.connect()
    for value in values:
        text = point._param_text(duckdb_type, value)
        if abs(value) <= {"DOUBLE": 2**53, "FLOAT": 2**24}[duckdb_type]:
            assert text is not point._NOT_SIMPLE, value  # these Python takes
        if text is not point._NOT_SIMPLE:
            assert con.execute(f"SELECT {value_text_sql('x', duckdb_type)} FROM (SELECT CAST(? AS {duckdb_type}) AS x)",
                               [value]).fetchone() == (text,), value


_TEMPORAL = {"DATE": st.dates(), "TIMESTAMP": st.datetimes(), "TIMESTAMP WITH TIME ZONE": st.datetimes(timezones=st.timezones()),
             "TIME": st.times(), "BLOB": st.binary(), "UUID": st.uuids()}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(_TEMPORAL)).flatmap(lambda t: st.tuples(st.just(t), st.lists(_TEMPORAL[t], min_size=1, max_size=30))))
@example(("TIMESTAMP", [datetime.datetime(2024, 1, 1, 12), datetime.datetime(1, 1, 1, 0, 0, 0, 500000),
                        datetime.datetime(9999, 12, 31, 23, 59, 59, 999999), datetime.datetime(999, 5, 5, 0, 0, 0, 120)]))
@example(("DATE", [datetime.date(1, 1, 1), datetime.date(999, 12, 31), datetime.date(9999, 12, 31)]))
@example(("TIME", [datetime.time(0), datetime.time(1, 2, 3, 400), datetime.time(23, 59, 59, 999999)]))
@example(("TIMESTAMP WITH TIME ZONE", [  # the hour Berlin's clocks repeat, either time; offsets past either end of years
    datetime.datetime(2024, 10, 27, 2, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin")),
    datetime.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin")),
    datetime.datetime(1, 1, 1, 0, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
    datetime.datetime(9999, 12, 31, 23, 30, tzinfo=datetime.timezone(-datetime.timedelta(hours=1, microseconds=5))),
    datetime.datetime(2024, 1, 1, 12, 0, 0, 500, tzinfo=datetime.timezone(datetime.timedelta(hours=5, minutes=30)))]))
@example(("BLOB", [b"", b"\x00ab", bytes(range(256))]))
def test_python_writes_duckdbs_text_of_dates_times_blobs_and_uuids(case: tuple[str, list]) -> None:
    """A DATE, TIMESTAMP (a naive datetime), TIMESTAMPTZ (an aware one, carried as its UTC wall clock),
    TIME (a naive time), BLOB or UUID parameter's text as Python writes it is DuckDB's text of the
    value the parameter binds to (the rows statement's): years 1-9999, fractions of a second with
    trailing zeros dropped, either time of a repeated hour, any bytes, any UUID."""
    duckdb_type, values = case
    con = duckdb.connect()
    texts = con.execute(f"SELECT {value_text_sql('x', duckdb_type)} FROM (SELECT unnest(?::{duckdb_type}[]) AS x)",
                        [values]).fetchall()
    python = [point._param_text(duckdb_type, v) for v in values]
    # only an aware datetime whose UTC time is outside Python's years is left to the rows statement
    left = [v for v, text in zip(values, python) if text is point._NOT_SIMPLE]
    assert all(v.year in (1, 9999) and v.utcoffset() for v in left), left
    assert [text for text in python if text is not point._NOT_SIMPLE] == [t for (t,), p in zip(texts, python)
                                                                         if p is not point._NOT_SIMPLE]


def test_row_encoding_of_texts_matches_sql_for_a_mixed_row() -> None:
    con = duckdb.connect()
    types = ["INTEGER", "VARCHAR", "DOUBLE", "BLOB", "TIMESTAMP", "DECIMAL(3,3)", "BOOLEAN"]
    values = [None, "a|b", -0.0, b"\x00|", "infinity", "-0.5", False]
    cols = [Column(f"c{i}", t) for i, t in enumerate(types)]
    casts = ", ".join(f"CAST(${i + 1} AS {t}) AS c{i}" for i, t in enumerate(types))
    texts = ", ".join(value_text_sql(f"c{i}", t) for i, t in enumerate(types))
    row = con.execute(f"SELECT {tuple_id_sql('r', cols)}, {tuple_encoding_sql('r', cols)}, {texts} "
                      f"FROM (SELECT {casts})", values).fetchone()
    assert tuple_id_of_texts("r", cols, list(row[2:])) == row[0]


# -- the point path against the batch path ------------------------------------------------------------

SCHEMA = {"keyed": "(k INTEGER PRIMARY KEY, v VARCHAR, f DOUBLE)", "unkeyed": "(k INTEGER, v VARCHAR, f DOUBLE)"}

KEYS = st.integers(0, 5)
VALUES = st.sampled_from(["a", "b", None, "it's", "é"])
FLOATS = st.sampled_from([0.0, -0.0, 1.5, float("nan"), float("inf"), None])
STATEMENTS = st.one_of(
    st.tuples(st.just("INSERT INTO t VALUES (?, ?, ?)"), st.tuples(KEYS, VALUES, FLOATS)),
    st.tuples(st.just("INSERT INTO t VALUES (?, ?, ?), (?, ?, ?)"), st.tuples(KEYS, VALUES, FLOATS, KEYS, VALUES, FLOATS)),
    st.tuples(st.just("INSERT INTO t VALUES (NULL, ?, 1)"), st.tuples(VALUES)),
    st.tuples(st.just("UPDATE t SET v = ? WHERE k = ?"), st.tuples(VALUES, KEYS)),
    st.tuples(st.just("UPDATE t SET k = ? WHERE k = ?"), st.tuples(KEYS, KEYS)),
    st.tuples(st.just("UPDATE t SET f = ?, k = ?, v = ? WHERE k = ?"), st.tuples(FLOATS, KEYS, VALUES, KEYS)),
    st.tuples(st.just("UPDATE t SET v = 'a', f = NULL WHERE k = ?"), st.tuples(KEYS)),
    st.tuples(st.just("UPDATE t SET f = f"), st.just(())),
    st.tuples(st.just("DELETE FROM t WHERE k = ?"), st.tuples(KEYS)),
    st.tuples(st.just("DELETE FROM t WHERE v IS NULL OR k > ?"), st.tuples(KEYS)),
    st.tuples(st.just("INSERT INTO t SELECT i, 'r', NULL FROM range(?) r(i)"), st.tuples(st.sampled_from([0, 3, 70]))),
)


def _run(site: crr.Site, sql: str, params: tuple, batch_path: bool = False) -> Any:
    saved = point.POINT_ROWS
    point.POINT_ROWS = -1 if batch_path else saved  # no write is small enough: the batch path
    try:
        return site.execute(sql, list(params))
    except crr.CrrError as e:
        return type(e)
    finally:
        point.POINT_ROWS = saved


def _norm(rows: Any) -> str:
    """Rows as text in which values SQL holds equal print alike (NaN = NaN, -0.0 = 0.0)."""
    return re.sub(r"(?<![\w.])-0\.0(?![\d])", "0.0", repr(rows))


def _without_stamps(state: dict) -> dict:
    return {**state, "cl": [row[:4] + row[5:] for row in state["cl"]], "tuples": _norm(state["tuples"])}


def _state(site: crr.Site) -> tuple:
    """APP rows and AUG state without stamps (each site's clock issues its own)."""
    state = aug(site, "t")
    cl = [row[:4] + row[5:] for row in state["cl"]]
    return _norm(app(site, "t")), _norm(state["tuples"]), cl


@pytest.mark.parametrize("keyed", ["keyed", "unkeyed"])
def test_point_path_leaves_the_state_the_batch_path_leaves(keyed: str) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(STATEMENTS, min_size=1, max_size=12))
    @example([("INSERT INTO t VALUES (?, ?, ?)", (1, "a", 1.5)), ("UPDATE t SET v = ? WHERE k = ?", ("b", 1)),
              ("UPDATE t SET v = ? WHERE k = ?", ("a", 1))])  # back to a version the table holds
    @example([("INSERT INTO t VALUES (?, ?, ?)", (1, "a", 0.0)), ("INSERT INTO t VALUES (?, ?, ?)", (2, "a", 0.0)),
              ("DELETE FROM t WHERE k = ?", (2,)), ("UPDATE t SET k = ? WHERE k = ?", (2, 1)),  # onto a deleted version
              ("UPDATE t SET k = ? WHERE k = ?", (1, 2)), ("INSERT INTO t VALUES (?, ?, ?)", (2, "b", None)),
              ("UPDATE t SET k = ? WHERE k = ?", (2, 1)),  # onto a present key: refused
              ("UPDATE t SET f = ?, k = ?, v = ? WHERE k = ?", (float("nan"), 3, None, 5))])  # no such row
    def check(statements: list[tuple[str, tuple]]) -> None:
        fast, viewed, batch = crr.Site(), crr.Site(), crr.Site()
        for site in (fast, viewed, batch):
            site.execute(f"CREATE REPLICATED TABLE t {SCHEMA[keyed]}")
        for site in (viewed, batch):  # t is read: views maintained after the point write, or the batch path
            site.execute("CREATE MATERIALIZED VIEW everything AS SELECT * FROM t")
            site.execute("CREATE MATERIALIZED VIEW pairs AS SELECT a.v, b.f FROM t a JOIN t b ON a.k = b.k + 1")
        for sql, params in statements:
            expected = _run(batch, sql, params, batch_path=True)
            assert _run(fast, sql, params) == expected, sql
            assert _run(viewed, sql, params) == expected, sql
            assert _state(fast) == _state(batch) == _state(viewed), sql
            for view in ("everything", "pairs"):
                assert _norm(app(viewed, view)) == _norm(app(batch, view)), sql
                assert _without_stamps(aug(viewed, view)) == _without_stamps(aug(batch, view)), sql
        assert _norm(app(batch, "everything")) == _norm(app(batch, "t"))

    check()


# -- statement counts ---------------------------------------------------------------------------------

class Counting:
    """A connection wrapper that records every statement executed through it."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.statements: list[str] = []

    def execute(self, sql: str, params: Any = None) -> Any:
        self.statements.append(sql)
        return self.con.execute(sql, params) if params is not None else self.con.execute(sql)

    def sql(self, sql: str) -> Any:
        self.statements.append(sql)
        return self.con.sql(sql)

    def executemany(self, sql: str, params: Any) -> Any:
        self.statements.append(sql)
        return self.con.executemany(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)


def _statements(site: crr.Site, action: Callable[[], Any]) -> list[str]:
    """The statements ``action`` runs on ``site``'s connection."""
    counting = Counting(site._con)
    site._con = counting  # type: ignore[assignment]
    try:
        action()
    finally:
        site._con = counting.con
    return counting.statements


def _count(site: crr.Site, sql: str, params: list) -> list[str]:
    """The statements a write runs, an ``EXECUTE`` of a statement the site prepared (crr.prepared)
    shown as ``EXECUTE: <its SQL>``."""
    return _expanded(site, _statements(site, lambda: site.execute(sql, params)))


def _expanded(site: crr.Site, ran: list[str]) -> list[str]:
    """``ran`` with each ``EXECUTE`` of a statement the site prepared shown as ``EXECUTE: <its SQL>``."""
    prepared = {name: text for text, name in site._prepared._names.items()}
    return [f"EXECUTE: {prepared[s.split()[1].split('(')[0]]}" if s.startswith("EXECUTE ") else s for s in ran]


def app_writes(site: crr.Site, action: Callable[[], Any], relations: list[str]) -> dict[str, list[str]]:
    """Run ``action``; per relation of ``relations``, the first words of each write of its APP table
    (``INSERT INTO``, ``DELETE FROM``, ``MERGE INTO``, ``UPDATE``) among the statements it ran, also
    where one is a part of a larger statement (a point write's one statement holds its views'
    writes as CTEs), in order."""
    ran = [" ".join(s.split()) for s in _expanded(site, _statements(site, action)) if not s.startswith("PREPARE ")]
    out = {}
    for relation in relations:
        pattern = re.compile(rf'(INSERT INTO|MERGE INTO|DELETE FROM|UPDATE) main\."{re.escape(relation)}"')
        out[relation] = [m.group(1) for s in ran for m in pattern.finditer(s)]
    return out


def test_a_point_write_updates_the_entry_it_looked_up_among_other_relations(tmp_path) -> None:
    """The point path updates a known entry by the ``rowid`` its lookup read (no scan of ``_crr.cl``).
    With the entries of two tables interleaved in ``_crr.cl``, an UPDATE, a DELETE and a re-INSERT
    change exactly their own entries: a wrong row would change the other table's entry or leave
    the written one as it was."""
    site = crr.Site(tmp_path / "s.db")
    for t in ("a", "b"):
        site.execute(f"CREATE REPLICATED TABLE {t} (k INTEGER PRIMARY KEY, v VARCHAR)")
    for i in range(6):
        for t in ("a", "b"):
            site.execute(f"INSERT INTO {t} VALUES (?, ?)", [i, f"{t}{i}"])
    entries = lambda: sorted(site.execute("SELECT rel, cl, vis, id FROM _crr.cl ORDER BY rel, id"))
    before = entries()
    site.execute("UPDATE a SET v = ? WHERE k = ?", ["new", 2])
    site.execute("DELETE FROM b WHERE k = ?", [4])
    site.execute("DELETE FROM a WHERE k = ?", [5])
    site.execute("INSERT INTO a VALUES (?, ?)", [5, "a5"])  # the same tuple back: its entry grows to 3
    after = entries()
    changed = sorted(set(after) - set(before))
    assert [(rel, cl, vis) for rel, cl, vis, _ in changed] == sorted(
        [("a", 2, False), ("a", 1, True), ("b", 2, False), ("a", 3, True)])
    assert len(after) == len(before) + 1  # the updated row's new version
    assert app(site, "a") == [(0, "a0"), (1, "a1"), (2, "new"), (3, "a3"), (4, "a4"), (5, "a5")]
    assert app(site, "b") == [(i, f"b{i}") for i in range(6) if i != 4]
    # a DELETE removes APP rows, whose tuples are held: its lookup reads no AUG tuples
    assert not [s for s in _count(site, "DELETE FROM a WHERE k = ?", [3]) if '"a$t"' in s]
    assert app(site, "a") == [(0, "a0"), (1, "a1"), (2, "new"), (4, "a4"), (5, "a5")]


@pytest.mark.parametrize("schema", list(SCHEMA.values()), ids=list(SCHEMA))
def test_single_row_writes_run_the_documented_statements(schema: str, tmp_path) -> None:
    """The statements of each point write once it is warm: a statement the site prepares
    (crr.prepared) costs one statement more (its PREPARE) the first time its shape runs."""
    site = crr.Site(tmp_path / "s.db")
    site.execute(f"CREATE REPLICATED TABLE t {schema}")
    site.execute("INSERT INTO t VALUES (0, 'a', 1)")
    lookup = lambda stmts: [s for s in stmts if s.lstrip().startswith("SELECT id, kh")]
    prepared = lambda stmts, head: [s for s in stmts if s.startswith(f"EXECUTE: {head}")]

    def warm(sql: str, params: list, warm_params: list) -> list[str]:
        first = _count(site, sql, warm_params)
        assert len([s for s in first if s.startswith("PREPARE ")]) <= 1
        return _count(site, sql, params)

    # a new key: its entry, tuple and APP row are written unless an entry exists, in one statement
    # (no lookup); the rows statement reads the text of an int the DOUBLE does not hold exactly
    new_key = warm("INSERT INTO t VALUES (?, ?, ?)", [1, "x", 2**60 + 1], [10, "x", 2**60 + 1])
    assert len(new_key) == 2 and not lookup(new_key) and len(prepared(new_key, "WITH entries AS")) == 1
    # a float for it, or an int it holds: Python writes its text (crr.point._double_text), one statement
    double = _count(site, "INSERT INTO t VALUES (?, ?, ?)", [5, "d", 0.1])
    assert len(double) == 1 and prepared(double, "WITH entries AS")
    whole = _count(site, "INSERT INTO t VALUES (?, ?, ?)", [6, "d", 2])
    assert len(whole) == 1 and prepared(whole, "WITH entries AS")
    # values Python writes as DuckDB's text (crr.point.param_texts): no rows statement
    given = _count(site, "INSERT INTO t (k, v) VALUES (?, ?)", [2, "w"])
    assert len(given) == 1 and prepared(given, "WITH entries AS")  # prepared for new_key
    # and literals of those kinds among them (crr.sql.dml.Constant)
    for sql, params in [("INSERT INTO t (k, v) VALUES (?, 'it''s')", [3]), ("INSERT INTO t (k, v) VALUES (-4, 'w')", [])]:
        literals = _count(site, sql, params)
        assert len(literals) == 1 and prepared(literals, "WITH entries AS")
    # a DELETE from a table no other relation reads: the APP rows and their entries, one statement
    delete = warm("DELETE FROM t WHERE k = ?", [2], [10])
    assert len(delete) == 1 and prepared(delete, "WITH gone AS (DELETE FROM")
    # rows, lookup, then one statement writing the old version's entry, the new one's entry and
    # tuple, and the APP row; keyed, by its key (SET and WHERE of values Python writes, the WHERE on
    # the key): the row and its key's entries in one statement (crr.point.key_lookup_sql), then the write
    by_key = lambda stmts: [s for s in stmts if s.lstrip().startswith("SELECT id, kh, cl, stamp, vis, rowid")]
    update = warm("UPDATE t SET v = ? WHERE k = ?", ["y", 1], ["y", 0])
    if "PRIMARY KEY" in schema:
        assert len(update) == 2 and len(by_key(update)) == 1 and len(prepared(update, "WITH part0 AS")) == 1
        expression = warm("UPDATE t SET v = v || ? WHERE k = ?", ["!", 1], ["!", 0])  # a value of the old row's
        assert len(expression) == 3 and len(lookup(expression)) == 1 and not by_key(expression)
        back_again = _count(site, "UPDATE t SET v = ? WHERE k = ?", ["y", 1])  # to a version it had: its entry grows
        assert len([s for s in back_again if not s.startswith("PREPARE ")]) == 2 and by_key(back_again)
    else:
        assert len(update) == 3 and len(lookup(update)) == 1 and len(prepared(update, "WITH part0 AS")) == 1
    assert len(_count(site, "DELETE FROM t WHERE k = ?", [1])) == 1
    # back from the dead: the new-rows INSERT writes nothing, the lookup finds the tuple known, so its
    # entry is updated and no tuple is added
    back = _count(site, "INSERT INTO t VALUES (?, ?, ?)", [1, "y", 2.0**60])  # the DOUBLE 2**60 + 1 is
    written = [s for s in back if s.startswith("PREPARE ") or "part0" in s]
    assert len([s for s in back if not s.startswith("PREPARE ")]) == 3 and len(lookup(back)) == 1
    assert written and not [s for s in written if '"t$t"' in s]
    assert not any("TEMP TABLE" in s.upper() for s in _count(site, "UPDATE t SET v = 'z' WHERE k = 0", []))
    # deleted again, then new values: unkeyed, a new tuple, one statement; keyed, a new version of
    # a key with (deleted) versions: the one statement writes nothing, then the lookup and the write
    assert len(_count(site, "DELETE FROM t WHERE k = ?", [1])) == 1
    renewed = _count(site, "INSERT INTO t (k, v) VALUES (?, ?)", [1, "n"])
    renewed = [s for s in renewed if not s.startswith("PREPARE ")]  # the write's shape, new here
    assert len(renewed) == (3 if "PRIMARY KEY" in schema else 1) and prepared(renewed, "WITH entries AS")
    assert app(site, "t") == [(-4, "w", None), (0, "z", 1.0), (1, "n", None), (3, "it's", None), (5, "d", 0.1), (6, "d", 2.0)]


def test_a_large_write_takes_the_batch_path_and_a_small_one_maintains_the_views() -> None:
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    many = _count(site, "INSERT INTO t SELECT i, 'x' FROM range(?) r(i)", [point.POINT_ROWS + 1])
    assert any("TEMP TABLE" in s.upper() for s in many)
    assert site.execute("SELECT count(*) FROM t") == [(point.POINT_ROWS + 1,)]
    few = _count(site, "INSERT INTO t SELECT i, 'x' FROM range(?, ?) r(i)", [100, 100 + point.POINT_ROWS])
    assert not any("TEMP TABLE" in s.upper() for s in few)
    site.execute("CREATE MATERIALIZED VIEW v AS SELECT v FROM t")
    read = _count(site, "INSERT INTO t VALUES (1000, 'y')", [])
    assert not any("TEMP TABLE" in s.upper() for s in read)
    assert any('"v$m"' in s for s in read)  # the point write, then the view's maintenance
    assert sorted(site.execute("SELECT * FROM v")) == [("x",), ("y",)]


def test_point_path_refusals_write_nothing() -> None:
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR NOT NULL)")
    site.execute("INSERT INTO t VALUES (1, 'a')")
    before = _state_of(site)
    with pytest.raises(crr.ConstraintError, match="duplicate key"):
        site.execute("INSERT INTO t VALUES (1, 'b')")
    with pytest.raises(crr.ConstraintError, match="more than once"):
        site.execute("INSERT INTO t VALUES (2, 'b'), (2, 'c')")
    with pytest.raises(crr.ConstraintError, match="NOT NULL"):
        site.execute("INSERT INTO t VALUES (3, NULL)")
    with pytest.raises(crr.ConstraintError, match="PRIMARY KEY"):
        site.execute("INSERT INTO t VALUES (NULL, 'x')")
    with pytest.raises(crr.TypeMismatchError):
        site.execute("INSERT INTO t VALUES ('not a number', 'x')")
    assert _state_of(site) == before


def _state_of(site: crr.Site) -> tuple:
    return repr(app(site, "t")), repr(aug(site, "t")), site.cursor


@pytest.mark.parametrize("view, inserts, deletes", [("project", 1, 1), ("join", 1, 1)])
def test_batch_merges_run_the_documented_statements(view: str, inserts: int, deletes: int, tmp_path) -> None:
    """A batch of 500 inserts (then deletes) of R1 merged into a view site of the paper's experiments
    runs the statements the README gives, and the view ends equal to its query."""
    from crr.bench.data import VIEW_NAMES, VIEWS, r1_rows, r2_rows
    from crr.bench.paper import _crr_site
    from crr.bench.streams import paper_streams

    streams = paper_streams(r1_rows(1500), r2_rows(), 500, 1000)
    site = _crr_site(str(tmp_path / "v.db"), view, streams.r2)
    site.merge(streams.inserts[0].changeset)  # the first batch creates what later ones reuse
    counted, writes, app_writes = {}, {}, {}
    name = VIEW_NAMES[view]
    for kind, batch in (("insert", streams.inserts[1]), ("delete", streams.deletes[0])):
        statements = _statements(site, lambda: site.merge(batch.changeset))
        counted[kind] = len([s for s in statements if not s.startswith("DESCRIBE")])
        home = '_crr."r1$e"' if view == "join" else '_crr."pi_bc$w"'  # R1's replica, or the co-located view's table
        dml = [w for s in statements for w in _writes_in(s)]
        writes[kind] = [verb for verb, table in dml if table == home]
        app_writes[kind] = [verb for verb, table in dml if table == f'main."{name}"']
    assert counted == {"insert": inserts, "delete": deletes}
    # first inserts are written by an INSERT (crr.replica.first_insert_sql, crr.colocated.first_insert_sql),
    # deletes by an UPDATE (crr.causal.later_entries_update_sql): neither needs the MERGE after it
    assert writes == {"insert": ["INSERT"], "delete": ["UPDATE"]}
    # the view's APP table: appended to (the append-only path), then deleted from in the statement
    # that writes the deletes' entries (the co-located view's APP DELETE, crr.colocated.app_changes_after;
    # the join view's tuples have one derivation each: crr.maintain_sql.lost_derivations_sql, in the
    # replica's UPDATE, Maintainer._lost_derivations_after)
    assert app_writes == {"insert": ["INSERT"], "delete": ["DELETE"]}
    base = crr.Site()
    base.execute("CREATE REMOTE TABLE r1 (a INTEGER, b INTEGER, c INTEGER, d INTEGER, e VARCHAR)")
    base.execute("CREATE REMOTE TABLE r2 (k INTEGER, c INTEGER)")
    for cs in [streams.r2] + [b.changeset for b in streams.inserts[:2] + streams.deletes[:1]]:
        base.merge(cs)
    assert sorted(site.execute(f"SELECT * FROM {name}")) == sorted(base.execute(f"SELECT DISTINCT * FROM ({VIEWS[view]})"))


def _writes_in(statement: str) -> list[tuple[str, str]]:
    """The writes a statement makes, ``(verb, table)``: the statement's own, or each data-modifying
    CTE's (``WITH name AS (INSERT INTO t ...``)."""
    pattern = r"(?:^|\bAS \()\s*(INSERT INTO|UPDATE|DELETE FROM|MERGE INTO)\s+(\S+)"
    return [(verb.split()[0], table) for verb, table in re.findall(pattern, statement.strip())]


def _app_merges(site: crr.Site, changeset: Any, table: str) -> int:
    """Merge ``changeset`` into ``site``; return how many statements MERGE INTO ``table``'s APP table."""
    statements = _statements(site, lambda: site.merge(changeset))
    return sum(1 for s in statements if s.lstrip().startswith(f'MERGE INTO main."{table}"'))


def test_a_merge_of_new_rows_skips_matching_known_rows_in_app(tmp_path) -> None:
    """Merging rows new to a replica appends them without the MERGE that matches flipped known
    tuples in the APP table; a merge that deletes known rows, or whose entries flip a tuple that
    arrived earlier without one, still runs it, and every APP table ends equal to the source's."""
    import dataclasses

    src, dst = crr.Site(site_id="src"), crr.Site(tmp_path / "dst.db", site_id="dst")
    for s in (src, dst):
        s.execute("CREATE REPLICATED TABLE t (k INTEGER, v VARCHAR)")
    src.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    assert _app_merges(dst, src.changes(), "t") == 0  # new rows only
    assert app(dst, "t") == app(src, "t")
    cursor = src.cursor
    src.execute("DELETE FROM t WHERE k = 2")
    assert _app_merges(dst, src.changes(since=cursor), "t") == 1  # a known row leaves
    assert app(dst, "t") == app(src, "t")
    # a tuple whose entry comes later than the tuple itself: first its values without entries,
    # then its entry together with a new row's
    cursor = src.cursor
    src.execute("INSERT INTO t VALUES (4, 'd')")
    first = src.changes(since=cursor)
    dst.merge(dataclasses.replace(first, cl=first.cl.slice(0, 0)))
    assert app(dst, "t") == [(1, "a"), (3, "c")]  # stored, but invisible without its entry
    cursor = src.cursor
    src.execute("INSERT INTO t VALUES (5, 'e')")
    second = src.changes(since=cursor)
    both = dataclasses.replace(second, cl=pa.concat_tables([first.cl, second.cl]))
    assert _app_merges(dst, both, "t") == 1  # the earlier tuple's entry flips it: matched in APP
    assert app(dst, "t") == app(src, "t") == [(1, "a"), (3, "c"), (4, "d"), (5, "e")]


def test_a_merge_runs_nothing_for_a_table_the_changeset_brings_no_tuples_of(tmp_path, monkeypatch) -> None:
    """``changes()`` names every table it covers, changed or not. A merge runs no statement over a
    table whose tuples table is empty (an INSERT of nothing cost 2 ms at a 1M-row site), and a view
    joining it still gets the other table's delta; an empty table with the wrong columns is still
    refused, also where the merge would be one statement (crr.point_merge; the batch path is
    forced for the first merge)."""
    src, dst = crr.Site(site_id="src"), crr.Site(tmp_path / "dst.db", site_id="dst")
    for s in (src, dst):
        s.execute("CREATE REPLICATED TABLE big (k INTEGER PRIMARY KEY, v VARCHAR)")
        s.execute("CREATE REPLICATED TABLE small (k INTEGER PRIMARY KEY, w VARCHAR)")
    dst.execute("CREATE MATERIALIZED VIEW j AS SELECT big.k, v, w FROM big JOIN small ON big.k = small.k")
    src.execute("INSERT INTO small VALUES (1, 'x'), (2, 'y')")
    dst.merge(src.changes())
    cursor = src.cursor
    src.execute("INSERT INTO big VALUES (1, 'a'), (3, 'c')")
    cs = src.changes(since=cursor)
    assert {rc.name: rc.tuples.num_rows for rc in cs.relations} == {"big": 2, "small": 0}
    with monkeypatch.context() as patch:
        general_merges(patch)
        statements = _statements(dst, lambda: dst.merge(cs))
    writes = [" ".join(s.split()[:3]) for s in statements if s.split()[0] in ("INSERT", "MERGE", "DELETE", "UPDATE")]
    assert 'INSERT INTO _crr."big$t"' in writes
    assert not [w for w in writes if "small" in w]
    assert app(dst, "j") == [(1, "a", "x")]
    cursor = src.cursor
    src.execute("INSERT INTO big VALUES (2, 'b')")
    cs = src.changes(since=cursor)
    bad = dataclasses.replace(cs, relations=[
        rc if rc.name == "big" else dataclasses.replace(rc, tuples=rc.tuples.rename_columns(["id", "k", "x"]))
        for rc in cs.relations])
    with pytest.raises(crr.ChangesetError, match="small"):
        dst.merge(bad)
    assert len([s for s in _statements(dst, lambda: dst.merge(cs)) if not s.startswith("PREPARE ")]) == 1
    assert app(dst, "j") == [(1, "a", "x"), (2, "b", "y")]


def test_a_merge_runs_nothing_for_a_view_the_changeset_brings_no_derivations_of(tmp_path) -> None:
    """A view's changes that add no tuple and no monomial cost the receiver no statement (it
    copied both into temp tables and ran an INSERT of nothing); the columns are still checked, and
    a view's tuples without monomials are still refused."""
    src = crr.Site(site_id="src")
    src.execute("CREATE REPLICATED TABLE big (k INTEGER PRIMARY KEY, v VARCHAR)")
    src.execute("CREATE REPLICATED TABLE small (k INTEGER PRIMARY KEY, w VARCHAR)")
    src.execute("CREATE MATERIALIZED VIEW j AS SELECT big.k, v, w FROM big JOIN small ON big.k = small.k")
    src.execute("INSERT INTO small VALUES (1, 'x')")
    src.execute("INSERT INTO big VALUES (1, 'a')")
    far = crr.Site(tmp_path / "far.db", site_id="far")
    far.execute("CREATE REMOTE TABLE j (k INTEGER, v VARCHAR, w VARCHAR)")
    far.merge(src.changes(relations=["j"]))
    cursor = src.cursor
    src.execute("INSERT INTO big VALUES (2, 'b')")  # joins nothing: j does not change
    cs = src.changes(since=cursor, relations=["j"])
    assert [(rc.name, rc.tuples.num_rows, rc.monos.num_rows) for rc in cs.relations] == [("j", 0, 0)]
    statements = _statements(far, lambda: far.merge(cs))
    # (the new big tuple's entry is still merged: j's lineage holds big)
    assert not [s for s in statements if s.startswith("CREATE") or s.startswith('INSERT INTO _crr."j$m"')]
    assert app(far, "j") == [(1, "a", "x")]
    bad = dataclasses.replace(cs, relations=[dataclasses.replace(
        rc, monos=rc.monos.rename_columns(["vid", "other"])) for rc in cs.relations])
    with pytest.raises(crr.ChangesetError, match="j"):
        far.merge(bad)
    with pytest.raises(crr.ChangesetError, match="without monomials"):
        far.merge(dataclasses.replace(cs, relations=[dataclasses.replace(rc, monos=None) for rc in cs.relations]))


def test_a_large_update_with_a_random_where_rewrites_exactly_the_rows_it_removes() -> None:
    """A batch-path UPDATE evaluates its rows once: the rows it removes are the rows it rewrites (two
    evaluations of a random WHERE would pick different rows), and the APP rows, the AUG tuples and
    what a replica receives hold the same values."""
    n = point.POINT_ROWS + 136
    site, replica = crr.Site(site_id="a"), crr.Site(site_id="b")
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, x DOUBLE)")
    replica.execute("CREATE REMOTE TABLE t (k INTEGER, x DOUBLE, PRIMARY KEY (k))")
    site.insert_many("t", [(i, 0.0) for i in range(n)])
    [(updated,)] = site.execute("UPDATE t SET x = 1 + random() WHERE random() < 0.5")
    replica.merge(site.changes().to_bytes())
    rows = site.execute("SELECT * FROM t ORDER BY k")
    assert [k for k, _ in rows] == list(range(n))  # every key still has exactly one row
    assert 0 < updated < n and sum(x >= 1 for _, x in rows) == updated
    assert replica.execute("SELECT * FROM t ORDER BY k") == rows


@pytest.mark.parametrize("path", ["point", "batch"])
def test_a_local_insert_of_a_row_whose_visible_entry_came_first_shows_it(path: str) -> None:
    """Site b learns r's entry of (1, 1) through a remote view's lineage, without the tuple, then
    inserts the same row locally: the entry is visible already, so nothing flips, but the tuple is
    new here and the APP table must show it (it did not: the write put only flipped rows in APP,
    and the sites never converged). Fails if the point path, or the batch path
    (``Maintainer._insert_late_tuples``), adds only flipped rows."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    a.execute("CREATE REPLICATED TABLE r (k INTEGER, g INTEGER)")
    a.execute("CREATE MATERIALIZED VIEW av AS SELECT k, g FROM r")
    a.execute("INSERT INTO r VALUES (1, 1)")
    b.execute("CREATE REPLICATED TABLE r (k INTEGER, g INTEGER)")
    b.execute("CREATE REMOTE TABLE av (k INTEGER, g INTEGER)")
    b.merge(a.changes(relations=["av"]))  # r's entry arrives in av's lineage, r's tuple does not
    assert app(b, "r") == []
    if path == "point":
        b.execute("INSERT INTO r VALUES (?, ?)", [1, 1])
    else:
        b.insert_many("r", [(1, 1)] * (point.POINT_ROWS + 1))  # more rows than the point path takes
    assert app(b, "r") == [(1, 1)]
    b.merge(a.changes())
    assert app(b, "r") == app(a, "r") == [(1, 1)]


@pytest.mark.parametrize("rows", [3, 200])  # the point path and the batch path
def test_an_update_onto_a_row_it_leaves_is_a_duplicate_key(rows: int) -> None:
    """UPDATE t SET k = 1 WHERE k = 0, where (1, 'a') exists and the new row is (1, 'a') too, merged the
    two rows into one (set semantics): a row was lost where SQL raises a duplicate key."""
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute(f"INSERT INTO t SELECT i, 'a' FROM range({rows}) r(i)")
    before = _state_of(site)
    with pytest.raises(crr.ConstraintError, match="duplicate key in t: a row with k=.?1.? already exists"):
        site.execute("UPDATE t SET k = 1 WHERE k = 0")
    with pytest.raises(crr.ConstraintError, match="duplicate key"):
        site.execute("UPDATE t SET k = k + 1 WHERE k < 2")  # 0 -> 1 is freed by 1 -> 2, 1 -> 2 is not
    assert _state_of(site) == before
    # keys the statement itself frees, and rows set to what they are, are no clash
    assert site.execute("UPDATE t SET k = k + 1") == [(rows,)]
    assert site.execute("UPDATE t SET v = v WHERE k = 1") == [(1,)]
    assert site.execute("SELECT count(*), min(k), max(k) FROM t") == [(rows, 1, rows)]


@pytest.mark.parametrize("updated", [2, point.POINT_ROWS + 36])  # the point path and the batch path
def test_an_update_giving_rows_one_key_and_the_same_values_is_a_duplicate_key(updated: int) -> None:
    """UPDATE t SET k = -1, v = 'z' WHERE k < 2 made the rows one tuple (set semantics), so a row was
    lost where SQL raises a duplicate key (found by a probe)."""
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute("INSERT INTO t SELECT i, 'a' || i FROM range(200) r(i)")
    before = _state_of(site)
    with pytest.raises(crr.ConstraintError, match="gives several rows of t the same key"):
        site.execute("UPDATE t SET k = -1, v = 'z' WHERE k < ?", [updated])
    assert _state_of(site) == before
    assert site.execute("UPDATE t SET k = -1, v = 'z' WHERE k = 0") == [(1,)]  # one row is no duplicate
    assert site.execute("SELECT count(*) FROM t") == [(200,)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.tuples(st.just("INSERT INTO t VALUES (?, ?, ?, ?)"),
              st.tuples(st.sampled_from(["x", "y", None]), KEYS, FLOATS, KEYS)),
    st.tuples(st.just("UPDATE t SET v = ?, k1 = ? WHERE k1 = ? AND k2 = ?"), st.tuples(FLOATS, KEYS, KEYS, KEYS)),
    st.tuples(st.just("UPDATE t SET b = 'z' WHERE k2 = ? AND k1 = ?"), st.tuples(KEYS, KEYS)),
    st.tuples(st.just("DELETE FROM t WHERE k1 = ?"), st.tuples(KEYS))), min_size=1, max_size=15))
def test_updates_by_a_key_of_two_columns_leave_the_state_the_rows_statement_leaves(statements) -> None:
    """An UPDATE by a key of two columns declared out of column order (crr.point.keyed_update_texts:
    the key's texts in key order, the row found by both) leaves every table, its outcome and the
    view's rows as the rows statement and the lookup leave them."""
    outcomes = []
    for by_key in (True, False):
        site = crr.Site(site_id="s")
        site.execute("CREATE REPLICATED TABLE t (b VARCHAR, k2 INTEGER, v DOUBLE, k1 INTEGER, PRIMARY KEY (k2, k1))")
        site.execute("CREATE MATERIALIZED VIEW p AS SELECT b, v FROM t")
        results = []
        with pytest.MonkeyPatch.context() as mp:
            if not by_key:
                mp.setattr("crr.site_dml.keyed_update_texts", lambda *a: None)
            for sql, params in statements:
                results.append(_run(site, sql, params))
        state = aug(site, "t")
        outcomes.append((results, _norm(app(site, "t")), _norm(state["tuples"]), [r[:4] + r[5:] for r in state["cl"]],
                         _norm(app(site, "p"))))
    assert outcomes[0] == outcomes[1]
