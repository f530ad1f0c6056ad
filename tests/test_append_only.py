"""A merge that can only add tuples to a view appends them (crr.maintain: _only_new_monomials_change).

When no monomial a view held before a merge holds an id whose causal-length entry the merge wrote,
the merge cannot remove a tuple from the view, and the view's APP table takes one INSERT of the new
monomials' alive tuples instead of the MERGE that re-evaluates membership. These tests check both
sides of that decision: merges of new rows take the INSERT, and every merge that also touches
monomials a view held before (deletes, keyed updates, an entry arriving after its tuple, a relation
reaching the view through two inputs) still leaves each view equal to plain DuckDB's evaluation.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

import crr
from tests.conftest import app, general_merges
from tests.test_point import _statements, _writes_in, app_writes

R = "(a INTEGER, b INTEGER, c INTEGER)"
S = "(k INTEGER, c INTEGER)"
VIEWS = {
    "p": "SELECT b, c FROM r WHERE c > 0",
    "j": "SELECT r.a, r.b, s.k FROM r JOIN s ON r.c = s.c",
}


def expected(base: crr.Site, view: str) -> list[tuple]:
    """The view's query evaluated by plain DuckDB over the base site's APP tables."""
    return base.execute(f"SELECT DISTINCT * FROM ({VIEWS[view]}) ORDER BY ALL NULLS FIRST")


def app_statements(site: crr.Site, changeset: crr.Changeset) -> dict[str, list[str]]:
    """Merge ``changeset``; per view of :data:`VIEWS`, the first words of each write of the view's
    APP table the merge ran, also where one is a part of a larger statement (a merge of a few new
    rows is one statement holding the views' writes: crr.point_merge)."""
    return app_writes(site, lambda: site.merge(changeset), list(VIEWS))


@pytest.fixture(params=["replicated", "replicated, batch path", "source"])
def sites(request, monkeypatch):
    """A keyed base site with r and s, and a view site holding them (as replicated tables, or as
    remote sources: p keeps nothing of r, j keeps both) with the views p and j. "batch path": merges
    of a few new rows take the batch path too (not the one statement of crr.point_merge)."""
    if request.param.endswith("batch path"):
        general_merges(monkeypatch)
    base = crr.Site(site_id="base")
    base.execute(f"CREATE REPLICATED TABLE r {R[:-1]}, PRIMARY KEY (a))")
    base.execute(f"CREATE REPLICATED TABLE s {S[:-1]}, PRIMARY KEY (k))")
    view = crr.Site(site_id="view")
    if request.param.startswith("replicated"):
        view.execute(f"CREATE REPLICATED TABLE r {R[:-1]}, PRIMARY KEY (a))")
        view.execute(f"CREATE REPLICATED TABLE s {S[:-1]}, PRIMARY KEY (k))")
    else:
        view.execute(f"CREATE REMOTE SOURCE r {R}")
        view.execute(f"CREATE REMOTE SOURCE s {S}")
    for name, sql in VIEWS.items():
        view.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    base.execute("INSERT INTO s VALUES (1, 10), (2, 20), (3, 10)")
    base.execute("INSERT INTO r VALUES (1, 5, 10), (2, 5, 20), (3, 6, 30)")
    view.merge(base.changes())
    yield base, view
    base.close()
    view.close()


def check(base: crr.Site, view: crr.Site) -> None:
    for name in VIEWS:
        assert app(view, name) == expected(base, name), name


def test_a_merge_of_new_rows_appends_them_to_the_views(sites):
    base, view = sites
    cursor = base.cursor
    base.execute("INSERT INTO r VALUES (4, 5, 10), (5, 7, 20), (6, 8, -1), (7, 9, 40)")
    cs = base.changes(since=cursor)
    # (4, 5, 10) adds nothing new to p: (5, 10) is there already; (7, 9, 40) joins nothing; (6, 8, -1)
    # fails p's predicate
    assert app_statements(view, cs) == {"p": ["INSERT INTO"], "j": ["INSERT INTO"]}
    check(base, view)
    assert app(view, "p").count((5, 10)) == 1 and (8, -1) not in app(view, "p")


def test_deletes_in_the_same_merge_as_new_rows_leave_the_views(sites):
    base, view = sites
    cursor = base.cursor
    base.execute("INSERT INTO r VALUES (4, 7, 20), (5, 8, 30)")
    base.execute("DELETE FROM r WHERE a IN (1, 3)")
    cs = base.changes(since=cursor)
    assert app_statements(view, cs) == {"p": ["MERGE INTO"], "j": ["MERGE INTO"]}  # old monomials hold deleted ids
    check(base, view)
    assert (5, 10) not in app(view, "p") and (6, 30) not in app(view, "p")


def test_a_keyed_update_arriving_with_new_rows_replaces_the_old_version(sites):
    base, view = sites
    cursor = base.cursor
    base.execute("UPDATE r SET b = 50 WHERE a = 2")  # a new version: the old one's id flips
    base.execute("INSERT INTO r VALUES (8, 1, 10)")
    view.merge(base.changes(since=cursor))
    check(base, view)
    assert (5, 20) not in app(view, "p") and (50, 20) in app(view, "p")


def test_a_delete_arriving_with_the_row_it_deletes_adds_nothing(sites):
    base, view = sites
    cursor = base.cursor
    base.execute("INSERT INTO r VALUES (9, 70, 20), (10, 71, 20)")
    base.execute("DELETE FROM r WHERE a = 9")
    cs = base.changes(since=cursor)
    assert app_statements(view, cs)["p"] == ["INSERT INTO"]  # both rows new here: nothing old changes
    check(base, view)
    assert (70, 20) not in app(view, "p") and (71, 20) in app(view, "p")


def test_new_rows_joining_a_deleted_row_of_the_other_input_add_nothing(sites):
    """The new monomials' ids of s were not written by the merge: their visibility is looked up
    (crr.maintain._liveness), and a monomial holding a deleted one is not alive."""
    base, view = sites
    base.execute("DELETE FROM s WHERE k = 2")
    view.merge(base.changes())
    cursor = base.cursor
    base.execute("INSERT INTO r VALUES (11, 80, 20), (12, 81, 10)")  # (11, 80, 20) joins only the dead s row
    cs = base.changes(since=cursor)
    assert app_statements(view, cs)["j"] == ["INSERT INTO"]
    check(base, view)
    assert (12, 81, 1) in app(view, "j") and (12, 81, 3) in app(view, "j")
    assert not [row for row in app(view, "j") if row[0] == 11]


def test_a_tuple_arriving_after_its_entry_with_new_rows_is_looked_up_in_its_own_relation(sites):
    """r's entry for (13, 82, 10) arrives first, its tuple later beside a new row with its entry.
    The merge wrote no entry for the first tuple, so ``in?`` looks its id up, and it must look in r's
    entries, not only in those of s, the input the join reads as state
    (``Maintainer._unwritten_lineage``). Fails if the lookup skips r: the tuple's rows are missing."""
    base, view = sites
    cursor = base.cursor
    base.execute("INSERT INTO r VALUES (13, 82, 10)")
    first = base.changes(since=cursor)
    empty = [dataclasses.replace(rc, tuples=rc.tuples.slice(0, 0)) for rc in first.relations]
    view.merge(dataclasses.replace(first, relations=empty))  # the entry without its tuple
    check_before = app(view, "j")
    assert not [row for row in check_before if row[0] == 13]
    cursor = base.cursor
    base.execute("INSERT INTO r VALUES (14, 83, 20)")
    second = base.changes(since=cursor)
    late = [dataclasses.replace(rc, tuples=pa.concat_tables([rc.tuples, old.tuples]))
            for rc, old in zip(second.relations, first.relations)]
    assert app_statements(view, dataclasses.replace(second, relations=late))["j"] == ["INSERT INTO"]
    check(base, view)
    assert (13, 82, 1) in app(view, "j") and (13, 82, 3) in app(view, "j") and (14, 83, 2) in app(view, "j")
    if "r" in view.relations() and view.relations()["r"] == "replicated":
        # the APP rows of both new tuples, the first one's visibility read from its stored entry
        # (fails if the APP INSERT took only the tuples whose entries the merge wrote)
        assert app(view, "r") == base.execute("SELECT * FROM r ORDER BY ALL")


def test_new_rows_of_both_inputs_join_the_stored_rows_of_each_other(sites):
    """New rows of r and of s in one merge: the term ``r' x ds`` reads r as state, so its monomials
    hold ids of r the merge did not write, looked up in r's entries (``Maintainer._unwritten_lineage``
    takes the lineage of every input of a branch with two changed inputs). Fails if that lookup
    reads only s's entries: the stored r rows' joins with the new s row are missing."""
    base, view = sites
    cursor = base.cursor
    base.execute("INSERT INTO s VALUES (4, 20)")  # joins the stored (2, 5, 20)
    base.execute("INSERT INTO r VALUES (15, 84, 10)")  # joins the stored s rows 1 and 3
    assert app_statements(view, base.changes(since=cursor))["j"] == ["INSERT INTO"]
    check(base, view)
    assert (2, 5, 4) in app(view, "j") and (15, 84, 1) in app(view, "j")


def test_an_entry_arriving_after_its_tuple_shows_the_tuple_with_new_rows():
    """A tuple that arrived without its entry is stored but absent; its entry arriving together with
    new rows flips a tuple the merge did not bring, so views re-evaluate it."""
    base, view = crr.Site(site_id="base"), crr.Site(site_id="view")
    for s in (base, view):
        s.execute(f"CREATE REPLICATED TABLE r {R}")
        s.execute(f"CREATE REPLICATED TABLE s {S}")
    view.execute(f"CREATE MATERIALIZED VIEW j AS {VIEWS['j']}")
    view.execute(f"CREATE MATERIALIZED VIEW p AS {VIEWS['p']}")
    base.execute("INSERT INTO s VALUES (1, 10)")
    view.merge(base.changes())
    cursor = base.cursor
    base.execute("INSERT INTO r VALUES (1, 5, 10)")
    first = base.changes(since=cursor)
    view.merge(dataclasses.replace(first, cl=first.cl.slice(0, 0)))  # the tuple without its entry
    assert app(view, "j") == [] and app(view, "p") == []
    cursor = base.cursor
    base.execute("INSERT INTO r VALUES (2, 6, 10)")
    second = base.changes(since=cursor)
    both = dataclasses.replace(second, cl=pa.concat_tables([first.cl, second.cl]))
    assert app_statements(view, both) == {"p": ["MERGE INTO"], "j": ["MERGE INTO"]}
    check(base, view)
    assert app(view, "j") == [(1, 5, 1), (2, 6, 1)]
    base.close()
    view.close()


def test_a_relation_reaching_a_view_through_two_inputs_is_reevaluated():
    """A union of a replicated table and a remote copy of a view over it: an id the merge brings to
    the table can already sit in monomials received through the remote view."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute(f"CREATE REPLICATED TABLE r {R}")
    a.execute("CREATE MATERIALIZED VIEW w AS SELECT b FROM r")
    b.execute("CREATE REMOTE TABLE w (b INTEGER)")
    b.execute("CREATE MATERIALIZED VIEW u AS SELECT b FROM r WHERE c > 0 UNION SELECT b FROM w")
    a.execute("INSERT INTO r VALUES (1, 5, 10)")
    b.merge(a.changes(relations=["w"]))  # w's monomial of r's tuple 1, with its entry
    assert app(b, "u") == [(5,)]
    cursor = a.cursor
    a.execute("DELETE FROM r WHERE a = 1")
    a.execute("INSERT INTO r VALUES (2, 6, 10)")
    cs = a.changes(since=0, relations=["r"])  # r's tuples (1 new here, deleted) and entries
    statements = _statements(b, lambda: b.merge(cs))
    assert [s for s in statements if s.split()[:3] == ["MERGE", "INTO", 'main."u"']]
    assert app(b, "u") == [(6,)]
    assert a.changes(since=cursor).cursor > cursor
    a.close()
    b.close()


@pytest.fixture()
def writer():
    """A site writing a keyed and an unkeyed table that views read (a projection and a join)."""
    s = crr.Site(site_id="w")
    s.execute("CREATE REPLICATED TABLE s (k INTEGER PRIMARY KEY, c INTEGER)")
    s.execute("CREATE REPLICATED TABLE r (a INTEGER, b INTEGER, c INTEGER)")
    for name, sql in VIEWS.items():
        s.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    s.execute("INSERT INTO s VALUES (1, 10), (2, 20)")
    s.execute("INSERT INTO r VALUES (1, 5, 10)")
    yield s
    s.close()


def written(site: crr.Site, sql: str, params: list | None = None) -> dict[str, list[str]]:
    """Run a local write; per view, the first words of each write of the view's APP table."""
    return app_writes(site, lambda: site.execute(sql, params), list(VIEWS))


def test_a_local_insert_of_new_rows_appends_them_to_the_views(writer):
    assert written(writer, "INSERT INTO r VALUES (?, ?, ?)", [2, 6, 20]) == {"p": ["INSERT INTO"], "j": ["INSERT INTO"]}
    assert written(writer, "INSERT INTO r VALUES (3, 5, 10), (4, 7, 30)") == {"p": ["INSERT INTO"], "j": ["INSERT INTO"]}
    check(writer, writer)


def test_a_local_insert_joining_a_deleted_row_adds_nothing(writer):
    """The point path's new monomial holds an id of s it did not write, deleted before: not alive."""
    writer.execute("DELETE FROM s WHERE k = 2")
    assert written(writer, "INSERT INTO r VALUES (?, ?, ?)", [2, 6, 20]) == {"p": ["INSERT INTO"], "j": ["INSERT INTO"]}
    assert app(writer, "j") == [(1, 5, 1)]
    assert written(writer, "INSERT INTO r VALUES (3, 7, 20), (4, 8, 10)") == {"p": ["INSERT INTO"], "j": ["INSERT INTO"]}
    check(writer, writer)
    assert app(writer, "j") == [(1, 5, 1), (4, 8, 1)]


def test_a_local_reinsert_of_a_deleted_row_and_an_update_reach_the_views(writer):
    writer.execute("DELETE FROM r WHERE a = 1")
    assert app(writer, "p") == [] and app(writer, "j") == []
    # the same tuple again: its monomials are the ones the views held before, dead until now. The
    # one statement of rows new to the site (with the views' appends) is tried first and writes
    # nothing, as the key has an entry; then the write's one statement re-evaluates membership, as
    # a DELETE and an INSERT of the APP rows (crr.maintain.Maintainer.rewrites)
    assert written(writer, "INSERT INTO r VALUES (?, ?, ?)", [1, 5, 10]) == {
        "p": ["INSERT INTO", "DELETE FROM", "INSERT INTO"], "j": ["INSERT INTO", "DELETE FROM", "INSERT INTO"]}
    check(writer, writer)
    assert app(writer, "j") == [(1, 5, 1)]
    writer.execute("UPDATE s SET c = 30 WHERE k = 1")  # a new version of s's key 1: the old one leaves
    writer.execute("INSERT INTO s VALUES (3, 10)")
    check(writer, writer)
    assert app(writer, "j") == [(1, 5, 3)]


def test_an_id_in_several_tuples_of_a_remote_view_copy_arriving_apart_is_reevaluated(tmp_path):
    """A remote copy of a UNION view named like the base table it reads holds one base id in two of
    its tuples, which reach the site in different merges; the second also deletes the id. The copy
    is marked ``derived`` (and stays so after reopening), so the view over it re-evaluates the tuple
    that held the id before. (Found by an adversarial review of the append-only path.)"""
    c, a = crr.Site(site_id="c"), crr.Site(site_id="a")
    b = crr.Site(tmp_path / "b.db", site_id="b")
    c.execute("CREATE REPLICATED TABLE r (a INTEGER)")
    c.execute("CREATE MATERIALIZED VIEW x AS SELECT a FROM r")
    c.execute("CREATE MATERIALIZED VIEW y AS SELECT a + 100 AS a FROM r")
    a.execute("CREATE REMOTE TABLE x (a INTEGER)")
    a.execute("CREATE REMOTE TABLE y (a INTEGER)")
    a.execute("CREATE MATERIALIZED VIEW r AS SELECT a AS v FROM x UNION SELECT a AS v FROM y")
    b.execute("CREATE REMOTE TABLE r (v INTEGER)")
    b.execute("CREATE MATERIALIZED VIEW u AS SELECT v FROM r")
    assert not b.relation("r").derived
    c.execute("INSERT INTO r VALUES (1)")
    a.merge(c.changes(relations=["x"]))
    b.merge(a.changes(relations=["r"]))
    cursor = a.cursor
    assert app(b, "u") == [(1,)] and b.relation("r").derived
    b.close()
    b = crr.Site(tmp_path / "b.db")
    assert b.relation("r").derived
    c.execute("DELETE FROM r WHERE a = 1")
    a.merge(c.changes(relations=["y"]))  # a's r gains the monomial (101, [t]) with t's delete
    a.merge(c.changes(relations=["x"]))
    assert app(a, "r") == []
    b.merge(a.changes(since=cursor, relations=["r"]))
    assert app(b, "r") == [] and app(b, "u") == []
    for s in (a, b, c):
        s.close()


def test_a_file_written_before_the_derived_flag_assumes_it_for_remote_relations(tmp_path):
    path = tmp_path / "old.db"
    s = crr.Site(path, site_id="old")
    s.execute("CREATE REPLICATED TABLE t (a INTEGER)")
    s.execute("CREATE REMOTE TABLE w (a INTEGER)")
    s.execute("CREATE REMOTE SOURCE q (a INTEGER)")
    s.close()
    import duckdb
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE _crr.relations DROP COLUMN derived")  # as an older crr wrote it
    con.close()
    s = crr.Site(path)
    assert {n: s.relation(n).derived for n in ("t", "w", "q")} == {"t": False, "w": True, "q": True}
    s.close()


def test_a_reopened_view_site_runs_a_join_batch_with_the_statements_it_ran_before(tmp_path):
    """Monomial lengths of stored inputs are read from the file after a reopen (a static input such
    as R2 would otherwise stay unknown, and every later batch take the temp-table path)."""
    from crr.bench.data import r1_rows, r2_rows
    from crr.bench.paper import _crr_site
    from crr.bench.streams import paper_streams

    streams = paper_streams(r1_rows(1200), r2_rows(), 300, 300)
    path = str(tmp_path / "v.db")
    site = _crr_site(path, "join", streams.r2)
    site.merge(streams.inserts[0].changeset)
    before = _statements(site, lambda: site.merge(streams.inserts[1].changeset))
    site.close()
    site = crr.Site(path)
    site.merge(streams.inserts[2].changeset)  # the first merge after opening reads what it caches
    after = _statements(site, lambda: site.merge(streams.inserts[3].changeset))
    first_words = [" ".join(s.split()[:3]) for s in after]
    assert len(after) == len(before) and not any(w.startswith("CREATE") for w in first_words), first_words
    # the view's APP rows are appended (inside the replica's INSERT: Maintainer._derivations_after)
    assert ("INSERT", 'main."r1_join_r2"') in [w for s in after for w in _writes_in(s)]
    site.close()
