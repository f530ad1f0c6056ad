"""Local inserts on a Spark site: rows in, a batch of AUG changes out (DESIGN 1.1 and 1.2).

Inserting an absent tuple (never seen, or deleted) grows its causal length by one (from 0 to 1 the
first time); inserting a present tuple changes nothing. In a keyed table the rows get one fresh stamp,
larger than every stamp this site knows for their keys, and a key that is visible with a different
value, or given twice with different values, is a constraint error, as in any database.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, functions as F

from crr.catalog import Relation
from crr.clock import HybridClock
from crr.types import TypeFamily, type_family
from crr.errors import ConstraintError
from crr.writes import key_clash_error
from crr.spark.encoding import key_hash_sql, spark_type, stamp_bytes, tuple_id_sql
from crr.spark.maintain import SparkBatch
from crr.spark.tables import aug_cols, current_cl, visibility


def stored_cols(rel: Relation) -> list[Column]:
    """The relation's AUG columns, each value as a site stores it: a float zero as ``+0.0``, the one
    value of ``-0.0`` and ``0.0`` (:func:`crr.types.stored_value_sql`)."""
    return [F.when(F.col(c.name) == 0, F.lit(0).cast(spark_type(c.type))).otherwise(F.col(c.name)).alias(c.name)
            if type_family(c.type) is TypeFamily.FLOAT else F.col(c.name) for c in rel.aug_columns]


def insert_batch(rel: Relation, rows: DataFrame, cl: DataFrame, tuples: DataFrame, clock: HybridClock) -> SparkBatch:
    """The batch inserting ``rows`` (the relation's AUG columns) into replicated table ``rel``, given
    the current causal-length table ``cl`` and the table's AUG tuples ``tuples`` (read only to word a
    key clash); raises ConstraintError before anything is written."""
    keyed = bool(rel.key)
    w = rows.select(F.expr(tuple_id_sql(rel.name, rel.aug_columns)).alias("id"),
                    (F.expr(key_hash_sql(rel.name, rel.key_aug_columns)) if keyed else F.lit(None).cast("binary"))
                    .alias("kh"), *stored_cols(rel)).cache()
    current = current_cl(cl.where(F.col("rel") == rel.name))
    checks = [F.sum(F.col(rel.aug_column(c)).isNull().cast("int")).alias(f"null_{i}")
              for i, c in enumerate(rel.not_null)]
    if keyed:
        checks.append((F.count_distinct("id") - F.count_distinct("kh")).alias("dupes"))
    row = w.agg(F.count(F.lit(1)).alias("n"), *checks).collect()[0]
    for i, c in enumerate(rel.not_null):
        if row[f"null_{i}"]:
            raise ConstraintError(f"NOT NULL constraint failed: {rel.name}.{c}; nothing was written")
    stamp = None
    if keyed:
        if row["dupes"]:
            raise ConstraintError(f"duplicate key in insert into {rel.name}: rows share a PRIMARY KEY "
                                  f"({', '.join(rel.key)}) with different values; nothing was written")
        keys = w.select("kh").distinct()
        known = current.join(keys, "kh", "left_semi")
        clash = (visibility(known).where("vis").join(known.select("id", "kh"), "id")
                 .join(w.select(F.col("kh"), F.col("id").alias("new_id")), "kh")
                 .where(F.col("id") != F.col("new_id")))
        top = known.agg(F.count(F.lit(1)).alias("n"), F.max("stamp").alias("top")).collect()[0]
        clashing = clash.select("id", "new_id").limit(1).collect() if top["n"] else []
        if clashing and not tuples.where(F.col("id") == F.lit(clashing[0]["id"])).limit(1).count():
            row = w.where(F.col("id") == F.lit(clashing[0]["new_id"])).select(*aug_cols(rel)).first()
            raise key_clash_error(rel, tuple(row), held=False, updates=False)
        if clashing:
            raise ConstraintError(f"duplicate key in insert into {rel.name}: a row with the same PRIMARY KEY "
                                  f"({', '.join(rel.key)}) is present with other values; UPDATE it instead "
                                  "(on a DuckDB site), nothing was written")
        if top["top"] is not None:
            clock.observe(int.from_bytes(top["top"], "big"))
        stamp = stamp_bytes(clock.tick())
    distinct = w.dropDuplicates(["id"])
    grown = (distinct.join(current.select("id", F.col("cl").alias("old")), "id", "left")
             .where(F.col("old").isNull() | (F.col("old") % 2 == 0))
             .select("id", F.lit(rel.name).alias("rel"), (F.coalesce(F.col("old"), F.lit(0)) + 1).alias("cl"),
                     "kh", (F.lit(stamp) if keyed else F.lit(None)).cast("binary").alias("stamp")))
    # cl_relations: the entries' relation, whose flips (a deleted tuple inserted again, which adds no
    # tuple) the membership step reads; without it a re-insert grew the entry and showed no row here
    # cl_one_per_key: the rows' distinct ids have distinct keys (the "dupes" check above)
    return SparkBatch(cl=grown, base={rel.name: distinct.select("id", *aug_cols(rel))}, cl_keyed=keyed,
                      cl_rows=row["n"], rows={rel.name: row["n"]}, cl_relations={rel.name}, cl_one_per_key=True)
