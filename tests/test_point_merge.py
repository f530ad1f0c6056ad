"""A merge of rows new to the site (what a peer sends after an INSERT) runs as one statement, with the
views reading the table and the tracked cursor inside it (crr.point_merge): a few rows Python
checked, as the local INSERT's statement ("point" route), or any number up to BATCH_ROWS read from
Arrow through the general path's SQL checks ("batch" route; forced here by turning the point route
off). Every other merge takes the general path. All must leave the same state and refuse the same
forged changesets."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import uuid
import zoneinfo
from contextlib import contextmanager
from typing import Iterator

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crr
import crr.clock
import crr.site
from crr import point_merge
from crr import site_merge
from crr.changeset import Changeset
from crr.types import Column, tuple_id_sql
from tests.conftest import app, general_merges
from tests.test_crafted import edit
from tests.test_point import _NEGATIVE_NAN, _bits, _expanded, _statements
from tests.test_point_views import OPS, PROPERTY_VIEWS, VIEWS, _state

@pytest.fixture(autouse=True, scope="module")
def _one_seq_floor() -> Iterator[None]:
    """The sites compared here number their changes alike only if they opened with one floor (a
    site's first change after it opens takes the wall clock's number, crr.clock.seq_floor)."""
    floor = crr.clock.seq_floor()
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(crr.site, "seq_floor", lambda: floor)
        yield


TABLES = ["CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)",
          "CREATE REPLICATED TABLE d (k INTEGER PRIMARY KEY, w VARCHAR NOT NULL)",
          "CREATE REPLICATED TABLE u (x VARCHAR)"]  # unkeyed


def _declared(site_id: str, views: dict[str, str] = VIEWS) -> crr.Site:
    site = crr.Site(site_id=site_id)
    for ddl in TABLES:
        site.execute(ddl)
    for name, sql in views.items():
        site.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    return site


def _pair(views: dict[str, str] = VIEWS, more_views: dict[str, str] | None = None) -> tuple[crr.Site, crr.Site]:
    """A source and a receiver that merged its first rows (by the general path: the receiver then
    knows the changesets' columns and the views' monomial lengths); ``more_views``: the receiver's
    views, if other than the source's."""
    src, dst = _declared("src", views), _declared("dst", more_views or views)
    src.insert_many("d", [(k, f"w{k}") for k in range(1, 8)])
    src.execute("DELETE FROM d WHERE k = 4")
    src.execute("INSERT INTO t VALUES (100, 'warm')")
    src.execute("INSERT INTO u VALUES ('warm')")
    dst.merge(src.changes().to_bytes(), track=True)
    return src, dst


def _trio(views: dict[str, str] = VIEWS) -> tuple[crr.Site, crr.Site, crr.Site]:
    """A source and two receivers that merged the same bytes of its first rows (so their stamps,
    sequence numbers and cursors agree)."""
    src, fused = _pair(views)
    general = _declared("dst", views)
    general.merge(src.changes().to_bytes(), track=True)
    return src, fused, general


def _everything(site: crr.Site) -> dict:
    """Every table the site keeps, in full (stamps and sequence numbers too; a cursor's update
    time left out), and its sequence number and flags."""
    out: dict = {"seq": site.cursor, "flags": sorted(f.value for f in site._rels.flags)}
    tables = site._con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                               "WHERE table_type = 'BASE TABLE' ORDER BY ALL").fetchall()
    for schema, name in tables:
        columns = "peer, relation, cursor" if (schema, name) == ("_crr", "cursors") else "*"
        out[f"{schema}.{name}"] = site._con.execute(f'SELECT {columns} FROM "{schema}"."{name}" ORDER BY ALL').fetchall()
    return out


def _outcome(site: crr.Site, data: bytes) -> tuple:
    """A merge's result (or refusal), as comparable values."""
    try:
        r = site.merge(data, track=True)
    except crr.CrrError as e:
        return type(e).__name__, str(e)
    return dict(r), r.cl_changed, r.changed, r.ignored


def _both(route: str, fused: crr.Site, general: crr.Site, data: bytes) -> tuple:
    """Merge ``data`` into both receivers, ``fused`` taking ``route`` where it can: their outcomes."""
    with _route(route):
        got = _outcome(fused, data)
    with _general_path():
        want = _outcome(general, data)
    return got, want


def _written(src: crr.Site, sql: str, params: list) -> Changeset:
    """What ``src`` sends after one write: its changes since before it, as received from the wire."""
    before = src.cursor
    src.execute(sql, params)
    return Changeset.from_bytes(src.changes(since=before).to_bytes())


def _merge_statements(site: crr.Site, cs: Changeset, track: bool = True) -> list[str]:
    return [s for s in _expanded(site, _statements(site, lambda: site.merge(cs, track=track)))
            if not s.startswith("PREPARE ")]


@contextmanager
def _general_path() -> Iterator[None]:
    """Every merge takes the general path."""
    with pytest.MonkeyPatch.context() as patch:
        general_merges(patch)
        yield


@contextmanager
def _route(name: str) -> Iterator[None]:
    """Merges of new rows take the ``point`` route where it applies, or always the ``batch`` one."""
    with pytest.MonkeyPatch.context() as patch:
        if name == "batch":
            patch.setattr(site_merge, "received_new_rows", lambda *args: None)
        yield


ROUTES = ["point", "batch"]
_BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize("route", ROUTES)
def test_a_merge_of_new_rows_is_one_statement_that_writes_the_views_and_the_cursor(route: str):
    src, dst = _pair()
    cs = _written(src, "INSERT INTO t VALUES (?, ?)", [1, "x"])
    with _route(route):
        ran = _merge_statements(dst, cs)
    assert len(ran) == 1, ran
    assert ran[0].startswith("EXECUTE: ") == (route == "point")  # the point route's statement is prepared
    for name in VIEWS:
        assert f'INSERT INTO _crr."{name}$m"' in ran[0] and f'INSERT INTO main."{name}"' in ran[0], name
    assert app(dst, "j") == [(1, "x", "w1")] and app(dst, "p") == [("warm",), ("x",)]
    assert dst.peer_cursor("src", "t") == cs.cursor and dst.peer_cursor("src", "d") == cs.cursor
    # the same changeset again: the statement writes nothing, and the general path finds nothing new
    with _route(route):
        result = dst.merge(cs, track=True)
    assert not result.changed and app(dst, "j") == [(1, "x", "w1")]


def test_the_join_looks_up_only_its_partners_entries():
    """The new rows' ids are visible (the statement wrote them), so ``in?`` of the join's new
    monomials reads only the other table's entries, whose row groups DuckDB can pick by their
    ``rel`` zone maps (at 1M rows of t it scanned all of t's entries otherwise)."""
    src, dst = _pair()
    cs = _written(src, "INSERT INTO t VALUES (?, ?)", [1, "x"])
    ran = _merge_statements(dst, cs)
    assert len(ran) == 1 and "FROM _crr.cl WHERE rel IN ('d')" in ran[0], ran
    assert "rel IN ('d', 't')" not in ran[0]
    assert app(dst, "j") == [(1, "x", "w1")]  # its own id counted visible
    # a partner deleted at the source: the monomial is dead, no APP row
    cs = _written(src, "INSERT INTO t VALUES (?, ?)", [4, "y"])
    assert len(_merge_statements(dst, cs)) == 1
    assert app(dst, "j") == [(1, "x", "w1")] and ("y",) in app(dst, "p")


@pytest.mark.parametrize("route", ROUTES)
def test_its_result_and_state_are_the_general_paths(route: str):
    src, fused, general = _trio()
    cs = _written(src, "INSERT INTO t VALUES (?, ?)", [2, "x"])
    got, want = _both(route, fused, general, cs.to_bytes())
    assert got == want
    counts, cl_changed, changed, ignored = got
    assert counts["t"] == dict(inserted=1, deleted=0, new_tuples=1, new_monomials=0)
    assert counts["j"] == dict(inserted=1, deleted=0, new_tuples=0, new_monomials=1)
    assert counts["d"] == dict(inserted=0, deleted=0, new_tuples=0, new_monomials=0) and "f" not in counts
    assert (cl_changed, changed, ignored) == (1, True, list(VIEWS))
    assert _everything(fused) == _everything(general)


def _rival_versions(src: crr.Site) -> bytes:
    """An honest changeset holding two versions of key 1 of t (``src`` merged another site's)."""
    other = _declared("other")
    before = src.cursor
    src.execute("INSERT INTO t VALUES (1, 'a')")
    other.execute("INSERT INTO t VALUES (1, 'b')")
    src.merge(other.changes())
    cs = src.changes(since=before, relations=["t"])
    assert cs.cl.num_rows == 2 and len(set(cs.cl.column("kh").to_pylist())) == 1
    return cs.to_bytes()


def _length_three(src: crr.Site) -> bytes:
    """A key new to the receivers whose one entry has length 3 (inserted, deleted, inserted)."""
    before = src.cursor
    for sql in ("INSERT INTO t VALUES (50, 'x')", "DELETE FROM t WHERE k = 50", "INSERT INTO t VALUES (50, 'x')"):
        src.execute(sql)
    return src.changes(since=before).to_bytes()


def _deleted(src: crr.Site) -> bytes:
    """A key new to the receivers whose one entry has length 2 (inserted, then deleted), with its tuple."""
    before = src.cursor
    src.execute("INSERT INTO t VALUES (51, 'x')")
    src.execute("DELETE FROM t WHERE k = 51")
    cs = src.changes(since=before)
    assert next(rc for rc in cs.relations if rc.name == "t").tuples.num_rows == 1
    return cs.to_bytes()


def _relabelled(src: crr.Site) -> bytes:
    """t's new row whose entry claims relation d (which the changeset carries, without rows)."""
    cs = _written(src, "INSERT INTO t VALUES (?, ?)", [60, "x"])
    cs.cl = edit(cs.cl, "SELECT id, 'd' AS rel, cl, kh, stamp FROM x")
    return cs.to_bytes()


def _entry_without_its_table(src: crr.Site) -> bytes:
    """A new row of t and an entry of d whose table the changeset leaves out (it names j, whose
    lineage holds d): the receivers keep the entry without its tuple."""
    before = src.cursor
    src.execute("INSERT INTO d VALUES (70, 'w70')")
    src.execute("INSERT INTO t VALUES (70, 'x')")
    return src.changes(since=before, relations=["t", "j"]).to_bytes()


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("changeset", [_rival_versions, _length_three, _deleted, _relabelled, _entry_without_its_table])
def test_changesets_of_rows_new_to_the_site_that_are_not_all_first_versions_merge_as_the_general_path_does(
        changeset, route: str):
    """Each would be written wrongly by the one statement (two visible rows for key 1, a length of 1
    where 3 came, a visible row of a deleted tuple, t's entry under d, d's entry dropped) unless it
    takes the general path: the receivers end equal, every table compared."""
    src, fused, general = _trio()
    data = changeset(src)
    got, want = _both(route, fused, general, data)
    assert got == want
    assert _everything(fused) == _everything(general)


SAME_ENTRIES = "SELECT * FROM x"
FORGERIES = {  # (the tuples of t, the entries, as edited; the general path's refusal)
    "a tuple id that is not its values', nor its entry's": ("SELECT id + 1 AS id, c0, c1 FROM x", SAME_ENTRIES, "tuple ids of t"),
    "a tuple id that is not its values', its entry's too": ("SELECT id + 1 AS id, c0, c1 FROM x",
                                                           "SELECT id + 1 AS id, rel, cl, kh, stamp FROM x", "tuple ids of t"),
    "a key hash that is not its key's": ("SELECT * FROM x", "SELECT id, rel, cl, kh + 1 AS kh, stamp FROM x", "key hash"),
    "a stamp far ahead": ("SELECT * FROM x", "SELECT id, rel, cl, kh, 340282366920938463463374607431768211455::UHUGEINT AS stamp FROM x",
                          "ahead of this site's clock"),
    "no key hash for a keyed table": ("SELECT * FROM x", "SELECT id, rel, cl, NULL::UHUGEINT AS kh, stamp FROM x", "no key hash"),
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_changeset_of_new_rows_is_refused_as_the_general_path_refuses_it(forgery: str, route: str):
    """Each forged field would be written as it came if neither Python (point route) nor the one
    statement (batch route) checked it: it is refused with the general path's message, and nothing
    changes."""
    src, dst = _pair()
    cs = _written(src, "INSERT INTO t VALUES (?, ?), (?, ?), (?, ?)", [3, "x", 7, "q", 8, "r"])
    tuples, entries, message = FORGERIES[forgery]
    rc = next(rc for rc in cs.relations if rc.name == "t")
    rc.tuples, cs.cl = edit(rc.tuples, tuples), edit(cs.cl, entries)
    before, cursor = _state(dst, VIEWS), dst.peer_cursor("src", "t")
    with _route(route), pytest.raises(crr.ChangesetError, match=message):
        dst.merge(cs.to_bytes(), track=True)
    assert _state(dst, VIEWS) == before and dst.peer_cursor("src", "t") == cursor
    with _route(route):
        dst.merge(_written(src, "INSERT INTO t VALUES (?, ?)", [4, "y"]), track=True)  # the site goes on
    assert app(dst, "p") == [("warm",), ("y",)]


@pytest.mark.parametrize("route", ROUTES)
def test_a_null_in_a_not_null_column_is_refused(route: str):
    src, dst = _pair()
    cs = _written(src, "INSERT INTO d VALUES (?, ?)", [9, "w9"])
    rc = next(rc for rc in cs.relations if rc.name == "d")
    forged_id = tuple_id_sql("d", [Column("c0", "INTEGER"), Column("c1", "VARCHAR")])  # of (c0, NULL): consistent
    rc.tuples = edit(rc.tuples, f"SELECT {forged_id} AS id, c0, c1 FROM (SELECT c0, NULL::VARCHAR AS c1 FROM x)")
    cs.cl = cs.cl.set_column(0, cs.cl.schema.field(0), rc.tuples.column(0))  # its entry names the forged id
    before = _state(dst, VIEWS)
    with _route(route), pytest.raises(crr.ChangesetError, match="NULL in column w"):
        dst.merge(cs.to_bytes())
    assert _state(dst, VIEWS) == before


def test_the_cursor_is_not_recorded_when_the_statement_wrote_nothing(monkeypatch):
    """A changeset of rows the site knows: the one statement writes nothing, its cursor CTE
    included, and the general path runs; when that fails, the cursor stays where it was."""
    src, dst = _pair()
    cs = _written(src, "INSERT INTO t VALUES (?, ?)", [5, "x"])
    dst.merge(cs)  # not tracked: the row is known, the cursor not recorded
    cursor = dst.peer_cursor("src", "t")
    assert cursor < cs.cursor

    def failing(*args, **kwargs):
        raise crr.ChangesetError("injected failure of the general path")

    monkeypatch.setattr(site_merge, "plan_merge", failing)
    with pytest.raises(crr.ChangesetError, match="injected"):
        dst.merge(cs, track=True)
    assert dst.peer_cursor("src", "t") == cursor


@pytest.mark.parametrize("route", ROUTES)
def test_a_view_failing_on_the_merged_rows_is_named_and_nothing_is_written(route: str):
    views = {**VIEWS, "big": "SELECT k * 2147483647 AS x FROM t WHERE k < 50"}  # INTEGER overflow for 1 < k < 50
    src, dst = _pair(VIEWS, views)
    dst.merge(_written(src, "INSERT INTO t VALUES (?, ?)", [1, "x"]), track=True)
    assert app(dst, "big") == [(2147483647,)]
    before, cursor = _state(dst, views), dst.peer_cursor("src", "t")
    with _route(route), pytest.raises(crr.SqlError, match="view big"):
        dst.merge(_written(src, "INSERT INTO t VALUES (?, ?)", [6, "x"]), track=True)
    assert _state(dst, views) == before and dst.peer_cursor("src", "t") == cursor


def test_merges_the_one_statement_does_not_cover_take_the_general_path(monkeypatch):
    src, dst = _pair()
    for sql, params in [("UPDATE t SET v = ? WHERE k = ?", ["z", 100]), ("DELETE FROM t WHERE k = ?", [100]),
                        ("INSERT INTO t VALUES (?, ?)", [100, "again"]),  # a new version of a deleted key
                        ("DELETE FROM t WHERE k = ?", [100]),
                        ("INSERT INTO t VALUES (?, ?)", [100, "z"])]:  # a deleted version back: length 3
        ran = _merge_statements(dst, _written(src, sql, params))
        assert len(ran) > 1, (sql, ran)
    before = src.cursor
    src.insert_many("t", [(k, "m") for k in range(200, 280)])  # more rows than the point route takes
    many = Changeset.from_bytes(src.changes(since=before).to_bytes())
    assert len(_merge_statements(dst, many)) == 1  # the batch route
    before = src.cursor
    src.insert_many("t", [(k, "n") for k in range(300, 380)])
    more = Changeset.from_bytes(src.changes(since=before).to_bytes())
    monkeypatch.setattr(point_merge, "BATCH_ROWS", 79)  # more rows than the batch route takes
    assert len(_merge_statements(dst, more)) > 1
    for name, sql in VIEWS.items():
        assert app(dst, name) == app(src, name), name


def test_a_batch_of_floats_and_keys_arriving_twice_in_one_stream():
    """Values Python does not write as text (DOUBLE) take the batch route at any size; a changeset
    repeating rows the site holds (a stream resent) writes nothing in one statement and then takes
    the general path, which finds nothing new."""
    src, dst = crr.Site(site_id="src"), crr.Site(site_id="dst")
    for site in (src, dst):
        site.execute("CREATE REPLICATED TABLE m (k INTEGER PRIMARY KEY, x DOUBLE, s VARCHAR)")
    dst.execute("CREATE MATERIALIZED VIEW big AS SELECT k, x FROM m WHERE x > 1.0")
    src.execute("INSERT INTO m VALUES (0, 0.5, 'a')")
    dst.merge(src.changes())
    before = src.cursor
    src.insert_many("m", [(k, k / 3, None if k % 4 else "s") for k in range(1, 9)] + [(9, -0.0, "z")])
    cs = src.changes(since=before)
    assert len(_merge_statements(dst, cs)) == 1
    assert app(dst, "m") == app(src, "m") and app(dst, "big") == src.execute("SELECT k, x FROM m WHERE x > 1.0 ORDER BY ALL")
    assert str(dst.execute("SELECT x FROM m WHERE k = 9")[0][0]) == "0.0"  # a zero is stored as +0.0
    resent = src.changes(since=0)
    assert len(_merge_statements(dst, resent)) > 1 and not dst.merge(resent).changed
    assert app(dst, "m") == app(src, "m")


SOURCE_OPS = st.one_of(
    st.tuples(st.sampled_from([0, 1]), OPS),
    st.tuples(st.sampled_from([0, 1]), st.just(("merge the other source", ()))),
)


@pytest.mark.parametrize("route", ROUTES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SOURCE_OPS, min_size=1, max_size=14))
def test_random_writes_at_two_sources_shipped_one_by_one_match_the_general_path_and_the_query(route: str, ops) -> None:
    """Random single-row writes at two sources writing the same keys (keyed and unkeyed tables,
    key changes, deletes of join partners, re-inserts), and the sources merging each other (so a
    source sends versions of a key it got from the other), each write's changes shipped as bytes
    to a receiver merging new rows in one statement and to one taking the general path: after
    every merge both report the same and keep the same tables in full (stamps, sequence numbers
    and cursors too), and in the end every view equals its query evaluated by DuckDB."""
    first, fused, general = _trio(PROPERTY_VIEWS)
    second = _declared("second", PROPERTY_VIEWS)
    sources, shipped = [first, second], [0, 0]
    for who, (sql, params) in ops:
        src = sources[who]
        if sql == "merge the other source":
            src.merge(sources[1 - who].changes())
        else:
            try:
                src.execute(sql, list(params))
            except crr.CrrError:
                continue
        data = src.changes(since=shipped[who]).to_bytes()
        shipped[who] = src.cursor
        got, want = _both(route, fused, general, data)
        assert got == want, (who, sql, params)
        assert _everything(fused) == _everything(general), (who, sql, params)
    for name, sql in PROPERTY_VIEWS.items():
        assert app(fused, name) == fused.execute(f"SELECT DISTINCT * FROM ({sql}) ORDER BY ALL NULLS FIRST"), name


@pytest.mark.parametrize("rows", [1, 300])  # the one-statement merge and the general path
def test_a_tracked_changeset_that_leaves_a_gap_does_not_move_the_cursor(rows: int):
    """A changeset starting after the recorded cursor does not carry the changes between them: recording
    its cursor made a stream resuming from it skip them for good."""
    src, dst = crr.Site(site_id="src"), crr.Site(site_id="dst")
    for site in (src, dst):
        site.execute("CREATE REPLICATED TABLE g (k INTEGER, v VARCHAR)")
    src.insert_many("g", [(k, "a") for k in range(rows)])
    dst.merge(src.changes(), track=True)
    first = src.cursor
    assert dst.peer_cursor("src", "g") == first
    src.insert_many("g", [(k, "gap") for k in range(rows, 2 * rows)])
    middle = src.cursor
    src.insert_many("g", [(k, "b") for k in range(2 * rows, 3 * rows)])
    assert dst.merge(src.changes(since=middle), track=True).changed  # its rows merge, the cursor stays
    assert dst.peer_cursor("src", "g") == first
    dst.merge(src.changes(since=dst.peer_cursor("src", "g")), track=True)  # the stream resumes: the gap arrives
    assert dst.peer_cursor("src", "g") == src.cursor
    assert sorted(dst.execute("SELECT * FROM g")) == sorted(src.execute("SELECT * FROM g"))
    fresh = crr.Site(site_id="fresh")
    fresh.execute("CREATE REPLICATED TABLE g (k INTEGER, v VARCHAR)")
    fresh.merge(src.changes(since=middle), track=True)  # no cursor yet: one from 0 is needed
    assert fresh.peer_cursor("src", "g") == 0


def test_a_table_of_doubles_merges_by_the_point_route_as_by_the_general_path():
    """A DOUBLE column's values reach the point route as Python floats, whose texts Python writes
    (crr.point._double_text): zeros of either sign, NaNs, infinities and subnormals leave every
    table as the general path does, and the statement is the prepared one."""
    src, fused, general = crr.Site(site_id="src"), crr.Site(site_id="dst"), crr.Site(site_id="dst")
    for site in (src, fused, general):  # a replicated table at each: the receivers take src's replica
        site.execute("CREATE REPLICATED TABLE g (k INTEGER PRIMARY KEY, f DOUBLE)")
        site.execute("CREATE MATERIALIZED VIEW gf AS SELECT f FROM g")
    src.execute("INSERT INTO g VALUES (0, 1.0)")
    warm = src.changes().to_bytes()
    for site in (fused, general):
        site.merge(warm, track=True)  # the receivers learn the columns and the view's widths
    for k, value in enumerate([-0.0, _NEGATIVE_NAN, float("inf"), 5e-324, 0.1, 1e16, 2.0**70], start=1):
        cs = _written(src, "INSERT INTO g VALUES (?, ?)", [k, value])
        ran = _merge_statements(fused, cs)
        assert len(ran) == 1 and ran[0].startswith("EXECUTE: "), ran
        with _general_path():
            general.merge(cs.to_bytes(), track=True)
    assert _bits(_everything(fused)) == _bits(_everything(general))  # NaNs compared by their bits
    assert _bits(app(fused, "g")) == _bits(app(src, "g")) and len(app(fused, "gf")) == 8


def test_a_field_table_of_uuids_times_floats_and_blobs_merges_by_the_point_route_unless_python_cannot_hold_a_value():
    """UUID, TIMESTAMP, TIMESTAMPTZ, DATE, TIME, FLOAT, DECIMAL and BLOB values reach the point route as the Python values
    whose texts Python writes (crr.point._param_text): such rows merge as one prepared statement and
    leave every table as the general path does; a date or timestamp Python cannot hold (infinity, a
    year past 9999), or a TIME of 24:00:00 (which Arrow gives Python as midnight), sends the merge to
    the batch route (read from Arrow by SQL), with the same outcome."""
    ddl = ("CREATE REPLICATED TABLE obs (id UUID PRIMARY KEY, at TIMESTAMP, day DATE, temp FLOAT, note VARCHAR, "
           "tick TIME, photo BLOB, seen TIMESTAMPTZ, cost DECIMAL(9,2), share DECIMAL(3,3))")
    src, fused, general = crr.Site(site_id="src"), crr.Site(site_id="dst"), crr.Site(site_id="dst")
    for site in (src, fused, general):
        site.execute(ddl)
        site.execute("CREATE MATERIALIZED VIEW warm_days AS SELECT day, temp FROM obs WHERE temp > 20")
    src.execute("INSERT INTO obs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [uuid.UUID(int=0), datetime.datetime(2026, 1, 1), datetime.date(2026, 1, 1), 25.0, "warm", None, None, None,
                 None, None])
    warm = src.changes().to_bytes()
    for site in (fused, general):
        site.merge(warm, track=True)  # the receivers learn the columns and the view's widths
    rows = [[uuid.UUID(int=1), datetime.datetime(2026, 11, 29, 8, 30, 0, 120000), datetime.date(2026, 11, 29), 21.1, "a",
             datetime.time(8, 30, 0, 5), b"\x00\xff|", datetime.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=_BERLIN),
             decimal.Decimal("-0.50"), decimal.Decimal("-0.5")],
            [uuid.UUID(int=2**128 - 1), datetime.datetime(1, 1, 1), datetime.date(9999, 12, 31), -0.0, None,
             datetime.time(23, 59, 59, 999999), b"", datetime.datetime(2024, 10, 27, 2, 30, tzinfo=_BERLIN),
             decimal.Decimal("9999999.99"), decimal.Decimal("0.999")],
            [uuid.uuid4(), datetime.datetime(2026, 2, 3, 4, 5, 6, 7), datetime.date(1970, 1, 1), float("nan"), "nan",
             datetime.time(0), bytes(range(256)), datetime.datetime(1, 1, 1, 1, 0, 0, 1, tzinfo=datetime.timezone.utc), 7, decimal.Decimal("0")],
            [uuid.uuid4(), None, None, 3.4028234663852886e38, "largest float", None, None, None, None, None]]
    beyond = [[uuid.uuid4(), "infinity", datetime.date(2026, 1, 2), 30.0, "forever", None, None, None, None, None],
              [uuid.uuid4(), datetime.datetime(2026, 1, 2), "10000-01-01", 30.0, "far", None, None, None, None, None],
              [uuid.uuid4(), None, None, 30.0, "the day's end", "24:00:00", None, None, None, None],
              [uuid.uuid4(), None, None, 30.0, "for ever", None, None, "infinity", None, None]]
    for values in rows + beyond:
        cs = _written(src, "INSERT INTO obs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        ran = _merge_statements(fused, cs)
        point_route = len(ran) == 1 and ran[0].startswith("EXECUTE: ")
        assert point_route == (values in rows), (values, ran)
        with _general_path():
            general.merge(cs.to_bytes(), track=True)
    assert _bits(_everything(fused)) == _bits(_everything(general))
    assert _bits(app(fused, "obs")) == _bits(app(src, "obs")) and len(app(fused, "obs")) == 9
    assert sorted(map(str, app(fused, "warm_days"))) == sorted(map(str, app(src, "warm_days"))) and len(app(fused, "warm_days")) == 7  # NaN > 20 in SQL; a set


@pytest.mark.parametrize("zone", ["Europe/Berlin", "+05:30", "Nowhere/Bogus"])
def test_a_timestamptz_column_sent_in_any_zone_merges_as_the_general_path_merges_it(zone: str):
    """A peer's TIMESTAMPTZ column may name any time zone (an instant is an instant): the point route
    reads its values as aware datetimes in that zone and writes their UTC wall clock, and a zone
    Python does not know sends the merge to the batch route; every table ends as the general path
    leaves it."""
    src, fused, general = crr.Site(site_id="src"), crr.Site(site_id="dst"), crr.Site(site_id="dst")
    for site in (src, fused, general):
        site.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, z TIMESTAMPTZ)")
    src.execute("INSERT INTO t VALUES (0, NULL)")
    warm = src.changes().to_bytes()
    for site in (fused, general):
        site.merge(warm, track=True)
    cs = _written(src, "INSERT INTO t VALUES (?, ?)", [1, datetime.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=_BERLIN)])
    rc = cs.relation("t")
    assert rc is not None
    at = rc.tuples.schema.names.index("c1")
    tuples = rc.tuples.set_column(at, pa.field("c1", pa.timestamp("us", zone)), rc.tuples.column(at).cast(pa.timestamp("us", zone)))
    sent = dataclasses.replace(cs, relations=[dataclasses.replace(r, tuples=tuples) if r.name == "t" else r
                                              for r in cs.relations]).to_bytes()
    got, want = _both("point", fused, general, sent)
    assert got == want and _everything(fused) == _everything(general)
    assert app(fused, "t")[-1] == (1, datetime.datetime(2024, 10, 27, 1, 30, tzinfo=zoneinfo.ZoneInfo("UTC")))


def test_a_table_of_128_bit_integers_merges_by_the_point_route_as_by_the_general_path():
    """HUGEINT and UHUGEINT values arrive as 16 little-endian bytes (crr.point_merge._python_values
    reads them as ints): the extremes and negative values merge as one prepared statement and leave
    every table as the general path does."""
    src, fused, general = crr.Site(site_id="src"), crr.Site(site_id="dst"), crr.Site(site_id="dst")
    for site in (src, fused, general):
        site.execute("CREATE REPLICATED TABLE w (k HUGEINT PRIMARY KEY, u UHUGEINT)")
        site.execute("CREATE MATERIALIZED VIEW wu AS SELECT u FROM w")
    src.execute("INSERT INTO w VALUES (0, 0)")
    warm = src.changes().to_bytes()
    for site in (fused, general):
        site.merge(warm, track=True)
    for k, u in [(-2**127, 2**128 - 1), (2**127 - 1, 2**64), (-1, None), (2**64 + 1, 1)]:
        cs = _written(src, "INSERT INTO w VALUES (?, ?)", [k, u])
        ran = _merge_statements(fused, cs)
        assert len(ran) == 1 and ran[0].startswith("EXECUTE: "), ran
        with _general_path():
            general.merge(cs.to_bytes(), track=True)
    assert _everything(fused) == _everything(general)
    assert sorted(app(fused, "w")) == sorted(app(src, "w")) and len(app(fused, "w")) == 5
