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


def current_cl(cl: DataFrame) -> DataFrame:
    """Each id's current entry ``(id, rel, kh, cl, stamp, seq)``: the maxima over its rows."""
    return cl.groupBy("id").agg(F.first("rel").alias("rel"), F.first("kh").alias("kh"), F.max("cl").alias("cl"),
                                F.max("stamp").alias("stamp"), F.max("seq").alias("seq"))


def visibility(current: DataFrame) -> DataFrame:
    """``(id, rel, vis)`` for every id (DESIGN 1.2): an unkeyed tuple is visible when its length is odd,
    a keyed one when it is present and has its key's largest stamp among the present versions."""
    odd = F.col("cl") % 2 == 1
    top = current.where(odd & F.col("kh").isNotNull()).groupBy("kh").agg(F.max("stamp").alias("top"))
    joined = current.join(top, "kh", "left")
    vis = odd & (F.col("kh").isNull() | (F.col("stamp") == F.col("top")))
    return joined.select("id", "rel", F.coalesce(vis, F.lit(False)).alias("vis"))


def base_app(rel: Relation, tuples: DataFrame, vis: DataFrame) -> DataFrame:
    """The APP rows of a replicated table: its visible tuples."""
    visible = vis.where(F.col("vis") & (F.col("rel") == rel.name)).select("id")
    return tuples.join(visible, "id", "left_semi").select(F.col("id").alias("key"), *aug_cols(rel))


def derived_app(rel: Relation, monos: DataFrame, vis: DataFrame) -> DataFrame:
    """The APP rows of a view or remote table: tuples with a monomial whose ids are all visible
    (``in?`` of DESIGN 1.3)."""
    ids = monos.select("vid", "ids", F.explode("ids").alias("id"))
    alive = (ids.join(vis.select("id", "vis"), "id", "left")
             .groupBy("vid", "ids").agg(F.min(F.coalesce(F.col("vis"), F.lit(False))).alias("alive"))
             .where("alive").select("vid").distinct())
    values = monos.groupBy("vid").agg(*[F.first(c).alias(c) for c in aug_cols(rel)])
    return values.join(alive, "vid", "left_semi").select(F.col("vid").alias("key"), *aug_cols(rel))


def user_view(rel: Relation, app: DataFrame) -> DataFrame:
    """An APP table under the user's column names."""
    return app.select(*[F.col(a).alias(c) for a, c in zip(aug_cols(rel), rel.column_names)])
