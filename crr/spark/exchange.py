"""Changesets in and out of a Spark site: the same bytes a DuckDB site reads and writes.

Reading (:func:`batch_of`): a validated :class:`~crr.changeset.Changeset` becomes a
:class:`~crr.spark.maintain.SparkBatch` of DataFrames, and every value that could be forged is
checked by one Spark job per table (:func:`check_tuples`, :func:`check_entries`), as the DuckDB
site checks it (:mod:`crr.merge`): tuple ids must hash their values, NOT NULL columns hold values,
causal-length entries have a relation, a length in range, a stamp not far ahead, and a key hash
exactly when their table is keyed, equal to the one recomputed from the values carried.

Writing (:func:`collect_changes`): the AUG rows changed after a cursor, as Arrow tables in the
changeset's types (ids and stamps back to DuckDB's ``UHUGEINT``). A changeset is built on the driver
by nature (it is bytes to send); its size is that of the changes, not of the state.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, functions as F

from crr.catalog import Catalog, Relation
from crr.changeset import ChangeKind, Changeset, RelationChanges
from crr.errors import ChangesetError
from crr.merge import MAX_CAUSAL_LENGTH
from crr.spark.encoding import (binary_to_hugeint, hugeint_to_binary, key_hash_sql, quote, spark_type,
                                stamp_bytes, stamp_from_spark, stamp_to_spark, tuple_id_sql)
from crr.spark.maintain import SparkBatch
from crr.spark.tables import CL, aug_cols, current_cl, monos_key, tuples_key

_SPARK_RANGE = (-62135596800000000, 253402300799999999)  # 0001-01-01 .. 9999-12-31 23:59:59.999999, in us
_DATE_RANGE = (-719162, 2932896)  # the same range in days


def _spark_column(col: pa.ChunkedArray, duckdb_type: str, what: str) -> pa.ChunkedArray:
    """A user column as Spark reads it (BOOLEAN as plain bool); values outside Spark's date and
    timestamp range (years 1 to 9999) are refused."""
    if isinstance(col.type, pa.ExtensionType):  # DuckDB's bool8
        col = pa.chunked_array([c.storage for c in col.chunks], type=col.type.storage_type).cast(pa.bool_())
    if col.null_count < len(col) and (pa.types.is_timestamp(col.type) or pa.types.is_date32(col.type)):
        ints = col.cast(pa.int64() if pa.types.is_timestamp(col.type) else pa.int32())
        low, high = _SPARK_RANGE if pa.types.is_timestamp(col.type) else _DATE_RANGE
        lo, hi = pc.min_max(ints).values()
        if lo.as_py() < low or hi.as_py() > high:
            raise ChangesetError(f"{what} holds a {duckdb_type} outside the years 1 to 9999, which a Spark site "
                                 "cannot hold; nothing was changed")
    return col


def values_frame(spark: SparkSession, rel: Relation, table: pa.Table, idcol: str | None, what: str) -> DataFrame:
    """A DataFrame ``(idcol, c0, c1, ...)`` of Arrow rows with the relation's AUG columns."""
    names, arrays, schema = [], [], []
    if idcol is not None:
        names.append(idcol)
        arrays.append(hugeint_to_binary(table.column(idcol)))
        schema.append(f"{idcol} BINARY")
    for col, aug in zip(rel.columns, rel.aug_columns):
        names.append(aug.name)
        arrays.append(_spark_column(table.column(aug.name), col.type, f"{what}: column {col.name}"))
        schema.append(f"{aug.name} {spark_type(col.type)}")
    return spark.createDataFrame(pa.table(arrays, names=names), schema=", ".join(schema))


def check_tuples(rel: Relation, frame: DataFrame, idcol: str) -> None:
    """Refuse tuples whose id is not the hash of their values, or with NULL in a NOT NULL column."""
    bad_id = F.expr(f"NOT ({quote(idcol)} <=> {tuple_id_sql(rel.name, rel.aug_columns)})")
    checks = [F.sum(bad_id.cast("int")).alias("forged")]
    checks += [F.sum(F.col(rel.aug_column(c)).isNull().cast("int")).alias(f"null_{i}")
               for i, c in enumerate(rel.not_null)]
    row = frame.agg(*checks).collect()[0]
    if row["forged"]:
        raise ChangesetError(f"malformed changeset: tuple ids of {rel.name} do not match their values; the "
                             "changeset is corrupt or forged")
    for i, c in enumerate(rel.not_null):
        if row[f"null_{i}"]:
            raise ChangesetError(f"malformed changeset: relation {rel.name}: the changeset holds NULL in column "
                                 f"{c}, which this site declares NOT NULL; declare it alike at every site "
                                 "(or without NOT NULL here)")


def entries_frame(spark: SparkSession, cl: pa.Table) -> DataFrame:
    """A changeset's causal-length entries as ``(id, rel, cl, kh, stamp)`` (stamps big-endian)."""
    table = pa.table([hugeint_to_binary(cl.column("id")), cl.column("rel"), cl.column("cl"),
                      hugeint_to_binary(cl.column("kh")), stamp_to_spark(cl.column("stamp"))],
                     names=["id", "rel", "cl", "kh", "stamp"])
    return spark.createDataFrame(table, schema="id BINARY, rel STRING, cl INT, kh BINARY, stamp BINARY")


def check_entries(catalog: Catalog, entries: DataFrame, key_hashes: DataFrame | None, max_clock_skew: float) -> None:
    """Refuse causal-length entries that are malformed, far ahead of this site's clock, or whose key
    hash is missing, unexpected, or differs from ``key_hashes`` ``(id, computed)`` recomputed from values."""
    keyed = [r.name for r in catalog.values() if r.is_base and r.key]
    unkeyed = [r.name for r in catalog.values() if r.is_base and not r.key]
    limit = stamp_bytes(((int((time.time() + max_clock_skew) * 1000) << 16 | 0xFFFF) << 64) | (2**64 - 1))
    e = entries
    if key_hashes is not None:
        e = e.join(key_hashes, "id", "left")
    else:
        e = e.withColumn("computed", F.lit(None).cast("binary"))
    flags = {
        "malformed": F.col("id").isNull() | F.col("rel").isNull() | F.col("cl").isNull() | (F.col("cl") < 1),
        "too_long": F.col("cl") > MAX_CAUSAL_LENGTH,
        "ahead": F.col("stamp") > F.lit(limit),
        "no_kh": F.col("kh").isNull() & F.col("rel").isin(keyed),
        "extra_kh": F.col("kh").isNotNull() & F.col("rel").isin(unkeyed),
        "wrong_kh": F.col("computed").isNotNull() & ~F.col("kh").eqNullSafe(F.col("computed")),
    }
    row = e.agg(*[F.sum(F.coalesce(c, F.lit(False)).cast("int")).alias(n) for n, c in flags.items()]).collect()[0]
    messages = {
        "malformed": "causal-length entries need an id, a relation and a length >= 1",
        "too_long": f"a causal length exceeds {MAX_CAUSAL_LENGTH}; the changeset is forged",
        "ahead": (f"a stamp is more than {max_clock_skew:g} s ahead of this site's clock; check the clocks "
                  "(or raise SparkSite(max_clock_skew=...))"),
        "no_kh": "an entry of a keyed table has no key hash; the changeset is forged",
        "extra_kh": "an entry of an unkeyed table has a key hash; the changeset is forged",
        "wrong_kh": "the key hash of a tuple does not match its key values; the changeset is corrupt or forged",
    }
    for name, text in messages.items():
        if row[name]:
            raise ChangesetError("malformed changeset: " + text)


def batch_of(spark: SparkSession, catalog: Catalog, cs: Changeset, held: list[tuple[Relation, RelationChanges]],
             max_clock_skew: float) -> SparkBatch:
    """The batch a changeset's held relations make, every value checked (ChangesetError otherwise)."""
    batch = SparkBatch()
    key_hashes = []
    for rel, rc in held:
        what = f"relation {rel.name}"
        if rc.kind is ChangeKind.BASE:
            frame = values_frame(spark, rel, rc.tuples, "id", what)
            check_tuples(rel, frame, "id")
            if rel.is_base:
                batch.base[rel.name] = frame
                if rel.key:
                    key_hashes.append(frame.select("id", F.expr(key_hash_sql(rel.name, rel.key_aug_columns))
                                                   .alias("computed")))
            else:  # a replicated table's tuples into a remote relation: each its own monomial
                batch.derived[rel.name] = frame.select(F.col("id").alias("vid"), F.array("id").alias("ids"),
                                                       *aug_cols(rel))
        else:
            frame = values_frame(spark, rel, rc.tuples, "vid", what)
            check_tuples(rel, frame, "vid")
            assert rc.monos is not None
            monos = spark.createDataFrame(
                pa.table([hugeint_to_binary(rc.monos.column("vid")),
                          pa.ListArray.from_arrays(rc.monos.column("ids").combine_chunks().offsets,
                                                   hugeint_to_binary(rc.monos.column("ids").combine_chunks().values))],
                         names=["vid", "ids"]), schema="vid BINARY, ids ARRAY<BINARY>")
            values = frame.dropDuplicates(["vid"])
            batch.derived[rel.name] = (monos.select("vid", F.array_sort(F.array_distinct("ids")).alias("ids"))
                                       .join(values, "vid"))
    if cs.cl is not None and cs.cl.num_rows:
        interest: set[str] = set()
        for rel, _ in held:
            interest |= catalog.lineage(rel.name)
        entries = entries_frame(spark, cs.cl).where(F.col("rel").isin(sorted(interest)))
        hashes = None
        if key_hashes:
            hashes = key_hashes[0]
            for h in key_hashes[1:]:
                hashes = hashes.unionByName(h)
            hashes = hashes.dropDuplicates(["id"])
        check_entries(catalog, entries, hashes, max_clock_skew)
        batch.cl = entries
    return batch


# -- out -----------------------------------------------------------------------------------------------

def _hugeint_list(col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks()
    return pa.ListArray.from_arrays(arr.offsets, binary_to_hugeint(arr.values))


def _arrow_values(rel: Relation, table: pa.Table, idcol: str) -> pa.Table:
    arrays = [binary_to_hugeint(table.column(idcol))]
    for c, a in zip(rel.columns, rel.aug_columns):
        col = table.column(a.name)
        if c.type.upper() == "TIMESTAMP WITH TIME ZONE" and col.type.tz != "UTC":
            col = col.cast(pa.timestamp("us", tz="UTC"))
        arrays.append(col)
    return pa.table(arrays, names=[idcol, *aug_cols(rel)])


def collect_changes(txn_read, catalog: Catalog, names: list[str], since: int) -> tuple[list[RelationChanges], pa.Table]:
    """The changes of the named relations after ``since``, and the causal-length entries of their
    lineage that changed, read from one committed state (``txn_read(key)`` gives a table)."""
    out: list[RelationChanges] = []
    lineage: set[str] = set()
    cl = txn_read(CL)
    for name in names:
        rel = catalog[name]
        rel_lineage = catalog.lineage(name)
        lineage |= rel_lineage
        if rel.is_base:
            touched = cl.where((F.col("rel") == rel.name) & (F.col("seq") > since)).select("id").distinct()
            t = txn_read(tuples_key(rel))
            rows = t.where(F.col("seq") > since).select("id", *aug_cols(rel)).unionByName(
                t.join(touched, "id", "left_semi").select("id", *aug_cols(rel))).dropDuplicates(["id"])
            tuples, monos = _arrow_values(rel, rows.toArrow(), "id"), None
        else:
            m = txn_read(monos_key(rel)).where(F.col("seq") > since).cache()
            try:
                mono_rows = m.select("vid", "ids").toArrow()
                value_rows = m.dropDuplicates(["vid"]).select("vid", *aug_cols(rel)).toArrow()
            finally:
                m.unpersist()
            monos = pa.table([binary_to_hugeint(mono_rows.column("vid")), _hugeint_list(mono_rows.column("ids"))],
                             names=["vid", "ids"])
            tuples = _arrow_values(rel, value_rows, "vid")
        out.append(RelationChanges(
            name=name, kind=ChangeKind.BASE if rel.is_base else ChangeKind.DERIVED,
            columns=[(c.name, c.type) for c in rel.columns], key=list(rel.key), not_null=list(rel.not_null),
            fingerprint=rel.fingerprint, lineage=sorted(rel_lineage), tuples=tuples, monos=monos))
    entries = (current_cl(cl.where(F.col("seq") > since)).where(F.col("rel").isin(sorted(lineage)))
               .select("id", "rel", "cl", "kh", "stamp").toArrow())
    cl_table = pa.table([binary_to_hugeint(entries.column("id")), entries.column("rel"), entries.column("cl"),
                         binary_to_hugeint(entries.column("kh")), stamp_from_spark(entries.column("stamp"))],
                        names=["id", "rel", "cl", "kh", "stamp"])
    return out, cl_table
