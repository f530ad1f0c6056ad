"""Tracked cursors: per (peer, relation), the source cursor of the last changeset merged with
``track=True``, so a stream resumes where it stopped (:meth:`crr.site.Site.peer_cursor`).

``_crr.cursors`` is the truth. A tracked merge records the cursor in its own transaction or
statement by the rule of :func:`tracked_cursor`, as one of two statements:

* the upsert (:data:`CURSOR_UPSERT_SQL`, :func:`upsert_cte_sql`), which inserts the stream's row or
  updates it, when the site does not know whether the row exists;
* the advance (:data:`CURSOR_ADVANCE_SQL`, :func:`advance_cte_sql`), an UPDATE of the row by its
  key, when the site knows the row exists: DuckDB's ``INSERT ... ON CONFLICT`` and the join that
  reads the recorded cursor cost about 1.5 ms more than the UPDATE (3.6 against 2.1 ms for a one-row
  INSERT with either as its CTE, prepared, measured side by side; a one-row tracked merge took 5.6
  ms with the upsert, 4.4 ms with the UPDATE), which a write's trip to a peer pays once.

What the site knows is :class:`RecordedCursors`, a snapshot of the rows a tracked merge of this
opening wrote, replaced after each commit (:meth:`RecordedCursors.after`). It answers
:meth:`crr.site.Site.peer_cursor` without a query for the streams it holds, but not while a tracked
merge runs (its commit precedes its snapshot: :attr:`crr.site_state.SiteState.tracking`). Only a
DROP or a new declaration deletes rows (:data:`CURSORS_FORGET_SQL`), and forgets them in the snapshot first
(:meth:`RecordedCursors.without_relation`): a snapshot that lacks a row costs an upsert, never a
wrong cursor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from crr.catalog import SCHEMA
from crr.changeset import shown
from crr.errors import CatalogError, SiteError
from crr.types import is_utf8

Stream = tuple[str, str]
"""A tracked stream: (peer site id, relation name)."""


def tracked_cursor(recorded: int, since: int, cursor: int) -> int:
    """The cursor a tracked merge of a changeset ``(since, cursor]`` leaves, given the one recorded
    (0: none). One starting past it leaves a gap of changes it does not carry, so the cursor stays and
    the stream resumes from it; one ending before it (an old changeset merged again) moves nothing
    back. A full state (``since`` 0) holds everything of its source up to its cursor, which is the
    cursor, even below the recorded one: a source restored from an older copy of its file numbers its
    new changes again from there (keeping the larger one skipped them)."""
    if since > recorded or (since and cursor < recorded):
        return recorded
    return cursor


_CURSOR_CONFLICT = "ON CONFLICT (peer, relation) DO UPDATE SET cursor = excluded.cursor, updated = excluded.updated"

_TRACKED_ROW_SQL = (
    f"SELECT v.peer, v.relation, v.cursor, now()::TIMESTAMP "
    f"FROM (VALUES (?, ?, ?::BIGINT, ?::BIGINT)) v(peer, relation, cursor, since) LEFT JOIN {SCHEMA}.cursors c "
    "ON c.peer = v.peer AND c.relation = v.relation "
    "WHERE v.since <= coalesce(c.cursor, 0) AND (v.since = 0 OR v.cursor >= coalesce(c.cursor, 0))")
# the (peer, relation, cursor, since) row whose cursor a tracked merge records (the rule of
# tracked_cursor): that of a changeset starting at or before the recorded cursor (0 when none is) and
# ending at or past it, or holding the full state

CURSOR_UPSERT_SQL = f"INSERT INTO {SCHEMA}.cursors {_TRACKED_ROW_SQL} {_CURSOR_CONFLICT} RETURNING 1"
"""Record a tracked stream's cursor, inserting its row if there is none: values :func:`upsert_values`.
Returns a row when it wrote the cursor."""

CURSOR_ADVANCE_SQL = (f"UPDATE {SCHEMA}.cursors SET cursor = ?::BIGINT, updated = now()::TIMESTAMP "
                      "WHERE peer = ? AND relation = ? AND ?::BIGINT <= cursor AND (?::BIGINT = 0 OR ?::BIGINT >= cursor)")
"""Record a tracked stream's cursor in its existing row, by the rule of :func:`tracked_cursor`:
values :func:`advance_values`. Writes nothing when the row is missing."""

CURSORS_FORGET_SQL = f"DELETE FROM {SCHEMA}.cursors WHERE relation = ?"
"""Forget the tracked cursors of a dropped relation: one declared again under its name starts from 0."""

PEER_CURSOR_SQL = f"SELECT cursor FROM {SCHEMA}.cursors WHERE peer = ? AND relation = ?"
"""A tracked stream's cursor: parameters (peer, relation)."""

PEER_CURSORS_SQL = f"SELECT peer, relation, cursor, updated FROM {SCHEMA}.cursors ORDER BY peer, relation"
"""Every tracked stream's cursor and when it last moved."""


def upsert_values(stream: Stream, cursor: int, since: int) -> list:
    """The values of :data:`CURSOR_UPSERT_SQL` and :func:`upsert_cte_sql`."""
    return [stream[0], stream[1], cursor, since]


def advance_values(stream: Stream, cursor: int, since: int) -> list:
    """The values of :data:`CURSOR_ADVANCE_SQL` and :func:`advance_cte_sql`."""
    return [cursor, stream[0], stream[1], since, since, cursor]


def upsert_cte_sql(written: str) -> str:
    """:data:`CURSOR_UPSERT_SQL` as a CTE of a merge's one statement (:mod:`crr.point_merge`),
    writing only when the CTE ``written`` returned rows (the merge wrote); values :func:`upsert_values`."""
    return (f"INSERT INTO {SCHEMA}.cursors {_TRACKED_ROW_SQL} AND EXISTS (SELECT 1 FROM {written}) "
            f"{_CURSOR_CONFLICT} RETURNING 1")


def advance_cte_sql(written: str) -> str:
    """:data:`CURSOR_ADVANCE_SQL` as a CTE of a merge's one statement, writing only when the CTE
    ``written`` returned rows; values :func:`advance_values`."""
    return f"{CURSOR_ADVANCE_SQL} AND EXISTS (SELECT 1 FROM {written}) RETURNING 1"


@dataclass(frozen=True)
class RecordedCursors:
    """The tracked cursors a site knows are stored: per stream, the cursor its row holds as committed.
    An immutable snapshot: :meth:`after` and :meth:`without_relation` return a new one."""

    cursors: Mapping[Stream, int] = field(default_factory=dict)

    def get(self, stream: Stream) -> int | None:
        """The stream's stored cursor, or None when this snapshot does not know it (a query does)."""
        return self.cursors.get(stream)

    def record(self, stream: Stream, cursor: int, since: int, written: str | None = None) -> tuple[str, list]:
        """The statement (a CTE of a merge's one statement reading the CTE ``written``, if given) that
        records the cursor of a changeset ``(since, cursor]`` of ``stream``, and its values."""
        if stream in self.cursors:
            return (CURSOR_ADVANCE_SQL + " RETURNING 1" if written is None else advance_cte_sql(written),
                    advance_values(stream, cursor, since))
        return (CURSOR_UPSERT_SQL if written is None else upsert_cte_sql(written),
                upsert_values(stream, cursor, since))

    def after(self, wrote: Mapping[Stream, tuple[bool, int]]) -> "RecordedCursors":
        """The snapshot once the statements of :meth:`record` committed: ``wrote`` maps each stream
        to whether its statement returned a row and the changeset's cursor. A row written holds that
        cursor; a stream whose statement wrote nothing keeps what it had (an upsert that wrote nothing
        leaves the snapshot not knowing). The snapshot itself when nothing was written (every
        untracked merge)."""
        if not any(written for written, _ in wrote.values()):
            return self
        cursors = dict(self.cursors)
        for stream, (written, cursor) in wrote.items():
            if written:
                cursors[stream] = cursor
        return RecordedCursors(cursors)

    def without_relation(self, relation: str) -> "RecordedCursors":
        """The snapshot without the streams of ``relation`` (whose rows :data:`CURSORS_FORGET_SQL` deletes)."""
        return RecordedCursors({s: c for s, c in self.cursors.items() if s[1] != relation})


def check_peer_cursor_args(peer: object, relation: object) -> None:
    """:class:`CatalogError` unless ``peer_cursor``'s arguments are a site id and a relation name (strings)."""
    if not isinstance(peer, str) or not isinstance(relation, str) or not (is_utf8(peer) and is_utf8(relation)):
        raise CatalogError(f"peer_cursor takes a peer's site id and a relation name, both strings of valid "
                           f"Unicode, not {shown(peer)} and {shown(relation)}")


def check_track(track: object) -> None:
    """:class:`SiteError` unless ``merge``'s ``track`` is a bool (numpy's bool_ is not: a truth test of
    an array or NA raises, and any truthy value such as ``'no'`` would turn tracking on)."""
    if not isinstance(track, bool):
        raise SiteError(f"merge's track is True or False, not {shown(track)}")
