"""Batches of first inserts (every causal length 1) are merged by an INSERT of the ids a site has no
entry of, then the MERGE for the ids it has (crr.causal.first_entries_insert_sql,
crr.replica.first_insert_sql, crr.colocated.first_insert_sql); batches whose lengths are all above 1
(deletes) by an UPDATE of the stored entries, then the MERGE for what it left
(crr.causal.later_entries_update_sql). Each test says which bug would make it fail."""

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


LAYOUTS = {
    "replicated": "CREATE REPLICATED TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)",
    "replica": "CREATE REMOTE TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)",
    "co-located": "CREATE REMOTE SOURCE r (a INTEGER, b INTEGER, c VARCHAR)",
}


def _layout_site(layout: str, site_id: str = "v") -> crr.Site:
    v = crr.Site(site_id=site_id)
    v.execute(LAYOUTS[layout])
    v.execute("CREATE MATERIALIZED VIEW p AS SELECT b, c FROM r WHERE b > 0")
    assert v.relation("p").colocated == (layout == "co-located")
    assert v.relation("r").replica == (layout == "replica")
    return v


def _base() -> crr.Site:
    base = crr.Site(site_id="base")
    base.execute("CREATE REPLICATED TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)")
    return base


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_delete_of_a_row_never_seen_stays_deleted_when_its_insert_arrives(layout: str) -> None:
    """A site receives the delete of a row (length 2) before the row's insert (length 1, relayed by a
    site that has not seen the delete). Fails if the UPDATE of stored entries were taken alone: the
    delete's entry would be dropped (no row to update), and the insert arriving after it would show
    the deleted row."""
    base = _base()
    base.execute("INSERT INTO r VALUES (1, 1, 'x'), (2, 2, 'y')")
    inserted = base.cursor
    relay = _base()
    sync(base, relay)
    base.execute("DELETE FROM r WHERE a = 1")
    v = _layout_site(layout)
    v.merge(base.changes(since=inserted).to_bytes())  # the delete alone
    assert app(v, "p") == []
    v.merge(relay.changes().to_bytes())  # the inserts, without the delete
    assert app(v, "p") == [(2, "y")]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_replayed_delete_batch_changes_nothing(layout: str) -> None:
    """The same delete changeset merged twice: the second UPDATE finds nothing grown and the MERGE
    after it nothing to write. Fails if either wrote a row (the merge would report changes)."""
    base = _base()
    base.execute("INSERT INTO r SELECT i, i, 'v' FROM range(1, 50) r(i)")
    v = _layout_site(layout)
    cursor = sync(base, v)
    base.execute("DELETE FROM r WHERE a < 20")
    data = base.changes(since=cursor).to_bytes()
    assert v.merge(data).changed
    assert app(v, "p") == [(i, "v") for i in range(20, 50)]
    assert not v.merge(data).changed
    assert app(v, "p") == [(i, "v") for i in range(20, 50)]


@pytest.mark.parametrize("layout", ["replica", "co-located"])
def test_a_delete_brings_the_values_of_a_tuple_whose_entry_came_alone(layout: str) -> None:
    """A row's entry arrives alone (a changeset without its tuples), then its delete with the tuple.
    Every entry grows, so only the tuple's row without values tells that the MERGE must run after the
    UPDATE: fails if it did not (the site would keep the tuple without its values, and its changes
    would not relay them), or if the row both statements wrote were reported twice."""
    base = _base()
    base.execute("INSERT INTO r VALUES (1, 1, 'x'), (2, 2, 'y')")
    inserted = base.cursor
    v = _layout_site(layout)
    entries_only = base.changes()
    for rc in entries_only.relations:
        rc.tuples = rc.tuples.slice(0, 0)
    v.merge(entries_only.to_bytes())
    base.execute("DELETE FROM r WHERE a = 1")
    delete = base.changes(since=inserted)
    assert delete.relations[0].tuples.num_rows == 1 and delete.cl.column("cl").to_pylist() == [2]
    result = v.merge(delete.to_bytes())
    assert result.cl_changed == 1  # the UPDATE's row and the MERGE's are one entry that grew, counted once
    assert app(v, "p") == []
    relayed = v.changes(relations=["p"] if layout == "co-located" else ["r"])
    assert relayed.relations[0].tuples.num_rows == 1  # the deleted row's values, kept


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_delete_batch_with_a_forged_tuple_is_refused(layout: str) -> None:
    """A delete changeset whose tuple's values do not match its id is refused, as any other batch:
    fails if the UPDATE of stored entries read the entries without the received tuples' checks."""
    from tests.test_crafted import edit

    home = {"replicated": "_crr.cl", "replica": '_crr."r$e"', "co-located": '_crr."p$w"'}[layout]
    state = lambda site: (app(site, "p"), site.cursor, site.execute(f"SELECT * FROM {home} ORDER BY id"))
    base = _base()
    base.execute("INSERT INTO r VALUES (1, 1, 'x'), (2, 2, 'y')")
    v = _layout_site(layout)
    cursor = sync(base, v)
    base.execute("DELETE FROM r WHERE a = 1")
    cs = base.changes(since=cursor)
    rc = cs.relations[0]
    assert rc.tuples.num_rows == 1
    rc.tuples = edit(rc.tuples, "SELECT * REPLACE ('forged' AS c2) FROM x")
    before = state(v)
    with pytest.raises(crr.ChangesetError, match="do not match their values"):
        v.merge(cs.to_bytes())
    assert state(v) == before


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("newer_first", [True, False])
def test_a_first_insert_of_a_key_another_version_holds_is_left_to_the_key_wide_merge(
        layout: str, newer_first: bool) -> None:
    """Two sites insert the same key with different values (two tuple ids, one key hash, both of
    length 1): the site receiving the second finds the first present. Fails if the first-insert
    INSERT wrote the second with visibility by parity (both versions would show) instead of leaving
    it to the MERGE's key-wide form (only the newer stamp shows)."""
    a, b = _base(), crr.Site(site_id="b")
    b.execute(LAYOUTS["replicated"])
    a.execute("INSERT INTO r VALUES (1, 1, 'old'), (2, 2, 'a')")
    b.execute("INSERT INTO r VALUES (1, 1, 'new'), (3, 3, 'b')")  # a later stamp
    v = _layout_site(layout)
    first, second = (b, a) if newer_first else (a, b)
    sync(first, v)
    sync(second, v)
    sync(b, a)
    assert app(a, "r") == [(1, 1, "new"), (2, 2, "a"), (3, 3, "b")]
    assert app(v, "p") == [(1, "new"), (2, "a"), (3, "b")]


def test_a_replayed_first_insert_relabelled_with_another_relation_is_refused() -> None:
    """A first insert merged again with its entry naming another keyed table of the site: an id's
    relation never changes, so it is forged, and the plain MERGE refused it. Fails if the INSERT's
    MERGE for the ids it left took the key-wide form, which drops an entry that neither grows nor
    flips before comparing it with the stored one (the changeset would be accepted)."""
    from tests.test_crafted import edit

    for tuples in (True, False):
        a, v = crr.Site(site_id="a"), crr.Site(site_id="v")
        for s in (a, v):
            s.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, x VARCHAR)")
            s.execute("CREATE REPLICATED TABLE u (k INTEGER PRIMARY KEY, x VARCHAR)")
        a.execute("INSERT INTO t VALUES (1, 'x')")
        cs = a.changes()
        v.merge(cs.to_bytes())
        before = v.execute("SELECT * FROM _crr.cl ORDER BY id")
        cs.cl = edit(cs.cl, "SELECT * REPLACE ('u' AS rel) FROM x")
        if not tuples:
            for rc in cs.relations:
                rc.tuples = rc.tuples.slice(0, 0)
        with pytest.raises(crr.ChangesetError, match="disagree about a tuple's relation or key hash"):
            v.merge(cs.to_bytes())
        assert v.execute("SELECT * FROM _crr.cl ORDER BY id") == before


def test_a_tuple_without_its_entry_beside_another_relations_entry_of_its_id_gets_its_values() -> None:
    """A replica's tuple whose entry came alone arrives again without that entry, beside a new row
    and an entry of a table the site does not hold that carries the tuple's id (a corrupt changeset
    the merge takes: that entry is ignored). Fails if the check for tuples without an entry in the
    batch looked at every relation's entries rather than the replica's own: the MERGE would be
    skipped and the tuple would stay without its values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    base = crr.Site(site_id="base")
    base.execute("CREATE REPLICATED TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)")
    base.execute("CREATE REPLICATED TABLE q (z INTEGER)")
    v = _layout_site("replica")
    base.execute("INSERT INTO r VALUES (1, 1, 'x')")
    first = base.changes(relations=["r"])
    entries_only = base.changes(relations=["r"])
    for rc in entries_only.relations:
        rc.tuples = rc.tuples.slice(0, 0)
    v.merge(entries_only.to_bytes())
    cursor = base.cursor
    base.execute("INSERT INTO r VALUES (3, 3, 'b')")
    base.execute("INSERT INTO q VALUES (7)")
    cs = base.changes(since=cursor)
    rc = [x for x in cs.relations if x.name == "r"][0]
    rc.tuples = pa.concat_tables([rc.tuples, first.relations[0].tuples])  # tuple 1 again, without its entry
    cl = cs.cl.combine_chunks()
    is_q = pc.equal(cl.column("rel"), "q")
    q_rows = cl.filter(is_q)
    q_rows = q_rows.set_column(0, cl.schema.field(0), first.cl.column("id"))  # q's entry takes tuple 1's id
    cs.cl = pa.concat_tables([cl.filter(pc.invert(is_q)), q_rows])
    v.merge(cs.to_bytes())
    assert app(v, "r") == [(1, 1, "x"), (3, 3, "b")]
    assert app(v, "p") == [(1, "x"), (3, "b")]
