"""Statements prepared once per connection (crr.prepared): values written as literals come back
exactly, the cache stays bounded, and DDL never leaves a stale statement behind."""

from __future__ import annotations

import duckdb
import pytest

import crr
from crr.prepared import Prepared, literal
from tests.conftest import app


VALUES = [None, True, False, 0, -7, 2**127 + 3, 2**128 - 1, "", "it's", "a''b", "ünï\x00\x01\n\t", "--", "x); DROP TABLE t; --"]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_literal_comes_back_as_the_value(value) -> None:
    con = duckdb.connect()
    cast = {bool: "BOOLEAN", int: "UHUGEINT" if isinstance(value, int) and value > 2**126 else "BIGINT",
            str: "VARCHAR"}.get(type(value), "VARCHAR")
    prepared = Prepared()
    assert prepared.run(con, f"SELECT ?::{cast}", [value]) == [(value,)]
    assert prepared.run(con, f"SELECT ?::{cast}", [value]) == [(value,)]  # the EXECUTE of the prepared one
    assert con.execute(f"SELECT {literal(value)}::{cast}").fetchall() == [(value,)]


def test_other_values_are_refused() -> None:
    with pytest.raises(TypeError, match="float"):
        literal(1.5)


def test_the_cache_is_bounded_and_statements_survive_its_flush() -> None:
    con = duckdb.connect()
    prepared = Prepared()
    for i in range(Prepared.LIMIT + 5):
        assert prepared.run(con, f"SELECT {i} + ?", [1]) == [(i + 1,)]
    assert len(prepared._names) <= Prepared.LIMIT
    assert prepared.run(con, "SELECT 0 + ?", [2]) == [(2,)]  # flushed, then prepared again
    prepared.forget(con)
    assert not prepared._names
    with pytest.raises(duckdb.Error):
        con.execute("EXECUTE _crr_prepared_1(1)")  # deallocated


def test_writes_after_ddl_use_the_tables_as_they_are_now(tmp_path) -> None:
    """A table dropped and declared again, with another column, takes new rows; so does one declared
    again with the same columns (the site deallocates its prepared statements after crr DDL)."""
    site = crr.Site(tmp_path / "s.db")
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute("INSERT INTO t VALUES (?, ?)", [1, "a"])
    assert site._prepared._names
    site.execute("DROP TABLE t")
    assert not site._prepared._names
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute("INSERT INTO t VALUES (?, ?)", [1, "b"])
    assert app(site, "t") == [(1, "b")]
    site.execute("DROP TABLE t")
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, w INTEGER, v VARCHAR)")
    site.execute("INSERT INTO t VALUES (?, ?, ?)", [2, 5, "c"])
    assert app(site, "t") == [(2, 5, "c")]
    assert site.execute("SELECT count(*) FROM _crr.cl") == [(1,)]


@pytest.mark.parametrize("statement", ["BEGIN", "BEGIN TRANSACTION", "START TRANSACTION", "COMMIT", "END",
                                       "ROLLBACK", "ABORT"])
def test_transaction_control_is_refused(statement: str) -> None:
    """A transaction the application opened would hold crr's own writes uncommitted (a write to a table
    no view reads is one autocommitted statement): refused, and the site keeps working."""
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    with pytest.raises(crr.UnsupportedSqlError, match="one transaction of its own"):
        site.execute(statement)
    site.execute("INSERT INTO t VALUES (?, ?)", [1, "a"])
    other = crr.Site()
    other.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    other.merge(site.changes())
    assert app(other, "t") == [(1, "a")]


@pytest.mark.parametrize("statement", ["DEALLOCATE {name}", "DEALLOCATE PREPARE {name}", "EXECUTE {name}(1)",
                                       "PREPARE {name} AS SELECT 1"])
def test_crr_prepared_statements_are_not_the_application_s(statement: str) -> None:
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute("INSERT INTO t VALUES (?, ?)", [1, "a"])
    (name,) = site._prepared._names.values()
    with pytest.raises(crr.UnsupportedSqlError, match="belong to crr"):
        site.execute(statement.format(name=name))
    site.execute("INSERT INTO t VALUES (?, ?)", [2, "b"])  # the prepared statement is still there
    site.execute("PREPARE mine AS SELECT 41 + 1")  # the application's own are its business
    assert site.execute("EXECUTE mine") == [(42,)]
    assert app(site, "t") == [(1, "a"), (2, "b")]
