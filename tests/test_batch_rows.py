"""The renderers of a batch's typed inputs (crr.batch_rows): a point write's flips read from its Arrow
table, and a batch write's exact APP changes read from its entries and written rows."""

from __future__ import annotations

import duckdb

from crr.batch_rows import Rows, RowsKind, WrittenChanges, rows_sql, written_app_changes_sql
from crr.catalog import Relation
from crr.point import PointResult
from crr.sql.statements import RelationKind
from crr.types import Column

REL = Relation(name="t", kind=RelationKind.REPLICATED, columns=[Column("k", "INTEGER"), Column("v", "VARCHAR")])


def test_point_flips_are_read_apart_from_added_rows() -> None:
    """The flips of a point write's Arrow table come back as (id, rel, vis) with ids as UHUGEINT
    (ids above 2^64 too); its added rows (kind 'n') are not flips."""
    big = 2**127 + 5
    point = PointResult(count=2, changed=True, flips=[(big, True), (7, False)], added=[(big, ("1", "a"))])
    con = duckdb.connect()
    con.register("pt", point.as_arrow(REL))
    got = con.execute(f"SELECT id, rel, vis FROM {rows_sql(REL, Rows('pt', RowsKind.POINT_FLIPS))} ORDER BY vis").fetchall()
    assert got == [(7, "t", False), (big, "t", True)]
    added = con.execute(f"SELECT id, c0, c1 FROM {rows_sql(REL, Rows('pt', RowsKind.POINT_ADDED))}").fetchall()
    assert added == [(big, 1, "a")]


def _written(con: duckdb.DuckDBPyConnection, name: str, rows: list[tuple]) -> Rows:
    con.execute(f"CREATE TABLE {name} (id UHUGEINT, kh UHUGEINT, c0 INTEGER, c1 VARCHAR)")
    if rows:
        con.executemany(f"INSERT INTO {name} VALUES (?, NULL, ?, ?)", rows)
    return Rows(name, RowsKind.WRITTEN)


def test_written_app_changes_hold_exactly_the_flipped_rows() -> None:
    """Of a write's rows, those whose visibility it flipped enter (keep) or leave (not keep) the APP
    table; a row written twice counts once, and a row whose visibility held is not a change."""
    con = duckdb.connect()
    con.execute("CREATE TABLE entries (id UHUGEINT, cl INTEGER, old_vis BOOLEAN)")
    con.executemany("INSERT INTO entries VALUES (?, ?, ?)", [
        (1, 2, True),    # deleted: leaves
        (2, 1, False),   # inserted: enters
        (3, 3, True),    # re-inserted while visible (no flip): not a change
        (4, 3, False),   # re-inserted after a delete: enters
    ])
    old = _written(con, "old_rows", [(1, 10, "a"), (3, 30, "c")])
    new = _written(con, "new_rows", [(2, 20, "b"), (2, 20, "b"), (3, 30, "c"), (4, 40, "d")])
    both = written_app_changes_sql(REL, WrittenChanges("entries", old, new))
    assert sorted(con.execute(both).fetchall()) == [(10, "a", False), (20, "b", True), (40, "d", True)]
    only_old = written_app_changes_sql(REL, WrittenChanges("entries", old, None))
    assert con.execute(only_old).fetchall() == [(10, "a", False)]
    only_new = written_app_changes_sql(REL, WrittenChanges("entries", None, new))
    assert sorted(con.execute(only_new).fetchall()) == [(20, "b", True), (40, "d", True)]
