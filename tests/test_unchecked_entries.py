"""A batch of first inserts finds the stored entries by key hash alone while every stored entry's key
hash was checked against its tuple's values (crr.causal.NewEntryProbe, Catalog.unchecked_entries).

An entry that arrives without its tuple cannot be checked: its key hash may be forged. Once
``_crr.cl`` holds one, a received entry with the same id and the true key hash would pass a probe by
key hash, and the id would be stored twice; so the site records it (``_crr.meta``), for good, and
probes by id again. Each test says which bug would make it fail.
"""

from __future__ import annotations

import pytest

import crr
from crr.catalog import STORAGE_VERSION
from tests.conftest import app, as_written_by, general_merges
from tests.test_crafted import edit, state
from tests.test_point import _expanded, _statements


def flag(site: crr.Site) -> list[tuple]:
    return site.execute("SELECT v FROM _crr.meta WHERE k = 'unchecked_entries'")


def pair(path=None) -> tuple[crr.Site, crr.Site]:
    a = crr.Site(site_id="a")
    b = crr.Site(path or ":memory:", site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    return a, b


def without_tuples(cs: crr.Changeset) -> crr.Changeset:
    for rc in cs.relations:
        rc.tuples = rc.tuples.slice(0, 0)
    return cs


def duplicate_ids(site: crr.Site) -> list[tuple]:
    return site.execute("SELECT id FROM _crr.cl GROUP BY id HAVING count(*) > 1")


@pytest.mark.parametrize("reopen", [False, True])
def test_an_entry_stored_without_its_tuple_brings_back_the_probe_by_id(tmp_path, reopen):
    """A forged key hash on an entry without its tuple is stored (nothing to check it against); the
    honest tuple and entry of that id must then be refused, as the stored entry disagrees, and never
    stored beside it. Fails if the merge storing the unchecked entry does not record it (or, with
    ``reopen``, if the site does not read the record back): the probe by key hash misses the forged
    entry, and the id is stored twice."""
    path = tmp_path / "b.db"
    a, b = pair(path)
    a.execute("INSERT INTO t VALUES (1, 'x')")
    honest = a.changes()
    forged = without_tuples(a.changes())
    forged.cl = edit(forged.cl, "SELECT id, rel, cl, kh + 1 AS kh, stamp FROM x")
    assert flag(b) == [("false",)]
    b.merge(forged)
    assert flag(b) == [("true",)]
    if reopen:
        b.close()
        b = crr.Site(path)
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="disagree about a tuple's relation or key hash"):
        b.merge(honest)
    assert state(b) == before and duplicate_ids(b) == []


def test_honest_merges_keep_the_probe_by_key_hash():
    """Inserts, an update and a delete from a peer that sends every entry with its tuple leave the
    record false, and a batch of first inserts then joins ``_crr.cl`` once, by key hash. Fails if an
    honest merge records unchecked entries (the site would lose the faster probe for good) or the
    batch probes by id as well."""
    a, b = pair()
    a.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y')")
    b.merge(a.changes())
    cursor = b.cursor
    a.execute("UPDATE t SET v = 'z' WHERE k = 1")
    a.execute("DELETE FROM t WHERE k = 2")
    b.merge(a.changes(since=b.peer_cursor("a", "t")))
    assert flag(b) == [("false",)]
    since = a.cursor
    a.insert_many("t", [(k, "n") for k in range(3, 200)])
    cs = a.changes(since=since)
    with pytest.MonkeyPatch.context() as patch:  # the batch pipeline
        general_merges(patch)
        inserts = [s for s in _statements(b, lambda: b.merge(cs)) if s.startswith("INSERT INTO _crr.cl")]
    assert len(inserts) == 1
    assert "ANTI JOIN _crr.cl c ON c.kh = d.kh" in inserts[0] and "c.id = d.id" not in inserts[0]
    assert app(b, "t") == app(a, "t") and flag(b) == [("false",)] and b.cursor > cursor
    since = a.cursor
    a.insert_many("t", [(k, "n") for k in range(200, 300)])
    ran = _statements(b, lambda: b.merge(a.changes(since=since)))  # one statement (crr.point_merge)
    assert len(ran) == 1 and "kh IN (SELECT kh FROM" in ran[0] and "OR id IN" not in ran[0]
    assert app(b, "t") == app(a, "t") and flag(b) == [("false",)]


def test_entries_without_tuples_that_only_extend_stored_ones_record_nothing():
    """A delete that comes without its tuple extends a stored entry: its key hash is compared with the
    stored one, so nothing unchecked is stored. Fails if any batch without tuples is recorded."""
    a, b = pair()
    a.execute("INSERT INTO t VALUES (1, 'x')")
    b.merge(a.changes())
    since = a.cursor
    a.execute("DELETE FROM t WHERE k = 1")
    b.merge(without_tuples(a.changes(since=since)))
    assert app(b, "t") == [] and flag(b) == [("false",)]


def test_a_new_entry_without_its_tuple_is_recorded_and_merging_goes_on():
    """An honest entry without its tuple (a delete of a tuple this site never saw) is recorded; later
    first inserts take the probe by id and still merge. Fails if it is not recorded, or if the probe
    by id lost a case the key hash probe handled."""
    a, b = pair()
    a.execute("INSERT INTO t VALUES (1, 'x')")
    a.execute("DELETE FROM t WHERE k = 1")
    b.merge(without_tuples(a.changes()))
    assert flag(b) == [("true",)]
    since = a.cursor
    a.execute("INSERT INTO t VALUES (2, 'y'), (3, 'z')")
    cs = a.changes(since=since)
    with pytest.MonkeyPatch.context() as patch:  # the batch path (not crr.point_merge's one statement)
        general_merges(patch)
        inserts = [s for s in _statements(b, lambda: b.merge(cs)) if s.startswith("INSERT INTO _crr.cl")]
    assert len(inserts) == 1 and "c.id = d.id" in inserts[0]
    since = a.cursor
    a.execute("INSERT INTO t VALUES (4, 'w')")
    ran = [s for s in _expanded(b, _statements(b, lambda: b.merge(a.changes(since=since)))) if not s.startswith("PREPARE ")]
    assert len(ran) == 1 and "OR id IN (" in ran[0]  # a merge of a new row as one statement probes by id too
    since = a.cursor
    a.execute("INSERT INTO t VALUES (1, 'x')")  # k = 1 again: a new causal length of the stored id
    b.merge(a.changes(since=since))
    assert app(b, "t") == app(a, "t") == [(1, "x"), (2, "y"), (3, "z"), (4, "w")] and duplicate_ids(b) == []


def test_an_entry_relabelled_keyed_is_checked_only_by_a_keyed_tuple():
    """An entry claiming keyed table t whose id is a tuple of unkeyed table u in the same batch: u's
    tuple gives no key hash to check, so the entry's key hash goes unchecked and the batch probes by
    id, which finds u's stored entry and refuses the disagreement. Fails if a tuple of any table
    counted as a check (the probe by key hash would store the id a second time)."""
    a, b = pair()
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE u (k INT, v VARCHAR)")
    a.execute("INSERT INTO u VALUES (5, 'q')")
    b.merge(a.changes())
    a.execute("INSERT INTO t VALUES (1, 'x')")
    cs = a.changes()
    cs.cl = edit(cs.cl, "SELECT id, 't' AS rel, cl, coalesce(kh, md5_number('forged')) AS kh, stamp FROM x")
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="disagree about a tuple's relation or key hash"):
        b.merge(cs)
    assert state(b) == before and duplicate_ids(b) == [] and flag(b) == [("false",)]


def test_a_version_6_file_is_upgraded_with_its_entries_taken_as_unchecked(tmp_path):
    """A file written before the record existed may hold entries that came without their tuples:
    the upgrade records them as possible, and the site probes by id. Fails if the upgrade left the
    record out or said false."""
    path = tmp_path / "v6.duckdb"
    a, b = pair(path)
    a.execute("INSERT INTO t VALUES (1, 'x')")
    b.merge(a.changes())
    b.close()
    as_written_by(path, 6)  # no record
    b = crr.Site(path)
    assert flag(b) == [("true",)] and b.execute("SELECT v FROM _crr.meta WHERE k = 'version'") == [(str(STORAGE_VERSION),)]
    since = a.cursor
    a.execute("INSERT INTO t VALUES (2, 'y')")
    cs = a.changes(since=since)
    with pytest.MonkeyPatch.context() as patch:  # the batch pipeline
        general_merges(patch)
        inserts = [s for s in _statements(b, lambda: b.merge(cs)) if s.startswith("INSERT INTO _crr.cl")]
    assert len(inserts) == 1 and "c.id = d.id" in inserts[0]
    since = a.cursor
    a.execute("INSERT INTO t VALUES (3, 'z')")
    ran = [s for s in _expanded(b, _statements(b, lambda: b.merge(a.changes(since=since)))) if not s.startswith("PREPARE ")]
    assert len(ran) == 1 and "OR id IN (" in ran[0]  # the one statement of crr.point_merge probes by id too
    assert app(b, "t") == [(1, "x"), (2, "y"), (3, "z")]


def forged_site() -> tuple[crr.Site, crr.Site]:
    """``b`` holds, from a forged changeset without tuples, the entry of the id of t's row (1, 'x')
    under a wrong key hash, and the entry of the id of u's row (7, 'q') relabelled as t's."""
    a, b = pair()
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE u (k INT, v VARCHAR)")
    a.execute("INSERT INTO t VALUES (1, 'x')")
    a.execute("INSERT INTO u VALUES (7, 'q')")
    forged = without_tuples(a.changes())
    forged.cl = edit(forged.cl, "SELECT id, 't' AS rel, cl, coalesce(kh, 0::UHUGEINT) + 1 AS kh, stamp FROM x")
    b.merge(forged)
    assert flag(b) == [("true",)]
    return a, b


@pytest.mark.parametrize("write", [
    "INSERT INTO t VALUES (1, 'x')",  # the point path's new-keys INSERT
    "INSERT INTO t VALUES (1, 'x'), (2, 'y')",
    "INSERT INTO u VALUES (7, 'q')",  # unkeyed: the id is stored under t
    "insert_many t",  # the batch path
    "insert_many u",
    "UPDATE t SET k = 1, v = 'x' WHERE k = 5",  # the point path's general sequence
])
def test_a_local_write_of_a_row_whose_id_a_forged_entry_holds_is_refused(write):
    """A site holding unchecked entries refuses a local write adding a row whose id has an entry of
    another relation or key hash, and changes nothing. Fails if a write path skipped the check: the
    row's id would be stored twice, or its write would grow the forged entry."""
    a, b = forged_site()
    if write.startswith("UPDATE"):
        b.execute("INSERT INTO t VALUES (5, 'five')")
    before = state(b)
    with pytest.raises(crr.ChangesetError, match="another relation or key, which a corrupt or forged changeset"):
        if write.startswith("insert_many"):
            table = write.split()[1]
            b.insert_many(table, [(1, "x")] if table == "t" else [(7, "q")])
        else:
            b.execute(write)
    assert state(b) == before and duplicate_ids(b) == []
    b.execute("INSERT INTO t VALUES (3, 'z')")  # other rows are written as before
    assert app(b, "t") == ([(3, "z"), (5, "five")] if write.startswith("UPDATE") else [(3, "z")])


@pytest.mark.parametrize("write", ["INSERT INTO t VALUES (2, 5)", "insert_many", "UPDATE t SET k = 2 WHERE k = 4"])
def test_a_key_whose_row_the_site_has_not_received_is_said_to_be_elsewhere(write: str):
    """A view's changes bring the causal lengths of its inputs' rows, not their values: until the
    table's own changes arrive, the key is taken but no row shows it, and the error said "a row with
    k=2 already exists" of a table showing none (found by a probe). A row held here keeps the message."""
    a, b = pair()
    a.execute("CREATE MATERIALIZED VIEW v AS SELECT k, v FROM t")
    b.execute("CREATE REMOTE TABLE v (k INT, v VARCHAR)")
    a.execute("INSERT INTO t VALUES (2, 'a')")
    b.merge(a.changes(relations=["v"]))
    b.execute("INSERT INTO t VALUES (4, 'b')")

    def run(sql: str) -> None:
        if sql == "insert_many":  # the batch path
            b.insert_many("t", [(2, "c"), (3, "c")])
        else:
            b.execute(sql)
    with pytest.raises(crr.ConstraintError, match="k='?2'? exists at another site; this site has its causal length"):
        run(write)
    with pytest.raises(crr.ConstraintError, match="k='?4'? already exists"):
        b.insert_many("t", [(4, "d")]) if write == "insert_many" else b.execute("INSERT INTO t VALUES (4, 'd')")
    assert app(b, "t") == [(4, "b")]
    b.merge(a.changes(relations=["t"]))
    assert app(b, "t") == [(2, "a"), (4, "b")]
