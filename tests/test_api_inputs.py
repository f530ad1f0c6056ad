"""Bad arguments to the Python API are refused with a crr error and change nothing (DESIGN 1.6).

Each case once raised Python's own exception (TypeError, IndexError, AttributeError, sqlglot's
TokenError) or did something else than asked (a dict row stored its keys as values, extra INSERT
parameters were ignored, ``Site(None)`` created a file named ``None``); found by probing the API.
"""

from __future__ import annotations

import datetime
import os
import shutil
import zoneinfo
from typing import Any, Callable

import duckdb
import pyarrow as pa

import pytest

import crr
from tests.conftest import general_merges
from crr.site_state import SiteState
from crr.errors import CatalogError, SiteError, SqlError, TypeMismatchError


@pytest.fixture
def site() -> crr.Site:
    s = crr.Site(site_id="s")
    s.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    s.execute("INSERT INTO t VALUES (1, 'a')")
    return s


_BERLIN_MIDNIGHT = datetime.time(0, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin"))  # no offset without a date

CASES: list[tuple[str, Callable[[crr.Site], Any], type, str]] = [
    ("too few parameters", lambda s: s.execute("INSERT INTO t VALUES (?, ?)", [2]), SqlError, "parameters"),
    ("too many parameters", lambda s: s.execute("INSERT INTO t VALUES (?, ?)", [2, "b", "c"]), SqlError, "excess"),
    ("parameters not a list", lambda s: s.execute("INSERT INTO t VALUES (?, ?)", 4), SqlError, "list or tuple"),
    ("parameters a string", lambda s: s.execute("INSERT INTO t VALUES (?, ?)", "ab"), SqlError, "list or tuple"),
    ("no statement", lambda s: s.execute(None), SqlError, "as a string"),
    ("statement as bytes", lambda s: s.execute(b"SELECT 1"), SqlError, "as a string"),
    ("statement in a list", lambda s: s.execute(["SELECT 1"]), SqlError, "as a string"),
    ("lone surrogate in the text", lambda s: s.execute("INSERT INTO t VALUES (2, '\ud800')"), SqlError,
     "not valid Unicode"),
    ("lone surrogate in a query", lambda s: s.execute("SELECT '\udfff'"), SqlError, "not valid Unicode"),
    ("overflow in an UPDATE", lambda s: s.execute("UPDATE t SET k = k + 2147483647"), TypeMismatchError, "Overflow"),
    ("overflow in a query", lambda s: s.execute("SELECT 2147483647::INT + 1"), TypeMismatchError, "Overflow"),
    ("parameter of no SQL type", lambda s: s.execute("INSERT INTO t VALUES (?, 'b')", [object()]), SqlError,
     "Unable to transform"),
    # DuckDB's client failed on these with an AttributeError
    ("a time without a UTC offset", lambda s: s.execute("INSERT INTO t VALUES (2, ?)", [_BERLIN_MIDNIGHT]),
     TypeMismatchError, "parameter 1: datetime.time(0, 0, tzinfo=zoneinfo.ZoneInfo(key='Europe/Berlin')) has a time zone"),
    ("a time without a UTC offset in a LIST parameter", lambda s: s.execute("SELECT $x", {"x": [[_BERLIN_MIDNIGHT]]}),
     TypeMismatchError, "parameter x: "),
    ("untokenizable statement", lambda s: s.execute("INSERT INTO t VALUES ($1,$2)", [2, "b"]), crr.CrrError, ""),
    ("rows None", lambda s: s.insert_many("t", None), TypeMismatchError, "list of tuples"),
    ("rows of scalars", lambda s: s.insert_many("t", [1, 2]), TypeMismatchError, "tuple or list"),
    ("rows as dicts", lambda s: s.insert_many("t", [{"k": 2, "v": "b"}]), TypeMismatchError, "from_pylist"),
    ("table not named", lambda s: s.insert_many(None, [(2, "b")]), CatalogError, "string"),
    ("Arrow column named like another's", lambda s: s.insert_many("t", pa.table({"v": [2], "kk": ["b"]})), SqlError,
     "unknown: kk; missing: k"),
    # DuckDB counted crr's own parameters too, and named parameter 3 of a statement that has one
    ("too many DELETE parameters", lambda s: s.execute("DELETE FROM t WHERE k = ?", [1, 2]), SqlError,
     "takes 1 value (? or $1...), got 2"),
    ("too few DELETE parameters", lambda s: s.execute("DELETE FROM t WHERE k = ? AND v = ?", [1]), SqlError,
     "takes 2 values (? or $1...), got 1"),
    ("too few UPDATE parameters", lambda s: s.execute("UPDATE t SET v = ? WHERE k = ?", ["x"]), SqlError,
     "takes 2 values (? or $1...), got 1"),
    ("no DELETE parameters given", lambda s: s.execute("DELETE FROM t WHERE k = ?"), SqlError, "got 0"),
    ("too many numbered parameters", lambda s: s.execute("DELETE FROM t WHERE k = $1", [1, 2]), SqlError,
     "takes 1 value (? or $1...), got 2"),
    ("values for a DELETE without parameters", lambda s: s.execute("DELETE FROM t WHERE k = 1", [1]), SqlError,
     "has no parameters"),
    # found by a probe: crr DDL took values and ignored them
    ("values for a CREATE TABLE", lambda s: s.execute("CREATE REPLICATED TABLE a (x INT)", [1, 2]), SqlError,
     "crr DDL takes no parameters, got 2 values"),
    ("values for a CREATE VIEW", lambda s: s.execute("CREATE MATERIALIZED VIEW w AS SELECT k FROM t", [1]), SqlError,
     "takes no parameters, got 1 value;"),
    ("values for a DROP", lambda s: s.execute("DROP REPLICATED TABLE t", {"x": 1}), SqlError,
     "takes no parameters"),
    ("named parameters without a dict", lambda s: s.execute("DELETE FROM t WHERE k = $k"), SqlError,
     "pass their values as a dict"),
    ("relation named None", lambda s: s.relation(None), CatalogError, "named by a string"),
    ("lineage of a number", lambda s: s.lineage(1), CatalogError, "named by a string"),
    ("a site pickled", lambda s: __import__("pickle").dumps(s), SiteError, "cannot be pickled"),
    ("a site copied", lambda s: __import__("copy").deepcopy(s), SiteError, "cannot be pickled or copied"),
    ("max_bytes not a number", lambda s: crr.Changeset.from_bytes(s.changes().to_bytes(), max_bytes="1"),
     crr.ChangesetError, "max_bytes"),
    ("a changeset's cl set to text", lambda s: __import__("dataclasses").replace(s.changes(), cl="x").to_bytes(),
     crr.ChangesetError, "cannot be encoded"),
    ("a changeset's version past a byte", lambda s: __import__("dataclasses").replace(s.changes(), version=300)
     .to_bytes(), crr.ChangesetError, "cannot be encoded"),
    ("a site's path a number", lambda s: crr.Site(123), SiteError, "path-like"),
    ("a site's path bytes", lambda s: crr.Site(b"x.duckdb"), SiteError, "path-like"),
    # found by a probe: os.stat's ValueError and UnicodeEncodeError, DuckDB's InvalidInputException, the
    # truth test of an array, and any truthy value taken for True
    ("a site's path with a NUL", lambda s: crr.Site("a\x00b.duckdb"), SiteError, "holds a NUL character"),
    ("a site's path of no Unicode", lambda s: crr.Site("\ud800.duckdb"), SiteError, "not valid Unicode"),
    ("a peer of no Unicode", lambda s: s.peer_cursor("\ud800", "t"), CatalogError, "strings of valid Unicode"),
    ("a relation of no Unicode", lambda s: s.peer_cursor("b", "\udfff"), CatalogError, "strings of valid Unicode"),
    ("merge's track a string", lambda s: s.merge(s.changes(), track="no"), SiteError, "True or False, not 'no'"),
    ("merge's track a list", lambda s: s.merge(s.changes(), track=[1, 2]), SiteError, "True or False"),
    ("a site id of no Unicode", lambda s: crr.Site(site_id="\ud800"), SiteError, "valid Unicode"),
    ("a clock skew past a float", lambda s: crr.Site(max_clock_skew=10**400), SiteError, "max_clock_skew"),
    ("Arrow column repeated", lambda s: s.insert_many("t", pa.Table.from_arrays([pa.array([2]), pa.array([3])],
                                                                                 ["k", "k"])), SqlError, "repeated: k"),
]


@pytest.mark.parametrize("case, call, error, words", CASES, ids=[c[0] for c in CASES])
def test_bad_arguments_are_refused_and_change_nothing(site: crr.Site, case: str, call, error: type, words: str,
                                                     tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Site(123) created a file named 123 in the working directory
    before = site.execute("SELECT * FROM t ORDER BY k"), site.cursor
    with pytest.raises(error) as e:
        call(site)
    assert words in str(e.value), str(e.value)
    assert (site.execute("SELECT * FROM t ORDER BY k"), site.cursor) == before
    site.execute("INSERT INTO t VALUES (?, ?)", [9, "z"])  # still usable
    assert (9, "z") in site.execute("SELECT * FROM t")
    assert os.listdir(tmp_path) == []


def test_arrow_columns_are_read_by_name_or_else_by_position(site: crr.Site):
    """Columns named as the table's are matched by name in any order; columns named otherwise
    (a data frame's 0, 1, or a name that is no column's) are read in the table's order."""
    site.insert_many("t", pa.table({"v": ["b"], "k": [2]}))
    site.insert_many("t", pa.table({"0": [3], "1": ["c"]}))
    site.insert_many("t", pa.table({"k": [4], "value": ["d"]}))
    assert site.execute("SELECT * FROM t ORDER BY k") == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]


def test_insert_many_takes_integers_past_64_bits_as_execute_does():
    """Python ints past int64 for HUGEINT, UBIGINT and UHUGEINT columns (Arrow infers no type for
    them); a value out of the column's range is refused naming the user's column, not crr's own."""
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE w (h HUGEINT, u UBIGINT, uh UHUGEINT, small TINYINT)")
    rows = [(2**100, 2**64 - 1, 2**128 - 1, 1), (-2**127, 2**63, None, None)]
    assert site.insert_many("w", rows) == 2
    other = crr.Site()
    other.execute("CREATE REPLICATED TABLE w (h HUGEINT, u UBIGINT, uh UHUGEINT, small TINYINT)")
    for row in rows:
        other.execute("INSERT INTO w VALUES (?, ?, ?, ?)", list(row))
    query = "SELECT * FROM w ORDER BY h"
    assert site.execute(query) == other.execute(query) == sorted(rows, key=lambda r: r[0])
    for bad, column in [((2**127, 0, 0, 0), "column h"), ((0, 2**64, 0, 0), "column u"),
                        ((0, 0, 0, 300), "column small")]:
        with pytest.raises(TypeMismatchError, match=f"insert_many into w: .*{column}; nothing was written"):
            site.insert_many("w", [bad])
    with pytest.raises(TypeMismatchError, match="column small"):
        site.insert_many("w", pa.table({"h": [0], "u": [0], "uh": [0], "small": [300]}))
    assert len(site.execute(query)) == 2


def test_the_right_number_of_parameters_still_takes_the_point_path(site: crr.Site):
    assert site.execute("INSERT INTO t VALUES (?, ?)", [2, "b"]) == [(1,)]
    assert site.execute("SELECT * FROM t ORDER BY k") == [(1, "a"), (2, "b")]


@pytest.mark.parametrize("site_id", [5, "", "  ", b"x"])
def test_a_site_id_must_be_a_non_empty_string(site_id):
    with pytest.raises(SiteError, match="non-empty string"):
        crr.Site(site_id=site_id)


def test_site_none_is_a_new_in_memory_site(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a, b = crr.Site(None), crr.Site(None)
    assert a.site_id != b.site_id and os.listdir(tmp_path) == []
    a.execute("CREATE REPLICATED TABLE t (k INT)")
    assert "t" not in b.relations()


@pytest.mark.parametrize("name", ["rels", "params", "state", "stmt"])
def test_an_unknown_table_is_not_one_of_crrs_python_variables(site: crr.Site, name: str):
    """DuckDB's replacement scans looked names up among the calling Python frames' variables: an
    unknown table named like one of crr's locals read that object ("Python Object ... not suitable
    for replacement scans")."""
    with pytest.raises(SqlError, match="does not exist"):
        site.execute(f"SELECT * FROM {name}")


@pytest.mark.parametrize("since", [-1, 1.5, "1", True, 10**30, b"x", float("nan"), [1]])
def test_changes_refuses_what_is_no_cursor(site: crr.Site, since):
    """Such cursors were accepted, and the changeset then could not be merged anywhere (or
    to_bytes raised OverflowError; b"x", [1], NaN raised Python's own errors)."""
    with pytest.raises(crr.ChangesetError, match="takes a cursor"):
        site.changes(since=since)


def test_a_cursor_past_the_sites_last_change_is_refused(site: crr.Site):
    """A cursor past the site's last change was answered with nothing, so the rows a site restored
    from an older copy of its file writes under the numbers it had handed out were never sent."""
    site.execute("CREATE REPLICATED TABLE c (k INTEGER)")
    site.execute("INSERT INTO c VALUES (1)")
    assert site.changes(since=site.cursor).relations[0].tuples.num_rows == 0  # the cursor itself: nothing new
    with pytest.raises(crr.ChangesetError, match=rf"since={site.cursor + 1}\): this site's last change is "
                                                 rf"{site.cursor}.*restored from an older copy"):
        site.changes(since=site.cursor + 1)


def test_changes_refuses_a_cursor_another_copy_of_the_file_handed_out(tmp_path):
    """A cursor handed out after a copy of the file was taken, asked of the copy once it is restored
    and has written (so its last change is past that cursor), was answered with the copy's rows
    numbered above it: the ones the peer lacked from before were skipped. The copy knows the
    openings it changed something in (``_crr.openings``), so it refuses a number none of them
    handed out, and ``knows_cursor`` tells which to ask for (the sync service does)."""
    path = tmp_path / "a.duckdb"
    a = crr.Site(str(path), site_id="a")
    a.execute("CREATE REPLICATED TABLE t (k INT)")
    a.execute("INSERT INTO t VALUES (1)")
    shared = a.cursor
    a.execute("CHECKPOINT")
    shutil.copy(path, tmp_path / "copy")  # taken while the site is open
    a.execute("INSERT INTO t VALUES (2)")
    branch = a.cursor  # handed out after the copy was taken
    a.close()
    shutil.copy(tmp_path / "copy", path)
    a = crr.Site(str(path))
    assert a.knows_cursor(0) and a.knows_cursor(shared) and not a.knows_cursor(branch)
    a.execute("INSERT INTO t VALUES (3)")
    assert shared < branch < a.cursor and not a.knows_cursor(branch)
    with pytest.raises(crr.ChangesetError, match=rf"since={branch}\): this copy of the site never handed out"):
        a.changes(since=branch)
    assert a.knows_cursor(a.cursor) and not a.knows_cursor(a.cursor - 1)  # below this opening's first: no one's
    assert a.changes(since=shared).relation("t").tuples.column("c0").to_pylist() == [3]
    a.close()
    a = crr.Site(str(path))  # reopened: the openings are the file's
    a.execute("INSERT INTO t VALUES (4)")
    assert a.knows_cursor(shared) and not a.knows_cursor(branch)
    assert sorted(a.changes(since=shared).relation("t").tuples.column("c0").to_pylist()) == [3, 4]
    a.close()


def test_a_site_knows_its_cursors_after_the_clock_steps_back(tmp_path, monkeypatch):
    """An opening is recorded before its first change writes, so one whose change wrote nothing (an
    UPDATE of no row) handed out no number; when the wall clock then stepped back, the next opening's
    floor fell below that one's, and the site refused its own cursors (found by a probe). Floors
    now always grow."""
    import crr.site
    path = str(tmp_path / "a.duckdb")
    a = crr.Site(path, site_id="a")
    a.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v INT)")
    a.execute("INSERT INTO t VALUES (1, 1)")
    a.close()
    a = crr.Site(path)
    a.execute("UPDATE t SET v = 5 WHERE k = 99")  # changes nothing
    a.close()
    stepped_back = crr.site.seq_floor() - 2_000_000
    monkeypatch.setattr(crr.site, "seq_floor", lambda: stepped_back)
    a = crr.Site(path)
    a.execute("INSERT INTO t VALUES (2, 2)")
    first = a.cursor
    a.execute("INSERT INTO t VALUES (3, 3)")
    assert a.knows_cursor(first) and a.knows_cursor(a.cursor)
    assert a.changes(since=first).relation("t").tuples.column("c0").to_pylist() == [3]
    a.close()


def test_recording_an_opening_that_fails_is_a_crr_error(tmp_path):
    """The first change after an opening records it before it writes; DuckDB failing there (here: the
    table dropped behind crr's back; Site.interrupt landing on it, found by a probe) raised DuckDB's
    own exception from a write to a table views read."""
    path = str(tmp_path / "a.duckdb")
    a = crr.Site(path, site_id="a")
    a.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v INT)")
    a.execute("CREATE MATERIALIZED VIEW w AS SELECT v FROM t")
    a.close()
    a = crr.Site(path)
    a._con.execute("DROP TABLE _crr.openings")
    with pytest.raises(crr.CrrError, match="openings"):
        a.execute("INSERT INTO t VALUES (1, 1)")
    assert a.execute("SELECT count(*) FROM t") == [(0,)] and a.execute("SELECT count(*) FROM w") == [(0,)]
    a.close()


def test_a_changeset_given_as_a_cursor_is_named_not_printed(site: crr.Site):
    """``changes(since=changeset)`` (not its ``.cursor``) printed the whole changeset, Arrow tables and
    all, into the message (found by a probe)."""
    with pytest.raises(crr.ChangesetError, match=r"not Changeset\(.*\.\.\. \(a Changeset\)$") as refused:
        site.changes(since=site.changes())
    assert len(str(refused.value)) < 300
    for call in (lambda: site.changes(relations=site.changes()), lambda: site.peer_cursor(site.changes(), "t")):
        with pytest.raises(crr.CatalogError, match=r"\.\.\. \(a Changeset\)") as refused:
            call()
        assert len(str(refused.value)) < 400


@pytest.mark.parametrize("relations", ["t", [1], 5, [b"t"]])
def test_changes_refuses_what_is_no_list_of_names(site: crr.Site, relations):
    """A string was read one letter at a time; other values raised AttributeError or TypeError."""
    with pytest.raises(CatalogError, match="list of relation names"):
        site.changes(relations=relations)


def test_changes_names_each_relation_once(site: crr.Site):
    """A relation named twice was sent twice, and every merge refused the changeset."""
    peer = crr.Site(site_id="peer")
    peer.execute("CREATE REMOTE TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    peer.merge(site.changes(relations=["t", "T", "t"]).to_bytes())
    peer.merge(site.changes(relations=(name for name in ["t"])))
    assert peer.execute("SELECT * FROM t") == [(1, "a")]
    with pytest.raises(CatalogError, match="strings"):
        peer.peer_cursor("s", None)


def test_a_dropped_relations_tracked_cursors_are_forgotten(site: crr.Site):
    """A table dropped and declared again kept the tracked cursor of the old one, so a peer resuming
    from it never sent the rows before it."""
    peer = crr.Site(site_id="peer")
    peer.execute("CREATE REMOTE TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    peer.merge(site.changes(), track=True)
    assert peer.peer_cursor("s", "t") == site.cursor > 0
    peer.execute("DROP REMOTE TABLE t")
    peer.execute("CREATE REMOTE TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    assert peer.peer_cursor("s", "t") == 0
    site.execute("INSERT INTO t VALUES (2, 'b')")
    peer.merge(site.changes(since=peer.peer_cursor("s", "t")), track=True)
    assert peer.execute("SELECT * FROM t ORDER BY k") == [(1, "a"), (2, "b")]


def test_a_site_merging_its_own_changes_tracks_no_cursor_for_itself(site: crr.Site):
    """A tracked merge of a site's own changeset (handed back by a relay, or by an application that
    merges whatever it pulls) recorded the site as a peer of itself; its own changes are no stream
    it resumes. A peer's tracked merge still records, and the merges change nothing here."""
    before = site.execute("SELECT * FROM t")
    for _ in range(2):  # the first merge takes the general path, the second is a known repeat
        site.merge(site.changes(), track=True)
        assert site.peer_cursors() == [] and site.peer_cursor("s", "t") == 0
    assert site.execute("SELECT * FROM t") == before
    peer = crr.Site(site_id="peer")
    peer.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    peer.execute("INSERT INTO t VALUES (2, 'b')")
    site.merge(peer.changes(), track=True)
    assert [(p, r, c) for p, r, c, _ in site.peer_cursors()] == [("peer", "t", peer.cursor)]


def test_the_cursor_counts_only_committed_changes(site: crr.Site, monkeypatch):
    """``site.cursor`` showed the sequence number a running write had taken before it committed (read
    from another thread; found by a probe): if the write then failed, that number was handed out
    and ``changes(since=...)`` refused it as past the site's last change."""
    seen = []
    apply = SiteState.apply

    def spying(state, *args, **kwargs):
        result = apply(state, *args, **kwargs)
        seen.append(site.cursor)  # inside the write's transaction, after its number was taken
        return result
    monkeypatch.setattr(SiteState, "apply", spying)
    before = site.cursor
    site.insert_many("t", [(k, "x") for k in range(10, 110)])
    assert seen == [before] and site.cursor == before + 1
    with pytest.raises(crr.ConstraintError):
        site.insert_many("t", [(k, "y") for k in range(200, 300)] + [(1, "clash")])
    assert site.cursor == before + 1 and site.changes(since=site.cursor).relations[0].tuples.num_rows == 0


@pytest.mark.parametrize("route", ["one statement", "general"])
def test_a_tracked_full_state_sets_the_cursor_below_the_recorded_one(route: str, monkeypatch):
    """A tracked merge kept the larger of the recorded cursor and the changeset's: a source restored
    from an older copy of its file answers a cursor past its last change with its full state, whose
    cursor is lower, so the peer kept asking from the old cursor and missed the change numbered
    with it (found by a probe). A full state now sets the cursor; an old changeset merged again, or
    one leaving a gap, moves nothing."""
    if route == "general":
        general_merges(monkeypatch)
    # the source as a copy of its file from before its inserts holds it (opened first: a site's first
    # number after it opens is the wall clock's, crr.clock.seq_floor, so its numbers stay below a's)
    restored = crr.Site(site_id="a")
    restored.execute("CREATE REPLICATED TABLE t (k INT)")
    restored.execute("INSERT INTO t VALUES (20)")
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE t (k INT)")
    first = a.changes()
    for k in range(3):
        a.execute(f"INSERT INTO t VALUES ({k})")
    b.merge(a.changes(), track=True)
    recorded = b.peer_cursor("a", "t")
    assert recorded == a.cursor
    b.merge(a.changes(since=first.cursor), track=True)  # merged again: stays
    a.execute("INSERT INTO t VALUES (10)")
    b.merge(a.changes(since=recorded + 1), track=True)  # a gap: stays
    assert b.peer_cursor("a", "t") == recorded
    assert 0 < restored.cursor < recorded
    b.merge(restored.changes(), track=True)
    assert b.peer_cursor("a", "t") == restored.cursor
    assert sorted(b.execute("SELECT k FROM t")) == [(0,), (1,), (2,), (20,)]


@pytest.mark.parametrize("known", [False, True])  # rows new to the site (one statement), or known (general path)
def test_a_tracked_merge_records_cursors_of_the_relations_the_site_holds_only(known: bool):
    """A tracked merge recorded a cursor for every relation of the changeset, those it ignored too:
    a relation declared later then resumed from that cursor and never received the rows before it
    (found by a probe). A tracked changeset of no relations raised DuckDB's executemany error."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    a.execute("CREATE REPLICATED TABLE t (k INT, v INT)")
    a.execute("CREATE REPLICATED TABLE u (k INT)")
    a.execute("INSERT INTO t VALUES (1, 1)")
    a.execute("INSERT INTO u VALUES (1)")
    b.execute("CREATE REMOTE TABLE u (k INT)")
    if known:
        b.merge(a.changes())
    assert b.merge(a.changes(), track=True).ignored == ["t"]
    assert b.peer_cursor("a", "u") == a.cursor and b.peer_cursor("a", "t") == 0
    b.execute("CREATE REMOTE TABLE t (k INT, v INT)")
    b.merge(a.changes(since=b.peer_cursor("a", "t"), relations=["t"]), track=True)
    assert b.execute("SELECT * FROM t") == [(1, 1)]
    assert b.merge(crr.Site(site_id="c").changes(), track=True).ignored == []
    assert b.merge(a.changes(relations=[]), track=True).ignored == []


def test_a_relation_declared_forgets_cursors_kept_under_its_name():
    """A site file written before the fix above may keep a peer's cursor of a relation it never held;
    declaring a relation of that name starts it from 0."""
    site = crr.Site(site_id="b")
    site._con.execute("INSERT INTO _crr.cursors VALUES ('a', 'w', 5, now())")
    site.execute("CREATE REMOTE TABLE w (k INT)")
    assert site.peer_cursor("a", "w") == 0


def test_interrupt_stops_a_running_statement_and_the_site_goes_on():
    """Site.interrupt (what crr serve calls when a control client leaves) from another thread."""
    import threading
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE r (k INTEGER)")
    site.interrupt()  # nothing running: nothing happens, and the next statement runs
    site.execute("INSERT INTO r VALUES (1)")
    timer = threading.Timer(1.0, site.interrupt)
    timer.start()
    with pytest.raises(crr.CrrError, match="was interrupted"):
        site.execute("SELECT count(*) FROM range(30000000000000)")
    timer.join()
    assert site.execute("SELECT * FROM r") == [(1,)]
    site.close()
    site.interrupt()  # a closed site runs nothing: nothing happens (DuckDB raised ConnectionException)


class _InterruptedAt:
    """A connection on which the statements containing ``words`` are interrupted, as DuckDB's
    ``interrupt()`` landing while they run interrupts them."""

    def __init__(self, con, words: str) -> None:
        self.con, self.words = con, words

    def execute(self, sql: str, params: Any = None):
        if self.words in sql:
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        return self.con.execute(sql, params) if params is not None else self.con.execute(sql)

    def __getattr__(self, name: str):
        return getattr(self.con, name)


@pytest.mark.parametrize("step, words", [("a view's maintenance", '"p$m"'), ("changes()", "_crr.cl")])
def test_an_interrupt_anywhere_in_a_call_is_a_crr_error(step: str, words: str):
    """Site.interrupt landing in an insert_many's maintenance, or in changes(), raised DuckDB's own
    InterruptException: those steps ran outside the translation of DuckDB's errors."""
    site = crr.Site(site_id="s")
    site.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute("CREATE MATERIALIZED VIEW p AS SELECT v FROM r")
    site.execute("INSERT INTO r VALUES (1, 'a')")
    before = site.execute("SELECT * FROM p"), site.cursor
    site._con = _InterruptedAt(site._con, words)  # type: ignore[assignment]
    try:
        with pytest.raises(crr.CrrError, match="interrupted"):
            if step == "changes()":
                site.changes()
            else:
                site.insert_many("r", pa.table({"k": list(range(2, 2000)), "v": ["b"] * 1998}))
    finally:
        site._con = site._con.con
    assert (site.execute("SELECT * FROM p"), site.cursor) == before
    site.insert_many("r", [(5, "c")])
    assert site.execute("SELECT * FROM p ORDER BY v") == [("a",), ("c",)]


def _one_column_site(duckdb_type: str) -> crr.Site:
    s = crr.Site(site_id="s")
    s.execute(f"CREATE REPLICATED TABLE x (v {duckdb_type})")
    return s


@pytest.mark.parametrize("duckdb_type, arrow, fits", [
    # check_duckdb_values read every unit as microseconds: nanosecond times after 00:01:26.4 were refused
    ("TIME", pa.array([82_800 * 10**9], pa.time64("ns")), True),
    ("TIME", pa.array([86_400 * 10**9], pa.time64("ns")), True),  # 24:00:00
    ("TIMESTAMP", pa.array([-(2**63) + 10**12], pa.timestamp("ns")), True),  # 1677-09-21
    # time32 was not checked: -5 ms killed the database (FatalException), 200000 s was stored as 55:33:20
    ("TIME", pa.array([-5], pa.int32()).view(pa.time32("ms")), False),
    ("TIME", pa.array([200_000], pa.time32("s")), False),
    ("TIME", pa.array([86_400 * 10**9 + 1], pa.time64("ns")), False),
    # a millisecond timestamp below DuckDB's range was stored, and every peer then refused the table's changes
    ("TIMESTAMP", pa.array([-9223372022400000 - 1], pa.timestamp("ms")), False),
    ("TIMESTAMP", pa.array([-9223372022400], pa.timestamp("s")), True),
    ("TIMESTAMP", pa.array([9223372036854], pa.timestamp("s")), True),  # 294247-01-10
    ("TIMESTAMP", pa.array([9223372036855], pa.timestamp("s")), False),
])
def test_insert_many_checks_times_and_timestamps_in_their_own_unit(duckdb_type: str, arrow: pa.Array, fits: bool):
    s = _one_column_site(duckdb_type)
    if fits:
        assert s.insert_many("x", pa.table({"v": arrow})) == 1
        plain = crr.Site(site_id="p")
        plain.execute(f"CREATE REMOTE TABLE x (v {duckdb_type})")
        plain.merge(s.changes().to_bytes())  # what the site stored, a peer takes
        assert plain.execute("SELECT v::VARCHAR FROM x") == s.execute("SELECT v::VARCHAR FROM x")
    else:
        with pytest.raises(TypeMismatchError, match="outside"):
            s.insert_many("x", pa.table({"v": arrow}))
        assert s.execute("SELECT count(*) FROM x") == [(0,)] and s.cursor == 0
    s.insert_many("x", [(None,)])  # the site still works
    assert s.execute("SELECT count(*) FROM x WHERE v IS NULL") == [(1,)]


@pytest.mark.parametrize("arrow", [pa.array([1.5], pa.float16()), pa.array([1], pa.decimal256(40, 0))],
                         ids=["float16", "decimal256"])
def test_arrow_duckdb_cannot_read_is_refused_and_the_next_insert_many_works(arrow: pa.Array):
    """The Arrow slot was kept although DuckDB refused to register it: every later insert_many then
    failed ("_crr_bulk does not exist") until the site was reopened."""
    s = _one_column_site("DOUBLE")
    with pytest.raises(TypeMismatchError) as refused:  # it was DuckDB's bare "Unsupported Internal Arrow Type e"
        s.insert_many("x", pa.table({"v": arrow}))
    assert f"among the columns given (v {arrow.type}); cast that column" in str(refused.value)
    assert s.insert_many("x", pa.table({"v": pa.array([2.5])})) == 1
    assert s.insert_many("x", [(3.5,)]) == 1
    assert s.execute("SELECT v FROM x ORDER BY v") == [(2.5,), (3.5,)]


def test_decimal_tuples_that_fit_the_column_are_taken_and_ones_that_need_39_digits_are_refused_so():
    """A probe's case: Arrow gives ``0`` beside ``1E-38`` the type decimal256(39, 38), which DuckDB
    has no reader for, so a list of tuples that fit DECIMAL(38, 38) was refused, advising to pass a
    list of tuples. Such columns are read as decimal128(38, s) when their values fit it."""
    from decimal import Decimal
    s = _one_column_site("DECIMAL(38, 38)")
    assert s.insert_many("x", [(Decimal("0"),), (Decimal("1E-38"),)]) == 2
    assert s.execute("SELECT v FROM x ORDER BY v") == [(Decimal("0E-38"),), (Decimal("1E-38"),)]
    assert s.changes().relations[0].tuples.num_rows == 2
    wide = _one_column_site("DECIMAL(38, 0)")
    with pytest.raises(TypeMismatchError) as refused:
        wide.insert_many("x", [(Decimal("1" * 39),)])
    assert "needs more digits than DuckDB's DECIMAL holds (38)" in str(refused.value)
    assert "pass a list of tuples" not in str(refused.value)
    assert wide.execute("SELECT count(*) FROM x") == [(0,)]


def test_a_dataframe_pyarrow_cannot_convert_is_a_type_mismatch():
    pd = pytest.importorskip("pandas")
    s = _one_column_site("VARCHAR")
    with pytest.raises(TypeMismatchError, match="one type"):
        s.insert_many("x", pd.DataFrame({"v": ["a", 1, 2.5]}))
    with pytest.raises(TypeMismatchError, match="insert_many into x"):
        s.insert_many("x", pd.DataFrame({"v": [2**100]}))
    assert s.insert_many("x", pd.DataFrame({"v": ["a", "b"]})) == 2


class _InterruptedCalls:
    """A connection whose ``begin()`` and ``rollback()`` raise DuckDB's InterruptException the first
    ``begins`` and ``rollbacks`` times, and whose statements containing ``words`` are interrupted,
    as ``Site.interrupt`` from another thread landing there does (a ROLLBACK cut short leaves the
    transaction open)."""

    def __init__(self, con, begins: int = 0, rollbacks: int = 0, words: str | None = None) -> None:
        self.con, self.begins, self.rollbacks, self.words = con, begins, rollbacks, words

    def begin(self):
        if self.begins:
            self.begins -= 1
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        return self.con.begin()

    def rollback(self):
        if self.rollbacks:
            self.rollbacks -= 1
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        return self.con.rollback()

    def execute(self, sql: str, params: Any = None):
        if self.words is not None and self.words in sql:
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        return self.con.execute(sql, params) if params is not None else self.con.execute(sql)

    def __getattr__(self, name: str):
        return getattr(self.con, name)


@pytest.mark.parametrize("where", ["begin", "statement and rollback"])
def test_an_interrupt_at_begin_or_rollback_is_a_crr_error_and_the_site_goes_on(where: str):
    """Site.interrupt can land on a transaction's BEGIN (DuckDB's InterruptException escaped crr) or
    cut its ROLLBACK short, which left the transaction open and aborted: every later statement of
    the site failed ("Current transaction is aborted (please ROLLBACK)") until it was reopened."""
    site = crr.Site(site_id="s")
    site.execute("CREATE REPLICATED TABLE r (k INTEGER, v VARCHAR)")
    site.execute("CREATE MATERIALIZED VIEW p AS SELECT v FROM r")
    site.execute("INSERT INTO r VALUES (1, 'a')")
    before = site.execute("SELECT * FROM p"), site.cursor
    con = site._con
    site._con = (_InterruptedCalls(con, begins=1) if where == "begin"  # type: ignore[assignment]
                 else _InterruptedCalls(con, rollbacks=3, words='"p$m"'))
    try:
        with pytest.raises(crr.CrrError, match="interrupted"):
            site.insert_many("r", pa.table({"k": list(range(2, 2000)), "v": ["b"] * 1998}))
    finally:
        site._con = con
    assert (site.execute("SELECT * FROM p"), site.cursor) == before
    site.insert_many("r", [(5, "c")])
    assert site.execute("SELECT * FROM p ORDER BY v") == [("a",), ("c",)]


def test_interrupts_from_another_thread_at_any_moment_leave_writes_whole_and_the_site_usable():
    """Another thread calling Site.interrupt at random moments while writes run: each write is done
    or refused as interrupted (a CrrError, never DuckDB's own exception), the rows are those of the
    writes that were done, and the site takes writes afterwards."""
    import random
    import threading
    import time

    site = crr.Site(site_id="s")
    site.execute("CREATE REPLICATED TABLE r (k BIGINT, v BIGINT)")
    stop = threading.Event()
    pause = random.Random(7)

    def interrupts() -> None:
        while not stop.is_set():
            site.interrupt()
            time.sleep(pause.random() * 0.004)
    thread = threading.Thread(target=interrupts, daemon=True)
    thread.start()
    done = 0
    try:
        for i in range(150):
            try:  # 200 rows: the batch path, one transaction
                site.execute(f"INSERT INTO r SELECT {i} * 1000 + j, j FROM range(200) t(j)")
                done += 1
            except crr.CrrError as e:
                assert "interrupted" in str(e), e
    finally:
        stop.set()
        thread.join()
    assert site.execute("SELECT count(*) FROM r") == [(200 * done,)]
    site.execute("INSERT INTO r VALUES (-1, -1)")
    assert site.execute("SELECT count(*) FROM r") == [(200 * done + 1,)]
