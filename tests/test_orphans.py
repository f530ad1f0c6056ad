"""A replicated table's tuples that arrived before their entries (``crr.catalog.Relation.orphans``).

While every tuple in a replicated table's ``$t`` has an entry in ``_crr.cl``, a merge adds the tuples
whose entries its causal-length MERGE inserted without the anti-join that looks for them in ``$t``
(``Maintainer._entries_new``). A merge that stores a tuple without an entry marks the table, in the
file and in the catalog, and from then on every merge looks. Each test says which bug would make it
fail.
"""

from __future__ import annotations

import dataclasses
import gzip
import shutil
from pathlib import Path

import pytest

import crr
from crr.catalog import STORAGE_VERSION
from tests.conftest import app, general_merges, without_tuples
from tests.test_point import _statements

FIXTURE = Path(__file__).parent / "fixtures" / "site_v5.duckdb.gz"
"""Written by crr at 3932509 (storage version 5), site id ``v5-site``: replicated tables
``r (k PRIMARY KEY, g)`` and ``s (g PRIMARY KEY, name)`` and the view
``v = SELECT r.k, s.name FROM r JOIN s ON r.g = s.g``; s holds (1, 'one'), (2, 'two'), written
there; r holds (20, 1) and (21, 2), merged from a site ``v5-base`` with their entries, and the tuple
of (22, 1) merged without its entry (so it is stored and absent)."""

R = "CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, g INTEGER)"
S = "CREATE REPLICATED TABLE s (g INTEGER PRIMARY KEY, name VARCHAR)"
V = "CREATE MATERIALIZED VIEW v AS SELECT r.k, s.name FROM r JOIN s ON r.g = s.g"


def tuple_rows(site: crr.Site, table: str) -> list[tuple]:
    """The ids of a replicated table's AUG tuples, with how often each is stored."""
    return site.execute(f'SELECT id::VARCHAR, count(*) FROM _crr."{table}$t" GROUP BY id ORDER BY id')


@pytest.fixture()
def base():
    s = crr.Site(site_id="base")
    s.execute(R)
    yield s
    s.close()


def view_site(path) -> crr.Site:
    site = crr.Site(path, site_id="view")
    for ddl in (R, S, V):
        site.execute(ddl)
    site.execute("INSERT INTO s VALUES (1, 'one'), (2, 'two')")
    return site


def without_entries(cs: crr.Changeset) -> crr.Changeset:
    return dataclasses.replace(cs, cl=cs.cl.slice(0, 0))


def test_new_rows_are_added_without_looking_in_the_stored_tuples(base, tmp_path):
    """Fails if a merge of rows new to the site still anti-joins ``$t`` (the fast path is never
    taken), or if it takes the fast path for a row the site already holds (a duplicate tuple)."""
    site = view_site(tmp_path / "v.db")
    base.execute("INSERT INTO r VALUES (1, 1), (2, 2)")
    with pytest.MonkeyPatch.context() as patch:  # the batch pipeline (not crr.point_merge's one statement)
        general_merges(patch)
        statements = _statements(site, lambda: site.merge(base.changes()))
    inserts = [s for s in statements if s.lstrip().startswith('INSERT INTO _crr."r$t"')]
    assert len(inserts) == 1 and "ANTI JOIN" not in inserts[0]
    cursor = base.cursor
    base.execute("DELETE FROM r WHERE k = 1")
    base.execute("INSERT INTO r VALUES (1, 1), (3, 2)")  # (1, 1) is held: its entry grows, not new
    statements = _statements(site, lambda: site.merge(base.changes(since=cursor)))
    inserts = [s for s in statements if s.lstrip().startswith('INSERT INTO _crr."r$t"')]
    assert len(inserts) == 1 and "ANTI JOIN" in inserts[0]
    assert [n for _, n in tuple_rows(site, "r")] == [1, 1, 1]
    assert app(site, "v") == [(1, "one"), (2, "two"), (3, "two")]
    assert not site.relation("r").orphans


def test_a_tuple_before_its_entry_marks_the_table_and_is_stored_once(base, tmp_path):
    """The tuple of (5, 1) arrives without its entry, then both arrive. Fails if the first merge did
    not mark the table (the second merge would add the tuple again, since its entry is new), or if
    the mark were lost on reopening."""
    path = tmp_path / "v.db"
    site = view_site(path)
    base.execute("INSERT INTO r VALUES (5, 1)")
    full = base.changes()
    site.merge(without_entries(full))
    assert site.relation("r").orphans and app(site, "v") == []
    site.close()
    site = crr.Site(path)
    assert site.relation("r").orphans  # the file holds the mark
    site.merge(full)
    assert [n for _, n in tuple_rows(site, "r")] == [1]
    assert app(site, "v") == [(5, "one")]
    site.close()


def test_an_entry_before_its_tuple_leaves_the_table_unmarked(base, tmp_path):
    """The entry arrives first, then the tuple (whose entry the second merge does not write): the
    tuple has its entry, so the table stays unmarked. Fails if the check of the added tuples looked
    only at the entries the merge wrote (every later merge would pay the anti-join)."""
    site = view_site(tmp_path / "v.db")
    base.execute("INSERT INTO r VALUES (6, 2)")
    full = base.changes()
    site.merge(without_tuples(full))
    site.merge(without_entries(full))
    assert not site.relation("r").orphans
    assert app(site, "v") == [(6, "two")] and [n for _, n in tuple_rows(site, "r")] == [1]


def test_a_refused_merge_leaves_the_table_unmarked(tmp_path):
    """A merge stores r's tuple without its entry (marking r), then finds a forged tuple of s and
    fails: the mark is rolled back with everything else, in the file and in the catalog the site
    keeps. Fails if the mark were written or staged outside the merge's transaction."""
    writer = crr.Site(site_id="writer")
    writer.execute(R)
    writer.execute(S)
    writer.execute("INSERT INTO r VALUES (7, 1)")
    writer.execute("INSERT INTO s VALUES (3, 'x'), (4, 'y')")
    cs = without_entries(writer.changes())
    assert [rc.name for rc in cs.relations] == ["r", "s"]  # r's tuples are merged first
    s_changes = cs.relations[1]
    ids = s_changes.tuples.column("id")
    forged = s_changes.tuples.set_column(0, "id", ids.take([1, 0]))  # each tuple with the other's id
    bad = dataclasses.replace(cs, relations=[cs.relations[0], dataclasses.replace(s_changes, tuples=forged)])
    site = view_site(tmp_path / "v.db")
    with pytest.raises(crr.CrrError, match="do not match their values"):
        site.merge(bad)
    assert not site.relation("r").orphans and tuple_rows(site, "r") == []
    site.merge(cs)  # the honest changeset marks it
    assert site.relation("r").orphans
    site.close()
    writer.close()
    reopened = crr.Site(tmp_path / "v.db")
    assert reopened.relation("r").orphans
    reopened.close()


def test_a_version_5_file_gets_each_tables_mark_from_its_tuples(tmp_path):
    """Upgrading to version 6 marks r (its tuple of (22, 1) has no entry) and not s. Fails if the
    upgrade assumed no orphans (the entry of (22, 1) arriving later would add its tuple twice) or
    marked every table."""
    path = tmp_path / "v5.duckdb"
    with gzip.open(FIXTURE) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    site = crr.Site(path)
    assert site.execute("SELECT v FROM _crr.meta WHERE k = 'version'") == [(str(STORAGE_VERSION),)]
    assert site.relation("r").orphans and not site.relation("s").orphans
    # and, on to versions 7 and 8, it cannot tell which stored entries came with their tuples, nor
    # whether a key had two present versions
    assert site.execute("SELECT k, v FROM _crr.meta WHERE k IN ('unchecked_entries', 'rival_versions') "
                        "ORDER BY k") == [("rival_versions", "true"), ("unchecked_entries", "true")]
    assert app(site, "v") == [(20, "one"), (21, "two")]
    writer = crr.Site(site_id="v5-base")  # the same rows, so the same tuple ids
    writer.execute(R)
    writer.execute("INSERT INTO r VALUES (20, 1), (21, 2), (22, 1)")
    site.merge(writer.changes())
    assert [n for _, n in tuple_rows(site, "r")] == [1, 1, 1]
    assert app(site, "v") == [(20, "one"), (21, "two"), (22, "one")]
    site.close()


def test_a_local_insert_of_a_row_whose_tuple_arrived_without_its_entry_stores_it_once(base, tmp_path):
    """The point path writes a new key's entry, tuple and APP row without a lookup
    (``PointWrite._insert_new``) only while the table holds no tuple without an entry. Here the
    tuple of (8, 1) arrived without its entry and the same row is then inserted locally. Fails if
    the point path skipped the lookup for a marked table (the tuple would be stored twice)."""
    site = view_site(tmp_path / "v.db")
    base.execute("INSERT INTO r VALUES (8, 1)")
    site.merge(without_entries(base.changes()))
    assert site.relation("r").orphans
    site.execute("INSERT INTO r VALUES (?, ?)", [8, 1])
    assert [n for _, n in tuple_rows(site, "r")] == [1]
    assert app(site, "r") == [(8, 1)] and app(site, "v") == [(8, "one")]
