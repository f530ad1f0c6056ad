"""Batches of first inserts (every causal length 1) are merged by an INSERT of the ids a site has no
entry of, then the MERGE for the ids it has (crr.causal.first_entries_insert_sql,
crr.replica.first_insert_sql). Each test says which bug would make it fail."""

from __future__ import annotations

import pytest

import crr
from tests.conftest import app, aug, sync


def _pair(keyed: bool) -> tuple[crr.Site, crr.Site]:
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute(f"CREATE REPLICATED TABLE t (k INTEGER{' PRIMARY KEY' if keyed else ''}, v VARCHAR)")
    return a, b


def _entries(site: crr.Site, home: str) -> list[tuple]:
    return site.execute(f"SELECT id, cl, stamp, vis FROM {home} WHERE cl > 0 ORDER BY id")


@pytest.mark.parametrize("keyed", [True, False])
def test_a_row_inserted_at_two_sites_ends_with_one_entry_of_the_later_stamp(keyed: bool) -> None:
    """Both sites insert the same row (the same tuple id, length 1; keyed, each its own stamp) beside a
    row of their own, then merge each other's changes: the batch holds an id the receiver has and one
    it lacks. Fails if the INSERT of new ids added a second entry for the shared id, or if the MERGE
    after it did not run for the shared id (a keyed entry's stamp would stay the receiver's own, and
    the sites would disagree)."""
    a, b = _pair(keyed)
    a.execute("INSERT INTO t VALUES (1, 'x'), (2, 'a')")
    b.execute("INSERT INTO t VALUES (1, 'x'), (3, 'b')")
    stamps = {s.site_id: s.execute("SELECT stamp FROM _crr.cl c JOIN _crr.\"t$t\" t USING (id) WHERE t.c0 = 1")[0][0]
              for s in (a, b)}
    assert (stamps["a"] != stamps["b"]) if keyed else (stamps["a"] == stamps["b"] == 0)  # unkeyed: no stamps
    sync(a, b)
    sync(b, a)
    assert aug(a, "t") == aug(b, "t")
    assert app(a, "t") == app(b, "t") == [(1, "x"), (2, "a"), (3, "b")]
    for s in (a, b):
        shared = s.execute("SELECT count(*), max(stamp) FROM _crr.cl c JOIN _crr.\"t$t\" t USING (id) WHERE t.c0 = 1")
        assert shared == [(1, max(stamps.values()))]


def test_a_replica_takes_the_later_stamp_of_a_row_two_sites_inserted() -> None:
    """A remote copy receives the shared row from one site, then from the other with a row it lacks.
    Fails if the replica's first-insert INSERT took the batch without the MERGE for the id it held
    (the entry would keep the first site's stamp) or stored the id twice."""
    a, b = _pair(keyed=True)
    r = crr.Site(site_id="r")
    r.execute("CREATE REMOTE TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    a.execute("INSERT INTO t VALUES (1, 'x')")
    b.execute("INSERT INTO t VALUES (1, 'x'), (3, 'b')")
    for first, second in ((a, b), (b, a)):
        sync(first, r)
        sync(second, r)
    sync(b, a)
    assert _entries(r, '_crr."t$e"') == _entries(a, "_crr.cl")
    assert r.execute('SELECT count(*), count(DISTINCT id) FROM _crr."t$e"') == [(2, 2)]
    assert app(r, "t") == app(a, "t") == [(1, "x"), (3, "b")]


def test_a_replayed_batch_of_first_inserts_changes_nothing() -> None:
    """The same changeset merged twice: the second INSERT finds every id stored and writes nothing,
    and the MERGE after it finds nothing grown. Fails if either wrote a row (the result would report
    changes, or an id would have two entries)."""
    a, b = _pair(keyed=True)
    a.execute("INSERT INTO t SELECT i, 'v' || i FROM range(100) r(i)")
    data = a.changes().to_bytes()
    assert b.merge(data).changed
    before = aug(b, "t")
    assert not b.merge(data).changed
    assert aug(b, "t") == before
    assert b.execute("SELECT count(*), count(DISTINCT id) FROM _crr.cl") == [(100, 100)]


def test_a_replica_takes_a_later_stamp_arriving_without_its_tuple() -> None:
    """The shared row's entry from the second site comes alone (with the changes of a view over the
    table, which carry the table's entries but not its tuples), beside the entry of a row the replica
    lacks. Fails if the MERGE after the INSERT ran only when a received tuple was left out (here
    every tuple is new: only an entry is), so the stored entry kept the first site's stamp."""
    a, b = _pair(keyed=True)
    r = crr.Site(site_id="r")
    r.execute("CREATE REMOTE TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    r.execute("CREATE REMOTE TABLE big (k INTEGER, v VARCHAR)")
    for s in (a, b):
        s.execute("CREATE MATERIALIZED VIEW big AS SELECT k, v FROM t WHERE k > 0")
    a.execute("INSERT INTO t VALUES (1, 'x')")
    b.execute("INSERT INTO t VALUES (1, 'x'), (3, 'b')")
    first, second = (a, b) if a.execute("SELECT max(stamp) FROM _crr.cl")[0][0] < b.execute(
        "SELECT min(stamp) FROM _crr.cl")[0][0] else (b, a)
    sync(first, r, "t")
    sync(second, r, "big")  # t's entries, without t's tuples
    sync(second, first)
    assert _entries(r, '_crr."t$e"') == _entries(first, "_crr.cl")


def test_a_co_located_view_takes_the_later_stamp_of_a_row_two_sites_inserted() -> None:
    """A co-located view's table (crr.colocated) receives the shared row from one site, then from the
    other beside a row it lacks. Fails if the first-insert INSERT took the batch without the MERGE for
    the id the table held (the entry would keep the first site's stamp), or stored the id twice."""
    sites = []
    for name in ("a", "b"):
        s = crr.Site(site_id=name)
        s.execute("CREATE REPLICATED TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)")
        sites.append(s)
    a, b = sites
    v = crr.Site(site_id="v")
    v.execute("CREATE REMOTE SOURCE r (a INTEGER, b INTEGER, c VARCHAR)")
    v.execute("CREATE MATERIALIZED VIEW p AS SELECT b, c FROM r WHERE b > 0")
    assert v.relation("p").colocated
    a.execute("INSERT INTO r VALUES (1, 1, 'x')")
    b.execute("INSERT INTO r VALUES (1, 1, 'x'), (3, 3, 'b')")
    first, second = (a, b) if a.execute("SELECT max(stamp) FROM _crr.cl")[0][0] < b.execute(
        "SELECT min(stamp) FROM _crr.cl")[0][0] else (b, a)
    sync(first, v, "r")
    sync(second, v, "r")
    sync(second, first)
    got = v.execute('SELECT id, cl, stamp, vis FROM _crr."p$w" WHERE cl > 0 ORDER BY id')
    assert got == first.execute("SELECT id, cl, stamp, vis FROM _crr.cl ORDER BY id")
    assert v.execute('SELECT count(*), count(DISTINCT id) FROM _crr."p$w"') == [(2, 2)]


@pytest.mark.parametrize("layout", ["replica", "co-located"])
def test_a_tuple_whose_entry_came_before_it_is_added_beside_first_inserts(layout: str) -> None:
    """Entries of r arrive alone first (a changeset without its tuples); then a changeset brings those
    tuples without their entries, beside a new row with its entry. Every entry in that batch is new,
    so only the tuple without an entry tells that the table holds its row: fails if the first-insert
    INSERT were taken alone (the tuple's row would stay without values, and the view without it)."""
    base = crr.Site(site_id="base")
    base.execute("CREATE REPLICATED TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)")
    v = crr.Site(site_id="v")
    if layout == "replica":
        v.execute("CREATE REMOTE TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)")
        v.execute("CREATE MATERIALIZED VIEW p AS SELECT b, c FROM r WHERE b > 0")
        assert v.relation("r").replica
    else:
        v.execute("CREATE REMOTE SOURCE r (a INTEGER, b INTEGER, c VARCHAR)")
        v.execute("CREATE MATERIALIZED VIEW p AS SELECT b, c FROM r WHERE b > 0")
        assert v.relation("p").colocated
    base.execute("INSERT INTO r VALUES (1, 1, 'x')")
    entries_only = base.changes()
    for rc in entries_only.relations:
        rc.tuples = rc.tuples.slice(0, 0)
    v.merge(entries_only.to_bytes())
    assert app(v, "p") == []
    base.execute("INSERT INTO r VALUES (3, 3, 'b')")
    cs = base.changes()
    first_id = entries_only.cl.column("id")[0]
    keep = [i for i, x in enumerate(cs.cl.column("id")) if x != first_id]
    cs.cl = cs.cl.take(keep)  # the new row's entry only, with both tuples
    assert cs.cl.num_rows == 1
    v.merge(cs.to_bytes())
    assert app(v, "p") == [(1, "x"), (3, "b")]
