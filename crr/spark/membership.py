"""APP membership on Spark from what a batch changed: counted APP tables patched by count changes.

``in?`` (DESIGN 1.3) is the one non-monotone part of crr: a tuple of a view or remote table is present
when one of its monomials has all its ids visible. A Spark site keeps, in the APP table of every
derived relation, each present tuple's count ``n`` of alive monomials (DESIGN 1.3's derived counter;
a tuple whose count is 0 has no row), so a batch changes the table by count changes, the way Gupta's
counting changes its view, instead of recomputing membership from the whole state:

* **flips** (:func:`parity_flips`): the ids whose visibility the batch changed, ``(id, rel, d)`` with
  ``d = +1`` (now visible) or ``-1`` (no longer), read off the entries the causal-length merge wrote
  (each with its length before). That is exact when every written entry is its key's only present
  version: its visibility is then the parity of its length, before and
  after, and no other version's visibility moved. Unkeyed entries always are; :func:`key_versions`
  finds the keyed ones that are not. When some entry has a rival (a keyed UPDATE, concurrent versions
  of a key), the maintainer recomputes membership instead.
* **count changes** (:func:`count_changes`): of a derived relation's tuples, by the monomials it held
  before the batch that contain a flipped id (alive after minus alive before) and by its new
  monomials (alive after), those whose aliveness needs ids' visibility after the batch listed by
  :func:`changed_monomials`; the visibility of every id any relation of the batch reads is taken
  once (:func:`visible_after`: off the written entries, the few other ids looked up together);
* **patches**: a counted APP table keeps its rows but those of the tuples whose count changed, which
  are re-aggregated with the changes (:func:`patched_counts`); a replicated table's APP table re-reads only its flipped
  and new ids (:func:`patched_base_app`).

The delta identity: for a tuple ``t`` with monomials ``M(t)``, ``n'(t) = n(t) + sum over m in
M_old(t) of (alive'(m) - alive(m)) + sum over m in M_new(t) of alive'(m)``, and ``alive`` changes
only for monomials holding a flipped id. :func:`full_counts` computes the counters from the whole
state (a new view, the fallback, a site written before counters were kept).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, functions as F

from crr.catalog import Relation
from crr.spark.tables import BROADCAST_ROWS, aug_cols, current_cl, kept_rows, small_side, union_all, visibility
from crr.types import TypeFamily, type_family

COUNT_BELOW_ZERO = ("crr: a tuple's count of alive monomials went below zero; the site's state is inconsistent, "
                    "restore the folder from a backup")

Keep = Callable[[DataFrame], DataFrame]  # keeps a frame, computed once, until the batch ends


def by_tuple(df: DataFrame, rel: Relation, keys: list[str], *aggs) -> DataFrame:
    """``df`` grouped by ``keys`` and the tuple's values (``rel``'s AUG columns), with ``aggs``. Float
    values are carried (``first``), not grouped on: Spark's grouping turns -0.0 into 0.0, and the
    values of one tuple are equal bit for bit anyway (its id hashes them)."""
    floats = {c.name for c in rel.aug_columns if type_family(c.type) is TypeFamily.FLOAT}
    cols = aug_cols(rel)
    return df.groupBy(*keys, *[c for c in cols if c not in floats]).agg(
        *aggs, *[F.first(c).alias(c) for c in cols if c in floats])


def parity_flips(written: DataFrame) -> DataFrame:
    """``(id, rel, d)``: the written entries (``cl`` merged, ``o_cl`` before, null for a new id) whose
    length's parity changed, ``d = +1`` when now odd."""
    before = F.coalesce(F.col("o_cl") % 2 == 1, F.lit(False))
    after = F.col("cl") % 2 == 1
    return written.where(before != after).select("id", "rel", F.when(after, 1).otherwise(-1).alias("d"))


def key_versions(written: DataFrame, cl: DataFrame, new_ids_only: bool, small: bool,
                 one_per_key: bool = False) -> DataFrame:
    """``(kh, rival)``: the other versions of the written keyed entries' keys, one row each: another
    written entry of the key (a rival), or another id's stored version (a rival when present;
    ``cl``: after the batch, which wrote ``written``). ``new_ids_only``: the site has never stored
    two ids of one key, so a stored id's key has no other version stored, and only the keys of new
    ids are looked up. ``small``: ``written`` has at most :data:`BROADCAST_ROWS` rows, so its key
    hashes are broadcast and ``cl`` is scanned, not shuffled. ``one_per_key``: no two written entries
    share a key hash (known from the batch), so none is looked for."""
    keyed = written.where(F.col("kh").isNotNull())
    probe = keyed.where(F.col("o_cl").isNull()) if new_ids_only else keyed
    stored = current_cl(cl.join(small_side(probe.select("kh"), small), "kh", "left_semi")
                        .join(keyed.select("id"), "id", "left_anti"))
    versions = stored.select("kh", (F.col("cl") % 2 == 1).alias("rival"))
    if one_per_key:
        return versions
    twice = (keyed.groupBy("kh").agg(F.count(F.lit(1)).alias("n")).where(F.col("n") > 1)
             .select("kh", F.lit(True).alias("rival")))
    return twice.unionByName(versions)


def looked_up_visibility(cl: DataFrame, ids: DataFrame, keyed: bool) -> DataFrame:
    """``(id, vis)`` for the ids of the one-column frame ``ids`` (distinct) from the stored entries: an
    id without one is not visible. ``keyed``: some entry may carry a key hash, so the other versions
    of those ids' keys are read too."""
    scope = cl.join(ids, "id", "left_semi")
    if keyed:
        khs = scope.where(F.col("kh").isNotNull()).select("kh").distinct()
        scope = scope.unionByName(cl.join(khs, "kh", "left_semi"))
    return visibility(current_cl(scope), keyed).join(ids, "id", "left_semi").select("id", "vis")


def visible_after(cl: DataFrame, written: DataFrame | None, keyed: bool, keep: Keep,
                  needed: DataFrame | None) -> DataFrame:
    """``(id, vis)``: visibility after the batch, in parity form, of the ids every patched relation
    reads (``needed``, one column ``id``, repeats allowed; None when none reads an id the batch did
    not write) and of every written entry's id: a written entry's from its parity, any other id's
    looked up in ``cl`` (unchanged by the batch) once for all relations. ``written``: None when the
    batch wrote no entry; ``keep``: keeps a frame, computed once, for the rest of the batch. The
    frame may hold more ids than a relation asks about: join it with yours."""
    if written is None:
        if needed is None:
            return cl.sparkSession.createDataFrame([], "id BINARY, vis BOOLEAN")
        return keep(looked_up_visibility(cl, needed.distinct(), keyed))
    mine = written.select("id", (F.col("cl") % 2 == 1).alias("vis"))
    if needed is None:
        return mine
    # the ids to look up, materialized: one small job that skips the scans of ``cl`` when there are
    # none (the usual case: new tuples), and otherwise lets Spark see how small they are
    others = keep(needed.join(written.select("id"), "id", "left_anti").distinct())
    rows = kept_rows(others)
    if rows == 0:
        return mine
    return keep(mine.unionByName(looked_up_visibility(cl, F.broadcast(others) if rows <= BROADCAST_ROWS else others,
                                                      keyed)))


def changed_monomials(rel: Relation, old: DataFrame, new: DataFrame | None, flips: DataFrame | None, narrow: bool,
                      keep: Keep, small: bool) -> DataFrame | None:
    """The monomials of derived relation ``rel`` whose aliveness after the batch depends on ids'
    visibility, one row per id (column ``id``), for :func:`count_changes`; None when there are none.
    ``narrow`` (every monomial has one id): its new monomials ``(vid, id, cols...)``, an old one's
    change being its id's flip; otherwise the old monomials holding a flipped id and the new ones,
    ``(vid, ids, old, cols..., id)``, kept for the batch. ``old``: its monomials before the batch;
    ``new``: those the batch added; ``flips``: :func:`parity_flips` of the ids in its lineage;
    ``small``: the flips are few enough to broadcast (the old monomials are scanned, not shuffled)."""
    cols = aug_cols(rel)
    if narrow:
        return None if new is None else new.select("vid", F.col("ids")[0].alias("id"), *cols)
    mons = []
    if flips is not None:
        d = small_side(flips.select("id"), small)
        mons.append(old.select("vid", "ids", *cols, F.explode("ids").alias("id")).join(d, "id", "left_semi")
                    .dropDuplicates(["vid", "ids"]).select("vid", "ids", *cols, F.lit(True).alias("old")))
    if new is not None:
        mons.append(new.select("vid", "ids", *cols, F.lit(False).alias("old")))
    if not mons:
        return None
    return keep(union_all(mons).select("vid", "ids", "old", *cols, F.explode("ids").alias("id")))


def count_changes(rel: Relation, old: DataFrame, monos: DataFrame | None, flips: DataFrame | None,
                  vis: DataFrame, narrow: bool, small: bool) -> DataFrame:
    """``(key, cols..., n)``: count changes of derived relation ``rel`` (rows may repeat a key; their
    sum is the change). ``old``: its monomials before the batch; ``monos``: :func:`changed_monomials`;
    ``flips``: :func:`parity_flips` of the ids in its lineage; ``vis``: :func:`visible_after` (holding
    every id of ``monos``); ``narrow``: every monomial has one id (alive is that id's visibility);
    ``small``: the flips are few enough to broadcast (the old monomials are scanned, not shuffled)."""
    cols = aug_cols(rel)
    d = small_side(flips.select("id", "d"), small) if flips is not None else None
    if narrow:
        parts = []
        if d is not None:  # an old monomial of a flipped id changes by the flip
            parts.append(old.select("vid", F.col("ids")[0].alias("id"), *cols).join(d, "id")
                         .select(F.col("vid").alias("key"), *cols, F.col("d").cast("long").alias("n")))
        if monos is not None:  # a new monomial counts when its id is visible after the batch
            alive = monos.join(vis.where("vis").select("id"), "id", "left_semi")
            parts.append(alive.select(F.col("vid").alias("key"), *cols, F.lit(1).cast("long").alias("n")))
        return union_all(parts)
    # alive after minus alive before (0 for a new one), per monomial
    assert monos is not None
    each = monos.join(vis, "id", "left")
    now = F.coalesce(F.col("vis"), F.lit(False))
    if d is not None:
        each = each.join(d, "id", "left")
        was = F.col("old") & F.when(F.col("d").isNull(), now).otherwise(F.col("d") == -1)
    else:
        was = F.lit(False)
    per = by_tuple(each, rel, ["vid", "ids", "old"], F.min(now).alias("now"), F.min(was).alias("was"))
    return per.where(F.col("now") != F.col("was")).select(
        F.col("vid").alias("key"), *cols, F.when(F.col("now"), 1).otherwise(-1).cast("long").alias("n"))


def summed_changes(rel: Relation, changes: DataFrame) -> DataFrame:
    """``(key, cols..., n)``: the count changes of :func:`count_changes` summed per tuple, those that
    cancel out dropped."""
    return (by_tuple(changes, rel, ["key"], F.sum("n").alias("n")).where(F.col("n") != 0)
            .select("key", *aug_cols(rel), "n"))


def patched_counts(rel: Relation, app: DataFrame, changes: DataFrame, rows: int) -> DataFrame:
    """A counted APP table after adding ``changes`` (:func:`summed_changes`, ``rows`` of them, joined
    by broadcast up to :data:`BROADCAST_ROWS`): the changed tuples' counts summed with their stored
    ones, tuples at 0 dropped, every other row kept as it is. A count below 0 fails the job (the
    state would be inconsistent)."""
    cols = aug_cols(rel)
    keys = changes.select("key")
    if rows <= BROADCAST_ROWS:
        keys = F.broadcast(keys)
    changed = by_tuple(app.join(keys, "key", "left_semi").select("key", *cols, "n").unionByName(changes), rel,
                       ["key"], F.sum("n").alias("n")).where(F.col("n") != 0)
    checked = changed.select("key", *cols, F.when(F.col("n") < 0, F.raise_error(F.lit(COUNT_BELOW_ZERO)))
                             .otherwise(F.col("n")).alias("n"))
    return app.join(keys, "key", "left_anti").unionByName(checked)


def patched_base_app(rel: Relation, app: DataFrame, tuples: DataFrame, flips: DataFrame | None,
                     new_ids: DataFrame | None, vis: DataFrame) -> DataFrame:
    """A replicated table's APP rows after the batch: its flipped ids and new tuples (``new_ids``, one
    column ``id``) re-read from ``tuples`` when visible, every other row kept. ``vis``
    (:func:`visible_after`) holds every written entry's id (each flipped id's among them) and the new
    tuples' looked up.

    One join does both halves: the APP rows and the stored tuples, side by side, each joined with the
    dirty ids (``(id, vis)``); an APP row stays when its id is not dirty, a tuple comes in when its id is
    dirty and visible. Two joins (an anti join for the APP rows, a semi join with the visible ones for
    the tuples) broadcast two frames, a Spark job each with the jobs computing them, and a small merge
    costs its number of jobs."""
    cols = aug_cols(rel)
    dirty = vis.join(union_all([f.select("id") for f in (flips, new_ids) if f is not None]), "id", "left_semi")
    rows = app.select("key", *cols, F.lit(True).alias("_app")).unionByName(
        tuples.select(F.col("id").alias("key"), *cols, F.lit(False).alias("_app")))
    joined = rows.join(dirty.withColumnRenamed("id", "key"), "key", "left")
    return joined.where(F.when(F.col("_app"), F.col("vis").isNull()).otherwise(F.coalesce(F.col("vis"), F.lit(False)))
                        ).select("key", *cols)


def full_counts(rel: Relation, monos: DataFrame, vis: DataFrame, narrow: bool) -> DataFrame:
    """``(key, cols..., n)`` from the whole state: each present tuple's count of alive monomials
    (``vis``: :func:`~crr.spark.tables.visibility` of every id)."""
    cols = aug_cols(rel)
    if narrow:
        alive = monos.select("vid", F.col("ids")[0].alias("id"), *cols).join(vis.where("vis").select("id"), "id",
                                                                              "left_semi")
    else:
        each = monos.select("vid", "ids", *cols, F.explode("ids").alias("id")).join(vis.select("id", "vis"), "id",
                                                                                      "left")
        alive = by_tuple(each, rel, ["vid", "ids"], F.min(F.coalesce(F.col("vis"), F.lit(False))).alias("a")).where("a")
    counted = by_tuple(alive.withColumnRenamed("vid", "key"), rel, ["key"], F.count(F.lit(1)).alias("n"))
    return counted.select("key", *cols, "n")
