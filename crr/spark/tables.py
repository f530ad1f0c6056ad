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
* ``app:<r>`` -- the APP rows of every relation but a remote source: ``(key, cols...)``, the visible
  tuples of a replicated table (``key`` its id), and ``(key, cols..., n)``, the present tuples of a
  view or remote table with their count of alive monomials (``key`` the vid; see
  :mod:`crr.spark.membership`).
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
    """Spark DDL schema of ``app:<r>`` (a derived relation's rows carry their count ``n``)."""
    return f"key BINARY, {_cols_schema(rel)}" + ("" if rel.is_base else ", n BIGINT")


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
      than one id (a view's width follows from its plan, see :meth:`narrow`);
    * ``versions``: some key hash may belong to more than one stored id (a keyed UPDATE, concurrent
      versions of a key). Until then, a batch's keyed entry of a stored id has no other version
      stored, so only the entries of new ids are looked up by key (see
      :meth:`crr.spark.maintain.SparkMaintainer._flips_are_parities`).

    All only grow, like the state they describe. They are kept in the manifest's metadata and
    replaced when a transaction commits; a site written before they were kept reads as keyed, with
    every received relation wide and keys that may have several versions.
    """

    keyed: bool = False
    wide: frozenset[str] = frozenset()
    versions: bool = False

    @classmethod
    def from_meta(cls, meta: dict, received: list[str]) -> "StateShape":
        """The shape a manifest's metadata records (``received``: the site's remote relations, all
        taken as wide when the metadata predates the shape)."""
        shape = meta.get("shape")
        if shape is None:
            return cls(keyed=True, wide=frozenset(received), versions=True)
        return cls(keyed=bool(shape["keyed"]), wide=frozenset(shape["wide"]),
                   versions=bool(shape.get("versions", True)))

    @property
    def key_versions(self) -> bool:
        """Whether an id's visibility may depend on other versions of its key (else it is the parity
        of its length: :func:`visibility` with ``keyed=False``)."""
        return self.keyed and self.versions

    def to_meta(self) -> dict:
        """The shape as manifest metadata."""
        return {"keyed": self.keyed, "wide": sorted(self.wide), "versions": self.versions}

    def grown(self, keyed: bool, wide: set[str], versions: bool = False) -> "StateShape":
        """The shape after storing entries (``keyed``: some carry key hashes; ``versions``: some key
        may now have several ids) and derivations (``wide``: relations that received a monomial of
        more than one id)."""
        return StateShape(keyed=self.keyed or keyed, wide=self.wide | frozenset(wide),
                          versions=self.versions or versions)

    def narrow(self, rel: Relation, rels: Mapping[str, Relation]) -> bool:
        """Whether every monomial of derived relation ``rel`` has one id: a received relation that
        never received a wider one, or a view whose every branch reads one narrow relation (or a
        replicated table)."""
        if rel.plan is None:
            return rel.name not in self.wide
        inputs = [rels[b.occurrences[0].relation] if len(b.occurrences) == 1 else None for b in rel.plan.branches]
        return all(r is not None and (r.is_base or self.narrow(r, rels)) for r in inputs)


def union_all(frames: list[DataFrame]) -> DataFrame:
    """The rows of every frame of a non-empty list (columns matched by name)."""
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


BROADCAST_ROWS = 1_000_000  # a batch's frames up to this many rows are joined by broadcast


def small_side(df: DataFrame, small: bool) -> DataFrame:
    """``df`` marked for broadcast when ``small`` (a batch's frame of at most :data:`BROADCAST_ROWS`
    rows): a join with a state table then scans the table once instead of shuffling it."""
    return F.broadcast(df) if small else df


def of_ids(state: DataFrame, ids: DataFrame, listed: list[bytes] | None, small: bool) -> DataFrame:
    """The rows of ``state`` whose ``id`` is one of the ids of frame ``ids``. ``listed``: those ids as
    constants (a changeset's few, :func:`crr.id_sets.listed_id_bytes`; a superset does as well):
    then ``state`` is filtered by them, with no job to collect and broadcast ``ids`` first (one Spark
    job where the broadcast semi join runs two, and a small merge costs its number of jobs); else a
    semi join with ``ids``, broadcast when ``small`` (:func:`small_side`)."""
    if listed is not None:
        return state.where(F.col("id").isin(listed))
    return state.join(small_side(ids.select("id"), small), "id", "left_semi")


def kept_rows(df: DataFrame) -> int:
    """The number of rows of a kept frame (a local checkpoint, already computed or computed now), in
    one Spark job over its partitions. ``DataFrame.count`` plans an aggregation, which adaptive
    execution runs as two jobs (the partial counts and their shuffle, then the sum); a small merge
    costs its number of jobs (see the README's "Large views on Spark"). Counting a frame that is not
    kept this way would compute all its columns."""
    return int(df._jdf.queryExecution().toRdd().count())


def current_cl(cl: DataFrame) -> DataFrame:
    """Each id's current entry ``(id, rel, kh, cl, stamp, seq)``: the maxima over its rows."""
    return cl.groupBy("id").agg(F.first("rel").alias("rel"), F.first("kh").alias("kh"), F.max("cl").alias("cl"),
                                F.max("stamp").alias("stamp"), F.max("seq").alias("seq"))


def visibility(current: DataFrame, keyed: bool = True) -> DataFrame:
    """``(id, rel, vis)`` for every id (DESIGN 1.2): an unkeyed tuple is visible when its length is odd,
    a keyed one when it is present and has its key's largest stamp among the present versions, of
    equal stamps the larger id (:data:`crr.causal.VISIBLE_ORDER`, as a DuckDB site orders them).
    ``keyed=False`` (no entry carries a key hash) skips the per-key comparison of stamps."""
    odd = F.col("cl") % 2 == 1
    if not keyed:
        return current.select("id", "rel", odd.alias("vis"))
    # binaries compare as unsigned bytes: stamps are big-endian, ids DuckDB's little-endian bytes
    order = F.struct("stamp", F.reverse("id").alias("id"))
    top = current.where(odd & F.col("kh").isNotNull()).groupBy("kh").agg(F.max(order).alias("top"))
    joined = current.join(top, "kh", "left")
    vis = odd & (F.col("kh").isNull() | (order == F.col("top")))
    return joined.select("id", "rel", F.coalesce(vis, F.lit(False)).alias("vis"))


def base_app(rel: Relation, tuples: DataFrame, vis: DataFrame) -> DataFrame:
    """The APP rows of a replicated table: its visible tuples."""
    visible = vis.where(F.col("vis") & (F.col("rel") == rel.name)).select("id")
    return tuples.join(visible, "id", "left_semi").select(F.col("id").alias("key"), *aug_cols(rel))


def user_view(rel: Relation, app: DataFrame) -> DataFrame:
    """An APP table under the user's column names."""
    return app.select(*[F.col(a).alias(c) for a, c in zip(aug_cols(rel), rel.column_names)])
