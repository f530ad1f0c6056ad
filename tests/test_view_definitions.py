"""A remote copy of a view follows one definition of it: rows of the view declared again with another
query at its source are refused (they would otherwise sit beside the old query's rows, which nothing
deletes), until the copy is declared again. The same query written with other spacing, letter case or
comments is one definition."""

from __future__ import annotations

import pytest

import crr
from crr.catalog import TABLE_DEFINITION, view_definition_id
from tests.conftest import app

OPEN = "SELECT k, s FROM r WHERE s = 'open'"
CLOSED = "SELECT k, s FROM r WHERE s = 'closed'"
COPY = "CREATE REMOTE TABLE v (k INTEGER, s VARCHAR)"


def _source(query: str = OPEN) -> crr.Site:
    a = crr.Site(site_id="a")
    a.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, s VARCHAR)")
    a.execute("INSERT INTO r VALUES (1, 'open'), (2, 'closed')")
    a.execute(f"CREATE MATERIALIZED VIEW v AS {query}")
    return a


def _declare_again(site: crr.Site, query: str) -> None:
    site.execute("DROP VIEW v")
    site.execute(f"CREATE MATERIALIZED VIEW v AS {query}")


def test_a_copy_refuses_the_rows_of_a_view_declared_again_with_another_query(tmp_path):
    a = _source()
    b = crr.Site(str(tmp_path / "b.duckdb"), site_id="b")
    b.execute(COPY)
    b.merge(a.changes(relations=["v"]), track=True)
    assert app(b, "v") == [(1, "open")]
    cursor = a.cursor
    _declare_again(a, CLOSED)
    b.close()
    b = crr.Site(str(tmp_path / "b.duckdb"))  # what the copy follows is stored, not only in memory
    for since in (cursor, 0):
        with pytest.raises(crr.SchemaMismatchError, match="another definition of the view v .* drop v here"):
            b.merge(a.changes(since=since, relations=["v"]).to_bytes(), track=True)
    assert app(b, "v") == [(1, "open")] and b.peer_cursor("a", "v") == cursor  # nothing changed
    # declared again here, the copy follows the new definition, from the start of the stream
    b.execute("DROP TABLE v")
    b.execute(COPY)
    assert b.peer_cursor("a", "v") == 0
    b.merge(a.changes(relations=["v"]), track=True)
    assert app(b, "v") == [(2, "closed")]
    a.execute("INSERT INTO r VALUES (3, 'closed')")
    b.merge(a.changes(since=b.peer_cursor("a", "v"), relations=["v"]))
    assert app(b, "v") == [(2, "closed"), (3, "closed")]


def test_the_same_query_written_otherwise_is_the_same_definition():
    a = _source()
    b = crr.Site(site_id="b")
    b.execute(COPY)
    b.merge(a.changes(relations=["v"]))
    _declare_again(a, 'select "K", S  from R -- the same view\n where S=\'open\'')
    a.execute("INSERT INTO r VALUES (3, 'open')")
    b.merge(a.changes(relations=["v"]))
    c = _source("SELECT k,s FROM r WHERE s='open'")  # a third site declaring it alike
    b.merge(c.changes(relations=["v"]))
    assert app(b, "v") == [(1, "open"), (3, "open")]
    assert view_definition_id(OPEN) == view_definition_id("SELECT  K,s from r where s='open'") != view_definition_id(CLOSED)
    assert view_definition_id(OPEN) != view_definition_id(OPEN.replace("'open'", "'Open'"))  # values are not names
    assert a.changes().relation("v").definition == view_definition_id(OPEN, (("r", TABLE_DEFINITION),))


def test_a_relay_states_the_definition_its_copy_follows():
    a = _source()
    b, d = crr.Site(site_id="b"), crr.Site(site_id="d")
    for s in (b, d):
        s.execute(COPY)
    b.merge(a.changes(relations=["v"]))
    relayed = b.changes(relations=["v"])
    assert relayed.relation("v").definition == a.changes(relations=["v"]).relation("v").definition
    d.merge(relayed)
    assert app(d, "v") == [(1, "open")]
    _declare_again(a, CLOSED)
    b.execute("DROP TABLE v")
    b.execute(COPY)
    b.merge(a.changes(relations=["v"]))
    with pytest.raises(crr.SchemaMismatchError, match="another definition of the view v"):
        d.merge(b.changes(relations=["v"]))
    assert app(d, "v") == [(1, "open")]


def test_a_copy_holds_either_a_replicated_tables_rows_or_a_views():
    """A view replaced by a replicated table of its name (or the other way) is another definition too;
    a relay of a table's copy states the table's, which its copies accept."""
    a = _source()
    t = crr.Site(site_id="t")
    t.execute("CREATE REPLICATED TABLE v (k INTEGER, s VARCHAR)")
    t.execute("INSERT INTO v VALUES (5, 'x')")
    of_view, of_table, relay = (crr.Site(site_id=n) for n in ("of_view", "of_table", "relay"))
    for s in (of_view, of_table, relay):
        s.execute(COPY)
    of_view.merge(a.changes(relations=["v"]))
    relay.merge(t.changes())
    assert relay.changes().relation("v").definition == TABLE_DEFINITION
    of_table.merge(relay.changes())  # a relay's rows of the table, then the table's own
    of_table.merge(t.changes())
    assert app(of_table, "v") == [(5, "x")]
    with pytest.raises(crr.SchemaMismatchError, match="holds a view's rows, the changeset brings a replicated table's"):
        of_view.merge(t.changes())
    with pytest.raises(crr.SchemaMismatchError, match="holds a replicated table's rows, the changeset brings a view's"):
        of_table.merge(a.changes(relations=["v"]))
    assert app(of_view, "v") == [(1, "open")] and app(of_table, "v") == [(5, "x")]


def test_a_view_over_a_view_declared_again_states_another_definition():
    """The outer view's query is unchanged, but it reads another definition of the inner one."""
    a = crr.Site(site_id="a")
    a.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, s VARCHAR)")
    a.execute("INSERT INTO r VALUES (1, 'open'), (2, 'closed')")
    a.execute(f"CREATE MATERIALIZED VIEW v AS {OPEN}")
    a.execute("CREATE MATERIALIZED VIEW w AS SELECT k FROM v")
    b = crr.Site(site_id="b")
    b.execute("CREATE REMOTE TABLE w (k INTEGER)")
    b.merge(a.changes(relations=["w"]))
    a.execute("DROP VIEW w")
    _declare_again(a, CLOSED)
    a.execute("CREATE MATERIALIZED VIEW w AS SELECT k FROM v")
    with pytest.raises(crr.SchemaMismatchError, match="another definition of the view w"):
        b.merge(a.changes(relations=["w"]))
    assert app(b, "w") == [(1,)]


def test_a_copy_that_received_no_rows_learns_no_definition():
    a = crr.Site(site_id="a")
    a.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, s VARCHAR)")
    a.execute(f"CREATE MATERIALIZED VIEW v AS {OPEN}")
    b = crr.Site(site_id="b")
    b.execute(COPY)
    b.merge(a.changes(relations=["v"]))  # the view has no rows yet
    _declare_again(a, CLOSED)
    a.execute("INSERT INTO r VALUES (2, 'closed')")
    b.merge(a.changes(relations=["v"]))
    assert app(b, "v") == [(2, "closed")]
    _declare_again(a, OPEN)
    with pytest.raises(crr.SchemaMismatchError, match="another definition"):
        b.merge(a.changes(relations=["v"]))


def test_a_remote_source_refuses_rows_of_another_definition_and_its_view_keeps_its_rows():
    a = _source()
    b = crr.Site(site_id="b")
    b.execute("CREATE REMOTE SOURCE v (k INTEGER, s VARCHAR)")
    b.execute("CREATE MATERIALIZED VIEW ks AS SELECT k FROM v")
    b.merge(a.changes(relations=["v"]))
    _declare_again(a, CLOSED)
    with pytest.raises(crr.SchemaMismatchError, match="another definition"):
        b.merge(a.changes(relations=["v"]))
    assert app(b, "ks") == [(1,)]
