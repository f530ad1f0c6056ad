"""Tracked cursors (crr.tracked_cursors): whatever order changesets of a stream arrive in, through
whichever merge path, the cursor a site answers, the one its file holds and the one the rule of
``tracked_cursor`` gives agree, in the opening that wrote them and after the file is opened again."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import crr
from crr.tracked_cursors import CURSOR_ADVANCE_SQL, RecordedCursors, tracked_cursor
from tests.test_point import _expanded, _statements

WRITES = [
    "INSERT INTO t VALUES (1, 'a')",
    "INSERT INTO t VALUES (2, 'b'), (3, 'c')",
    "UPDATE t SET v = 'B' WHERE k = 2",
    "DELETE FROM t WHERE k = 1",
    "INSERT INTO t VALUES (4, 'd')",
    "INSERT INTO t VALUES (1, 'again')",
]


def _history() -> list[crr.Changeset]:
    """A source's changesets after each of its writes: the increment of that write, the full state,
    and the changes since its first write (each with the cursor it had then)."""
    src = crr.Site(site_id="src")
    src.execute("CREATE REPLICATED TABLE t (k INT PRIMARY KEY, v VARCHAR)")
    out, cursors = [], []
    for sql in WRITES:
        before = src.cursor
        src.execute(sql)
        cursors.append(src.cursor)
        out += [src.changes(since=before), src.changes(), src.changes(since=cursors[0])]
    return out


HISTORY = _history()


def _file_cursor(site: crr.Site) -> int:
    """The stream's cursor as the file holds it (0 without a row)."""
    rows = [c for p, r, c, _ in site.peer_cursors() if (p, r) == ("src", "t")]
    return rows[0] if rows else 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, len(HISTORY) - 1), min_size=1, max_size=12))
def test_the_cursor_answered_the_one_stored_and_the_rule_agree(tmp_path_factory, picks: list[int]):
    """A wrong advance (its values in another order, a condition of the rule missing) or a snapshot
    that does not follow what the file holds makes them differ."""
    path = str(tmp_path_factory.mktemp("cursors") / "dst.duckdb")
    dst = crr.Site(path, site_id="dst")
    dst.execute("CREATE REMOTE TABLE t (k INT, v VARCHAR)")
    expected = 0
    for pick in picks:
        cs = HISTORY[pick]
        dst.merge(cs, track=True)
        expected = tracked_cursor(expected, cs.since, cs.cursor)
        assert (dst.peer_cursor("src", "t"), _file_cursor(dst)) == (expected, expected), picks
    dst.close()
    again = crr.Site(path)
    assert again.peer_cursor("src", "t") == expected
    again.close()


def test_a_stream_recorded_once_moves_by_the_update_of_its_row():
    """The second and later tracked merges of a stream in one opening run the advance, not the upsert;
    a stream the snapshot does not know runs the upsert (which finds the stored row), as after a reopen."""
    dst = crr.Site(site_id="dst")
    dst.execute("CREATE REMOTE TABLE t (k INT, v VARCHAR)")
    first, second, third = HISTORY[0], HISTORY[3], HISTORY[6]  # increments of the first three writes
    dst.merge(first, track=True)
    assert dst._state.recorded_cursors.get(("src", "t")) == first.cursor
    ran = _expanded(dst, _statements(dst, lambda: dst.merge(second, track=True)))
    assert any(CURSOR_ADVANCE_SQL in sql for sql in ran) and not any("ON CONFLICT" in sql for sql in ran)
    dst._state.recorded_cursors = RecordedCursors()  # as a new opening has it
    ran = _expanded(dst, _statements(dst, lambda: dst.merge(third, track=True)))
    assert any("ON CONFLICT" in sql for sql in ran) and not any(CURSOR_ADVANCE_SQL in sql for sql in ran)
    assert dst.peer_cursor("src", "t") == _file_cursor(dst) == third.cursor


def test_a_dropped_relation_forgets_its_stream_in_the_snapshot_too():
    """peer_cursor answers from the snapshot: a DROP that deleted the rows but left the snapshot would
    answer the old cursor, and the stream of a relation declared again would skip what came before."""
    dst = crr.Site(site_id="dst")
    dst.execute("CREATE REMOTE TABLE t (k INT, v VARCHAR)")
    dst.merge(HISTORY[-2], track=True)
    assert dst.peer_cursor("src", "t") == HISTORY[-2].cursor
    dst.execute("DROP REMOTE TABLE t")
    dst.execute("CREATE REMOTE TABLE t (k INT, v VARCHAR)")
    assert (dst.peer_cursor("src", "t"), _file_cursor(dst)) == (0, 0)
    dst.merge(HISTORY[-2], track=True)
    assert dst.execute("SELECT * FROM t ORDER BY k") == [(1, "again"), (2, "B"), (3, "c"), (4, "d")]


def test_the_cursor_answered_between_a_merges_commit_and_its_snapshot_is_the_committed_one(monkeypatch):
    """A reader on another thread asking between a tracked merge's commit and the replacement of the
    snapshot got the cursor before the merge, older than the one the file held (found by a probe):
    while a tracked merge runs, the file answers. The reader here runs at that moment."""
    dst = crr.Site(site_id="dst")
    dst.execute("CREATE REMOTE TABLE t (k INT, v VARCHAR)")
    seen = []
    after = RecordedCursors.after

    def reading(snapshot, wrote):
        seen.append((dst.peer_cursor("src", "t"), _file_cursor(dst)))  # committed, snapshot not replaced yet
        return after(snapshot, wrote)
    monkeypatch.setattr(RecordedCursors, "after", reading)
    for cs in (HISTORY[0], HISTORY[3], HISTORY[6], HISTORY[7]):  # new rows three times, then a full state held
        dst.merge(cs, track=True)
    assert len(seen) >= 4 and all(answered == stored for answered, stored in seen), seen
    assert seen[-1][1] == HISTORY[7].cursor


def test_a_closed_site_refuses_to_answer_a_cursor():
    """A closed site answered the cursors its last opening wrote (found by a probe), where it refuses
    every other call."""
    dst = crr.Site(site_id="dst")
    dst.execute("CREATE REMOTE TABLE t (k INT, v VARCHAR)")
    dst.merge(HISTORY[0], track=True)
    dst.close()
    with pytest.raises(crr.SiteError, match="closed"):
        dst.peer_cursor("src", "t")
