"""Apply a batch of augmented changes to a site, set-at-a-time, inside the caller's transaction.

Local writes and merges both end here. A batch (:class:`Batch`) holds

* causal-length entries: a merge's :class:`~crr.causal.ReceivedEntries` or a local write's
  :class:`~crr.causal.LocalEntries` (typed inputs: :mod:`crr.causal` builds every statement over
  them);
* as :class:`~crr.batch_rows.Rows` (where they are read and how, rendered by
  :func:`crr.batch_rows.rows_sql` alone), base tuples ``(id, cols...)`` per replicated table, and
  derived tuples ``(vid, cols...)`` and monomials ``(vid, ids)`` per view, remote table or source.

:meth:`Maintainer.apply` then

1. joins the causal lengths into ``_crr.cl`` (max of ``cl`` and of ``stamp``) and recomputes the
   visibility cache for the ids whose entries changed (and the other versions of their keys),
   noting the ids whose visibility flipped (one MERGE, after a count for keyed entries); a
   replica's entries and tuples go into its own table by one MERGE each (:mod:`crr.replica`), whose
   new tuples are the replica's delta for step 4;
2. adds new base tuples to the replicated tables' AUG state;
3. adds (``+``) new monomials to the views, remote tables and sources that arrived directly (a source
   that keeps nothing passes them straight to its views);
4. runs each local view's delta plans, in dependency order, for the inputs that got new tuples or
   monomials, and adds the products to the view (absorbing ``p + p.q = p`` when monomials of
   different lengths may meet);
5. re-evaluates ``in?`` for the tuples whose provenance grew or contains an id whose visibility
   flipped, and patches every APP table with the result (one idempotent MERGE per relation), or,
   when the batch can only add tuples to a view, appends them (one INSERT:
   :meth:`Maintainer._only_new_monomials_change`), or, when it can only remove the tuples of a
   view whose tuples have one derivation each, deletes them (one DELETE:
   :meth:`Maintainer._only_derivations_lost`).

Provenance only grows; nothing here removes a monomial except absorption, which keeps the canonical
form. Statements touch only the rows of the batch and the rows they join with.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import Enum

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from crr import aggregate, colocated, replica, sql_memo
from crr.arrow_build import FALSE, int64_range, int64_scalar, string_scalar, strings
from crr.batch_rows import Rows, RowsKind, WrittenChanges, app_cols_sql, cols_sql, rows_sql, written_app_changes_sql
from crr.arrow_result import arrow_rows, bool_column
from crr.arrow_slots import ArrowSlots
from crr.catalog import Catalog, Relation, SiteFlag, flag_set_sql, orphans_update_sql
from crr.cte import CteWrite, cte_values, returning_then_sql
from crr.errors import ViewQueryError, first_line
from crr.id_sets import all_in, distinct_ids, id_storage, ids_sql, index_in, listed_ids
from crr.causal import (CL, EntryHome, ListedIds, LocalEntries, ReceivedEntries, cl_merge_sql, cl_update_sql,
                        NewEntryProbe, first_entries_insert_sql, local_cl_merge_sql, local_flips_sql, present_key_versions_sql,
                        takes_first_insert, takes_later_update, tuples_without_entries_sql)
from crr.maintain_sql import (alive_sql, any_rows_sql, app_append_sql, app_remove_sql, base_tuples_insert_sql,
                               dirty_monomials, held_sql, holding_flipped_sql, listed_probes, lost_derivations_sql,
                               lost_tuples_sql, members_merge_sql, membership_changes_sql, mid_sql, monomials_insert_sql,
                               narrowed_visibility, temp_table)
from crr.types import quote_ident, quote_str, tuple_id_sql
from crr.sql.compile import IDS


_ZERO = int64_scalar(0)  # built without pyarrow's pandas probe (crr.arrow_build)


class AppPatch(Enum):
    """Which changes a batch's exact APP changes hold, and so the statement that applies them."""

    INSERT = "insert"  # rows only appear: a plain INSERT
    DELETE = "delete"  # rows only leave: a plain DELETE
    MERGE = "merge"  # both: one MERGE


@dataclass
class Batch:
    """Where the changes to apply are read from (see the module docstring)."""

    received: ReceivedEntries | None = None  # a merge's causal-length entries (crr.causal)
    local: LocalEntries | None = None  # a local write's exact growing entries (crr.causal)
    base: dict[str, Rows] = field(default_factory=dict)  # base tuples (id, cols...) per replicated table
    derived: dict[str, tuple[Rows, Rows | None]] = field(default_factory=dict)  # (tuples, monomials) per relation
    local_write: bool = False  # a local write: ``base`` holds the written rows, some maybe known already
    # set by the point path (crr.point), which wrote the table's causal lengths (``local`` then has no
    # table), AUG tuples and APP rows itself: the (id, rel, vis) of the ids whose visibility flipped
    # (RowsKind.POINT_FLIPS); only the relations deriving from the table remain to maintain
    applied_flips: Rows | None = None
    # the same flips as Arrow (id, rel, vis), and the ids of the rows the write added that the table
    # did not hold before (the evidence crr.maintain needs to append to views without re-evaluating)
    applied_flips_arrow: pa.Table | None = None
    applied_fresh: pa.Array | None = None
    # relations whose rows in ``base`` are all tuples their replica here did not hold before (the
    # point path knows it: every added row is fresh)
    fresh: frozenset[str] = frozenset()
    # relation -> a batch write's exact APP changes (crr.writes)
    app_changes: dict[str, WrittenChanges] = field(default_factory=dict)
    # what the batch brings co-located views: their sources' tuples and entries (crr.colocated)
    colocated: list[colocated.ColocatedBatch] = field(default_factory=list)
    # what the batch brings replicas: their tuples and entries (crr.replica)
    replicas: list[replica.ReplicaBatch] = field(default_factory=list)
    # relations every tuple of which is valued again, their lineage grown (crr.merge.relineaged)
    revalued: frozenset[str] = frozenset()


@dataclass
class RelationCounts:
    """What a batch did to one relation."""

    inserted: int = 0  # rows that appeared in the APP table
    deleted: int = 0  # rows that left the APP table
    new_tuples: int = 0  # AUG tuples added (replicated tables)
    new_monomials: int = 0  # derivations added (views, remote tables and sources; each holds its values)

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict."""
        return dict(inserted=self.inserted, deleted=self.deleted, new_tuples=self.new_tuples,
                    new_monomials=self.new_monomials)


@dataclass
class BatchResult:
    """Counts of one applied batch."""

    relations: dict[str, RelationCounts] = field(default_factory=dict)
    cl_changed: int = 0

    @property
    def changed(self) -> bool:
        """Whether the batch changed any replicated state."""
        return self.cl_changed > 0 or any(c.new_tuples or c.new_monomials for c in self.relations.values())


def _one_row_per_id(first: pa.Table, then: pa.Table) -> pa.Table:
    """The rows two statements wrote into one home, one per id: ``then``'s, and ``first``'s for the
    ids ``then`` did not write (the same columns in both)."""
    if then.num_rows == 0:
        return first
    kept = first.filter(pc.is_null(index_in(first.column("id"), then.column("id"))))
    return pa.concat_tables([kept, then])


@dataclass(frozen=True)
class Follow:
    """Writes run in the statement that writes a home's entries (see :meth:`Maintainer._write_entries`),
    reading the rows it returns under ``name``; ``columns``: those of its rows Python reads (all when
    empty)."""

    name: str
    then: Sequence[CteWrite]
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Written:
    """What a batch's statements wrote into one home of entries (:meth:`Maintainer._write_entries`)."""

    rows: pa.Table  # the rows written, one per id
    followed: dict[str, int] = field(default_factory=dict)  # rows returned by each followed write
    complete: bool = False  # the followed writes ran, and read every row written
    later: pa.Table | None = None  # the rows of the MERGE after the followed writes, which they did not read

    def merged(self, then: pa.Table) -> Written:
        """These rows with a later statement's (``then``) in place of theirs for the ids it wrote: the
        followed writes did not read ``then``."""
        return Written(_one_row_per_id(self.rows, then), self.followed, complete=self.complete and then.num_rows == 0,
                       later=then if self.followed else None)


def patch_app(con: duckdb.DuckDBPyConnection, rel: Relation, changes_sql: str) -> tuple[int, int]:
    """Apply membership changes (see :func:`members_merge_sql`) in one MERGE; return (inserted, deleted)."""
    actions = con.execute(members_merge_sql(rel, changes_sql, "merge_action")).fetchall()
    deleted = sum(1 for (a,) in actions if a == "DELETE")
    return len(actions) - deleted, deleted


def patch_members_returning(con: duckdb.DuckDBPyConnection, rel: Relation, changes_sql: str) -> pa.Table:
    """:func:`patch_app` returning the rows it changed: the relation's columns (as its members
    table names them) and ``sign`` (1: the row entered, -1: it left)."""
    returning = f"{app_cols_sql(rel)}, CASE WHEN merge_action = 'DELETE' THEN -1 ELSE 1 END AS sign"
    return arrow_rows(con, members_merge_sql(rel, changes_sql, returning))


def apply_app_changes(con: duckdb.DuckDBPyConnection, rel: Relation, changes_sql: str, mode: AppPatch) -> tuple[int, int]:
    """Like :func:`patch_app` for changes known to be only insertions or only deletions (a plain
    INSERT or DELETE is cheaper than a MERGE); ``AppPatch.MERGE`` falls back to it."""
    if mode is AppPatch.INSERT:
        n = con.execute(f"INSERT INTO {rel.app} ({app_cols_sql(rel)}) SELECT {cols_sql(rel)} FROM ({changes_sql})").fetchall()
        return int(n[0][0]), 0
    if mode is AppPatch.DELETE:
        n = con.execute(app_remove_sql(rel, changes_sql)).fetchall()
        return 0, int(n[0][0])
    return patch_app(con, rel, changes_sql)


def view_query_failed(error: BaseException) -> bool:
    """Whether a DuckDB error is a view's query failing on the data (an overflow, a failed cast), not
    one of crr's own checks (``error('crr: ...')``)."""
    return (isinstance(error, (duckdb.OutOfRangeException, duckdb.ConversionException, duckdb.InvalidInputException))
            and "crr: " not in str(error))


_AUG_SOURCE_COLUMN = re.compile(r"\bsource column (c[0-9]+)\b")

# the most relations a point write maintains inside its own statement; with more it takes the general
# path. DuckDB's binder nests a statement's CTEs and subqueries, and refuses one past its
# ``max_expression_depth`` (1000): a merge of one row into a table that 260 views read failed so
# (found by a probe), a local INSERT at about 700. 32 keeps the one statement far below that.
MAX_STATEMENT_VIEWS = 32


def _view_inputs(rels: Mapping[str, Relation], view: str) -> list[Relation]:
    """The relations the query of ``view`` reads, as the catalog ``rels`` holds them (none for a
    relation without a plan, or one ``rels`` lacks)."""
    plan = rels[view].plan if view in rels else None
    return [rels[name] for name in (plan.inputs if plan is not None else ()) if name in rels]


def in_user_words(detail: str, inputs: Sequence[Relation]) -> str:
    """DuckDB's error ``detail`` as its first line, with the AUG column a failed cast names (``source
    column c1``: AUG tables name user columns by position) given as the user's (``v of t``), of each
    of the view's ``inputs`` that has a column there."""
    def named(match: re.Match[str]) -> str:
        position = int(match.group(1)[1:])
        names = dict.fromkeys(f"{rel.column_names[position]} of {rel.name}"
                              for rel in inputs if position < len(rel.column_names))
        return f"source column {' or '.join(names)}" if names else match.group(0)
    return _AUG_SOURCE_COLUMN.sub(named, first_line(detail))


@contextmanager
def view_errors(view: str, rels: Mapping[str, Relation] | None = None) -> Iterator[None]:
    """A view's query failing on the batch's data (:func:`view_query_failed`) is a
    :class:`~crr.errors.ViewQueryError` naming the view (``rels``: the catalog, whose columns of the
    relations the view reads the message gives for the AUG ones DuckDB's quotes, looked up only
    then); other errors pass on."""
    try:
        yield
    except duckdb.Error as e:
        if not view_query_failed(e):
            raise
        inputs = _view_inputs(rels, view) if rels is not None else []
        raise ViewQueryError.on_data(view, in_user_words(str(e), inputs)) from None


class Maintainer:
    """Runs one batch against a site's relations. One instance per transaction."""

    def __init__(self, con: duckdb.DuckDBPyConnection, slots: ArrowSlots, relations: Catalog,
                 seq: int, widths: dict[str, tuple[int, int]]) -> None:
        self.con = con
        self.slots = slots  # where the batch's Arrow results are read from (crr.arrow_slots)
        self.rels = dict(relations)  # this batch's view of the catalog (see _mark_wide)
        # the site's flags that are true (crr.catalog.SiteFlag), and those this batch set (recorded in
        # the file; the site stages them)
        self.flags: set[SiteFlag] = set(relations.flags)
        self.raised: list[SiteFlag] = []
        self.seq = seq
        self._seq_scalar = int64_scalar(seq)  # for pyarrow comparisons with returned seq columns
        self.widths = widths  # per derived relation: (min, max) monomial length seen (a cache)
        self.result = BatchResult()
        self.new_base: dict[str, str] = {}  # relation -> FROM text of its new tuples (id, cols)
        self.new_derived: dict[str, str] = {}  # relation -> FROM text of new monomials (vid, mid, ids, cols)
        self.absorbed: dict[str, str] = {}  # relation -> temp of absorbed monomials (vid, mid)
        # relations whose delta (new_base / new_derived) holds only tuples or monomials the relation
        # did not hold before this batch (see _fresh_product)
        self.fresh: set[str] = set()
        self.flipped_rels: set[str] = set()  # relations with entries that grew or flipped (a superset)
        self.flips = ""  # FROM text of (id, rel, vis) whose visibility flipped, once _merge_cl ran
        # the ids of flips as Python ints when a merge's _merge_cl wrote few (crr.id_sets.listed_ids):
        # holding_flipped_sql then compares them as constants; None otherwise
        self.flip_ids: list[int] | None = None
        # every causal-length entry the batch wrote, as Arrow (id, rel, vis): a superset of the flips
        # (the causal-length MERGE's RETURNING, or a point write's own list); None when not at hand
        self.written_arrow: pa.Table | None = None
        self.added_arrow: dict[str, pa.Table] = {}  # replicated table or replica -> the ids (id) of a merge's added tuples
        self.new_arrow: dict[str, pa.Table] = {}  # relation -> its new monomials as Arrow, when one INSERT returned them
        self._written_by: dict[str, pa.Table] = {}  # base relation -> its rows of written_arrow (memo)
        self._all_new: dict[str, bool] = {}  # relation -> _written_all_new_to_replica (memo)
        # relations whose catalog entry this batch changed (first wide monomials, first tuples without
        # entries), recorded in the file; the site stages them
        self.marked: list[str] = []
        self.new_entries: pa.ChunkedArray | None = None  # ids the causal-length MERGE inserted (no entry before)
        self.local_written: pa.ChunkedArray | None = None  # ids of the entries a local batch write wrote
        self.local_added: dict[str, pa.ChunkedArray] = {}  # replicated table -> ids of the tuples a local batch write added
        self.lineage: dict[str, set[str]] = {}  # relation -> base relations in its lineage (set by the site)
        self.sql_cache: dict[tuple, tuple[str, bool]] = {}  # generated delta SQL (kept by the site across batches)
        self._temps: list[str] = []
        self._registered: list[str] = []  # slots holding this batch's Arrow results (released by cleanup)
        self.batch: Batch | None = None
        # the views appends() maintains: (view, its new monomials' statement, its APP rows' statement)
        self.appended: list[tuple[str, str, str]] = []
        # views whose APP changes a statement writing entries made in full (_merge_replica): step 5 skips them
        self.maintained: set[str] = set()

    # -- helpers -------------------------------------------------------------------------------
    def x(self, sql: str, params: list | None = None) -> int:
        """Execute a statement; return the row count it reports (0 if none)."""
        cur = self.con.execute(sql, params) if params else self.con.execute(sql)
        try:
            rows = cur.fetchall()
        except duckdb.InvalidInputException:
            return 0
        return int(rows[0][0]) if rows and rows[0] and isinstance(rows[0][0], int) else 0

    def temp(self, name: str, select_sql: str) -> int:
        """Create (or replace) a temp table from a query; return its row count."""
        rows = self.con.execute(f"CREATE OR REPLACE TEMP TABLE {quote_ident(name)} AS {select_sql}").fetchall()
        if name not in self._temps:
            self._temps.append(name)
        return int(rows[0][0]) if rows else 0  # CREATE TABLE AS reports the rows it wrote

    def counts(self, rel: str) -> RelationCounts:
        """The counts record of a relation."""
        return self.result.relations.setdefault(rel, RelationCounts())

    def cleanup(self, force: bool = False) -> None:
        """Drop the temp tables of a large batch (a small one's are replaced by the next batch)."""
        r = self.result
        size = r.cl_changed + sum(c.new_tuples + c.new_monomials for c in r.relations.values())
        if self._temps and (force or size > 10_000):
            self.con.execute("; ".join(f"DROP TABLE IF EXISTS {temp_table(name)}" for name in self._temps))
        self._temps.clear()
        self.release()

    def release(self) -> None:
        """Let go of the Arrow results this batch put in slots (cleanup does it too)."""
        for view in self._registered:
            self.slots.release(view)
        self._registered.clear()

    # -- the pipeline --------------------------------------------------------------------------
    def apply(self, batch: Batch, view_order: list[str]) -> BatchResult:
        """Apply a batch (see module docstring) and return what changed."""
        self.batch = batch
        if batch.applied_flips is not None:
            self._take_applied(batch)
        else:
            self._merge_cl(batch)
            for rel, rows in batch.base.items():
                self._merge_base(self.rels[rel], rows, batch.local_write)
        for part in batch.colocated:
            with view_errors(part.view, self.rels):
                self._apply_colocated(part)
        for rel, (tuples, monos) in batch.derived.items():
            self._merge_received(self.rels[rel], rows_sql(self.rels[rel], tuples),
                                 rows_sql(self.rels[rel], monos) if monos is not None else None)
        for name in view_order:
            if not self.rels[name].colocated and name not in self.maintained:  # _apply_colocated, _merge_replica
                with view_errors(name, self.rels):
                    self._run_view(self.rels[name])
        for rel in self.rels.values():
            if rel.is_base:
                if batch.applied_flips is None:
                    self._patch_base(rel)
            elif rel.has_app and not rel.colocated and rel.name not in self.maintained:
                with view_errors(rel.name, self.rels):
                    self._refresh_derived(rel)
        return self.result

    def populate(self, view: Relation) -> BatchResult:
        """Fill a newly created view: every input's whole AUG state acts as its delta. Inputs that
        hold nothing yet (a view declared with its tables, on a new site) cost one query."""
        assert view.plan is not None
        held = [self.rels[r].aug("t" if self.rels[r].is_base else "m") for r in dict.fromkeys(view.plan.inputs)
                if self.rels[r].stored]
        if not held or not self.con.execute(any_rows_sql(held)).fetchall()[0][0]:
            # what the fill records all the same: the monomial length of the view's plan, when it
            # is one length (the one-statement merges of new rows read it, crr.point_merge)
            width = self._plan_width(view)
            if width is not None and width[0] == width[1] and (width[1] <= 1 or view.wide):
                self._mixed_widths(view, *width)
            return self.result
        for r in view.plan.inputs:
            rel = self.rels[r]
            name = f"_crr_all_{r}"
            if not rel.stored:
                continue  # a source keeping nothing has received nothing yet (see crr.catalog.Catalog.sources_to_store)
            if rel.is_base:
                self.temp(name, f"SELECT id, {cols_sql(rel)} FROM {rel.aug('t')}")
                self.new_base[r] = temp_table(name)
            else:
                self.temp(name, f"SELECT vid, mid, ids, {cols_sql(rel)} FROM {rel.aug('m')}")
                self.new_derived[r] = temp_table(name)
        self._run_view(view)
        # the view as the catalog holds it now: its first monomials of several ids marked it wide
        # (_mark_wide), and in? of a wide view's tuples reads their monomials' ids, not their mid
        self._refresh_derived(self.rels[view.name])
        return self.result

    def _take_applied(self, batch: Batch) -> None:
        """Steps 1 and 2 for a write the point path applied: note its flips and its delta."""
        assert batch.local is not None and batch.applied_flips is not None
        self.result.cl_changed = batch.local.changes
        if batch.local.changes:
            self._note_flips(rows_sql(self.rels[batch.local.relation], batch.applied_flips), {batch.local.relation})
            self.written_arrow = batch.applied_flips_arrow
        if batch.applied_fresh is not None:
            self.added_arrow[batch.local.relation] = pa.table({"id": batch.applied_fresh})
        self.new_base.update({rel: rows_sql(self.rels[rel], rows) for rel, rows in batch.base.items()})
        self.fresh |= batch.fresh & set(batch.base)

    # 1. causal lengths and visibility ------------------------------------------------------------
    def _merge_cl(self, batch: Batch) -> None:
        """Join the batch's causal lengths into ``_crr.cl`` (and each replica's, with its tuples: see
        :meth:`_merge_replica`) and note which ids' visibility flipped.

        A local write hands its exact growing entries (with their old visibility): one MERGE writes
        them, and visibility is plain parity (see :mod:`crr.writes`). A merge's entries are written
        by one ``MERGE ... RETURNING`` (:func:`crr.causal.cl_merge_sql`) that computes visibility
        (by parity when a count finds no other present version of the keys; key-wide otherwise) and
        returns what it wrote, registered as the batch's flips. Two kinds of batch take a cheaper
        statement first, and the MERGE only for what it left: first inserts an INSERT of the new ids
        (:func:`crr.causal.first_entries_insert_sql`, which leaves out keys with another present
        version itself, without the count), later lengths (deletes) an UPDATE of the stored entries
        (:func:`crr.causal.later_entries_update_sql`, after the count for keyed entries; see
        :meth:`_write_entries`). Replicas and co-located views do the same into their tables
        (:meth:`_merge_replica`, :meth:`_apply_colocated`).
        """
        if batch.local is not None:
            self._write_local_cl(batch.local)
            return
        written = []
        received = batch.received
        if received is not None:
            probe = (NewEntryProbe.KEYS if received.keys_checked and SiteFlag.UNCHECKED_ENTRIES not in self.flags
                     else NewEntryProbe.IDS_AND_RIVALS)
            merged = self._write_entries(received, CL, None, None,
                                         lambda: first_entries_insert_sql(received, self.seq, probe,
                                                                          self._listed(received)),
                                         lambda: cl_update_sql(received, self.seq),
                                         lambda single: cl_merge_sql(received, self.seq, single)).rows
            self.result.cl_changed = merged.num_rows
            self.new_entries = merged.filter(bool_column(merged.column("new_entry").combine_chunks())).column("id")
            written.append(merged.select(["id", "rel", "vis"]))
            if received.untupled is not None and SiteFlag.UNCHECKED_ENTRIES not in self.flags \
                    and len(self.new_entries) and pc.any(pc.is_valid(index_in(self.new_entries, received.untupled))).as_py():
                # _crr.cl now holds an entry whose tuple did not come with it: from now on a batch of
                # first inserts probes the stored entries by id too (crr.causal.NewEntryProbe)
                self._raise(SiteFlag.UNCHECKED_ENTRIES)
        for part in batch.replicas:
            written.append(self._merge_replica(part))
        written = [w for w in written if w.num_rows]
        if not written:
            return
        table = written[0] if len(written) == 1 else pa.concat_tables(written)
        self._note_flips(f"(SELECT id, rel, vis FROM {self._register('_crr_flips', table)})",
                         set(table.column("rel").unique().to_pylist()), listed_ids(table.column("id")))
        self.written_arrow = table

    def _merge_replica(self, part: replica.ReplicaBatch) -> pa.Table:
        """Merge a replica's share of the batch, its entries and its tuples, in one MERGE (see
        :mod:`crr.replica`); register the tuples it added as the relation's delta and return the
        entries it wrote, ``(id, rel, vis)`` (a superset of the flips). A batch that brings nothing
        else takes the INSERT of first inserts with the views over the replica maintained inside it
        (:meth:`_derivations_after`), or the UPDATE of deletes with the lost tuples of its views
        removed inside it (:meth:`_lost_derivations_after`)."""
        rel = self.rels[part.relation]
        follow, lost = self._lost_derivations_after(rel, part)
        derived: dict[str, tuple[str, str]] = {}
        if follow is None:
            follow, derived = self._derivations_after(rel, part)
        written = self._write_entries(part.entries, replica.home(rel), part.tuples, "tseq",
                                      lambda: replica.first_insert_sql(rel, part, self.seq, values=bool(derived),
                                                                      listed=self._listed(part.entries, part.tuples)),
                                      lambda: replica.update_sql(rel, part, self.seq),
                                      lambda single: replica.merge_sql(rel, part, self.seq, single), follow)
        # reported as the general path reports them: a view the written entries touched, a view
        # that gained monomials
        for view, name in lost.items():
            if name in written.followed:
                if written.rows.num_rows:
                    self.counts(view).deleted += written.followed[name]
                if written.complete:
                    self.maintained.add(view)
        for view, (monomials, app) in derived.items():
            if monomials in written.followed:
                if written.followed[monomials]:
                    self.counts(view).new_monomials += written.followed[monomials]
                    self.counts(view).inserted += written.followed[app]
                if written.complete:
                    self.maintained.add(view)
        returned = written.rows
        grew = pc.and_(pc.equal(returned.column("seq"), self._seq_scalar), pc.greater(returned.column("cl"), _ZERO))
        self.result.cl_changed += pc.sum(grew).as_py() or 0
        added = returned.filter(pc.equal(returned.column("tseq"), self._seq_scalar)).select(["id"])
        if added.num_rows:
            self.added_arrow[rel.name] = added
            self.fresh.add(rel.name)
            self.counts(rel.name).new_monomials += added.num_rows
            self.widths[rel.name] = (1, 1)
        # the relation's delta for the views: every added tuple, or, when the views derived from
        # the INSERT's inside it (_derivations_after) and a MERGE added more after it, the MERGE's
        if derived and written.followed:
            later = written.later
            added = (later.filter(pc.equal(later.column("tseq"), self._seq_scalar)).select(["id"])
                     if later is not None else added.slice(0, 0))
        if added.num_rows:
            assert part.tuples is not None  # only received tuples are added
            # their values are the received ones: all of them, or those whose ids the MERGE returned
            received = self.slots.table(part.tuples.table)
            rows = part.tuples
            if added.num_rows < received.num_rows:
                kept = pc.is_valid(index_in(received.column(rows.id_column), added.column("id")))
                rows = Rows(self._register(f"_crr_added_{rel.name}", received.filter(kept)), rows.kind,
                            rows.id_column)
            self.new_derived[rel.name] = replica.added_tuples_sql(rel, rows)
        return returned.filter(pc.greater(returned.column("cl"), _ZERO)).select(["id", "rel", "vis"])

    def _one_replica_alone(self) -> bool:
        """Whether this batch is a merge that brings one replica's share and nothing else (no other
        home's entries, no other relation's tuples): what :meth:`_derivations_after` and
        :meth:`_lost_derivations_after` fold into the replica's statement."""
        batch = self.batch
        return (batch is not None and batch.local is None and not batch.base and not batch.derived
                and not batch.colocated and batch.received is None and len(batch.replicas) == 1)

    def _derivations_after(self, rel: Relation, part: replica.ReplicaBatch) -> tuple[Follow | None, dict[str, tuple[str, str]]]:
        """For a batch that brings nothing but first inserts of the remote source ``rel`` (a replica
        without an APP table), the maintenance of the views over it as writes run in the replica's
        INSERT (:meth:`_write_entries`), and per view the names of the counts of its new monomials
        and APP rows. They are :meth:`appends`' statements, reading the tuples the INSERT added
        (:func:`crr.replica.new_tuples_sql`): each tuple new to the site, its entry of length 1
        visible, each its own monomial. ``(None, {})`` for any other batch (a tuple without its entry
        in it, or an entry without its tuple, too: most likely a row the site holds, which the MERGE
        after the INSERT takes), or when a relation
        derived from ``rel`` needs more than those statements: it is not a view reading ``rel``
        itself (a view over such a view, whose delta the statement does not hand on), or
        :meth:`appends`' conditions fail (inputs each one id
        per monomial, disjoint lineages, one delta query, monomials of the one length it holds).

        When the MERGE runs after the INSERT (some received row was stored), the views derive in
        steps 4 and 5 from the tuples the MERGE added, and re-read the membership of what it
        wrote."""
        if (not self._one_replica_alone() or rel.has_app or rel.derived
                or part.entries is None or part.tuples is None or not takes_first_insert(part.entries)):
            return None, {}
        received = self.slots.table(part.tuples.table).column(part.tuples.id_column)
        assert part.entries.ids is not None
        if len(received) != len(part.entries.ids) or not all_in(received, part.entries.ids):
            return None, {}  # a tuple without its entry (or the reverse): most likely a stored id, the MERGE's
        readers = [v for v in self.rels.values()
                   if v.plan is not None and rel.name in self.lineage.get(v.name, {rel.name})]
        if not readers:
            return None, {}
        new = "_crr_new"
        self.new_derived[rel.name] = new  # the delta the views' candidates read, for appends' checks
        then: list[CteWrite] = [(new, replica.new_tuples_sql(rel, "_crr_e", self.seq), [])]
        names: dict[str, tuple[str, str]] = {}
        try:
            for n, view in enumerate(readers):
                # (a view over this one holds rel in its lineage too: it does not read rel itself)
                reads = view.plan is not None and rel.name in view.plan.inputs
                cand = self._appendable(view, rel, self._single_id) if reads else None
                if cand is None:
                    return None, {}
                parts = self._append_parts(n, rel, view, cand)
                then.extend(parts)
                names[view.name] = (parts[0][0], parts[1][0])
        finally:
            self.new_derived.pop(rel.name, None)
        return Follow("_crr_e", then, replica.returned_columns()), names

    def _lost_derivations_after(self, rel: Relation, part: replica.ReplicaBatch) -> tuple[Follow | None, dict[str, str]]:
        """For a batch that brings nothing but deletes of the replica ``rel`` (entries of even
        lengths), the APP deletes of the views over it whose tuples have one derivation each, to run
        in the replica's UPDATE (:meth:`_write_entries`), and the name each one's count has, by view.

        Such an UPDATE adds no tuple, so each such view gains no monomial, and an entry it writes
        either turns invisible (its length grows to an even one) or keeps the visibility it had (a
        later stamp with a shorter length: it stays as it was, visible when its stored length is
        odd). So the view loses exactly the tuples of its monomials holding an id written invisible
        (:meth:`_only_derivations_lost`): :func:`lost_derivations_sql` over those rows the UPDATE
        returned. When the MERGE runs after it, step 5 maintains the views again over every row
        written (removing tuples already gone removes nothing). ``(None, {})`` for any other batch."""
        if not self._one_replica_alone() or part.entries is None or not part.entries.deletions_only:
            return None, {}
        written = "(SELECT id FROM _crr_e WHERE cl > 0 AND NOT vis)"
        then: list[CteWrite] = []
        views: dict[str, str] = {}
        for view, v in self.rels.items():
            if (v.plan is not None and rel.name in self.lineage.get(view, ()) and v.has_app and not v.colocated
                    and self._one_derivation(v)):
                name = f"_crr_lost{len(then)}"
                lost = lost_derivations_sql(v, written, len(v.plan.branches[0].occurrences))
                then.append((name, app_remove_sql(v, lost) + " RETURNING 1", []))
                views[view] = name
        return (Follow("_crr_e", then), views) if then else (None, {})

    def _write_entries(self, entries: ReceivedEntries | None, home: EntryHome, tuples: Rows | None,
                       values: str | None, insert: Callable[[], str], update: Callable[[], str],
                       merge: Callable[[bool], str], follow: Follow | None = None) -> Written:
        """Write a batch's entries (and the tuples it brings the home, ``tuples``) into ``home``; return
        the rows written, one per id. ``insert``, ``update`` and ``merge`` build the home's three
        statements (``merge`` given its form: parity when the rival count finds no other present
        version of a key, see :mod:`crr.causal`); ``values`` names the column that is NULL in a row
        without its tuple's values (None for ``_crr.cl``, which holds none).

        First inserts take ``insert`` and deletes ``update`` (:func:`crr.causal.takes_first_insert`,
        :func:`crr.causal.takes_later_update`); the MERGE runs after either only when it left
        something (:meth:`_left_over`), and then its row for an id replaces the first statement's
        (the UPDATE writes no values, so the MERGE may write a row again for its tuple's values).
        The count runs only when the MERGE does, or to decide on the UPDATE.

        ``follow``: writes that read the rows the INSERT or UPDATE returns, under the name it gives,
        and run in the same statement (:func:`crr.cte.returning_then_sql`); the result says how many
        rows each returned, and whether they saw every row written (no MERGE ran after)."""
        def first(sql: str) -> Written:
            if follow is None:
                return Written(arrow_rows(self.con, sql))
            then = follow.then
            rows = arrow_rows(self.con, returning_then_sql(follow.name, sql, then, follow.columns), cte_values(then))
            names = [n for n, _, _ in then]
            counts = {n: (rows.column(n)[0].as_py() if rows.num_rows else 0) for n in names}
            return Written(rows.drop_columns(names), counts, complete=True)

        if entries is not None and takes_first_insert(entries):
            written = first(insert())
            if not self._left_over(entries, written.rows, tuples, None):
                return written
            return written.merged(arrow_rows(self.con, merge(self._single_versions(entries, home))))
        single = entries is not None and self._single_versions(entries, home)
        if entries is not None and takes_later_update(entries, single):
            written = first(update())
            if not self._left_over(entries, written.rows, tuples, values):
                return written
            return written.merged(arrow_rows(self.con, merge(single)))
        return Written(arrow_rows(self.con, merge(single)))

    def _left_over(self, entries: ReceivedEntries, written: pa.Table, tuples: Rows | None, values: str | None) -> bool:
        """After a first-insert INSERT or a later-lengths UPDATE (``written``: the rows it returned),
        whether the MERGE must run too: some received entry of the home is not among the written rows
        (its id was stored, it did not grow, its key has a rival, or it is not stored), or some
        received tuple's row is not among the written rows (with values, when ``values`` names the
        column that is NULL in a row without them: the UPDATE writes none)."""
        assert entries.ids is not None
        ids = written.column("id")
        if tuples is None and values is None and written.num_rows == len(entries.ids):
            return False  # written ids are distinct received ones: all of them
        if not all_in(entries.ids, ids):
            return True
        if tuples is None:
            return False
        if values is not None:
            ids = written.filter(pc.is_valid(written.column(values))).column("id")
        return not all_in(self.slots.table(tuples.table).column(tuples.id_column), ids)

    def _single_versions(self, received: ReceivedEntries, home: EntryHome) -> bool:
        """Whether the received entries' MERGE into ``home`` may take the parity form: some are keyed,
        no two share a key, and no other present version of their keys is stored there (see
        :mod:`crr.causal`). A count finds out, except for a batch of deletes while no home may hold
        two present versions of a key (:attr:`crr.catalog.SiteFlag.RIVAL_VERSIONS` false): a version
        it deletes was its key's only present one. When the answer is no for keyed entries, the
        MERGE may store a second present version of a key: the flag is set."""
        if not (received.some_keyed and received.one_per_key):
            single = False
        elif received.deletions_only and SiteFlag.RIVAL_VERSIONS not in self.flags:
            return True
        else:
            single = self.con.execute(present_key_versions_sql(received, home)).fetchall()[0][0] == 0
        if received.some_keyed and not single:
            self._raise(SiteFlag.RIVAL_VERSIONS)
        return single

    def _raise(self, flag: SiteFlag) -> None:
        """Record in the file that a site flag is true (it stays true)."""
        if flag not in self.flags:
            self.x(flag_set_sql(flag))
            self.flags.add(flag)
            self.raised.append(flag)

    def _write_local_cl(self, local: LocalEntries) -> None:
        """Write a local write's exact growing entries in one MERGE."""
        self.result.cl_changed = local.changes
        if local.changes == 0:
            return
        self.local_written = arrow_rows(self.con, local_cl_merge_sql(local, self.seq)).column("id")
        self._note_flips(local_flips_sql(local), {local.relation})

    def _note_flips(self, flips: str, rels: set[str], ids: list[int] | None = None) -> None:
        """Note the batch's flips: ``flips``, FROM text of ``(id, rel, vis)``; ``rels``, their
        relations; ``ids``, the same ids as ints when a merge wrote few (:func:`crr.id_sets.listed_ids`),
        which :func:`holding_flipped_sql` then compares as constants (None for any other flips)."""
        self.flips, self.flipped_rels, self.flip_ids = flips, rels, ids

    def _register(self, name: str, table: pa.Table) -> str:
        """Put an Arrow table in a slot for the rest of the batch; return the slot's quoted name."""
        view = self.slots.put(f"{name}_arrow", table)
        self._registered.append(view)
        return quote_ident(view)

    # 2. base tuples -----------------------------------------------------------------------------
    def _merge_base(self, rel: Relation, rows: Rows, local: bool = False) -> None:
        table = rows_sql(rel, rows)
        if local:  # the written rows act as the delta; views drop the derivations they already hold
            added = arrow_rows(self.con, f"""INSERT INTO {rel.aug('t')}
                SELECT DISTINCT ON (n.id) n.id, {cols_sql(rel, 'n')}, {self.seq}
                FROM {table} n ANTI JOIN {rel.aug('t')} t ON t.id = n.id RETURNING id""")
            self.new_base[rel.name] = table
            self.local_added[rel.name] = added.column("id")
            self.counts(rel.name).new_tuples += added.num_rows
            return
        # a merge: one INSERT adds the tuples this site lacks and returns them, as the batch's delta
        # (a changeset's tuples hold each id once: Changeset.validate refuses duplicates)
        fresh = self._entries_new(rel, rows)
        listed = None if fresh else self._received_ids(rows)
        added = arrow_rows(self.con, base_tuples_insert_sql(rel, rows, self.seq, fresh, listed))
        if added.num_rows:
            self.new_base[rel.name] = self._register(f"_crr_new_{rel.name}", added)
            self.added_arrow[rel.name] = added
            self.fresh.add(rel.name)
            self.counts(rel.name).new_tuples += added.num_rows
            if not fresh and not rel.orphans:
                self._note_orphans(rel)

    def _received_ids(self, rows: Rows) -> list[int] | None:
        """The ids of a merge's received tuples (an Arrow slot's) as ints when they are few
        (:func:`crr.id_sets.listed_ids`); None otherwise, or when they are not in a slot."""
        table = self._slot(rows.table) if rows.kind is RowsKind.RECEIVED else None
        return None if table is None else listed_ids(table.column(rows.id_column))

    def _slot(self, name: str) -> pa.Table | None:
        """The Arrow table in the slot ``name``; None when ``name`` is a temp table, not a slot."""
        try:
            return self.slots.table(name)
        except KeyError:
            return None

    def _listed(self, entries: ReceivedEntries | None, tuples: Rows | None = None) -> ListedIds | None:
        """A batch's ids for one home (its entries' and the tuples it brings there) and its entries' key
        hashes as ints when each is few (:func:`crr.id_sets.listed_ids`); None otherwise. Key hashes
        None when some entry has none (then none is listed)."""
        ids: set[int] = set()
        key_hashes: list[int] | None = None
        if entries is not None:
            listed = listed_ids(entries.ids) if entries.ids is not None else None
            if listed is None:
                return None
            ids.update(listed)
            khs = self._slot_column(entries.table, "kh", entries.relations)
            key_hashes = listed_ids(khs) if khs is not None else None
        if tuples is not None:
            listed = self._received_ids(tuples)
            if listed is None:
                return None
            ids.update(listed)
        return ListedIds(tuple(sorted(ids)), None if key_hashes is None else tuple(key_hashes))

    def _slot_column(self, slot: str, column: str, relations: frozenset[str]) -> pa.ChunkedArray | None:
        """A column of a merge's received entries (an Arrow slot's), of the rows of ``relations``; None
        when they are not in a slot."""
        table = self._slot(slot)
        if table is None:
            return None
        rels = pa.array(sorted(relations), pa.string())
        return table.filter(pc.is_in(table.column("rel"), value_set=rels)).column(column)

    def _entries_new(self, rel: Relation, rows: Rows) -> bool:
        """Whether every received tuple of the replicated table ``rel`` has an id whose entry this
        batch's causal-length MERGE inserted (:attr:`new_entries`), while ``$t`` holds no tuple without
        an entry (:attr:`crr.catalog.Relation.orphans`): then ``$t`` holds none of them, and they
        are added without looking in it."""
        if rel.orphans or self.new_entries is None or rows.kind is not RowsKind.RECEIVED:
            return False
        return all_in(self.slots.table(rows.table).column(rows.id_column), self.new_entries)

    def _note_orphans(self, rel: Relation) -> None:
        """Mark ``rel`` (in the file and in this batch's catalog) when a tuple the merge added to its
        ``$t`` (:attr:`new_base`) has no entry in ``_crr.cl``: the tuple arrived before its entry.
        Looked up only when the batch did not write every added tuple's entry."""
        if self._new_ids_written(rel.name):
            return
        if self.con.execute(tuples_without_entries_sql(self.new_base[rel.name])).fetchall()[0][0]:
            self.x(orphans_update_sql(), [True, rel.name])
            self.rels[rel.name] = dataclasses.replace(rel, orphans=True)
            self.marked.append(rel.name)

    # 3. derived tuples received directly ----------------------------------------------------------
    def _merge_received(self, rel: Relation, tuples: str, monos: str | None) -> None:
        """Add a changeset's tuples and monomials of a view or remote table (``monos`` None: the
        source holds the relation as a replicated table, each tuple its own single monomial)."""
        if monos is None:
            cand = f"SELECT vid, vid AS mid, [vid] AS ids, {cols_sql(rel)} FROM {tuples}"
            width: tuple[int, int] | None = (1, 1)
        else:
            cand = f"""SELECT m.vid, {mid_sql('m.ids')} AS mid, m.ids, {cols_sql(rel, 't')}
                       FROM (SELECT vid, list_sort(list_distinct(ids)) AS ids FROM {monos}) m
                       JOIN (SELECT DISTINCT ON (vid) * FROM {tuples}) t ON t.vid = m.vid"""
            width = None
        if rel.stored:  # a base relation's tuples hold each id once (Changeset.validate): one monomial each
            self._add_monomials(rel, cand, dedup=monos is not None, width=width)
            return
        # A source that keeps nothing: everything received is its delta (re-adding a monomial a view
        # already has is a no-op, so nothing needs filtering here).
        self.new_derived[rel.name] = f"({cand})"
        if width is None:
            self.widths.pop(rel.name, None)
        else:
            self.widths[rel.name] = width

    # 3b. co-located views ----------------------------------------------------------------------
    def _apply_colocated(self, part: colocated.ColocatedBatch) -> None:
        """Merge a co-located view's share of the batch: its source's entries and the derivations of
        its source's tuples, then its APP changes (see :mod:`crr.colocated`). A batch of first
        inserts or of deletes is one statement: the INSERT or UPDATE of ``$w`` and the APP changes
        reading the rows it returned (:func:`colocated.app_changes_after`); the APP statements run
        on their own only after the MERGE (a batch the INSERT or UPDATE did not cover)."""
        view, source = self.rels[part.view], self.rels[part.source]
        derivations = None
        if part.tuples is not None:
            key = ("colocated", view.name, part.tuples.table)  # generated once per site, like the delta plans'
            if key not in self.sql_cache:  # (the flag is _run_view's "one plan over base tuples"; unused here)
                self.sql_cache[key] = (colocated.derivations_sql(view, source, part.tuples), False)
            derivations = self.sql_cache[key][0]
        written = self._write_entries(part.entries, colocated.home(view, source.name), part.tuples, "vid",
                                      lambda: colocated.first_insert_sql(view, part, derivations, self.seq,
                                                                         self._listed(part.entries, part.tuples)),
                                      lambda: colocated.update_sql(view, part, derivations, self.seq),
                                      lambda single: colocated.merge_sql(view, part, derivations, self.seq, single),
                                      Follow(*colocated.app_changes_after(view, part.entries)))
        returned = written.rows
        if returned.num_rows == 0:
            return  # (the APP changes read only the rows written: none)
        counts = self.counts(view.name)
        counts.deleted += written.followed.get(colocated.APP_DELETED, 0)
        counts.inserted += written.followed.get(colocated.APP_INSERTED, 0)
        seq = pc.equal(returned.column("seq"), self._seq_scalar)
        self.result.cl_changed += pc.sum(pc.and_(seq, pc.greater(returned.column("cl"), _ZERO))).as_py() or 0
        counts.new_monomials += pc.sum(pc.equal(returned.column("dseq"), self._seq_scalar)).as_py() or 0
        if written.complete:
            return
        derived = pc.is_valid(returned.column("vid"))
        visible = bool_column(returned.column("vis").combine_chunks())
        slot = self._register(f"_crr_w_{view.name}", returned)
        if pc.any(pc.and_(derived, pc.invert(visible))).as_py():
            counts.deleted += self.x(colocated.app_delete_sql(view, slot))
        if pc.any(pc.and_(derived, visible)).as_py():
            counts.inserted += self.x(colocated.app_insert_sql(view, slot))

    # 4. local views -----------------------------------------------------------------------------
    def _source(self, relation: str, delta: bool) -> exp.Expression:
        rel = self.rels[relation]
        if rel.is_base:
            table = self.new_base[relation] if delta else rel.aug("t")
            ids: exp.Expression = exp.Array(expressions=[exp.column("id")])
        else:
            table = self.new_derived[relation] if delta else rel.aug("m")
            ids = exp.column("ids")
        # only the FROM text is parsed (a name or a subquery); the columns are built, as parsing
        # the list of a table of 1000 columns took 0.2 s
        query = sqlglot.parse_one(f"SELECT * FROM {table}", read="duckdb")
        query.set("expressions", [exp.column(c.name) for c in rel.aug_columns] + [exp.alias_(ids, IDS, copy=False)])
        return query.subquery(copy=False)

    def _run_view(self, view: Relation) -> None:
        plan = view.plan
        assert plan is not None
        changed = {r for r in plan.inputs if r in self.new_base or r in self.new_derived}
        if not changed:
            return
        cand, linear, single = self._candidates(view, changed)
        single_base = linear and all(single[r] for r in changed)
        self._add_monomials(view, cand, dedup=not single_base, width=self._plan_width(view),
                            fresh=linear and all(single.values()) and self._fresh_product(view, changed))

    def _candidates(self, view: Relation, changed: set[str]) -> tuple[str, bool, dict[str, bool]]:
        """SELECT text of the view's candidate monomials ``(vid, mid, ids, cols...)`` from the deltas
        of its ``changed`` inputs (its delta plans, :meth:`sql.compile.ViewPlan.delta_queries`);
        whether that is one delta query; and per input whether each of its monomials holds one id
        (:meth:`_single_id`)."""
        plan = view.plan
        assert plan is not None
        # the plans are compiled once; their SQL text depends only on where each changed input's
        # delta is read from, so it is generated once per such combination (``sql_cache``, per site)
        single = {r: self._single_id(r) for r in plan.inputs}
        key = (view.name, tuple((r, self.new_base[r] if r in self.new_base else self.new_derived[r])
                                for r in sorted(changed)), tuple(single[r] for r in sorted(plan.inputs)))
        cached = self.sql_cache.get(key)
        if cached is None:
            def build() -> tuple[str, bool]:
                # each plan is a new tree, generated once: no copy
                queries = [q.sql("duckdb", copy=False)
                           for q in plan.delta_queries(changed, self._source, single.__getitem__)]
                union = " UNION ALL ".join(f"({q})" for q in queries)
                cand = f"""SELECT {tuple_id_sql(view.name, view.aug_columns, 'p')} AS vid,
                                  {mid_sql(f'p.{IDS}')} AS mid, p.{IDS} AS ids, {cols_sql(view, 'p')}
                           FROM ({union}) p"""
                return cand, len(queries) == 1
            cached = self.sql_cache[key] = sql_memo.memo(self._candidates_key(view, changed, single), build)
        return cached[0], cached[1], single

    def _candidates_key(self, view: Relation, changed: set[str], single: dict[str, bool]) -> tuple:
        """Everything :meth:`_candidates`' text is generated from, as plain values (the key of
        :mod:`crr.sql_memo`, shared by the process's sites): the view's name, definition and columns
        (its plan is compiled from them and its inputs' columns), and per input its name, kind, columns,
        whether its monomials hold one id, and where this batch reads its delta (:meth:`_source`)."""
        assert view.plan is not None
        inputs = []
        for r in view.plan.inputs:
            rel = self.rels[r]
            delta = (self.new_base[r] if rel.is_base else self.new_derived[r]) if r in changed else None
            inputs.append((r, rel.kind, tuple(rel.columns), single[r], delta))
        return ("candidates", view.name, view.definition, tuple(view.columns), view.aggregate is not None,
                tuple(inputs))

    def _fresh_product(self, view: Relation, changed: set[str]) -> bool:
        """Whether none of the view's candidate monomials can be one it already holds, so adding them
        needs no anti-join with its ``$m``. Given one delta query (one changed input, occurring once)
        and inputs that each hold one id per monomial (:meth:`_single_id`, checked by the caller):

        * the changed input's delta holds only monomials it did not hold before (:attr:`fresh`), so
          each candidate holds an id of the changed input that no stored monomial of it held, and no
          monomial of the view derived before this batch holds it (a view derives monomials only
          from its inputs' stored or delta monomials, and AUG state never loses one);
        * the inputs' lineages are disjoint: no other input can hold that id either (a remote copy of
          the changed table beside it would, and could have brought it into the view earlier).
        """
        assert view.plan is not None
        return changed <= self.fresh and self._disjoint_lineages(view.plan.inputs)

    def _disjoint_lineages(self, relations: list[str]) -> bool:
        """Whether no base relation is in the lineage of two of ``relations`` (nor of one twice)."""
        lineages = [self.lineage.get(r, {r}) for r in relations]
        return sum(len(x) for x in lineages) == len(set().union(*lineages))

    def _single_id(self, relation: str) -> bool:
        """Whether every monomial of ``relation`` holds exactly one id: a base relation's, and a remote
        relation's that has only received a replicated table's tuples (not ``derived``; the site marks
        it derived, in this batch's catalog, before a view's monomials are merged into it). A view's
        lengths may still grow, so views never qualify; the answer is part of the plan cache's key."""
        rel = self.rels[relation]
        return rel.is_base or rel.narrow

    def _input_widths(self, relation: str) -> tuple[int, int] | None:
        """(min, max) monomial length of an input: 1 for a replicated table; a stored relation's
        lengths are read from the file when the site's cache lacks them (then the cache follows its
        batches), so a reopened site does not take the slower path for unknown lengths while an input
        like a static R2 never changes."""
        rel = self.rels[relation]
        if rel.is_base:
            return (1, 1)
        if relation not in self.widths and rel.stored:
            stored = self._stored_widths(rel)
            if stored is not None:
                self.widths[relation] = stored
        return self.widths.get(relation)

    def _stored_widths(self, rel: Relation) -> tuple[int, int] | None:
        """(min, max) length of the monomials a relation stores; None when it stores none."""
        lo, hi = self.con.execute(f"SELECT min(len(ids)), max(len(ids)) FROM {rel.aug('m')}").fetchall()[0]
        return None if lo is None else (int(lo), int(hi))

    def _plan_width(self, view: Relation) -> tuple[int, int] | None:
        """(min, max) monomial length the view's plans can produce, when the inputs' lengths tell it."""
        assert view.plan is not None
        bounds = set()
        for branch in view.plan.branches:
            widths = [self._input_widths(o.relation) for o in branch.occurrences]
            if any(w is None for w in widths):
                return None
            disjoint = self._disjoint_lineages([o.relation for o in branch.occurrences])
            lo = sum(w[0] for w in widths) if disjoint else max(w[0] for w in widths)  # type: ignore[index]
            bounds.add((lo, sum(w[1] for w in widths)))  # type: ignore[index]
        lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
        return (lo, hi)

    def _add_monomials(self, rel: Relation, cand: str, dedup: bool, width: tuple[int, int] | None = None,
                       fresh: bool = False) -> None:
        """Add (``+``) the candidate monomials (SQL: vid, mid, ids, cols) that ``rel`` lacks (``fresh``:
        the caller knows it lacks them all, see :meth:`_fresh_product`)."""
        name = f"_crr_newm_{rel.name}"
        source = f"(SELECT DISTINCT ON (vid, mid) * FROM ({cand}))" if dedup else f"({cand})"
        if (width is not None and width[0] == width[1] and (width[1] <= 1 or rel.wide)
                and not self._mixed_widths(rel, *width)):
            # every monomial has the one length the relation's others have, so none absorbs another:
            # one INSERT adds them and returns them, as this batch's delta of the relation
            self._insert_monomials(rel, name, source, fresh)
            return
        n = self.temp(name, f"""SELECT c.* FROM {source} c
                                ANTI JOIN {rel.aug('m')} m ON m.vid = c.vid AND m.mid = c.mid""")
        if n == 0:
            return
        if width is None or width[0] != width[1]:
            width = self.con.execute(f"SELECT min(len(ids)), max(len(ids)) FROM {temp_table(name)}").fetchall()[0]
        lo, hi = width
        if hi > 1 and not rel.wide:
            rel = self._mark_wide(rel)
        if self._mixed_widths(rel, lo, hi):
            n = self._absorb(rel, name)
            if n == 0:
                return
        self.new_derived[rel.name] = temp_table(name)
        self.new_arrow.pop(rel.name, None)
        self.fresh.add(rel.name)
        counts = self.counts(rel.name)
        counts.new_monomials += n
        self.x(f"""INSERT INTO {rel.aug('m')} SELECT n.vid, n.mid, n.ids, {cols_sql(rel, 'n')}, {self.seq}
                   FROM {temp_table(name)} n""")

    def _insert_monomials(self, rel: Relation, name: str, source: str, fresh: bool = False) -> None:
        """Add the monomials of ``source`` that ``rel`` lacks with one INSERT ... RETURNING (without
        the anti-join when the caller knows it lacks them all); the rows it returns are registered (as
        Arrow) as the relation's delta for the views over it."""
        added = arrow_rows(self.con, monomials_insert_sql(rel, source, str(self.seq), lacking_only=not fresh))
        if added.num_rows == 0:
            return
        view = self._register(name, added)
        self.new_derived[rel.name] = view
        self.new_arrow[rel.name] = added
        self.fresh.add(rel.name)
        self.counts(rel.name).new_monomials += added.num_rows

    def _mixed_widths(self, rel: Relation, lo: int, hi: int) -> bool:
        """Whether monomials of different lengths may meet in ``rel`` (only then can one absorb another)."""
        if rel.name not in self.widths:
            self.widths[rel.name] = self._stored_widths(rel) or (lo, hi)
        olo, ohi = self.widths[rel.name]
        lo, hi = min(lo, olo), max(hi, ohi)
        self.widths[rel.name] = (lo, hi)
        return lo < hi

    def _mark_wide(self, rel: Relation) -> Relation:
        """Record in the catalog that a relation whose monomials so far all held one id now holds longer
        ones; return the relation as it is now (this batch's own view of the catalog; the site stages it)."""
        self.x("UPDATE _crr.relations SET wide = true WHERE name = ?", [rel.name])
        rel = self.rels[rel.name] = dataclasses.replace(rel, wide=True)
        self.marked.append(rel.name)
        return rel

    def _absorb(self, rel: Relation, newm: str) -> int:
        """Apply ``p + p.q = p`` between the new monomials and the existing ones of the same tuples."""
        self.x(f"""DELETE FROM {temp_table(newm)} n WHERE EXISTS (
                      SELECT 1 FROM (SELECT m.vid, m.ids FROM {rel.aug('m')} m
                                     WHERE m.vid IN (SELECT vid FROM {temp_table(newm)})
                                     UNION ALL SELECT vid, ids FROM {temp_table(newm)}) e
                      WHERE e.vid = n.vid AND len(e.ids) < len(n.ids) AND list_has_all(n.ids, e.ids))""")
        absorbed = f"_crr_absorbed_{rel.name}"
        gone = self.temp(absorbed, f"""SELECT DISTINCT m.vid, m.mid FROM {rel.aug('m')} m
                                       JOIN {temp_table(newm)} n ON m.vid = n.vid
                                       WHERE len(n.ids) < len(m.ids) AND list_has_all(m.ids, n.ids)""")
        if gone:
            self.absorbed[rel.name] = absorbed
            self.x(f"DELETE FROM {rel.aug('m')} AS m USING {temp_table(absorbed)} a WHERE m.vid = a.vid AND m.mid = a.mid")
        return self.con.execute(f"SELECT count(*) FROM {temp_table(newm)}").fetchall()[0][0]

    # 5. derived counters and APP patches ------------------------------------------------------
    def _refresh_derived(self, rel: Relation) -> None:
        """Re-evaluate ``in?`` for the tuples whose provenance grew or holds a flipped id, and patch APP.

        One statement: the dirty tuples' monomials are valued against the visibility cache and the
        result drives an idempotent MERGE into the APP table (present -> inserted if missing,
        absent -> deleted if there), so no per-tuple membership state is needed.
        """
        dirty = []
        if rel.name in self.new_derived:
            dirty.append(f"SELECT vid FROM {self.new_derived[rel.name]}")
        if rel.name in self.absorbed:
            dirty.append(f"SELECT vid FROM {temp_table(self.absorbed[rel.name])}")
        if self.flipped_rels & self.lineage.get(rel.name, self.flipped_rels):
            dirty.append(self._holding_flipped(rel))
        # every tuple, valued against a narrower lineage before (neither shortcut below holds for them)
        revalued = self.batch is not None and rel.name in self.batch.revalued
        if revalued:
            dirty = [f"SELECT vid FROM {rel.aug('m')}"]
        if not dirty:
            return
        if not revalued and rel.aggregate is None and self._only_new_monomials_change(rel):
            self._insert_alive_new(rel)
            return
        if not revalued and self._only_derivations_lost(rel):
            sql = lost_derivations_sql(rel, self.flips, len(rel.plan.branches[0].occurrences),  # type: ignore[union-attr]
                                       self._flip_ids_sql())
            self.counts(rel.name).deleted += apply_app_changes(self.con, rel, sql, AppPatch.DELETE)[1]
            return
        changes = membership_changes_sql(rel, dirty_monomials(rel, f"({' UNION ALL '.join(dirty)})"), self._visibility(rel))
        if rel.aggregate is not None:  # the core's rows changed: maintain the aggregate from them
            rows = patch_members_returning(self.con, rel, changes)
            dele = sum(1 for s in rows.column("sign").to_pylist() if s < 0)
            ins = rows.num_rows - dele
            if rows.num_rows:
                aggregate.maintain(self.con, rel.aggregate, self._register(f"_crr_core_{rel.name}", rows),
                                   self._register)
        else:
            ins, dele = patch_app(self.con, rel, changes)
        counts = self.counts(rel.name)
        counts.inserted += ins
        counts.deleted += dele

    def _visibility(self, rel: Relation, lineage: set[str] | None = None) -> str:
        """FROM text of the visibility ``(id, vis)`` ``in?`` of ``rel``'s tuples may read: that of the
        base relations in its lineage (or in ``lineage``, a part of it the caller knows its ids are
        from), in ``_crr.cl`` and their replicas (every relation's when the lineage is unknown)."""
        if lineage is None:
            lineage = self.lineage.get(rel.name)
        return replica.visibility_sql([r for r in self.rels.values() if r.replica], lineage)

    def _unwritten_lineage(self, view: Relation) -> set[str] | None:
        """The base relations whose ids can be among the ids of the view's new monomials that this
        batch wrote no entry for (the ids ``in?`` still looks up, :func:`_liveness`); None when a
        lineage is not known (then every relation's entries are read).

        The view's delta plans (:meth:`sql.compile.ViewPlan.delta_queries`) make one term per
        changed occurrence of a branch, reading that occurrence's new monomials and every other
        occurrence's state. So such an id is in the lineage of an input some term reads as state,
        or of a changed input whose new monomials hold an id without an entry written by this batch.
        In a batch that adds R1 tuples with their entries to ``R1 JOIN R2``, that is R2 alone, and
        DuckDB skips R1's row groups of ``_crr.cl`` (and R1's replica) by their ``rel`` zone maps."""
        assert view.plan is not None and self.written_arrow is not None
        changed = {r for r in view.plan.inputs if r in self.new_base or r in self.new_derived}
        read: set[str] = set()
        for branch in view.plan.branches:
            names = [o.relation for o in branch.occurrences]
            deltas = [i for i, r in enumerate(names) if r in changed]
            if not deltas:
                continue  # the branch has no term
            read.update(r for i, r in enumerate(names) if len(deltas) > 1 or i != deltas[0])
            read.update(names[i] for i in deltas if not self._new_ids_written(names[i]))
        out: set[str] = set()
        for name in read:
            rel = self.rels[name]
            lineage = self.lineage.get(name, {name} if rel.is_base else None)
            if lineage is None:
                return None
            out |= lineage
        return out

    def _new_ids_written(self, relation: str) -> bool:
        """Whether every id of the monomials this batch added to ``relation`` has an entry this batch
        wrote (in :attr:`written_arrow`); False when those monomials or the entries are not at hand
        as Arrow."""
        if self.written_arrow is None:
            return False
        if self._single_id(relation):
            ids = self._new_to_replica(relation)
        elif relation in self.new_arrow:
            ids = pc.list_flatten(self.new_arrow[relation].column("ids").combine_chunks())
        else:
            return False
        return ids is not None and all_in(ids, self.written_arrow.column("id"))

    def _holding_flipped(self, rel: Relation) -> str:
        """SELECT text of the vids of ``rel``'s monomials that hold a flipped id (maybe repeated,
        :func:`holding_flipped_sql`): the longest monomial is 1 while ``rel`` is not wide, else the
        longest length the site knows it holds (:attr:`widths`, an upper bound that every added
        monomial widens), unknown for a relation that keeps nothing."""
        return holding_flipped_sql(rel, self.flips, ["vid"], self._longest(rel), self._flip_ids_sql())

    def _longest(self, rel: Relation) -> int:
        """The longest monomial ``rel`` can hold (see :meth:`_holding_flipped`), 0 when unknown."""
        return 1 if not rel.wide else self.widths.get(rel.name, (0, 0))[1] if rel.stored else 0

    def _flip_ids_sql(self) -> str | None:
        """The listed flipped ids (:attr:`flip_ids`) as SQL constants, None when not listed."""
        return None if self.flip_ids is None else ids_sql(self.flip_ids)

    def _only_new_monomials_change(self, view: Relation) -> bool:
        """Whether this batch can only add tuples to ``view``, and only tuples of its new monomials.

        True when the view absorbed nothing and no monomial it held before this batch holds an id
        whose entry the batch wrote: then no old monomial changed its value, ``in?`` can only turn
        true, and only through a new monomial. Decided on the Arrow results of the batch's own
        statements (no statement runs), per base relation ``L`` of the view's lineage with written
        entries:

        * ``L`` reaches the view through one stored input only, ``L``'s own replica (the replicated
          table, or a remote table or source of it that has only ever received that table's tuples,
          each its own one monomial: not ``derived``; views between count as paths), so every
          monomial of the view holding an id of ``L`` was derived from the one tuple of that id, when
          the tuple first arrived here;
        * every written id of ``L`` is a tuple this batch brought first: a tuple it added to the
          replica, or, when each of the view's monomials holds one id (a width-1 monomial is derived
          from its one tuple only), an id of one of the view's new monomials.

        (A remote copy of a UNION view named like a base table breaks the first condition: one id
        sits in several of its tuples, which can arrive in different merges. tests/test_append_only.py
        has that case.)
        """
        if view.plan is None or view.name in self.absorbed:
            return False
        new = self.new_arrow.get(view.name)
        if new is None and view.name in self.new_derived:
            return False  # new monomials, but not as Arrow (a temp table of a large or absorbing batch)
        touched = self.flipped_rels & self.lineage.get(view.name, self.flipped_rels)
        if not touched:
            return True
        if self.written_arrow is None:
            return False
        width_one = self._plan_width(view) == (1, 1)
        for relation in touched:
            if self._stored_inputs_holding(view, relation) != {relation} or self.rels[relation].derived:
                return False
            if self._written_all_new_to_replica(relation):
                continue
            if not (width_one and new is not None):
                return False
            # ids whose tuples this batch brought first: those of the view's new (width-1) monomials,
            # and those the batch added to the replica
            fresh = [id_storage(new.column("mid"))]
            added = self._new_to_replica(relation)
            if added is not None:
                fresh.append(id_storage(added))
            if not all_in(self._written(relation).column("id"), pa.concat_arrays(fresh)):
                return False
        return True

    def _one_derivation(self, view: Relation) -> bool:
        """Whether every tuple of ``view`` has exactly one derivation: its plan's rows fix their inputs'
        rows (``ViewPlan.one_derivation``), and each input's monomials hold one id (:meth:`_single_id`),
        so a view tuple's values fix the one monomial that can derive it."""
        plan = view.plan
        return (plan is not None and plan.one_derivation and view.aggregate is None
                and all(self._single_id(r) for r in plan.inputs))

    def _only_derivations_lost(self, view: Relation) -> bool:
        """Whether this batch can only remove tuples from ``view``, exactly those of its monomials
        that hold an id the batch wrote (then :func:`lost_derivations_sql` lists them, and a plain
        DELETE is the whole membership change: no visibility is read, no monomial grouped).

        True when every tuple of the view has one derivation (:meth:`_one_derivation`), the batch added no monomial to
        it and absorbed none, and every entry it wrote of the view's lineage is invisible: each
        monomial holding such an id is dead, and so is its tuple, which has no other; a tuple whose
        monomial holds no written id keeps its membership. (A rival version of a deleted key that
        turns visible is an entry the batch writes, visible: then the general MERGE runs.) Decided on
        the Arrow result of the batch's causal-length statements; False when it is not at hand.
        """
        if (not self._one_derivation(view) or self.written_arrow is None
                or view.name in self.new_derived or view.name in self.absorbed):
            return False
        written = self.written_arrow
        lineage = self.lineage.get(view.name)
        if lineage is not None:
            written = written.filter(pc.is_in(written.column("rel"), value_set=strings(sorted(lineage))))
        return not pc.any(bool_column(written.column("vis").combine_chunks())).as_py()

    def _new_to_replica(self, relation: str) -> pa.ChunkedArray | None:
        """Ids of the tuples this batch added to the base relation's replica here (the replicated
        table's new AUG tuples, or a stored remote table's or source's new monomials, each one tuple
        of its own, ``mid`` = ``vid`` = id); None when they are not at hand as Arrow."""
        if relation in self.added_arrow:
            return self.added_arrow[relation].column("id")
        if relation in self.new_arrow:
            return self.new_arrow[relation].column("mid")
        return None

    def _written(self, relation: str) -> pa.Table:
        """The rows of :attr:`written_arrow` (id, rel, vis) of one base relation."""
        assert self.written_arrow is not None
        if relation not in self._written_by:
            self._written_by[relation] = self.written_arrow.filter(
                pc.equal(self.written_arrow.column("rel"), string_scalar(relation)))
        return self._written_by[relation]

    def _stored_inputs_holding(self, view: Relation, relation: str) -> set[str]:
        """The non-view relations among ``view``'s inputs, and its input views' inputs, whose lineage
        holds the base relation ``relation``."""
        assert view.plan is not None
        out: set[str] = set()
        for name in view.plan.inputs:
            rel = self.rels[name]
            if rel.plan is not None:
                out |= self._stored_inputs_holding(rel, relation)
            elif relation in self.lineage.get(name, set()):
                out.add(name)
        return out

    def _insert_alive_new(self, view: Relation) -> None:
        """Append to the APP table the tuples of the view's new monomials that are alive (every id
        visible) and not present yet: the whole membership change of a batch that can only add
        tuples (see :meth:`_only_new_monomials_change`). The ids whose entries this batch wrote have
        their visibility in :attr:`written_arrow`: a monomial holding one written invisible is
        dropped before the statement, and the statement looks up in ``_crr.cl`` only the others (none
        when the batch wrote every id's entry: then it reads only the APP table)."""
        new = self.new_arrow.get(view.name)
        if new is None:
            return  # no new monomials: nothing changes
        cols = [c.name for c in view.aug_columns]
        if self.written_arrow is None:
            present = alive_sql(view, self.new_derived[view.name], self._visibility(view))
            distinct, non_null = False, frozenset()
        else:
            live = _liveness(new, self.written_arrow)
            kept = new.filter(pc.invert(live.dead))
            if kept.num_rows == 0:
                return
            distinct = distinct_ids(kept.column("vid"))
            non_null = frozenset(c for c in cols if kept.column(c).null_count == 0)
            if live.unknown_ids is None:
                present = f"SELECT * FROM {self._register(f'_crr_alive_{view.name}', kept.select(['vid'] + cols))}"
            else:  # a monomial holding an id _crr.cl has invisible (or has no entry for) is dead
                cand = self._register(f"_crr_cand_{view.name}", kept.select(["vid", "mid"] + cols))
                unknown = self._register(f"_crr_unknown_{view.name}", live.unknown_ids)
                visibility = self._visibility(view, self._unwritten_lineage(view))
                present = f"""SELECT c.* EXCLUDE (mid) FROM {cand} c
                              ANTI JOIN (SELECT u.mid FROM {unknown} u LEFT JOIN {visibility} v ON v.id = u.id
                                         WHERE NOT coalesce(v.vis, false)) d ON d.mid = c.mid"""
        rows = f"({present})" if distinct else f"(SELECT DISTINCT ON (vid) * FROM ({present}))"
        inserted = self.x(app_append_sql(view, rows, self._one_derivation(view), non_null))
        self.counts(view.name).inserted += inserted

    # -- a point write's maintenance, inside its own statement ------------------------------------
    def appends(self, rel: Relation, derived: list[str], tuples: str, one_row: bool = False) -> list[CteWrite] | None:
        """The statements that maintain the relations ``derived`` from ``rel`` (in dependency order)
        after an INSERT of rows new to the site, to run inside that INSERT's one statement
        (:func:`crr.point.new_rows_insert_sql`) as data-modifying CTEs, each ``(name, sql,
        parameters)``. ``tuples`` names the CTE that returns the added tuples (``id, cols...``),
        each new to the site, with a visible entry of length 1 written before. None when a relation
        needs more than they do (:meth:`one_statement_views`): the caller then takes the general
        path (the point write, then :meth:`apply`). ``one_row``: the write adds one tuple (see
        :meth:`_append_parts`).

        They are the steps :meth:`apply` takes for such a batch, with each step's Arrow result
        read by the next statement instead of by Python, per view:

        * its new monomials, by one INSERT ... RETURNING (:func:`monomials_insert_sql`), without
          the anti-join with ``$m``, as the rows are new (:meth:`_fresh_product`);
        * its new APP rows (:meth:`_insert_alive_new`): the batch only adds tuples
          (:meth:`_only_new_monomials_change`: every written id is a tuple it added), so the
          membership change is the alive new monomials' tuples the APP table lacks; a monomial is
          alive when every id is visible: ``rel``'s ids are (their entries, written earlier in the
          statement, are visible to the statements after it), and the others are looked up in
          ``_crr.cl`` (:func:`alive_sql`) when the view reads another table.
        """
        views = self.one_statement_views(rel, derived, tuples)
        if views is None:
            return None
        parts = [part for n, (view, cand) in enumerate(views) for part in self._append_parts(n, rel, view, cand, one_row)]
        # per view, the names of its two statements: its new monomials, then its APP rows
        self.appended = [(view.name, parts[2 * n][0], parts[2 * n + 1][0]) for n, (view, _) in enumerate(views)]
        return parts

    def appended_result(self, rel: Relation, tuples: int, app_rows: int, counts: dict[str, int],
                        held: Sequence[str]) -> BatchResult:
        """What a merge of ``tuples`` rows new to the site did to ``rel`` (``app_rows`` APP rows)
        and, by :meth:`appends`' statements run inside its statement, to the views (``counts``: the
        rows each statement returned, by its name), as :meth:`apply` would report it: every
        relation of the changeset this site holds (``held``), and each view that changed."""
        for name in held:
            self.counts(name)
        self.result.cl_changed += tuples
        self.counts(rel.name).new_tuples += tuples
        self.counts(rel.name).inserted += app_rows
        for view, monomials, app in self.appended:
            if counts[monomials] or counts[app]:
                self.counts(view).new_monomials += counts[monomials]
                self.counts(view).inserted += counts[app]
        return self.result

    def _append_parts(self, n: int, rel: Relation, view: Relation, cand: str, one_row: bool = False) -> list[CteWrite]:
        """:meth:`appends`' statements of one view (the ``n``-th), ``cand`` its candidate monomials.
        ``one_row``: the write adds one tuple of ``rel``; then a view of one branch reading ``rel``
        once gains at most one monomial, and its new APP rows need no DISTINCT ON (0.6-1.2 ms off a
        single-row INSERT or UPDATE with a projection and a join view, interleaved in one process,
        stop 64)."""
        added = f"_crr_added{n}"
        assert view.plan is not None
        if set(view.plan.inputs) == {rel.name}:  # every id is one the statement wrote, visible
            present = f"SELECT vid, {cols_sql(view)} FROM {added}"
        else:
            present = alive_sql(view, added, narrowed_visibility(self._visibility_beside_added(view, rel), added))
        one = self._one_derivation(view)  # then each new monomial is a tuple of its own
        single = one_row and len(view.plan.branches) == 1 and len(view.plan.branches[0].occurrences) == 1
        rows = f"({present})" if one or single else f"(SELECT DISTINCT ON (vid) * FROM ({present}))"
        return [(added, monomials_insert_sql(view, f"({cand})", "?", lacking_only=False), [self.seq]),
                (f"_crr_app{n}", app_append_sql(view, rows, one, frozenset()) + " RETURNING 1", [])]

    def _visibility_beside_added(self, view: Relation, rel: Relation) -> str:
        """FROM text of ``(id, vis)`` for ``in?`` of the monomials :meth:`_append_parts` adds to
        ``view``: ``rel``'s ids in them are those of its added tuples (``self.new_base``, or the
        monomials of a replica's first inserts, ``self.new_derived``), each visible, and the others
        are looked up in the entries of the rest of the view's lineage only (its inputs' lineages are
        disjoint: :meth:`one_statement_views`, :meth:`_derivations_after`). Leaving ``rel`` out lets
        DuckDB skip its row groups of ``_crr.cl`` by their ``rel`` zone maps, and a replica's ``$e``
        altogether: a 1-row merge into the 1M-row join view scanned R1's million entries to find the
        visibility of its R2 partners."""
        lineage = self.lineage.get(view.name)
        if lineage is None:
            return self._visibility(view)
        others = self._visibility(view, lineage - {rel.name})
        if rel.name in self.new_base:
            added = f"SELECT id, true AS vis FROM {self.new_base[rel.name]}"
        else:
            added = f"SELECT unnest(ids) AS id, true AS vis FROM {self.new_derived[rel.name]}"
        return f"(SELECT id, vis FROM {others} UNION ALL {added})"

    def rewrites(self, rel: Relation, views: list[tuple[Relation, str]], flips: str, fresh: bool,
                 only_new: bool, replaced: Sequence[int] | None = None, one_row: bool = False) -> list[CteWrite]:
        """The statements that maintain the ``views`` of ``rel`` (:meth:`one_statement_views`, given
        the CTE of the rows the write added, ``id, cols...``; ``fresh``: all new to the table) after
        any point write, to run inside its one statement (:func:`crr.point.write_sql`), each ``(name,
        sql, parameters)``: ``flips`` names the CTE of the ids whose visibility the write flipped
        (``id``), written before. ``only_new``: the write only added rows new to the table, each
        with a visible entry it wrote (every flip is one of them turning visible): then the
        statements are :meth:`appends`'. Otherwise, per view, the steps :meth:`apply` takes
        (:meth:`_run_view`, then :meth:`_refresh_derived`):

        * its new monomials from the added rows (without the anti-join with ``$m`` when the rows
          are ``fresh``);
        * ``in?`` of the tuples of those monomials and of the monomials holding a flipped id
          (:func:`membership_changes_sql`, computed once, over the state the writes before it
          left), then the APP rows of those no longer alive deleted and those alive and missing
          inserted: what the general path's MERGE does, as two statements, since DuckDB runs a
          MERGE only as a statement of its own.

        ``replaced``: the write turned these ids invisible, and visible only the rows it added, all new
        to the table (an UPDATE's new versions, in place of the old): then per view
        :meth:`_replace_parts`, which reads neither ``flips`` nor the other ids' visibility.
        ``one_row``: the write adds one tuple (:meth:`_append_parts`).
        """
        if only_new:
            return [part for n, (view, cand) in enumerate(views) for part in self._append_parts(n, rel, view, cand, one_row)]
        if replaced is not None:
            return [part for n, (view, cand) in enumerate(views)
                    for part in self._replace_parts(n, rel, view, cand, replaced, one_row)]
        self._note_flips(flips, {rel.name})
        parts: list[CteWrite] = []
        for n, (view, cand) in enumerate(views):
            new = f"_crr_added{n}"
            changes = f"_crr_changes{n}"
            parts.append((new, monomials_insert_sql(view, f"({cand})", "?", lacking_only=not fresh), [self.seq]))
            dirty = f"(SELECT vid FROM {new} UNION ALL {self._holding_flipped(view)})"
            parts.append((f"_crr_held{n}", held_sql(view, dirty), []))
            parts.append((changes, self._held_membership(view, f"_crr_held{n}"), []))
            parts.append((f"_crr_gone{n}", app_remove_sql(view, f"SELECT {cols_sql(view)} FROM {changes} WHERE NOT keep"), []))
            parts.append((f"_crr_came{n}", app_append_sql(view, f"(SELECT * FROM {changes} WHERE keep)", False, frozenset()), []))
        return parts

    def _replace_parts(self, n: int, rel: Relation, view: Relation, cand: str, gone: Sequence[int],
                       one_row: bool = False) -> list[CteWrite]:
        """:meth:`rewrites`' statements of one view (the ``n``-th, ``cand`` its candidate monomials)
        after a write that turned the ids ``gone`` invisible (as parameters of the statements) and
        visible only its added rows, new to the table, whose monomials are all new (``rel``'s lineage
        is disjoint from the other inputs': :meth:`one_statement_views`). Then the view's tuples that
        change are those of the new monomials, which can only come (:meth:`_append_parts`: the
        monomials, then the alive ones' tuples the APP table lacks), and those of the monomials
        holding a gone id, which can only leave: their APP rows are deleted when no monomial of the
        tuple is alive, over ``$m`` and the entries the statements before left (the new monomials
        among them, so a tuple that one of them derives stays). When each tuple has one derivation
        (:meth:`_one_derivation`) that is every tuple of those monomials: their one monomial is dead,
        and none is the tuple of a new monomial, which holds a new id. Against :meth:`rewrites`'
        general steps this leaves out the ``in?`` of the new monomials' tuples (and, with one
        derivation, any ``in?``) and the CTE of the flips."""
        added, app = self._append_parts(n, rel, view, cand, one_row)
        listed = ", ".join(["?::UHUGEINT"] * len(gone))
        assert view.plan is not None
        if self._one_derivation(view):
            width = len(view.plan.branches[0].occurrences)
            lost = lost_derivations_sql(view, "", width, listed)
            return [added, (f"_crr_gone{n}", app_remove_sql(view, lost), [*gone] * listed_probes(width)), app]
        longest = self._longest(view)
        held = f"_crr_held{n}"
        dirty = f"({holding_flipped_sql(view, '', ['vid'], longest, listed)})"
        left = lost_tuples_sql(view, held, self._held_visibility(view, held))
        return [added, (held, held_sql(view, dirty), [*gone] * listed_probes(longest)),
                (f"_crr_gone{n}", app_remove_sql(view, left), []), app]

    def _held_membership(self, view: Relation, held: str) -> str:
        """:func:`membership_changes_sql` of the tuples whose monomials the CTE ``held`` lists
        (:func:`held_sql`), over the visibility of their ids alone (:meth:`_held_visibility`)."""
        return membership_changes_sql(view, f"{held} m", self._held_visibility(view, held))

    def _held_visibility(self, view: Relation, held: str) -> str:
        """FROM text of the visibility ``(id, vis)`` of the ids the monomials the CTE ``held``
        lists hold, alone (:func:`narrowed_visibility`)."""
        return narrowed_visibility(self._visibility(view), held, view.wide)

    def one_statement_views(self, rel: Relation, derived: list[str], delta: str) -> list[tuple[Relation, str]] | None:
        """Each relation ``derived`` from ``rel`` with the SQL of its candidate monomials from
        ``rel``'s new rows (``delta`` names them), when every one can be maintained inside a point
        write's statement: decided on the catalog and the site's width cache (a view's lengths are
        read once, by one statement, when the cache lacks them, as the general path would). That
        is a view of replicated tables only, whose lineages are disjoint (so each
        candidate holds one of the new rows' ids, which no older monomial holds), whose plan has one
        delta query for ``rel``, and whose monomials all have the one length its ``$m`` holds
        already (no absorption, no catalog change); None otherwise, and when there are more than
        :data:`MAX_STATEMENT_VIEWS` of them."""
        if len(derived) > MAX_STATEMENT_VIEWS:
            return None
        self.new_base[rel.name] = delta
        out = []
        for name in derived:
            view = self.rels[name]
            cand = self._appendable(view, rel, lambda r: self.rels[r].is_base)
            if cand is None:
                return None
            out.append((view, cand))
        return out

    def _appendable(self, view: Relation, rel: Relation, input_ok: Callable[[str], bool]) -> str | None:
        """The SQL of ``view``'s candidate monomials from ``rel``'s new tuples (the delta
        ``self.new_base`` or ``self.new_derived`` names for ``rel``), when the view can be maintained
        inside the statement that adds them (:meth:`one_statement_views`, :meth:`_derivations_after`);
        None otherwise. That is a view with an APP table of its own (not co-located, not an
        aggregate) whose inputs each pass ``input_ok`` and have disjoint lineages (so each candidate
        holds one of the new ids, which no older monomial holds), whose plan has one delta query for
        ``rel``, and whose monomials all have the one length its ``$m`` holds already (no
        absorption, no catalog change): read once per site, by one statement, when the width cache
        lacks them, as the general path would."""
        plan = view.plan
        if (plan is None or view.colocated or view.aggregate is not None or not view.has_app
                or not all(input_ok(r) for r in plan.inputs) or not self._disjoint_lineages(plan.inputs)):
            return None
        cand, linear, _ = self._candidates(view, {rel.name})
        width = self._plan_width(view)
        if not linear or width is None or width[0] != width[1] or (width[1] > 1 and not view.wide):
            return None
        if view.name not in self.widths:
            stored = self._stored_widths(view)
            if stored is None:
                return None  # no monomials yet: the general path records their lengths
            self.widths[view.name] = stored
        return cand if self.widths[view.name] == width else None

    def removals(self, rel: Relation, derived: list[str], grown: str) -> list[CteWrite] | None:
        """The statements that maintain the relations ``derived`` from ``rel`` after a DELETE, to run
        inside its one statement (:func:`crr.point.delete_sql`) as data-modifying CTEs, each ``(name,
        sql, parameters)``. ``grown`` names the CTE that returns the ids (``id``) of the entries the
        DELETE grew to an even length (the present versions of the removed rows' keys), written
        before them. None when a relation is not a view maintained here (a remote copy, a co-located
        or aggregate view), or there are more than :data:`MAX_STATEMENT_VIEWS`: the caller then
        takes the general path.

        A DELETE only turns ids invisible: a view's tuple can only leave, and only a tuple with a
        monomial holding such an id (its "dirty" tuples, :func:`holding_flipped_sql`). So per view,
        one DELETE of its APP rows: for a view whose tuples have one derivation each
        (:meth:`_only_derivations_lost`), the tuples of those monomials; otherwise the dirty tuples
        none of whose monomials is alive any more (:func:`lost_tuples_sql` over the visibility
        the statement's own entry update left, which the statements after it see).
        """
        if len(derived) > MAX_STATEMENT_VIEWS:
            return None
        self._note_flips(grown, {rel.name})
        parts: list[CteWrite] = []
        for n, name in enumerate(derived):
            view = self.rels[name]
            plan = view.plan
            if plan is None or view.colocated or view.aggregate is not None or not view.has_app:
                return None
            if self._one_derivation(view):
                gone = lost_derivations_sql(view, grown, len(plan.branches[0].occurrences))
            else:
                parts.append((f"_crr_held{n}", held_sql(view, f"({self._holding_flipped(view)})"), []))
                gone = lost_tuples_sql(view, f"_crr_held{n}", self._held_visibility(view, f"_crr_held{n}"))
            parts.append((f"_crr_gone{n}", app_remove_sql(view, gone), []))
        return parts

    def _patch_base(self, rel: Relation) -> None:
        """Patch a replicated table's APP rows after a merge: new visible tuples, and known tuples
        whose visibility flipped.

        An APP table holds the values of exactly the visible tuples this site has, and a tuple's id
        is a hash of its values, so a tuple this batch added cannot be in it yet: the visible ones
        are appended by a plain INSERT, which never scans the APP table. Only known tuples whose
        visibility flipped need matching, by one MERGE (an empty source makes DuckDB skip the
        scans). Values come from the batch; ``$t`` and ``_crr.cl`` are probed only for the rows that
        need them.
        """
        exact = self.batch.app_changes.get(rel.name) if self.batch else None
        if exact is not None:
            # a plain INSERT only adds rows and a DELETE only removes them: they need no MERGE
            mode = (AppPatch.MERGE if exact.old is not None and exact.new is not None
                    else AppPatch.INSERT if exact.new is not None else AppPatch.DELETE)
            ins, dele = apply_app_changes(self.con, rel, written_app_changes_sql(rel, exact), mode)
            counts = self.counts(rel.name)
            counts.inserted += ins
            counts.deleted += dele
            counts.inserted += self._insert_late_tuples(rel)
            return
        flipped = rel.name in self.flipped_rels
        new = self.new_base.get(rel.name)
        counts = self.counts(rel.name)
        flips = f"(SELECT id, vis FROM {self.flips} WHERE rel = {quote_str(rel.name)})"
        if new is not None:
            with_flips = f"SELECT {cols_sql(rel, 'n')} FROM {new} n JOIN {flips} f ON f.id = n.id WHERE f.vis"
            if flipped and self._new_ids_written(rel.name):  # every new tuple's entry is in this batch
                visible = with_flips
            elif flipped:  # new tuples with entries in this batch, and those whose entries came earlier
                visible = (f"{with_flips} UNION ALL SELECT {cols_sql(rel, 'n')} FROM {new} n ANTI JOIN {flips} f "
                           f"ON f.id = n.id JOIN _crr.cl c ON c.id = n.id WHERE c.vis")
            else:
                visible = f"SELECT {cols_sql(rel, 'n')} FROM {new} n JOIN _crr.cl c ON c.id = n.id WHERE c.vis"
            counts.inserted += apply_app_changes(self.con, rel, visible, AppPatch.INSERT)[0]
        # ids the batch added cannot be in the APP table yet: when every written id is one, the MERGE
        # matching flipped known tuples has nothing to do (a merge of new rows skips it)
        if flipped and not self._written_all_new_to_replica(rel.name):
            older = flips if new is None else f"(SELECT f.* FROM {flips} f ANTI JOIN {new} n ON n.id = f.id)"
            # few written ids: the scan of $t keeps only theirs (constants), not a hash join's probe
            only = "" if self.flip_ids is None else f" WHERE t.id IN ({ids_sql(self.flip_ids)})"
            ins, dele = patch_app(self.con, rel, f"SELECT {cols_sql(rel, 't')}, f.vis AS keep "
                                                 f"FROM {rel.aug('t')} t JOIN {older} f ON f.id = t.id{only}")
            counts.inserted += ins
            counts.deleted += dele

    def _insert_late_tuples(self, rel: Relation) -> int:
        """APP rows of the tuples a local batch write stored whose entries it did not write, visible
        already: their entries came first (a merge brought them in a remote relation's lineage), so
        no visibility flipped, but the tuple is new here. Decided on the Arrow results (no statement
        when every stored tuple's entry was written, as for any row new to the site)."""
        added = self.local_added.get(rel.name)
        if added is None or len(added) == 0:
            return 0
        late = added if self.local_written is None else pc.filter(added, pc.is_null(index_in(added, self.local_written)))
        if len(late) == 0:
            return 0
        slot = self._register(f"_crr_late_{rel.name}", pa.table({"id": late}))
        return apply_app_changes(self.con, rel, f"""SELECT {cols_sql(rel, 't')} FROM {rel.aug('t')} t
            JOIN {slot} l ON l.id = t.id JOIN _crr.cl c ON c.id = t.id WHERE c.vis""", AppPatch.INSERT)[0]

    def _written_all_new_to_replica(self, relation: str) -> bool:
        """Whether every id of the base relation ``relation`` whose entry this batch wrote is a tuple
        the batch added to the relation's replica here (:meth:`_new_to_replica`). Decided once per
        batch and relation on the Arrow results of the batch's own statements; False when they are
        not at hand. Its callers say what follows from it."""
        if relation not in self._all_new:
            added = self._new_to_replica(relation)
            self._all_new[relation] = (
                self.written_arrow is not None and added is not None
                and self._written(relation).num_rows <= len(added)
                and all_in(self._written(relation).column("id"), added))
        return self._all_new[relation]


@dataclass(frozen=True)
class Liveness:
    """What a batch's written entries tell of its new monomials (see :func:`_liveness`)."""

    dead: pa.Array  # per monomial: whether it holds an id the batch wrote invisible
    # (mid, id) of each id the batch wrote no entry for, in a monomial not known dead (None: there is none)
    unknown_ids: pa.Table | None


def _liveness(monomials: pa.Table, flips: pa.Table) -> Liveness:
    """Per monomial (``vid, mid, ids`` columns), whether ``flips`` (id, vis) has one of its ids
    invisible, and the ids of the other monomials that have no row there (their visibility is only
    in ``_crr.cl``)."""
    ids = monomials.column("ids").combine_chunks()
    flat, parents = pc.list_flatten(ids), pc.list_parent_indices(ids)
    at = index_in(flat, flips.column("id"))
    visible = bool_column(pc.take(flips.column("vis").combine_chunks(), at))  # null where unknown
    # written and not visible (a written entry without a visibility counts as invisible)
    dead_ids = pc.and_(pc.is_valid(at), pc.invert(pc.fill_null(visible, FALSE)))
    lengths = pc.min_max(pc.list_value_length(ids)).as_py()
    if lengths["min"] == lengths["max"] == 1:  # one id each: the ids line up with the monomials
        dead = dead_ids
    else:
        dead_rows = pc.unique(pc.filter(parents, dead_ids))
        dead = pc.is_in(int64_range(monomials.num_rows), value_set=pc.cast(dead_rows, pa.int64()))
    if at.null_count == 0:
        return Liveness(dead, None)
    unknown = pc.is_null(at)
    rows = pc.cast(pc.filter(parents, unknown), pa.int64())  # the monomial of each unknown id
    ids_unknown = pc.filter(flat, unknown)
    undecided = pc.invert(pc.take(dead, rows))  # a monomial known dead needs no lookup
    rows, ids_unknown = pc.filter(rows, undecided), pc.filter(ids_unknown, undecided)
    if len(rows) == 0:
        return Liveness(dead, None)
    return Liveness(dead, pa.table({"mid": pc.take(monomials.column("mid"), rows), "id": ids_unknown}))
