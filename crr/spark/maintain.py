"""Maintenance on Spark: one batch of AUG changes, applied set-at-a-time inside a store transaction.

The same steps as the DuckDB maintainer (:mod:`crr.maintain`), as Spark jobs:

1. causal lengths: the batch's entries, merged per id, that grow an id's current entry are appended
   to ``cl`` (an id's relation and key hash never change; entries that disagree are refused);
2. base tuples a replicated table lacks are appended to ``t:<r>``: they are its delta;
3. derivations of remote tables and sources a relation lacks are appended to ``m:<r>``;
4. views, in dependency order, run the compiler's delta plans (:meth:`crr.sql.compile.ViewPlan.delta_queries`,
   transpiled to Spark SQL) over the deltas and the state, and append the derivations they lack;
5. every relation whose membership may have changed gets its APP table patched from what the batch
   changed (:mod:`crr.spark.membership`: the ids whose visibility flipped, read off the entries step 1
   wrote, and the new tuples and derivations), as one replacement part; when flips cannot be read off
   the entries (a keyed UPDATE, concurrent versions of a key), membership is recomputed from the
   whole state instead.

The AUG steps are the monotone part: appends only, each a Spark job over the batch joined with the
state. Step 5 is the one non-monotone part; it rewrites the relation's APP table (see the README's
"Large views on Spark" for what that costs). Nothing is collected to the driver but counts.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterator

import pyspark
from pyspark.sql import DataFrame, SparkSession, functions as F
from pyspark.util import inheritable_thread_target
from sqlglot import exp

from crr.catalog import Catalog, Relation
from crr.errors import SqlError, ViewQueryError, first_line
from crr.sql.compile import IDS
from crr.sql.statements import RelationKind
from crr.spark.encoding import tuple_id_sql
from crr.spark.membership import (changed_monomials, count_changes, full_counts, key_versions,
                                  parity_flips, patched_base_app, patched_counts, summed_changes, visible_after)
from crr.spark.store import Transaction
from crr.spark.tables import (BROADCAST_ROWS, CL, CL_COLUMNS, StateShape, app_key, app_schema, aug_cols, base_app,
                              current_cl, kept_rows, monos_key, of_ids, tuples_key, union_all, visibility)

_names = itertools.count()
_PYSPARK_MAJOR = int(pyspark.__version__.split(".")[0])
PARALLEL_JOBS = 4  # independent steps run at once (see SparkMaintainer._parallel)

FORGED_ENTRIES = ("crr: causal-length entries disagree about a tuple's relation or key hash; the changeset is "
                  "corrupt or forged")


@dataclass
class SparkBatch:
    """AUG changes to apply: causal-length entries ``(id, rel, cl, kh, stamp)``, at most one per id (a
    changeset's validation refuses repeated ids; a local write's are distinct), base tuples
    ``(id, cols...)`` per replicated table, one row per id (a changeset's validation refuses repeated
    ids, a local write's are deduplicated), and derivations ``(vid, ids, cols...)`` per remote relation."""

    cl: DataFrame | None = None
    cl_relations: set[str] = field(default_factory=set)  # the relations ``cl``'s entries may name
    base: dict[str, DataFrame] = field(default_factory=dict)
    derived: dict[str, DataFrame] = field(default_factory=dict)
    cl_rows: int | None = None  # at most how many entries ``cl`` holds (None: unknown)
    cl_keyed: bool = True  # whether some entry of ``cl`` may carry a key hash (False only when known)
    cl_one_per_key: bool = False  # whether no two entries of ``cl`` carry one key hash (True only when known)
    cl_listed: list[bytes] | None = None  # the ids of ``cl``'s entries (or more) when few (crr.spark.tables.of_ids)
    wide: set[str] = field(default_factory=set)  # relations of ``derived`` with a monomial of several ids
    rows: dict[str, int] = field(default_factory=dict)  # at most how many rows each frame of base/derived has
    listed: dict[str, list[bytes]] = field(default_factory=dict)  # a base frame's tuple ids when few (of_ids)
    revalued: frozenset[str] = frozenset()  # relations whose APP table is recomputed (crr.merge.relineaged)


@dataclass
class SparkResult:
    """What a batch wrote: causal-length entries that grew, new tuples and derivations per relation,
    and the relations whose APP table was recomputed."""

    cl_changed: int = 0
    new_tuples: dict[str, int] = field(default_factory=dict)
    new_monomials: dict[str, int] = field(default_factory=dict)
    refreshed: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # a merge's relations the site does not merge

    @property
    def changed(self) -> bool:
        """Whether replicated state grew."""
        return bool(self.cl_changed or any(self.new_tuples.values()) or any(self.new_monomials.values()))


# Spark's errors of a query failing on its data (ANSI mode: an overflow, a division by zero, a cast
# of a text that is no number or date), as DuckDB's OutOfRange, Conversion and InvalidInput errors are
_DATA_ERRORS = ("ArithmeticException", "NumberFormatException", "DateTimeException")


@contextlib.contextmanager
def view_errors(view: str) -> Iterator[None]:
    """A delta plan failing on Spark refuses the change, naming the view: a query failing on the
    data (:data:`_DATA_ERRORS`) is a :class:`~crr.errors.ViewQueryError`, as at a DuckDB site
    (:func:`crr.maintain.view_errors`); any other Spark error a :class:`~crr.errors.SqlError`."""
    try:
        yield
    except Exception as e:  # Spark raises its own exception classes (pyspark.errors)
        if not type(e).__module__.startswith("pyspark"):
            raise
        first = first_line(e)
        if type(e).__name__ in _DATA_ERRORS:
            raise ViewQueryError.on_data(view, first) from None
        raise SqlError(f"view {view} cannot be maintained: {first}; nothing was changed") from None


class SparkMaintainer:
    """Applies batches inside one transaction, writing AUG rows with sequence number ``seq``."""

    def __init__(self, spark: SparkSession, txn: Transaction, catalog: Catalog, seq: int) -> None:
        self.spark, self.txn, self.rels, self.seq = spark, txn, catalog, seq
        received = [n for n, r in catalog.items() if r.kind in (RelationKind.REMOTE, RelationKind.SOURCE)]
        self.shape = StateShape.from_meta(txn.meta, received)  # as committed; grown by apply()
        self.result = SparkResult()
        self.delta: dict[str, DataFrame] = {}  # relation -> its new AUG rows (tuples or derivations)
        self.flipped: set[str] = set()  # base relations some of whose entries grew
        self.written: DataFrame | None = None  # the entries step 1 wrote, with ``o_cl`` (a local checkpoint)
        self.keyed_batch = False  # whether some entry of the batch may carry a key hash
        self.one_per_key = False  # whether no two entries of the batch are known to share a key hash
        self.small = False  # whether the batch's entries are few enough to broadcast (BROADCAST_ROWS)
        self._temp: list[str] = []
        self._kept: list[DataFrame] = []
        self._lock = threading.Lock()  # steps run in threads (see _parallel)

    def close(self) -> None:
        """Drop the temp views the batch registered and the frames it kept."""
        for name in self._temp:
            self.spark.catalog.dropTempView(name)
        self._temp.clear()
        # the batch's local checkpoints: Spark's context cleaner frees their blocks once nothing refers to them
        self.written = None
        self._kept.clear()

    def _keep(self, df: DataFrame) -> DataFrame:
        """``df`` kept until the batch ends (:meth:`close`): computed by the first job that reads it and
        read back by the later ones. A local checkpoint, not a cache: later plans over it see a scan,
        not its lineage (Spark spent seconds a batch analysing the lineage of cached frames)."""
        df = df.localCheckpoint(eager=False)
        with self._lock:
            self._kept.append(df)
        return df

    def _view(self, df: DataFrame) -> str:
        name = f"crr_tmp_{next(_names)}"
        df.createOrReplaceTempView(name)
        self._temp.append(name)
        return name

    # -- the steps ------------------------------------------------------------------------------------
    def apply(self, batch: SparkBatch, view_order: list[str]) -> SparkResult:
        """Apply a batch: steps 1-5 of the module docstring."""
        self.shape = self.shape.grown(batch.cl is not None and batch.cl_keyed, batch.wide)
        self.txn.meta["shape"] = self.shape.to_meta()  # committed with the batch
        if batch.cl is not None:
            self.keyed_batch = batch.cl_keyed
            self.one_per_key = batch.cl_one_per_key
            self._merge_cl(batch.cl, batch.cl_relations, batch.cl_rows, batch.cl_listed)
        def small(name: str) -> bool:
            return batch.rows.get(name, BROADCAST_ROWS + 1) <= BROADCAST_ROWS
        self._parallel([lambda n=name, df=df: self._add_tuples(self.rels[n], df, small(n), batch.listed.get(n))
                        for name, df in batch.base.items()]
                       + [lambda n=name, df=df: self._add_derivations(self.rels[n], df, small(n))
                          for name, df in batch.derived.items()])
        for level in self._levels(view_order):
            self._parallel([lambda n=name: self._run_view(self.rels[n]) for name in level])
        self._membership(batch.revalued)
        return self.result

    def _parallel(self, jobs: list) -> None:
        """Run independent steps at once (each is one or more Spark jobs), so Spark overlaps their
        scheduling and small tasks; the first failure is raised once all have stopped. Each thread
        takes the calling thread's Spark properties and tags (its job group, scheduler pool, job
        description), so the merge's jobs are the caller's wherever they run."""
        if len(jobs) <= 1:
            for job in jobs:
                job()
            return
        # PySpark 4 carries the session's tags too; 3.5 takes the thread target only
        inherit = inheritable_thread_target(self.spark) if _PYSPARK_MAJOR >= 4 else inheritable_thread_target
        with ThreadPoolExecutor(max_workers=PARALLEL_JOBS) as pool:
            futures = [pool.submit(inherit(job)) for job in jobs]
        for f in futures:
            f.result()

    def _levels(self, view_order: list[str]) -> list[list[str]]:
        """The views grouped so that each group reads only relations of earlier groups (or inputs)."""
        level: dict[str, int] = {}
        for name in view_order:
            plan = self.rels[name].plan
            assert plan is not None
            level[name] = 1 + max((level.get(r, 0) for r in plan.inputs), default=0)
        return [[n for n in view_order if level[n] == k] for k in sorted(set(level.values()))]

    def populate(self, view: Relation) -> SparkResult:
        """Fill a new view from the whole state of its inputs, and compute its APP table."""
        assert view.plan is not None
        keys = [tuples_key(self.rels[name]) if self.rels[name].is_base else monos_key(self.rels[name])
                for name in view.plan.inputs]
        if all(self.txn.empty(key) for key in keys):  # a view declared before data: no job to run
            self.result.refreshed.append(view.name)  # its APP table, created empty, is its membership
            return self.result
        for name, key in zip(view.plan.inputs, keys):
            self.delta[name] = self.txn.read(key)
        self._run_view(view)
        self.txn.replace(app_key(view), full_counts(view, self.txn.read(monos_key(view)), self._visibility(),
                                                    self.shape.narrow(view, self.rels)))
        self.result.refreshed.append(view.name)
        return self.result

    def _merge_cl(self, entries: DataFrame, relations: set[str], rows: int | None,
                  listed: list[bytes] | None = None) -> None:
        """Append the entries that grow an id's current one (one job). An id's relation and key hash
        never change: entries disagreeing with the stored ones fail the job (``raise_error``), which
        aborts the transaction. ``entries`` holds at most one row per id (:attr:`SparkBatch.cl`);
        ``relations``: the relations of the entries; ``rows``: at most how many there are; ``listed``:
        their ids as constants when few (:func:`crr.spark.tables.of_ids`).

        The entries written are kept (a local checkpoint) with their length before (``o_cl``, null for
        a new id), from which step 5 reads the flips."""
        self.small = rows is not None and rows <= BROADCAST_ROWS  # the entries written are at most these
        # only the stored rows of the batch's ids are grouped (filtered by the listed ids, or read by
        # broadcast when the batch is small)
        stored = of_ids(self.txn.read(CL), entries, listed, self.small)
        old = current_cl(stored).select("id", F.col("rel").alias("o_rel"), F.col("kh").alias("o_kh"),
                                        F.col("cl").alias("o_cl"), F.col("stamp").alias("o_stamp"))
        joined = entries.join(old, "id", "left")
        forged = F.col("o_rel").isNotNull() & ((F.col("o_rel") != F.col("rel"))
                                               | ~F.col("o_kh").eqNullSafe(F.col("kh")))
        grew = (F.col("o_cl").isNull() | (F.col("cl") > F.col("o_cl"))
                | (F.coalesce(F.col("stamp"), F.lit(b"")) > F.coalesce(F.col("o_stamp"), F.lit(b""))))
        cl = F.when(forged, F.raise_error(F.lit(FORGED_ENTRIES))).otherwise(F.greatest("cl", "o_cl"))
        written = joined.where(grew | forged).select(
            "id", "rel", cl.cast("int").alias("cl"), "kh", F.greatest("stamp", "o_stamp").alias("stamp"),
            F.lit(self.seq).alias("seq"), "o_cl").localCheckpoint(eager=False)  # kept for the flips (step 5)
        # compaction keeps each id's current entry only (its newest row already holds the maxima)
        _, wrote = self.txn.append(CL, written.select(*CL_COLUMNS),
                                   compact=lambda cl: current_cl(cl).select(*CL_COLUMNS))
        if wrote:
            self.result.cl_changed = wrote
            self.flipped = set(relations)
            self.written = written

    def _add_tuples(self, rel: Relation, tuples: DataFrame, small: bool, listed: list[bytes] | None = None) -> None:
        """Append the base tuples ``rel`` lacks; they are its delta. ``small``: ``tuples`` can be
        broadcast (at most :data:`BROADCAST_ROWS` rows); ``listed``: their ids as constants when few
        (:func:`crr.spark.tables.of_ids`)."""
        key = tuples_key(rel)
        stored = of_ids(self.txn.read(key).select("id"), tuples, listed, small)
        new = tuples.join(stored, "id", "left_anti")
        part, n = self.txn.append(key, new.select("id", *aug_cols(rel), F.lit(self.seq).alias("seq")))
        if n:
            self.delta[rel.name] = part
            self.result.new_tuples[rel.name] = self.result.new_tuples.get(rel.name, 0) + n

    def _add_derivations(self, rel: Relation, monos: DataFrame, small: bool, distinct: bool = False) -> None:
        """Append the derivations ``rel`` lacks; they are its delta. A remote source that keeps nothing
        (no view joins it) passes what it received on as its delta: re-adding a derivation a view
        already has is a no-op there. ``small``: ``monos`` can be broadcast (at most
        :data:`BROADCAST_ROWS` rows), so the stored derivations are scanned once, not shuffled, probing
        pairs of the batch's tuples and first ids; ``distinct``: ``monos`` holds no derivation twice (and is
        kept: :meth:`_keep`)."""
        if rel.kind is RelationKind.SOURCE and not rel.stored:
            self.delta[rel.name] = monos
            return
        key = monos_key(rel)
        if not distinct:  # a small batch's deduplicated once (kept), as it is read twice below
            unique = monos.dropDuplicates(["vid", "ids"])
            monos = self._keep(unique) if small else unique
        first = F.col("ids")[0].alias("first")
        state = self.txn.read(key).select("vid", "ids", first)
        if small:
            # the stored derivations of a batch tuple with that tuple's first id in the batch (few per
            # batch derivation): both joins broadcast, so neither the state nor the batch is shuffled,
            # and the state's scan probes two binaries, not the id lists
            stored = state.join(F.broadcast(monos.select("vid", first)), ["vid", "first"], "left_semi")
            new = monos.join(F.broadcast(stored.select("vid", "ids")), ["vid", "ids"], "left_anti")
        else:
            # the stored derivations of the batch's tuples whose first id is a batch monomial's: one scan
            # probing both (a projection's tuple has many monomials, a join's popular id many tuples)
            stored = (state.join(monos.select("vid").distinct(), "vid", "left_semi")
                      .join(monos.select(first).distinct(), "first", "left_semi"))
            new = monos.join(stored.select("vid", "ids"), ["vid", "ids"], "left_anti")
        part, n = self.txn.append(key, new.select("vid", "ids", *aug_cols(rel), F.lit(self.seq).alias("seq")))
        if n:
            self.delta[rel.name] = part
            self.result.new_monomials[rel.name] = self.result.new_monomials.get(rel.name, 0) + n

    def _source(self, relation: str, delta: bool) -> exp.Expression:
        """A relation's delta or whole AUG state, with its AUG columns and ``_crr_ids``."""
        rel = self.rels[relation]
        if delta:
            df = self.delta[relation]
        else:
            df = self.txn.read(tuples_key(rel) if rel.is_base else monos_key(rel))
        ids = F.array("id") if rel.is_base else F.col("ids")
        return exp.to_table(self._view(df.select(*aug_cols(rel), ids.alias(IDS))))

    def _run_view(self, view: Relation) -> None:
        """Run the view's delta plans for the inputs that changed; append the derivations it lacks."""
        plan = view.plan
        assert plan is not None
        changed = {r for r in plan.inputs if r in self.delta}
        if not changed:
            return
        with view_errors(view.name):
            name = self._view(union_all([self.spark.sql(q.sql("spark", copy=False))  # new trees: no copy
                                         for q in plan.delta_queries(changed, self._source)]))
            # the candidates, computed once (the plans' branches may derive one monomial twice)
            cand = self._keep(self.spark.sql(f"SELECT {tuple_id_sql(view.name, view.aug_columns)} AS vid, "
                                             f"`{IDS}` AS ids, {', '.join(aug_cols(view))} FROM {name}")
                              .dropDuplicates(["vid", "ids"]))
            self._add_derivations(view, cand, kept_rows(cand) <= BROADCAST_ROWS, distinct=True)

    def _visibility(self) -> DataFrame:
        return visibility(current_cl(self.txn.read(CL)), self.shape.key_versions)

    def _membership(self, revalued: frozenset[str]) -> None:
        """Patch the APP table of every relation whose membership may have changed, or recompute them
        when the batch's flips cannot be read off its entries (see :mod:`crr.spark.membership`);
        those of ``revalued`` are recomputed whatever the batch brought them."""
        todo = []
        for rel in self.rels.values():
            lineage = self.rels.lineage(rel.name) if not rel.is_base else {rel.name}
            if rel.has_app and rel.name not in revalued and (rel.name in self.delta or lineage & self.flipped):
                todo.append(rel)
        again = [rel for rel in self.rels.values() if rel.has_app and rel.name in revalued]
        if again:
            self._recompute_app(again)
        cl = self.txn.read(CL)
        keyed = self.written is not None and self.keyed_batch
        if not todo:
            if keyed and not self.shape.versions:
                self._flips_are_parities(cl)  # keeps StateShape.versions true to the state
            return
        if keyed and not self._flips_are_parities(cl):
            self._recompute_app(todo)
            return
        flips = parity_flips(self.written) if self.written is not None else None

        def lineage_flips(rel: Relation) -> DataFrame | None:
            lineage = self.rels.lineage(rel.name) if not rel.is_base else {rel.name}
            return flips.where(F.col("rel").isin(sorted(lineage))) if flips is not None and lineage & self.flipped \
                else None
        # what each relation's patch reads: its flips, and the ids whose visibility after the batch it
        # needs (a replicated table's new tuples', a derived relation's changed monomials'), all
        # looked up at once (visible_after)
        # (flips, new ids or changed monomials, old monomials, narrow) per relation
        reads: dict[str, tuple[DataFrame | None, DataFrame | None, DataFrame | None, bool]] = {}
        needed = []
        for rel in todo:
            mine = lineage_flips(rel)
            if rel.is_base:
                new = self.delta[rel.name].select("id") if rel.name in self.delta else None
                ids = new  # (a flipped id's entry was written: visible_after reads it off the entry)
                reads[rel.name] = (mine, new, None, False)
            else:
                old = self.txn.read(monos_key(rel)).where(F.col("seq") < self.seq)
                narrow = self.shape.narrow(rel, self.rels)
                monos = changed_monomials(rel, old, self.delta.get(rel.name), mine, narrow, self._keep, self.small)
                ids = monos.select("id") if monos is not None else None
                reads[rel.name] = (mine, monos, old, narrow)
            if ids is not None:
                needed.append(ids)
        vis = visible_after(cl, self.written, self.shape.key_versions, self._keep, union_all(needed) if needed else None)

        def patch(rel: Relation) -> None:
            mine, more, old, narrow = reads[rel.name]
            app = self.txn.read(app_key(rel))
            if rel.is_base:
                patched = patched_base_app(rel, app, self.txn.read(tuples_key(rel)), mine, more, vis)
            else:
                assert old is not None
                changes = self._keep(summed_changes(rel, count_changes(rel, old, more, mine, vis, narrow, self.small)))
                rows = kept_rows(changes)  # materialized, then joined
                if not rows:
                    return  # no tuple's count changed: the APP table stays as it is (no part written)
                patched = patched_counts(rel, app, changes, rows)
            self.txn.replace(app_key(rel), patched)
        self._parallel([lambda r=rel: patch(r) for rel in todo])
        self.result.refreshed.extend(rel.name for rel in todo)

    def _flips_are_parities(self, cl: DataFrame) -> bool:
        """Whether no written keyed entry has a rival version of its key (one job; see
        :func:`crr.spark.membership.key_versions`). Finding another version of a key records that
        keys may have several (:class:`~crr.spark.tables.StateShape`), so later batches look up
        every keyed entry's key, not only new ids' keys."""
        assert self.written is not None
        found = key_versions(self.written, cl, new_ids_only=not self.shape.versions, small=self.small,
                             one_per_key=self.one_per_key).agg(
            F.count(F.lit(1)).alias("versions"), F.max(F.col("rival").cast("int")).alias("rivals")).collect()[0]
        if found["versions"] and not self.shape.versions:
            self.shape = self.shape.grown(False, set(), versions=True)
            self.txn.meta["shape"] = self.shape.to_meta()
        return not found["rivals"]

    def recount(self) -> None:
        """Give every view and remote table a counted APP table computed from the whole state (a site
        stored before APP tables held counts)."""
        todo = [rel for rel in self.rels.values() if rel.has_app and not rel.is_base]
        for rel in todo:
            self.txn.create(app_key(rel), app_schema(rel))
        if todo:
            self._recompute_app(todo)

    def _recompute_app(self, todo: list[Relation]) -> None:
        """Recompute the APP tables of ``todo`` from the whole AUG state and every id's visibility."""
        vis = self._visibility().cache()

        def refresh(rel: Relation) -> None:
            if rel.is_base:
                app = base_app(rel, self.txn.read(tuples_key(rel)), vis)
            else:
                app = full_counts(rel, self.txn.read(monos_key(rel)), vis, self.shape.narrow(rel, self.rels))
            self.txn.replace(app_key(rel), app)
        try:
            self._parallel([lambda r=rel: refresh(r) for rel in todo])
            self.result.refreshed.extend(rel.name for rel in todo)
        finally:
            vis.unpersist()
