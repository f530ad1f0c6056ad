"""The tables of a Spark site's AUG and APP layers, and the DataFrames that read their state.

Every relation's user columns are named positionally (``c0, c1, ...``) as on DuckDB (see
:mod:`crr.catalog`); ids, key hashes and stamps are 16-byte binaries (see :mod:`crr.spark.encoding`).

* ``cl`` -- causal-length entries ``(id, rel, cl, kh, stamp, seq)``. Append-only: a transaction
  appends the entries that grew, holding the merged maxima, so an id's current entry is the maximum
  over its rows (:func:`current_cl`) and its newest row carries the ``seq`` it last changed at.
  Compaction (every 16 parts) keeps only the current entries.
* ``t:<r>`` -- a replicated table's AUG tuples ``(id, cols..., seq)``.
* ``m:<r>`` -- derivations of a view, remote table or remote source ``(vid, ids, cols..., seq)``:
  one row per monomial, ``ids`` its sorted id list.
* ``app:<r>`` -- the APP rows ``(key, cols...)`` of every relation but a remote source: the visible
  tuples of a replicated table, the present tuples of the others (``key`` is the id or vid).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame, functions as F

from crr.catalog import Relation
from crr.spark.encoding import quote, spark_type

CL = "cl"
CL_SCHEMA = "id BINARY, rel STRING, cl INT, kh BINARY, stamp BINARY, seq BIGINT"
CL_COLUMNS = ["id", "rel", "cl", "kh", "stamp", "seq"]


def tuples_key(rel: Relation) -> str:
    """The key of a replicated table's AUG tuple table."""
    return "t:" + rel.name


def monos_key(rel: Relation) -> str:
    """The key of a derived relation's monomial table."""
    return "m:" + rel.name


def app_key(rel: Relation) -> str:
    """The key of a relation's APP table."""
    return "app:" + rel.name


def _cols_schema(rel: Relation) -> str:
    return ", ".join(f"{quote(c.name)} {spark_type(c.type)}" for c in rel.aug_columns)


def tuples_schema(rel: Relation) -> str:
    """Spark DDL schema of ``t:<r>``."""
    return f"id BINARY, {_cols_schema(rel)}, seq BIGINT"


def monos_schema(rel: Relation) -> str:
    """Spark DDL schema of ``m:<r>``."""
    return f"vid BINARY, ids ARRAY<BINARY>, {_cols_schema(rel)}, seq BIGINT"


def app_schema(rel: Relation) -> str:
    """Spark DDL schema of ``app:<r>``."""
    return f"key BINARY, {_cols_schema(rel)}"


def relation_tables(rel: Relation) -> dict[str, str]:
    """The tables (key -> schema) a relation keeps."""
    out = {tuples_key(rel): tuples_schema(rel)} if rel.is_base else {monos_key(rel): monos_schema(rel)}
    if rel.has_app:
        out[app_key(rel)] = app_schema(rel)
    return out


def aug_cols(rel: Relation) -> list[str]:
    """The relation's AUG column names (``c0, c1, ...``)."""
    return [c.name for c in rel.aug_columns]


@dataclass(frozen=True)
class StateShape:
    """What a site's stored state is known to hold, so that ``in?`` can take cheaper plans.

    * ``keyed``: some causal-length entry carries a key hash (else visibility is plain parity and
      needs no join with each key's newest stamp);
    * ``wide``: the received relations (remote tables and sources) that may hold a monomial of more
      than one id (a view's width follows from its plan, see :meth:`narrow`).

    Both only grow, like the state they describe. They are kept in the manifest's metadata and
    replaced when a transaction commits; a site written before they were kept reads as keyed, with
    every received relation wide.
    """

    keyed: bool = False
    wide: frozenset[str] = frozenset()

    @classmethod
    def from_meta(cls, meta: dict, received: list[str]) -> "StateShape":
        """The shape a manifest's metadata records (``received``: the site's remote relations, all
        taken as wide when the metadata predates the shape)."""
        shape = meta.get("shape")
        if shape is None:
            return cls(keyed=True, wide=frozenset(received))
        return cls(keyed=bool(shape["keyed"]), wide=frozenset(shape["wide"]))

    def to_meta(self) -> dict:
        """The shape as manifest metadata."""
        return {"keyed": self.keyed, "wide": sorted(self.wide)}

    def grown(self, keyed: bool, wide: set[str]) -> "StateShape":
        """The shape after storing entries (``keyed``: some carry key hashes) and derivations
        (``wide``: relations that received a monomial of more than one id)."""
        return StateShape(keyed=self.keyed or keyed, wide=self.wide | frozenset(wide))

    def narrow(self, rel: Relation, rels: Mapping[str, Relation]) -> bool:
        """Whether every monomial of derived relation ``rel`` has one id: a received relation that
        never received a wider one, or a view whose every branch reads one narrow relation (or a
        replicated table)."""
        if rel.plan is None:
            return rel.name not in self.wide
        inputs = [rels[b.occurrences[0].relation] if len(b.occurrences) == 1 else None for b in rel.plan.branches]
        return all(r is not None and (r.is_base or self.narrow(r, rels)) for r in inputs)


def current_cl(cl: DataFrame) -> DataFrame:
    """Each id's current entry ``(id, rel, kh, cl, stamp, seq)``: the maxima over its rows."""
    return cl.groupBy("id").agg(F.first("rel").alias("rel"), F.first("kh").alias("kh"), F.max("cl").alias("cl"),
                                F.max("stamp").alias("stamp"), F.max("seq").alias("seq"))


def visibility(current: DataFrame, keyed: bool = True) -> DataFrame:
    """``(id, rel, vis)`` for every id (DESIGN 1.2): an unkeyed tuple is visible when its length is odd,
    a keyed one when it is present and has its key's largest stamp among the present versions.
    ``keyed=False`` (no entry carries a key hash) skips the per-key comparison of stamps."""
    odd = F.col("cl") % 2 == 1
    if not keyed:
        return current.select("id", "rel", odd.alias("vis"))
    top = current.where(odd & F.col("kh").isNotNull()).groupBy("kh").agg(F.max("stamp").alias("top"))
    joined = current.join(top, "kh", "left")
    vis = odd & (F.col("kh").isNull() | (F.col("stamp") == F.col("top")))
    return joined.select("id", "rel", F.coalesce(vis, F.lit(False)).alias("vis"))


def base_app(rel: Relation, tuples: DataFrame, vis: DataFrame) -> DataFrame:
    """The APP rows of a replicated table: its visible tuples."""
    visible = vis.where(F.col("vis") & (F.col("rel") == rel.name)).select("id")
    return tuples.join(visible, "id", "left_semi").select(F.col("id").alias("key"), *aug_cols(rel))


def derived_app(rel: Relation, monos: DataFrame, vis: DataFrame, narrow: bool = False) -> DataFrame:
    """The APP rows of a view or remote table: tuples with a monomial whose ids are all visible
    (``in?`` of DESIGN 1.3). ``narrow``: every monomial has one id, so a tuple is present when one
    of its ids is visible (a semi-join, no grouping per monomial)."""
    cols = aug_cols(rel)
    if narrow:
        visible = vis.where("vis").select("id")
        return (monos.select("vid", F.col("ids")[0].alias("id"), *cols).join(visible, "id", "left_semi")
                .dropDuplicates(["vid"]).select(F.col("vid").alias("key"), *cols))
    # a monomial is alive when all its ids are visible; its tuple's values travel with it (every
    # monomial of a tuple carries the same values: the tuple's id is their hash), so one grouping
    # per monomial and one de-duplication per tuple decide membership
    ids = monos.select("vid", "ids", *cols, F.explode("ids").alias("id"))
    alive = (ids.join(vis.select("id", "vis"), "id", "left")
             .groupBy("vid", "ids").agg(F.min(F.coalesce(F.col("vis"), F.lit(False))).alias("alive"),
                                        *[F.first(c).alias(c) for c in cols])
             .where("alive").dropDuplicates(["vid"]))
    return alive.select(F.col("vid").alias("key"), *cols)


def user_view(rel: Relation, app: DataFrame) -> DataFrame:
    """An APP table under the user's column names."""
    return app.select(*[F.col(a).alias(c) for a, c in zip(aug_cols(rel), rel.column_names)])
