"""Merging a changeset into a site: atomic, idempotent and commutative.

:func:`merge` first tries the one statement of rows new to the site (:mod:`crr.point_merge`: a peer's
INSERT, with the views reading the table maintained inside it, and the tracked cursor); when that is
not one, or it wrote nothing, the general path runs in one transaction: the catalog changes the
changeset teaches (learned lineage, relations turning derived, layouts that no longer apply), the
batch of its held relations (:func:`crr.merge.plan_merge`, checked as it is read), its maintenance
(:meth:`crr.site_state.SiteState.apply`) and the tracked cursor.
"""

from __future__ import annotations

import dataclasses
import json

from crr import replica
from crr.catalog import COPIED_DEFINITION_UPDATE_SQL, Relation
from crr.causal import KeyHashSource
from crr.changeset import Changeset, RelationChanges, received
from crr.cte import CteWrite, cte_values
from crr.maintain import BatchResult
from crr.merge import (DERIVED_UPDATE_SQL, ENTRY_COLUMNS, LINEAGE_UPDATE_SQL, MergeInputs,
                       MergeResult, changeset_errors, grown_lineage, held_relations, learned_definitions,
                       newly_derived, plan_merge, relineaged,
                       allowed_skew, received_entries, tuple_columns, without_copies)
from crr.point import NEW_TUPLES, PointWrite
from crr.point_merge import received_new_batch, received_new_rows, received_rows_insert_sql
from crr.repeated import repeated
from crr.site_state import SiteState, ViewFailed, views_inside
from crr.tracked_cursors import Stream


def _skew(state: SiteState) -> float:
    """How far ahead of this site a received stamp may be (:func:`crr.merge.allowed_skew`)."""
    return allowed_skew(state.max_clock_skew, state.clock.last)


def merge(state: SiteState, changeset: Changeset | bytes, track: bool = False) -> MergeResult:
    """Merge a changeset or its bytes (see :meth:`crr.site.Site.merge`)."""
    state.check_open()
    # bytes are validated as they are decoded; an object built in Python is validated here
    cs, copies = without_copies(state.rels, received(changeset))
    held, ignored = held_relations(state.rels, cs)
    ignored = copies + ignored
    # a site's own changes are no stream it resumes: their cursor is the site's own (Site.cursor)
    track = track and cs.source != state.site_id
    state.tracking = track
    try:
        result, repeats = _merge(state, cs, held, track)
    finally:
        state.tracking = False
    for _, rc in held:  # merged: a later changeset from this source overlapping it may repeat it
        key = (cs.source, rc.name)
        cursor, since = state.merged_cursors.get(key, (cs.cursor, cs.since))
        state.merged_cursors[key] = (max(cursor, cs.cursor), since if repeats else cs.since)
    return MergeResult(result, ignored)


def _merge(state: SiteState, cs: Changeset, held: list[tuple[Relation, RelationChanges]],
           track: bool) -> tuple[BatchResult, bool]:
    """Merge the held relations of a changeset (see :func:`merge`): nothing for a changeset that
    repeats what the site holds, or the one statement of rows new to the site, or the general path;
    and whether it was a repeat."""
    if _repeated(state, cs, held, track):
        return BatchResult(), True
    point = _merge_new_rows(state, cs, held, track)
    if point is not None:
        return point, False
    inputs = MergeInputs(state.con, state.slots, state.accepted)
    try:
        with state.transaction(), changeset_errors():
            grown = grown_lineage(held)
            stale = relineaged(state.rels, grown)
            if grown:  # staged: the committed catalog changes only if the merge commits
                state.stage(state.rels.with_(*(dataclasses.replace(state.rels[n], lineage=lin)
                                               for n, lin in grown.items())))
                state.con.executemany(LINEAGE_UPDATE_SQL, [[json.dumps(sorted(lin)), n] for n, lin in grown.items()])
            derived = newly_derived(held)
            if derived:
                now = [dataclasses.replace(state.rels[n], derived=True) for n in derived]
                for rel in now:  # a replica takes the standard layout before monomials arrive
                    if state.rels[rel.name].replica:
                        for stmt in replica.release_sql(state.rels[rel.name], rel):
                            state.con.execute(stmt)
                        state.note_unchecked_entries()
                state.stage(state.rels.with_(*now))
                state.con.executemany(DERIVED_UPDATE_SQL, [[n] for n in derived])
            learned = learned_definitions(held)
            if learned:
                state.stage(state.rels.with_(*(dataclasses.replace(state.rels[n], copied_definition=d)
                                               for n, d in learned.items())))
                state.con.executemany(COPIED_DEFINITION_UPDATE_SQL, [[d, n] for n, d in learned.items()])
            if grown or derived:
                state.uncolocate(state.rels)
            batch = plan_merge(state.con, state.rels, cs, held, inputs, _skew(state))
            batch.revalued = stale
            result = state.apply(batch) if held else BatchResult()
            # the relations the site holds: one declared later starts at 0
            recorded = _record_cursors(state, cs, held) if track else {}
        state.recorded_cursors = state.recorded_cursors.after(recorded)
    finally:
        inputs.close(drop_tables=len(cs) > 10_000)
    return result, False


def _repeated(state: SiteState, cs: Changeset, held: list[tuple[Relation, RelationChanges]], track: bool) -> bool:
    """Whether the changeset brings nothing new (:func:`crr.repeated.repeated`); then a tracked merge
    records the cursor, in its own transaction, and nothing else runs. Asked only of a changeset
    that, for each of its relations, starts before the cursor of one merged from the same source
    and not where the last one merged in full started (:attr:`crr.site_state.SiteState.merged_cursors`):
    a resend, a replay, a source's snapshot. A changeset continuing from the last one merged brings
    news, as does another part of the last one (a stream cut into batches); either would pay the
    query for nothing."""
    if not held:
        return False
    for _, rc in held:
        cursor, since = state.merged_cursors.get((cs.source, rc.name), (0, 0))
        if cs.since >= cursor or cs.since == since:
            return False
    inputs = MergeInputs(state.con, state.slots, state.accepted)
    try:
        with changeset_errors():
            if not repeated(state.con, state.rels, cs, held, inputs):
                return False
    finally:
        inputs.close(drop_tables=False)
    if track:
        with state.transaction(), changeset_errors():
            recorded = _record_cursors(state, cs, held)
        state.recorded_cursors = state.recorded_cursors.after(recorded)
    return True


def _record_cursors(state: SiteState, cs: Changeset,
                    held: list[tuple[Relation, RelationChanges]]) -> dict[Stream, tuple[bool, int]]:
    """Record the changeset's cursor of each held relation, in the caller's transaction, by the
    statements :meth:`crr.tracked_cursors.RecordedCursors.record` picks; what each wrote, for
    :meth:`~crr.tracked_cursors.RecordedCursors.after` once the transaction commits."""
    recorded = {}
    for _, rc in held:
        stream = (cs.source, rc.name)
        sql, values = state.recorded_cursors.record(stream, cs.cursor, cs.since)
        recorded[stream] = (bool(state.con.execute(sql, values).fetchall()), cs.cursor)
    return recorded


def _merge_new_rows(state: SiteState, cs: Changeset, held: list[tuple[Relation, RelationChanges]],
                    track: bool) -> BatchResult | None:
    """Merge a changeset of rows new to the site as one statement, with the maintenance of the
    views reading their table and the tracked cursors inside it (:mod:`crr.point_merge`): a few
    rows checked in Python (:func:`received_new_rows`) as parameters, more read from Arrow
    through the general path's checks (:func:`received_new_batch`). None, having written
    nothing, when it is not one, or a view needs the general path."""
    rows = received_new_rows(held, cs, _skew(state))
    batch = received_new_batch(held, cs) if rows is None else None
    if rows is not None:
        rel = rows.relation
    elif batch is not None:
        rel, received = batch
    else:
        return None
    derived = state.rels.derived_from(rel.name)
    m = state.maintainer()
    appends = m.appends(rel, derived, NEW_TUPLES, one_row=rows is not None and len(rows.ids) == 1) if derived else []
    if appends is None:
        return None
    then = list(appends)
    streams: dict[str, Stream] = {}  # the CTE recording each tracked stream's cursor, by its name
    if track:  # (held: the relations the site holds, as the general path records)
        for n, (_, rc) in enumerate(held):
            streams[f"_crr_cursor{n}"] = stream = (cs.source, rc.name)
            then.append((f"_crr_cursor{n}", *state.recorded_cursors.record(stream, cs.cursor, cs.since, NEW_TUPLES)))
    try:
        with changeset_errors(), views_inside(bool(appends)):
            if rows is not None:
                counts = PointWrite(state.con, state.prepared).insert_received(
                    rel, rows.texts, rows.ids, rows.key_hashes, rows.stamps, state.next_seq(),
                    unchecked_entries=state.rels.unchecked_entries, then=then)
                tuples = len(rows.texts)
            else:
                counts = _insert_received(state, rel, received, cs, then)
                tuples = received.tuples.num_rows
    except ViewFailed:
        return None  # nothing written: the general path names the view
    if counts is None:
        return None
    state.bump()
    written = dict(zip((name for name, _, _ in then), counts[1:]))
    state.recorded_cursors = state.recorded_cursors.after(
        {stream: (bool(written[name]), cs.cursor) for name, stream in streams.items()})
    return m.appended_result(rel, tuples, counts[0], written, [r.name for r, _ in held])


def _insert_received(state: SiteState, rel: Relation, rc: RelationChanges, cs: Changeset,
                     then: list[CteWrite]) -> tuple[int, ...] | None:
    """Run :func:`received_rows_insert_sql` on the changeset's tables, put in Arrow slots; its
    counts, or None when it wrote nothing."""
    assert cs.cl is not None
    inputs = MergeInputs(state.con, state.slots, state.accepted)
    try:
        cl = inputs.register("_crr_in_cl", cs.cl, ENTRY_COLUMNS, "causal lengths")
        tuples = inputs.register("_crr_in_t0", rc.tuples, tuple_columns(rel), rc.name)
        sources = (KeyHashSource(tuples, rel.name, tuple(rel.key_aug_columns)),) if rel.key else ()
        entries = received_entries(state.rels, cl, cs.cl, frozenset({rel.name}), sources, _skew(state), ())
        assert entries is not None
        sql = received_rows_insert_sql(rel, entries, tuples, state.rels.unchecked_entries, then)
        seq = state.next_seq()
        counts = state.con.execute(sql, [seq, seq, *cte_values(then)]).fetchall()[0]
    finally:
        inputs.close(drop_tables=False)
    return counts if counts[0] else None
