"""A DELETE is one statement (crr.point.delete_sql): the APP rows and every present version of their
keys, and, for a table views read, the views' rows that lose their last derivation
(crr.maintain.Maintainer.removals). Each test runs the same DELETE at a site whose table nothing
reads, at one whose table a view reads, and at one of those taking the general path (the point
path's lookup and entries, or the batch path, then the maintainer): all must end identical."""

from __future__ import annotations

import datetime

import pytest

import crr
from crr import maintain
from tests.conftest import app, aug

VIEWS = {"everything": "SELECT * FROM t", "prefixes": "SELECT left(v, 2) AS p FROM t", "joined": "SELECT t.v, d.k FROM t JOIN d ON t.k = d.k"}


def general(site: crr.Site, statement: str, params: list) -> list[tuple]:
    """Run a write at ``site`` by the general path (the maintainer after the write, not the one statement)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(maintain.Maintainer, "removals", lambda self, rel, derived, grown: None)
        return site.execute(statement, params)


def _pair(schema: str, rows: list[tuple]) -> tuple[crr.Site, crr.Site, crr.Site]:
    """A site whose table ``t`` nothing reads, and two with views over it (:data:`VIEWS`: a copy, a
    projection with several derivations per tuple, a join), holding ``rows``."""
    alone, read, slow = crr.Site(site_id="alone"), crr.Site(site_id="read"), crr.Site(site_id="slow")
    for site in (alone, read, slow):
        site.execute(f"CREATE REPLICATED TABLE t {schema}")
        site.execute("CREATE REPLICATED TABLE d (k INTEGER)")
        site.insert_many("t", rows)
        site.insert_many("d", [(1,), (3,)])
        site.execute("DELETE FROM t WHERE k = 3")  # back again: an entry of causal length 3
        site.insert_many("t", [row for row in rows if row[0] == 3])
    for site in (read, slow):
        for name, sql in VIEWS.items():
            site.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    return alone, read, slow


def _entries(site: crr.Site) -> list[tuple]:
    """(id, cl, kh, vis) of t's entries (stamps and sequence numbers are each site's own)."""
    return sorted((r[0], r[2], r[3], r[5]) for r in aug(site, "t")["cl"])


@pytest.mark.parametrize("schema", ["(k INTEGER PRIMARY KEY, v VARCHAR)", "(k INTEGER, v VARCHAR)"])
@pytest.mark.parametrize("statement, params, removed", [
    ("DELETE FROM t WHERE k = ?", [2], 1),
    ("DELETE FROM t AS x WHERE x.k > ? AND x.v <> 'keep'", [90], 9),
    ("DELETE FROM t USING d WHERE t.k = d.k", [], 2),
    ("DELETE FROM t WHERE k < 70", [], 69),  # more rows than the point path takes
    ("DELETE FROM t WHERE k = ?", [1000], 0),
    ("DELETE FROM t", [], 100),
])
def test_a_delete_leaves_what_the_maintained_path_leaves(schema: str, statement: str, params: list, removed: int) -> None:
    rows = [(i, "keep" if i == 95 else f"v{i}") for i in range(1, 101)]
    alone, read, slow = _pair(schema, rows)
    before = alone.cursor, read.cursor, slow.cursor
    assert (alone.execute(statement, params) == read.execute(statement, params) == general(slow, statement, params)
            == [(removed,)])
    assert app(alone, "t") == app(read, "t") == app(read, "everything") == app(slow, "t")
    assert len(app(alone, "t")) == 100 - removed
    assert _entries(alone) == _entries(read) == _entries(slow)
    for name, sql in VIEWS.items():
        assert app(read, name) == app(slow, name) == read.execute(f"SELECT DISTINCT * FROM ({sql}) ORDER BY ALL"), name
    # the sequence advances by one for a DELETE that removed rows, not at all for one that did not
    assert alone.cursor - before[0] == read.cursor - before[1] == slow.cursor - before[2] == (1 if removed else 0)


def test_a_delete_removes_every_present_version_of_the_key() -> None:
    """Two sites write key 1 concurrently: each site then holds two present versions of it, one
    visible. Deleting the key deletes both (DESIGN 1.2), so no version of it shows anywhere."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for site in (a, b):
        site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    a.execute("INSERT INTO t VALUES (?, ?)", [1, "from a"])
    b.execute("INSERT INTO t VALUES (?, ?)", [1, "from b"])
    a.merge(b.changes())
    b.merge(a.changes())
    viewed, slow = crr.Site(site_id="v"), crr.Site(site_id="slow")
    for site in (viewed, slow):
        site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
        site.execute("CREATE MATERIALIZED VIEW everything AS SELECT * FROM t")
        site.execute("CREATE MATERIALIZED VIEW vs AS SELECT v FROM t")
        site.merge(a.changes())
    assert sorted(r[2] for r in aug(a, "t")["cl"]) == [1, 1]
    statement = "DELETE FROM t WHERE k = ?"
    assert a.execute(statement, [1]) == viewed.execute(statement, [1]) == general(slow, statement, [1]) == [(1,)]
    assert sorted(r[2] for r in aug(a, "t")["cl"]) == [2, 2]
    assert _entries(a) == _entries(viewed) == _entries(slow)
    assert app(viewed, "vs") == app(slow, "vs") == []
    for site in (b, viewed):
        site.merge(a.changes())
    assert app(a, "t") == app(b, "t") == app(viewed, "t") == app(viewed, "everything") == []


def test_a_delete_with_values_no_literal_writes_runs_unprepared() -> None:
    """Parameters crr.prepared cannot write as literals (a date, a float) run the statement as it is."""
    alone, read, _ = _pair("(k INTEGER PRIMARY KEY, v VARCHAR)", [(i, f"v{i}") for i in range(1, 11)])
    for site in (alone, read):
        site.execute("CREATE REPLICATED TABLE e (k INTEGER PRIMARY KEY, at DATE, x DOUBLE)")
        site.insert_many("e", [(1, datetime.date(2026, 1, 1), 1.5), (2, datetime.date(2026, 2, 1), 2.5)])
    for site in (alone, read):
        assert site.execute("DELETE FROM e WHERE at < ? OR x = ?", [datetime.date(2026, 1, 15), 9.5]) == [(1,)]
    assert app(alone, "e") == app(read, "e") == [(2, datetime.date(2026, 2, 1), 2.5)]
    assert not [sql for sql in alone._prepared._names if '"e"' in sql]


def test_only_a_parameterized_delete_is_prepared() -> None:
    """An application's DELETE with its values written in has a text of its own each time: running
    it prepared would add a PREPARE to every such DELETE and fill the cache."""
    alone, _, _ = _pair("(k INTEGER PRIMARY KEY, v VARCHAR)", [(i, f"v{i}") for i in range(1, 11)])
    for k in (1, 2):
        alone.execute(f"DELETE FROM t WHERE k = {k}")
    assert not [sql for sql in alone._prepared._names if "DELETE FROM" in sql]
    alone.execute("DELETE FROM t WHERE k = ?", [3])
    assert len([sql for sql in alone._prepared._names if "DELETE FROM" in sql]) == 1
    assert [r[0] for r in app(alone, "t")] == list(range(4, 11))
