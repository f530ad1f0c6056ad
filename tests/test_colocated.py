"""The co-located layout (crr/colocated.py): one select/project view of a remote source that keeps
nothing holds the source's causal lengths and its own derivations in one table, ``_crr."<v>$w"``.

Each test says which bug would make it fail. The convergence property (tests/test_convergence.py,
site V4) checks the layout against a standard-layout twin after every delivery.
"""

from __future__ import annotations

import pytest

import crr
from crr.changeset import Changeset, RelationChanges
from tests.conftest import app, sync, without_tuples


def tables(site: crr.Site) -> set[str]:
    return {r[0] for r in site.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = '_crr'")}


@pytest.fixture()
def base():
    s = crr.Site(site_id="base")
    s.execute("CREATE REPLICATED TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)")
    yield s
    s.close()


def view_site(path=None, views=(("p", "SELECT b, c FROM r WHERE b > 0"),)) -> crr.Site:
    v = crr.Site(path or ":memory:", site_id="v")
    v.execute("CREATE REMOTE SOURCE r (a INTEGER, b INTEGER, c VARCHAR)")
    for name, sql in views:
        v.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    return v


def expected(base: crr.Site, sql: str) -> list[tuple]:
    return base.execute(f"SELECT DISTINCT * FROM ({sql}) ORDER BY ALL NULLS FIRST")


def entries(site: crr.Site, view: str) -> list[tuple]:
    """The causal-length entries a view's changes carry (wherever the site keeps them)."""
    cl = site.changes(relations=[view]).cl
    assert cl is not None
    return sorted((r["id"], r["rel"], r["cl"], r["kh"], r["stamp"]) for r in cl.to_pylist())


def test_which_views_take_the_layout(base):
    """Fails if an ineligible view took the layout (a union gives one tuple two derivations, a join
    needs the source's tuples, a second view needs the entries in _crr.cl) or an eligible one did not."""
    v = view_site()
    assert v.relation("p").colocated and "p$w" in tables(v) and "p$m" not in tables(v)
    for sql in ("SELECT b FROM r UNION SELECT a FROM r", "SELECT count(*) AS n FROM r",
                "SELECT x.a, y.b FROM r x JOIN r y ON x.b = y.a"):
        other = view_site(views=(("q", sql),))
        assert not other.relation("q").colocated, sql
    two = view_site(views=(("p", "SELECT b, c FROM r WHERE b > 0"), ("q", "SELECT a FROM r")))
    assert not two.relation("p").colocated and not two.relation("q").colocated
    assert {"p$m", "q$m"} <= tables(two) and "p$w" not in tables(two)


def test_a_view_declared_after_a_remote_table_learned_the_sources_lineage_takes_the_standard_layout(base):
    """A probe's case: a remote table of a view over ``r`` (its lineage, learned by a merge, holds
    ``r``) and then the first view over the source ``r``. The view took the co-located layout, which
    that holder breaks, and the CREATE failed converting a ``$w`` table it had not made yet
    (``Table with name p$w does not exist``), at every try."""
    base.execute("INSERT INTO r VALUES (1, 1, 'x'), (2, 2, 'y')")
    base.execute("CREATE MATERIALIZED VIEW big AS SELECT a, c FROM r WHERE a > 1")
    v = crr.Site(site_id="v")
    v.execute("CREATE REMOTE SOURCE r (a INTEGER, b INTEGER, c VARCHAR)")
    v.execute("CREATE REMOTE TABLE big (a INTEGER, c VARCHAR)")
    v.merge(base.changes(relations=["big"]))
    v.execute("CREATE MATERIALIZED VIEW p AS SELECT b, c FROM r WHERE b > 0")
    assert not v.relation("p").colocated and "p$w" not in tables(v)
    v.merge(base.changes(relations=["r"]))
    assert app(v, "p") == expected(base, "SELECT b, c FROM r WHERE b > 0") and app(v, "big") == [(2, "y")]
    v.close()


def test_inserts_deletes_updates_and_rederivations_match_the_query(base, tmp_path):
    """Fails if a deleted tuple stayed (no APP delete), a tuple with another live derivation left
    (the delete ignored other rows of its view tuple), or an update's new version did not appear."""
    v = view_site(tmp_path / "v.db")
    sql = "SELECT b, c FROM r WHERE b > 0"
    base.execute("INSERT INTO r VALUES (1, 1, 'x'), (2, 1, 'x'), (3, 2, 'y'), (4, 0, 'z'), (5, NULL, 'n')")
    cursor = sync(base, v)
    assert app(v, "p") == expected(base, sql) == [(1, "x"), (2, "y")]
    base.execute("DELETE FROM r WHERE a = 1")  # (1, 'x') keeps its other derivation
    base.execute("DELETE FROM r WHERE a = 3")
    cursor = sync(base, v, since=cursor)
    assert app(v, "p") == expected(base, sql) == [(1, "x")]
    base.execute("UPDATE r SET b = 5 WHERE a = 4")  # a filtered tuple's new version passes
    base.execute("UPDATE r SET c = 'w' WHERE a = 2")
    base.execute("INSERT INTO r VALUES (3, 2, 'y')")  # re-insert of a deleted tuple
    sync(base, v, since=cursor)
    assert app(v, "p") == expected(base, sql)
    before = v.cursor
    v.close()
    import duckdb
    con = duckdb.connect(str(tmp_path / "v.db"))  # as after a crash: counters only in the AUG rows
    con.execute("UPDATE _crr.meta SET v = '0' WHERE k IN ('seq', 'hlc')")
    con.close()
    v = crr.Site(tmp_path / "v.db")  # the layout survives a reopen, and the counters with it
    assert v.relation("p").colocated and v.cursor == before
    base.execute("DELETE FROM r WHERE a = 2")
    sync(base, v, since=cursor)
    assert app(v, "p") == expected(base, sql) and v.cursor > before


def test_entries_before_their_tuples_and_tuples_without_entries(base):
    """A source's entries can arrive before its tuples (and tuples before entries); either order must
    end in the same view. Fails if a row created by an entry never got its derivation, or if a
    tuple known without an entry counted as visible."""
    base.execute("INSERT INTO r VALUES (1, 1, 'x'), (2, 2, 'y')")
    cursor = base.cursor
    base.execute("DELETE FROM r WHERE a = 2")
    full = base.changes()
    rc = full.relation("r")
    assert rc is not None and full.cl is not None
    only_entries = Changeset(source="base", since=0, cursor=full.cursor, cl=full.cl,
                             relations=[RelationChanges(rc.name, rc.kind, rc.columns, rc.key, rc.fingerprint,
                                                        rc.lineage, rc.tuples.slice(0, 0), None, rc.not_null)])
    only_tuples = Changeset(source="base", since=0, cursor=full.cursor, cl=None, relations=[rc])
    for order in ((only_entries, only_tuples), (only_tuples, only_entries)):
        v = view_site(views=(("p", "SELECT b, c FROM r"),))
        v.merge(order[0].to_bytes())
        if order[0] is only_tuples:
            assert app(v, "p") == []  # values without entries: nothing is visible yet
        between = v.cursor
        v.merge(order[1].to_bytes())
        assert app(v, "p") == [(1, "x")], order
        # what the second merge added is in the view's changes after the cursor between the merges
        later = v.changes(since=between, relations=["p"])
        rc_p = later.relation("p")
        assert rc_p is not None and later.cl is not None
        if order[0] is only_entries:  # the derivations are what is new
            assert sorted(rc_p.tuples.column("c1").to_pylist()) == ["x", "y"] and later.cl.num_rows == 0
        else:  # the entries are
            assert rc_p.tuples.num_rows == 0 and later.cl.num_rows == 2
        # provenance only grows: the deleted tuple keeps its derivation, each monomial the tuple's id
        assert v.provenance("p") == {(b, c): ids for (_, b, c), ids in base.provenance("r").items()}
    assert cursor < base.cursor


def test_a_superseded_version_whose_tuple_arrives_after_its_entry_stays_invisible(base):
    """Two sites insert the same key concurrently, so both versions have odd causal lengths and only
    the newer stamp is visible; the entries arrive first, the tuples after. Fails if the MERGE that
    adds a derivation to a row with an entry recomputed its visibility as parity (the old version's
    tuple then enters the view)."""
    other = crr.Site(site_id="other")
    other.execute("CREATE REPLICATED TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)")
    base.execute("INSERT INTO r VALUES (1, 1, 'old')")
    other.execute("INSERT INTO r VALUES (1, 1, 'new')")  # a later stamp
    sync(other, base)
    full = base.changes()
    rc = full.relation("r")
    assert rc is not None and full.cl is not None and app(base, "r") == [(1, 1, "new")]
    only_entries = Changeset(source="base", since=0, cursor=full.cursor, cl=full.cl,
                             relations=[RelationChanges(rc.name, rc.kind, rc.columns, rc.key, rc.fingerprint,
                                                        rc.lineage, rc.tuples.slice(0, 0), None, rc.not_null)])
    only_tuples = Changeset(source="base", since=0, cursor=full.cursor, cl=None, relations=[rc])
    v = view_site(views=(("p", "SELECT b, c FROM r"),))
    v.merge(only_entries.to_bytes())
    v.merge(only_tuples.to_bytes())
    assert app(v, "p") == [(1, "new")]


def test_changes_of_the_view_and_the_source_entries_travel_on(base):
    """The view's changes from a co-located site fill a remote copy, and the source's entries travel
    with them, so a deletion reaches a site two hops away. Fails if changes() read the view's
    monomials or the entries from the standard tables (empty here)."""
    v = view_site(views=(("p", "SELECT b, c FROM r"),))
    far = crr.Site(site_id="far")
    far.execute("CREATE REMOTE TABLE p (b INTEGER, c VARCHAR)")
    base.execute("INSERT INTO r VALUES (1, 1, 'x'), (2, 2, 'y')")
    c1 = sync(base, v)
    c2 = sync(v, far, "p")
    assert app(far, "p") == [(1, "x"), (2, "y")]
    base.execute("DELETE FROM r WHERE a = 2")
    sync(base, v, since=c1)
    sync(v, far, "p", since=c2)
    assert app(far, "p") == [(1, "x")]
    assert far.provenance("p") == v.provenance("p")


def test_a_forged_entry_is_refused_and_changes_nothing(base):
    """An entry whose key hash differs from the stored one is forged: the merge fails and the view,
    the entries and the derivations stay as they were. Fails without the layout's FORGED check."""
    v = view_site(views=(("p", "SELECT b, c FROM r"),))
    base.execute("INSERT INTO r VALUES (1, 1, 'x')")
    sync(base, v)
    before = (app(v, "p"), v.execute('SELECT * FROM _crr."p$w" ORDER BY id'))
    base.execute("DELETE FROM r WHERE a = 1")
    cs = base.changes()
    assert cs.cl is not None
    forged = cs.cl.set_column(cs.cl.schema.get_field_index("kh"), "kh", cs.cl.column("stamp"))
    bad = Changeset(source="base", since=0, cursor=cs.cursor, relations=cs.relations, cl=forged)
    with pytest.raises(crr.ChangesetError, match="key hash of a tuple of r does not match its key values"):
        v.merge(bad.to_bytes())  # recomputed from the tuple's values
    with pytest.raises(crr.ChangesetError, match="disagree"):
        v.merge(without_tuples(bad).to_bytes())  # compared with the stored entry
    assert (app(v, "p"), v.execute('SELECT * FROM _crr."p$w" ORDER BY id')) == before


def test_concurrent_versions_of_a_key_resolve_as_in_the_standard_layout():
    """Two sites insert different values under one key: the later stamp wins; deleting it where it
    is the only version brings the other back. Fails if the layout's MERGE took the parity form
    with a rival version present (both versions, or none, would show)."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c VARCHAR)")
    v = view_site(views=(("p", "SELECT b, c FROM r"),))
    std = view_site(views=(("p", "SELECT b, c FROM r"), ("q", "SELECT a FROM r")))  # standard layout
    assert v.relation("p").colocated and not std.relation("p").colocated
    a.execute("INSERT INTO r VALUES (1, 1, 'old')")
    b.execute("INSERT INTO r VALUES (1, 2, 'new')")  # later stamp
    for site in (v, std):
        sync(a, site)
        cursor = sync(b, site)
    assert app(v, "p") == app(std, "p") == [(2, "new")]
    b.execute("DELETE FROM r WHERE a = 1")  # b holds only its own version
    for site in (v, std):
        sync(b, site, since=cursor)
    assert app(v, "p") == app(std, "p") == [(1, "old")]


@pytest.mark.parametrize("change", ["view over the view", "derived changeset", "lineage holder", "drop"])
def test_breaking_the_conditions_converts_to_the_standard_layout(base, change):
    """Fails if a change that needs the source's entries in _crr.cl (or the view's monomials in $m)
    left them in $w: the new reader would see none, or the conversion lost rows."""
    v = view_site(views=(("p", "SELECT b, c FROM r"),))
    base.execute("INSERT INTO r VALUES (1, 1, 'x'), (2, 2, 'y'), (3, 3, 'z')")
    cursor = sync(base, v)
    base.execute("DELETE FROM r WHERE a = 3")
    cursor = sync(base, v, since=cursor)
    sent = entries(v, "p")
    # the entries move into _crr.cl unchecked ($w recomputes no key hash): fails if not recorded
    unchecked = "SELECT v FROM _crr.meta WHERE k = 'unchecked_entries'"
    assert v.execute(unchecked) == [("false",)]
    if change == "view over the view":
        v.execute("CREATE MATERIALIZED VIEW pp AS SELECT c FROM p WHERE b >= 2")
        assert app(v, "pp") == [("y",)]
    elif change == "derived changeset":
        w = crr.Site(site_id="w")
        w.execute("CREATE REMOTE TABLE r (a INTEGER, b INTEGER, c VARCHAR)")
        sync(base, w)
        sync(w, v, "r")  # a remote table's changes carry monomials: r is derived from now on
        assert v.relation("r").derived
    elif change == "lineage holder":
        v.execute("CREATE REMOTE TABLE pq (b INTEGER, c VARCHAR)")
        src = view_site(views=(("pq", "SELECT b, c FROM r"),))
        sync(base, src)
        sync(src, v, "pq")
        assert "r" in v.lineage("pq")
    else:
        v.execute("DROP VIEW p")
        assert "p$w" not in tables(v)
        assert v.execute("SELECT count(*) FROM _crr.cl WHERE rel = 'r'") == [(3,)]
        assert v.execute(unchecked) == [("true",)]
        return
    assert v.execute(unchecked) == [("true",)]
    assert not v.relation("p").colocated and "p$w" not in tables(v) and "p$m" in tables(v)
    assert entries(v, "p") == sent
    assert app(v, "p") == [(1, "x"), (2, "y")]
    base.execute("DELETE FROM r WHERE a = 2")
    sync(base, v, since=cursor)
    assert app(v, "p") == [(1, "x")]


def test_a_co_located_batch_of_first_inserts_runs_one_statement(base):
    """A batch of keyed first inserts into the layout runs one statement: the INSERT into ``$w`` (which
    leaves out keys with another present version itself, without the rival count a MERGE needs
    first) and the APP INSERT reading the rows it returned (the README's figure); a batch of
    deletes, the UPDATE of ``$w`` and the APP DELETE. Fails if a step came back, a statement was
    added, or a write the batch cannot need was put in the statement."""
    from tests.test_point import _statements, _writes_in

    v = view_site(views=(("p", "SELECT b, c FROM r"),))
    base.execute("INSERT INTO r VALUES (1, 1, 'x')")
    cursor = sync(base, v)
    base.insert_many("r", [(i, i % 7, "v") for i in range(2, 300)])
    cs = base.changes(since=cursor)
    cursor = base.cursor
    statements = [s for s in _statements(v, lambda: v.merge(cs)) if not s.startswith("DESCRIBE")]
    assert [_writes_in(s) for s in statements] == [[("INSERT", '_crr."p$w"'), ("INSERT", 'main."p"')]]
    base.execute("DELETE FROM r WHERE a >= 2")
    cs = base.changes(since=cursor)
    statements = [s for s in _statements(v, lambda: v.merge(cs)) if not s.startswith("DESCRIBE")]
    assert [_writes_in(s) for s in statements] == [[("UPDATE", '_crr."p$w"'), ("DELETE", 'main."p"')]]
    assert app(v, "p") == expected(base, "SELECT b, c FROM r") == [(1, "x")]


def test_a_batch_the_first_insert_covers_in_part_is_maintained_whole(base):
    """A batch of first inserts holding an id the view site holds already: the INSERT into ``$w``
    writes the others and its APP INSERT adds their tuples, in one statement; the MERGE then takes
    the stored id (here: its tuple, which arrived without values before), and the APP statements
    run again over every row written. Fails if the tuples of the MERGE's rows were not added (the
    APP changes stopped at the first statement), or if they were counted twice."""
    v = view_site(views=(("p", "SELECT b, c FROM r"),))
    base.execute("INSERT INTO r VALUES (1, 1, 'x')")
    full = base.changes()
    assert full.cl is not None
    # the entry of (1, 1, 'x') arrives alone first: the site holds its id without values
    v.merge(without_tuples(full))
    assert app(v, "p") == []
    base.execute("INSERT INTO r VALUES (2, 2, 'y'), (3, 3, 'z')")
    result = v.merge(base.changes())  # every entry has length 1; id 1's is stored
    assert app(v, "p") == expected(base, "SELECT b, c FROM r") == [(1, "x"), (2, "y"), (3, "z")]
    assert result["p"]["inserted"] == 3


def test_a_small_batch_finds_the_stored_row_of_a_tuple_that_comes_without_its_entry(base):
    """A small batch of first inserts lists its ids as constants for the INSERT's look at ``$w``
    (``colocated.ListedRows``): the ids of its tuples as well as its entries'. Here the batch brings
    the tuple of a row whose entry arrived alone before, without that entry: the INSERT must see the
    stored row and leave it to the MERGE. Fails if only the entries' ids were listed (the INSERT then
    adds a second row for that id, and the tuple shows twice or not at all)."""
    import pyarrow as pa

    v = view_site(views=(("p", "SELECT b, c FROM r"),))
    base.execute("INSERT INTO r VALUES (1, 1, 'x')")
    first = base.changes()
    assert first.cl is not None
    v.merge(without_tuples(first))  # the entry of (1, 1, 'x') alone: the site holds its id, no values
    (stored,) = first.cl.column("id").to_pylist()
    base.execute("INSERT INTO r VALUES (2, 2, 'y'), (3, 3, 'z')")
    cs = base.changes()  # the three tuples and entries; the stored entry is taken out below
    assert cs.cl is not None
    cs.cl = cs.cl.filter(pa.array([i != stored for i in cs.cl.column("id").to_pylist()]))
    assert cs.cl.num_rows == 2 and cs.relation("r").tuples.num_rows == 3
    from tests.test_point import _statements
    ran = " ".join(_statements(v, lambda: v.merge(cs.to_bytes())))
    assert 'FROM _crr."p$w" WHERE id IN (' in ran  # the stored rows looked at by the listed ids
    assert v.execute('SELECT count(*), count(DISTINCT id) FROM _crr."p$w"') == [(3, 3)]
    assert app(v, "p") == expected(base, "SELECT b, c FROM r") == [(1, "x"), (2, "y"), (3, "z")]
    stored_id = stored if isinstance(stored, int) else int.from_bytes(stored, "little")
    assert stored_id in {r[0] for r in v.execute('SELECT id FROM _crr."p$w" WHERE vid IS NOT NULL')}


def test_deletes_of_rows_whose_values_never_arrived_take_the_merge_after_the_update(base):
    """The view site holds the entries of some rows without their values; a batch of deletes then
    brings those rows' tuples too: the UPDATE of ``$w`` (with the APP DELETE reading its rows) writes
    every entry, and the MERGE after it adds the values it left, after which the APP statements run
    again over every row written. Fails if the rows of the two statements could not be put together,
    a tuple another row still derives left the view, or one without a derivation stayed."""
    v = view_site(views=(("p", "SELECT b, c FROM r"),))
    base.execute("INSERT INTO r VALUES (1, 1, 'x'), (2, 1, 'x'), (3, 2, 'y')")
    cursor = sync(base, v)
    base.execute("INSERT INTO r VALUES (4, 2, 'y'), (5, 3, 'z'), (6, 3, 'z')")
    cs = base.changes(since=cursor)
    v.merge(without_tuples(cs))
    assert app(v, "p") == [(1, "x"), (2, "y")]  # 4, 5, 6: entries without values
    cursor = base.cursor
    base.execute("DELETE FROM r WHERE a IN (1, 3, 4, 5)")
    result = v.merge(base.changes(since=cursor))
    assert app(v, "p") == [(1, "x")]  # (3, 'z') of row 6 waits for its values
    assert result["p"]["deleted"] == 1  # (2, 'y'); (1, 'x') keeps row 2's derivation
    assert v.execute('SELECT count(*) FROM _crr."p$w" WHERE vid IS NULL') == [(1,)]  # the MERGE added 4's, 5's
    sync(base, v)  # row 6's values
    assert app(v, "p") == expected(base, "SELECT b, c FROM r") == [(1, "x"), (3, "z")]
