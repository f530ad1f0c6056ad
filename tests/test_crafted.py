"""Changesets from a peer that holds the secret but lies (DESIGN 1.6, guarantee 4).

Each test forges one field of an otherwise valid changeset the way a malicious or buggy peer could
(key hashes, stamps, causal lengths, tuples of a local view, NULLs a receiver refuses) and checks
that the merge is refused with a ChangesetError naming the relation and changes nothing, or that
the forged part is ignored, and that the site keeps working afterwards.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

import crr
from crr.types import Column, tuple_id_sql
from tests.conftest import app, aug


def edit(table: pa.Table, select: str) -> pa.Table:
    """``table`` rewritten by a DuckDB SELECT over it (named ``x``), keeping crr's Arrow types."""
    con = duckdb.connect()
    con.execute("SET arrow_lossless_conversion = true")
    con.register("x", table)
    out = con.sql(select).to_arrow_table()
    con.close()
    return out


def state(site: crr.Site) -> tuple:
    """Everything a merge could change at a site."""
    return {r: (app(site, r) if site.relation(r).kind != "source" else None, aug(site, r))
            for r in site.relations()}, site.cursor


def every_table(site: crr.Site) -> dict[str, list[tuple]]:
    """Every table of a site's file, crr's own included (a co-located source has no tables of its own)."""
    names = site.execute("SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT temporary")
    return {f"{s}.{t}": site.execute(f'SELECT * FROM "{s}"."{t}" ORDER BY ALL') for s, t in names}


def keyed_pair() -> tuple[crr.Site, crr.Site]:
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    a.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y')")
    b.merge(a.changes())
    return a, b


def test_forged_key_hash_with_values_is_refused():
    a, b = keyed_pair()
    a.execute("INSERT INTO t VALUES (3, 'z')")
    cs = a.changes(since=b.peer_cursor("a", "t"))
    # the new version claims the key hash of k = 1: two visible rows for one key if believed
    kh1 = "(SELECT kh FROM x WHERE id = (SELECT min(id) FROM x))"
    cs.cl = edit(cs.cl, f"SELECT id, rel, cl, {kh1} AS kh, stamp FROM x")
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="key hash of a tuple of t"):
        b.merge(cs.to_bytes())
    assert state(b) == before


def test_forged_key_hash_of_a_known_id_is_refused():
    a, b = keyed_pair()
    cs = a.changes()
    cs.relations[0].tuples = cs.relations[0].tuples.slice(0, 0)  # entries alone: no values to recompute from
    cs.cl = edit(cs.cl, "SELECT id, rel, cl + 2 AS cl, kh + 1 AS kh, stamp FROM x")
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="disagree about a tuple's relation or key hash"):
        b.merge(cs)
    assert state(b) == before
    # the same entries relabelled as another relation the changeset carries
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE u (k INT PRIMARY KEY, v VARCHAR)")
    a.execute("INSERT INTO u VALUES (9, 'u')")
    cs = a.changes()
    cs.relations[0].tuples = cs.relations[0].tuples.slice(0, 0)
    cs.cl = edit(cs.cl, "SELECT id, 'u' AS rel, cl + 2 AS cl, kh, stamp FROM x WHERE rel = 't'")
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="relation or key hash"):
        b.merge(cs)
    assert state(b) == before


def test_a_tuple_id_shared_by_two_keyed_relations_is_refused():
    # the merge reads one causal-length entry per id (crr.causal); joining the entries with key
    # hashes recomputed from two relations' tuples that share an id would repeat that entry
    a, b = keyed_pair()
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE u (k INT PRIMARY KEY, v VARCHAR)")
    a.execute("INSERT INTO t VALUES (5, 'same')")
    a.execute("INSERT INTO u VALUES (5, 'same')")
    cs = a.changes(since=b.peer_cursor("a", "t"))
    t_changes, u_changes = sorted(cs.relations, key=lambda rc: rc.name)
    u_changes.tuples = t_changes.tuples  # u claims t's tuples, ids included
    cs.cl = edit(cs.cl, "SELECT * FROM x WHERE rel = 't'")
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="key hash of a tuple of t does not match"):
        b.merge(cs)
    assert state(b) == before
    b.merge(a.changes())  # the honest changeset still merges
    assert app(b, "u") == app(a, "u")


def test_a_site_whose_first_merge_is_refused_merges_the_next_one():
    # the refused merge is the first to read Arrow slots (crr.arrow_slots) at this site; the
    # rollback undoes their registration, and the next merge must register them again
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
        s.execute("CREATE MATERIALIZED VIEW tv AS SELECT v FROM t")
    a.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y')")
    cs = a.changes()
    cs.cl = edit(cs.cl, "SELECT id, rel, cl, kh + 1 AS kh, stamp FROM x")
    with pytest.raises(crr.ChangesetError):
        b.merge(cs)
    b.merge(a.changes())
    assert app(b, "t") == app(a, "t") and app(b, "tv") == app(a, "tv")
    b.execute("INSERT INTO t VALUES (3, 'z')")
    assert sorted(app(b, "tv")) == [("x",), ("y",), ("z",)]


def test_keyed_entries_without_key_hash_are_refused():
    a, b = keyed_pair()
    cs = a.changes()
    cs.cl = edit(cs.cl, "SELECT id, rel, cl, NULL::UHUGEINT AS kh, stamp FROM x")
    with pytest.raises(crr.ChangesetError, match="keyed table t has no key hash"):
        b.merge(cs)


def test_stamp_far_in_the_future_is_refused_and_writes_go_on(tmp_path):
    a, _ = keyed_pair()
    path = str(tmp_path / "b.duckdb")
    b = crr.Site(path, site_id="b")
    b.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    cs = a.changes()
    cs.cl = edit(cs.cl, "SELECT id, rel, cl, kh, 340282366920938463463374607431768211455::UHUGEINT AS stamp FROM x")
    with pytest.raises(crr.ChangesetError, match="ahead of this site's clock"):
        b.merge(cs.to_bytes())
    assert app(b, "t") == []
    b.merge(a.changes())
    b.execute("UPDATE t SET v = 'new' WHERE k = 1")
    b.close()
    with crr.Site(path) as b:
        b.execute("UPDATE t SET v = 'newer' WHERE k = 1")
        b.execute("INSERT INTO t VALUES (5, 'w')")
        assert app(b, "t") == [(1, "newer"), (2, "y"), (5, "w")]


def test_clock_skew_is_configurable():
    a, _ = keyed_pair()
    hour_ahead = (((int(__import__("time").time() * 1000) + 3_600_000) << 16) << 64)
    cs = a.changes()
    cs.cl = edit(cs.cl, f"SELECT id, rel, cl, kh, {hour_ahead}::UHUGEINT AS stamp FROM x")
    strict = crr.Site(site_id="strict", max_clock_skew=60)
    lenient = crr.Site(site_id="lenient")
    for s in (strict, lenient):
        s.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    with pytest.raises(crr.ChangesetError, match="60 s ahead"):
        strict.merge(cs)
    lenient.merge(cs)
    assert app(lenient, "t") == [(1, "x"), (2, "y")]
    # set on an open site, it bounds the merges after; checked as at opening, and a bad value
    # leaves the bound as it was
    strict.max_clock_skew = 7200
    strict.merge(cs)
    assert app(strict, "t") == [(1, "x"), (2, "y")] and strict.max_clock_skew == 7200.0
    with pytest.raises(crr.SiteError, match="max_clock_skew"):
        strict.max_clock_skew = -5
    assert strict.max_clock_skew == 7200.0


def test_a_site_whose_clock_was_set_back_merges_what_it_holds(monkeypatch):
    """A site whose wall clock ran two days ahead stamped a write, then was set right: it refused its
    own changes ("more than 86400 s ahead") and a peer's copy of them, so a merge of what it held was
    no longer idempotent (found by a probe). The bound is measured from its hybrid clock too."""
    import time
    real = time.time
    ddl = "CREATE REPLICATED TABLE r (k INT PRIMARY KEY, v VARCHAR)"
    a = crr.Site(site_id="a")
    a.execute(ddl)
    monkeypatch.setattr(time, "time", lambda: real() + 2 * 86_400)
    a.execute("INSERT INTO r VALUES (1, 'x')")
    monkeypatch.setattr(time, "time", real)
    assert not a.merge(a.changes()).changed  # its own changes again
    b = crr.Site(site_id="b", max_clock_skew=float("inf"))
    b.execute(ddl)
    b.merge(a.changes())
    b.execute("UPDATE r SET v = 'y' WHERE k = 1")  # b's stamp: one past a's
    b.execute("INSERT INTO r VALUES (2, 'z')")
    a.merge(b.changes())
    assert app(a, "r") == [(1, "y"), (2, "z")]
    c = crr.Site(site_id="c")  # a site whose clock never ran ahead still bounds what it takes
    c.execute(ddl)
    with pytest.raises(crr.ChangesetError, match="86400 s ahead"):
        c.merge(a.changes())


def test_an_unbounded_clock_skew_takes_any_stamp_and_a_bad_one_is_refused():
    a, _ = keyed_pair()
    cs = a.changes()
    cs.cl = edit(cs.cl, "SELECT id, rel, cl, kh, 340282366920938463463374607431768211455::UHUGEINT AS stamp FROM x")
    anything = crr.Site(site_id="any", max_clock_skew=float("inf"))
    anything.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    anything.merge(crr.Changeset(source="a", since=0, cursor=0, relations=[], cl=None))  # nothing: no stamp to bound
    anything.merge(cs)
    assert app(anything, "t") == [(1, "x"), (2, "y")]
    for bad in (float("nan"), -1, "soon"):
        with pytest.raises(crr.SiteError, match="max_clock_skew"):
            crr.Site(site_id="bad", max_clock_skew=bad)


def test_huge_causal_length_is_refused_and_tuple_stays_deletable():
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE r (x INT)")
    a.execute("INSERT INTO r VALUES (1)")
    cs = a.changes()
    cs.cl = edit(cs.cl, "SELECT id, rel, 2147483647 AS cl, kh, stamp FROM x")
    with pytest.raises(crr.ChangesetError, match="causal length of r exceeds"):
        b.merge(cs)
    b.merge(a.changes())
    b.execute("DELETE FROM r WHERE x = 1")
    assert app(b, "r") == []
    assert b.execute("SELECT cl FROM _crr.cl") == [(2,)]


def test_tuples_of_a_local_view_are_ignored():
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE r (x INT)")
        s.execute("CREATE MATERIALIZED VIEW v AS SELECT x FROM r WHERE x > 1")
    a.execute("INSERT INTO r VALUES (5)")
    b.execute("INSERT INTO r VALUES (7)")
    result = b.merge(a.changes(relations=["v"]))
    assert "v" in result.ignored
    assert app(b, "v") == [(7,)]  # a's view rows come only with a's r, not as foreign view tuples
    b.merge(a.changes(relations=["r"]))
    assert app(b, "v") == [(5,), (7,)]


def test_not_null_declared_only_at_the_receiver_is_a_schema_mismatch():
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    a.execute("CREATE REPLICATED TABLE r (x INT, y INT)")
    b.execute("CREATE REMOTE TABLE r (x INT, y INT NOT NULL)")
    b.execute("CREATE REPLICATED TABLE other (z INT)")
    a.execute("INSERT INTO r VALUES (2, 3)")  # no NULL yet: refused all the same, before any data
    before = state(b)
    with pytest.raises(crr.SchemaMismatchError, match="declares y NOT NULL but the source does not"):
        b.merge(a.changes().to_bytes())
    assert state(b) == before
    b.execute("INSERT INTO other VALUES (1)")  # the site keeps working
    assert app(b, "other") == [(1,)]


def test_null_sent_for_a_not_null_column_is_refused():
    """A lying peer declares the NOT NULL but sends NULL anyway."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE r (x INT, y INT NOT NULL)")
    a.execute("INSERT INTO r VALUES (1, 2)")
    cs = a.changes()
    rc = cs.relations[0]
    forged_id = tuple_id_sql("r", [Column("c0", "INTEGER"), Column("c1", "INTEGER")])  # of (c0, NULL)
    rc.tuples = edit(rc.tuples, f"SELECT {forged_id} AS id, c0, NULL::INTEGER AS c1 FROM (SELECT c0, NULL AS c1 FROM x)")
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="NULL in column y"):
        b.merge(cs.to_bytes())
    assert state(b) == before


def test_refused_merge_leaves_lineage_as_it_was():
    """A refused merge into an unstored remote source must not leave its lineage learned in memory
    (it would refuse a later join view over the source until the site is reopened)."""
    a, v = crr.Site(site_id="a"), crr.Site(site_id="v")
    a.execute("CREATE REPLICATED TABLE r (x INT)")
    a.execute("INSERT INTO r VALUES (1)")
    v.execute("CREATE REMOTE SOURCE r (x INT)")
    v.execute("CREATE MATERIALIZED VIEW p AS SELECT x FROM r")
    cs = a.changes()
    cs.relations[0].tuples = edit(cs.relations[0].tuples, "SELECT id, c0 + 1 AS c0 FROM x")
    with pytest.raises(crr.ChangesetError, match="do not match their values"):
        v.merge(cs)
    assert v.lineage("r") == set()
    v.execute("CREATE MATERIALIZED VIEW j AS SELECT x.x FROM r x JOIN r y ON x.x = y.x")
    v.merge(a.changes())
    assert app(v, "j") == [(1,)] and app(v, "p") == [(1,)]


def test_insert_many_refuses_timestamps_duckdb_cannot_hold():
    s = crr.Site()
    s.execute("CREATE REPLICATED TABLE e (ts TIMESTAMP)")
    bad = pa.table({"ts": pa.array([-2**63 + 5], pa.int64()).cast(pa.timestamp("us"))})
    with pytest.raises(crr.TypeMismatchError, match="timestamp before DuckDB's range"):
        s.insert_many("e", bad)
    assert s.execute("SELECT ts::VARCHAR FROM e") == []  # the database is still usable


def test_a_changeset_object_is_validated_like_bytes():
    a, b = keyed_pair()
    cs = a.changes()
    cs.relations[0].tuples = cs.relations[0].tuples.rename_columns(["id", "k", "v"])
    with pytest.raises(crr.ChangesetError, match="c0"):
        b.merge(cs)


@pytest.mark.parametrize("receiver", ["replica", "remote table"])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_a_tuple_sent_twice_in_one_changeset_is_refused(as_bytes: bool, receiver: str):
    """A changeset holds each tuple id once; the merge's INSERTs of new base tuples (into a replica,
    or as monomials of a stored remote table) rely on it (no DISTINCT there), so a repeated id must
    be refused before anything is written, whether the changeset arrives as bytes or as an object
    built in Python."""
    a, b = keyed_pair()
    if receiver == "remote table":
        b = crr.Site(site_id="c")
        b.execute("CREATE REMOTE TABLE t (k INT PRIMARY KEY, v VARCHAR)")
        b.execute("CREATE MATERIALIZED VIEW vt AS SELECT v FROM t")
        b.merge(a.changes())
    a.execute("INSERT INTO t VALUES (3, 'z')")
    cs = a.changes(since=b.peer_cursor("a", "t"))
    cs.relations[0].tuples = pa.concat_tables([cs.relations[0].tuples, cs.relations[0].tuples])
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="tuples: column 'id' holds duplicates"):
        b.merge(cs.to_bytes() if as_bytes else cs)
    assert state(b) == before
    b.merge(a.changes())
    assert app(b, "t") == app(a, "t")
    if receiver == "remote table":
        assert sorted(b.execute("SELECT * FROM vt")) == [("x",), ("y",), ("z",)]



@pytest.mark.parametrize("rows", [3, 200])
def test_an_entry_sent_twice_in_one_changeset_is_refused(rows: int):
    """A changeset holds each causal-length entry's id once (Changeset.validate), which the merge of
    rows new to the site relies on (``crr.point_merge.received_new_batch`` does not count them again):
    an entry repeated, in a changeset of few rows or of a batch, is refused before anything is written."""
    a, b = keyed_pair()
    a.insert_many("t", [(k, f"v{k}") for k in range(10, 10 + rows)])
    cs = a.changes(since=b.peer_cursor("a", "t"))
    cs.cl = pa.concat_tables([cs.cl, cs.cl.slice(rows // 2, 1)])
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="causal lengths: column 'id' holds duplicates"):
        b.merge(cs.to_bytes())
    assert state(b) == before
    b.merge(a.changes())
    assert app(b, "t") == app(a, "t")


TIE_HOMES = {  # how the receiver holds k: each keeps the entries in another home and decides visibility
    "replicated": "CREATE REPLICATED TABLE k (id INT PRIMARY KEY, v VARCHAR)",
    "remote table": "CREATE REMOTE TABLE k (id INT PRIMARY KEY, v VARCHAR)",
    "remote source": "CREATE REMOTE SOURCE k (id INT PRIMARY KEY, v VARCHAR)",
}


def tied_versions() -> tuple[crr.Changeset, crr.Changeset, str]:
    """Two versions of key 1 from two sites, the second forged to carry the first's stamp (two sites
    sharing one site id could write that too), and the value of the one with the larger id."""
    a, a2 = crr.Site(site_id="a"), crr.Site(site_id="a2")
    for s, v in ((a, "one"), (a2, "uno")):
        s.execute("CREATE REPLICATED TABLE k (id INT PRIMARY KEY, v VARCHAR)")
        s.execute("INSERT INTO k VALUES (1, ?)", [v])
    first, second = a.changes(), a2.changes()
    second.cl = second.cl.set_column(4, "stamp", first.cl.column("stamp"))
    both = pa.concat_tables([first.relations[0].tuples, second.relations[0].tuples])
    larger = edit(both, "SELECT c1 FROM x ORDER BY id DESC LIMIT 1").column("c1")[0].as_py()
    return first, second, larger


@pytest.mark.parametrize("home", TIE_HOMES, ids=list(TIE_HOMES))
def test_versions_of_a_key_with_equal_stamps_show_one_in_any_order(home):
    """Equal stamps made both versions visible (a key shown twice, which no UPDATE could then
    change); now the larger id wins, whatever the order of the merges."""
    first, second, larger = tied_versions()
    for order in ((first, second), (second, first)):
        b = crr.Site(site_id="b")
        b.execute(TIE_HOMES[home])
        b.execute("CREATE MATERIALIZED VIEW kv AS SELECT id, v FROM k")
        for cs in order:
            b.merge(cs.to_bytes())
        assert app(b, "kv") == [(1, larger)]
        if home != "remote source":
            assert app(b, "k") == [(1, larger)]


def test_keyed_entries_without_a_stamp_are_refused():
    a, b = keyed_pair()
    fresh = crr.Site(site_id="fresh")  # a first merge of a few rows takes the point path (crr.point_merge)
    fresh.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    cs = a.changes()
    cs.cl = edit(cs.cl, "SELECT id, rel, cl, kh, NULL::UHUGEINT AS stamp FROM x")
    for site in (b, fresh):
        before = state(site)
        with pytest.raises(crr.ChangesetError, match="entry of t has a key hash but no stamp"):
            site.merge(cs.to_bytes())
        assert state(site) == before


RELAYS = {"": "from the table's site", "REMOTE TABLE k (id INT, v VARCHAR)": "through a relay without the key",
          "REMOTE TABLE k (id INT PRIMARY KEY, v VARCHAR)": "through a keyed relay"}


# (a replicated table merges only its replicas' changes: a relay's are refused)
@pytest.mark.parametrize("home,relay", [(h, r) for h in TIE_HOMES for r in RELAYS if h != "replicated" or not r],
                         ids=[f"{h}, {RELAYS[r]}" for h in TIE_HOMES for r in RELAYS if h != "replicated" or not r])
def test_forged_key_hashes_are_refused_wherever_the_table_is_held(home, relay):
    """A remote copy or source of a keyed table took entries under any key hash (its key hashes
    were never recomputed, nor those of a relay's rows): an old version made present under another
    key hash showed the key twice, and the honest changes were refused for good afterwards."""
    a = crr.Site(site_id="a")
    a.execute("CREATE REPLICATED TABLE k (id INT PRIMARY KEY, v VARCHAR)")
    a.execute("INSERT INTO k VALUES (1, 'old')")
    a.execute("UPDATE k SET v = 'new' WHERE id = 1")
    if relay:  # a peer's remote copy passes the rows on (as a view's rows, with the table's ids)
        hop = crr.Site(site_id="hop")
        hop.execute(f"CREATE {relay}")
        hop.merge(a.changes())
        a = hop
    honest = a.changes()
    b = crr.Site(site_id="b")
    b.execute(TIE_HOMES[home])
    b.execute("CREATE MATERIALIZED VIEW kv AS SELECT id, v FROM k")
    before = every_table(b)
    for forged in ("CASE WHEN cl = 2 THEN 3 ELSE cl END::INT AS cl, CASE WHEN cl = 2 THEN kh + 1 ELSE kh END AS kh",
                   "cl, NULL::UHUGEINT AS kh"):
        cs = a.changes()
        cs.cl = edit(cs.cl, f"SELECT id, rel, {forged}, stamp FROM x")
        with pytest.raises(crr.ChangesetError, match="key hash of a tuple of k does not match|k has no key hash"):
            b.merge(cs.to_bytes())
        assert every_table(b) == before
    b.merge(honest.to_bytes())
    assert app(b, "kv") == [(1, "new")]



def lineage_changesets() -> tuple[crr.Changeset, crr.Changeset, crr.Changeset, crr.Changeset]:
    """Changes of views ``vp`` (over ``u``) and ``vj`` (``u`` join ``k``); the same with ``vp``'s
    lineage stated as ``k``, too narrow (its rows hold ids of ``u``); then, after u's row (1, 'x') is
    deleted, ``vj``'s changes (with that deletion's entry) and ``vp``'s (the true lineage)."""
    a = crr.Site(site_id="a")
    a.execute("CREATE REPLICATED TABLE u (a INT, b VARCHAR)")
    a.execute("CREATE REPLICATED TABLE k (id INT PRIMARY KEY, v VARCHAR)")
    a.execute("CREATE MATERIALIZED VIEW vp AS SELECT b FROM u")
    a.execute("CREATE MATERIALIZED VIEW vj AS SELECT u.a, k.v FROM u JOIN k ON u.a = k.id")
    a.execute("INSERT INTO u VALUES (1, 'x'), (2, 'y')")
    a.execute("INSERT INTO k VALUES (1, 'one')")
    honest = a.changes()
    forged = crr.Changeset.from_bytes(honest.to_bytes())
    next(r for r in forged.relations if r.name == "vp").lineage = ["k"]
    a.execute("DELETE FROM u WHERE a = 1")
    return honest, forged, a.changes(relations=["vj"]), a.changes(relations=["vp"])


LINEAGE_COPY = ["CREATE REMOTE TABLE vp (b VARCHAR)", "CREATE REMOTE TABLE vj (a INT, v VARCHAR)",
                "CREATE MATERIALIZED VIEW w AS SELECT b || '!' AS bb FROM vp"]


@pytest.mark.parametrize("order", ["honest first", "forged first", "a flip between"])
def test_a_lineage_stated_too_narrow_is_made_good_by_the_true_one_in_any_order(order):
    """vp's lineage stated as k: in? of its rows read only k's entries (so they counted invisible),
    and flips of u's ids passed them by; when the true lineage came, nothing valued them again: the
    copy and the view over it stayed empty (or kept a deleted row) for good. Now a lineage that
    grows values every tuple of the relation and of the views over it again."""
    honest, forged, deleted, after = lineage_changesets()
    c = crr.Site(site_id="c")
    for ddl in LINEAGE_COPY:
        c.execute(ddl)
    merges = {"honest first": (honest, forged), "forged first": (forged, honest),
              "a flip between": (forged, deleted, after)}[order]
    for cs in merges:
        c.merge(cs.to_bytes())
    expected = ["x", "y"] if order != "a flip between" else ["y"]
    assert app(c, "vp") == [(b,) for b in expected] and app(c, "w") == [(b + "!",) for b in expected]


@pytest.mark.parametrize("home", TIE_HOMES, ids=list(TIE_HOMES))
def test_key_hashes_forged_onto_an_unkeyed_tables_entries_are_refused_wherever_it_is_held(home):
    """A replicated table refused them; a remote copy or source took them, so two rows forged under
    one key hash showed one of them, and the honest changes were refused after it."""
    a = crr.Site(site_id="a")
    a.execute("CREATE REPLICATED TABLE k (id INT, v VARCHAR)")
    a.execute("INSERT INTO k VALUES (1, 'x'), (2, 'y')")
    b = crr.Site(site_id="b")
    b.execute(TIE_HOMES[home].replace(" PRIMARY KEY", ""))
    b.execute("CREATE MATERIALIZED VIEW kv AS SELECT id, v FROM k")
    before = every_table(b)
    cs = a.changes()
    cs.cl = edit(cs.cl, "SELECT id, rel, cl, 7::UHUGEINT AS kh, stamp FROM x")
    with pytest.raises(crr.ChangesetError, match="entry of unkeyed table k has a key hash"):
        b.merge(cs.to_bytes())
    assert every_table(b) == before
    b.merge(a.changes().to_bytes())
    assert app(b, "kv") == [(1, "x"), (2, "y")]
