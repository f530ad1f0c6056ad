"""Changesets in and out of a Spark site: the same bytes a DuckDB site reads and writes.

Reading: every value of a changeset that could be forged is checked by :func:`check_changeset` with
the DuckDB site's own checks (:mod:`crr.merge`), run by DuckDB on the driver where the changeset
already is: tuple ids must hash their values, NOT NULL columns hold values, causal-length entries
have a relation, a length in range, a stamp not far ahead, and a key hash exactly when their table
is keyed, equal to the one recomputed from the values carried. Then :func:`batch_of` turns it into
a :class:`~crr.spark.maintain.SparkBatch` of DataFrames. (That an id's relation and key hash agree
with what the site stored is checked by the maintainer, against the state, on Spark.)

Writing (:func:`collect_changes`): the AUG rows changed after a cursor, as Arrow tables in the
changeset's types (ids and stamps back to DuckDB's ``UHUGEINT``). A changeset is built on the driver
by nature (it is bytes to send); its size is that of the changes, not of the state.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, functions as F

from crr.arrow_slots import ArrowSlots
from crr.catalog import Catalog, Relation
from crr.changeset import ChangeKind, Changeset, RelationChanges
from crr.errors import ChangesetError
from crr.id_sets import distinct_keys, listed_id_bytes
from crr.batch_rows import rows_sql
from crr.causal import checked_entries_sql
from crr.merge import MergeInputs, changeset_errors, plan_merge
from crr.spark.encoding import binary_to_hugeint, hugeint_lists_to_binary, hugeint_to_binary, spark_type, stamp_from_spark, stamp_to_spark
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


def entries_frame(spark: SparkSession, cl: pa.Table) -> DataFrame:
    """A changeset's causal-length entries as ``(id, rel, cl, kh, stamp)`` (stamps big-endian)."""
    table = pa.table([hugeint_to_binary(cl.column("id")), cl.column("rel"), cl.column("cl"),
                      hugeint_to_binary(cl.column("kh")), stamp_to_spark(cl.column("stamp"))],
                     names=["id", "rel", "cl", "kh", "stamp"])
    return spark.createDataFrame(table, schema="id BINARY, rel STRING, cl INT, kh BINARY, stamp BINARY")


def check_changeset(con: duckdb.DuckDBPyConnection, catalog: Catalog, cs: Changeset,
                    held: list[tuple[Relation, RelationChanges]], max_clock_skew: float) -> None:
    """Check every value of a changeset that could be forged, with the DuckDB site's own checks
    (:func:`crr.merge.plan_merge`), on the driver where the changeset already is (``con``: a scratch
    in-memory connection). Raises ChangesetError; reads no site state."""
    inputs = MergeInputs(con, ArrowSlots(con), {})
    try:
        with changeset_errors():
            batch = plan_merge(con, catalog, cs, held, inputs, max_clock_skew, keeps_replicas=False)
            for name, rows in batch.base.items():
                con.execute(f"SELECT count(id) FROM {rows_sql(catalog[name], rows)}").fetchall()
            for name, (tuples, monos) in batch.derived.items():
                con.execute(f"SELECT count(vid) FROM {rows_sql(catalog[name], tuples)}").fetchall()
                if monos is not None:
                    con.execute(f"SELECT count(ids) FROM {rows_sql(catalog[name], monos)}").fetchall()
            if batch.received is not None:
                con.execute(f"SELECT count(cl), count(kh) FROM {checked_entries_sql(batch.received)}").fetchall()
    finally:
        inputs.close(drop_tables=True)


def batch_of(spark: SparkSession, catalog: Catalog, cs: Changeset, held: list[tuple[Relation, RelationChanges]]
             ) -> SparkBatch:
    """The batch a changeset's held relations make (check it first with :func:`check_changeset`)."""
    batch = SparkBatch()
    for rel, rc in held:
        if rc.empty:
            continue  # nothing to append; its columns were checked by check_changeset
        what = f"relation {rel.name}"
        batch.rows[rel.name] = rc.tuples.num_rows if rc.monos is None else rc.monos.num_rows
        if rc.kind is ChangeKind.BASE:
            frame = values_frame(spark, rel, rc.tuples, "id", what)
            if rel.is_base:
                batch.base[rel.name] = frame
                listed = listed_id_bytes(rc.tuples.column("id"))
                if listed is not None:
                    batch.listed[rel.name] = listed
            else:  # a replicated table's tuples into a remote relation: each its own monomial
                batch.derived[rel.name] = frame.select(F.col("id").alias("vid"), F.array("id").alias("ids"),
                                                       *aug_cols(rel))
        else:
            assert rc.monos is not None
            frame = values_frame(spark, rel, rc.tuples, "vid", what)
            monos = spark.createDataFrame(
                pa.table([hugeint_to_binary(rc.monos.column("vid")), hugeint_lists_to_binary(rc.monos.column("ids"))],
                         names=["vid", "ids"]), schema="vid BINARY, ids ARRAY<BINARY>")
            batch.derived[rel.name] = (monos.select("vid", F.array_sort(F.array_distinct("ids")).alias("ids"))
                                       .join(frame.dropDuplicates(["vid"]), "vid"))
            if rc.monos.num_rows and (pc.max(pc.list_value_length(rc.monos.column("ids"))).as_py() or 0) > 1:
                batch.wide.add(rel.name)
    if cs.cl is not None and cs.cl.num_rows:
        interest: set[str] = set()
        for name in catalog:  # the catalog holds the lineage the changeset grew
            interest |= catalog.lineage(name)
        rels = set(cs.cl.column("rel").unique().to_pylist()) & interest
        if rels:
            batch.cl = entries_frame(spark, cs.cl).where(F.col("rel").isin(sorted(rels)))
            batch.cl_relations = rels
            batch.cl_rows = cs.cl.num_rows
            batch.cl_keyed = cs.cl.column("kh").null_count < cs.cl.num_rows
            batch.cl_one_per_key = distinct_keys(cs.cl.column("kh"))
            batch.cl_listed = listed_id_bytes(cs.cl.column("id"))  # (a superset of the frame's: any relation)
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
            columns=[(c.name, c.type) for c in rel.columns], key=list(rel.stated_key), not_null=list(rel.not_null),
            fingerprint=rel.fingerprint, lineage=sorted(rel_lineage), tuples=tuples, monos=monos,
            definition=None if rel.is_base else catalog.definition_id(name)))
    entries = (current_cl(cl.where(F.col("seq") > since)).where(F.col("rel").isin(sorted(lineage)))
               .select("id", "rel", "cl", "kh", "stamp").toArrow())
    cl_table = pa.table([binary_to_hugeint(entries.column("id")), entries.column("rel"), entries.column("cl"),
                         binary_to_hugeint(entries.column("kh")), stamp_from_spark(entries.column("stamp"))],
                        names=["id", "rel", "cl", "kh", "stamp"])
    return out, cl_table
