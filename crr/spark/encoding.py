"""Column types on Spark and tuple ids computed by Spark SQL, bit-identical to DuckDB's.

A tuple id is ``md5_number(enc(R, v))`` (see :mod:`crr.types`). On Spark an id is kept as the raw
16 bytes of the MD5 digest, ``unhex(md5(enc))``: the bytes DuckDB's ``UHUGEINT`` exports to Arrow
(little-endian), so ids cross the changeset boundary without any conversion. Spark only compares
ids for equality and sorts monomials by them (any fixed order works inside a site; a changeset's id
lists are re-sorted by the receiver). Stamps are compared by size, so they are kept big-endian
(:func:`stamp_to_spark`), where byte order is numeric order.

Every field encoding is a Spark SQL expression except floats: Java prints doubles differently
from DuckDB and Python, so floats go through a Python UDF (:data:`FLOAT_UDF`) calling
:func:`crr.types.encode_field`, the encoder the DuckDB point path already proves bit-identical.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crr.changeset import UHUGEINT
from crr.errors import TypeMismatchError
from crr.types import Column, TypeFamily, encode_field, type_family

FLOAT_UDF = "crr_float_field"
"""Name of the Spark UDF encoding a DOUBLE or FLOAT value (registered by :func:`register_udfs`)."""

_DECIMAL_RE = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")
_SPARK_TYPES = {
    "TINYINT": "TINYINT", "SMALLINT": "SMALLINT", "INTEGER": "INT", "BIGINT": "BIGINT",
    "FLOAT": "FLOAT", "DOUBLE": "DOUBLE", "VARCHAR": "STRING", "BOOLEAN": "BOOLEAN", "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP_NTZ", "TIMESTAMP WITH TIME ZONE": "TIMESTAMP", "BLOB": "BINARY",
}
SPARK_TYPES_TEXT = ("TINYINT, SMALLINT, INTEGER, BIGINT, DECIMAL(p,s), FLOAT, DOUBLE, VARCHAR, BOOLEAN, DATE, "
                    "TIMESTAMP, TIMESTAMPTZ, BLOB")


def spark_type(duckdb_type: str) -> str:
    """The Spark SQL type holding a column of ``duckdb_type``; TypeMismatchError if Spark has none."""
    t = duckdb_type.upper().strip()
    if t in _SPARK_TYPES:
        return _SPARK_TYPES[t]
    if _DECIMAL_RE.fullmatch(t):
        return t
    raise TypeMismatchError(f"column type {duckdb_type} is not supported on a Spark site (Spark has no type "
                            f"holding every value of it); use one of: {SPARK_TYPES_TEXT}")


def quote(name: str) -> str:
    """Quote an identifier for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def literal(text: str) -> str:
    """A Spark SQL string literal (backslashes are escapes in Spark's default dialect)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_FIELD = {
    TypeFamily.INTEGER: "concat('i', CAST({x} AS STRING))",
    TypeFamily.DECIMAL: "concat('n', CAST({x} AS STRING))",
    TypeFamily.FLOAT: FLOAT_UDF + "({x})",
    TypeFamily.STRING: "concat('s', CAST(octet_length({x}) AS STRING), ':', {x})",
    TypeFamily.BOOLEAN: "CASE WHEN {x} THEN 'b1' WHEN NOT {x} THEN 'b0' END",
    TypeFamily.DATE: "concat('d', CAST({x} AS STRING))",
    TypeFamily.TIMESTAMP: ("concat('t', CAST(timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {x}) "
                           "AS STRING))"),
    TypeFamily.TIMESTAMPTZ: "concat('z', CAST(unix_micros({x}) AS STRING))",
    TypeFamily.BLOB: "concat('x', hex({x}))",
}


def field_sql(expr: str, column: Column) -> str:
    """Spark SQL encoding one value of ``column`` (a NULL is ``N``), equal to DuckDB's field encoding.

    Spark prints decimals at their scale with a leading zero (``-0.500``), as crr's encoding wants.
    """
    spark_type(column.type)  # refuses the types Spark cannot hold
    return f"coalesce({_FIELD[type_family(column.type)].format(x=expr)}, 'N')"


def tuple_id_sql(relation: str, columns: list[Column], qualifier: str = "") -> str:
    """Spark SQL expression of the tuple id (16 bytes, DuckDB's byte order) of each row."""
    parts = [literal(f"{len(relation.encode())}:{relation}")]
    for col in columns:
        ref = (quote(qualifier) + "." if qualifier else "") + quote(col.name)
        parts += ["'|'", field_sql(ref, col)]
    text = parts[0] if len(parts) == 1 else "concat(" + ", ".join(parts) + ")"
    return f"unhex(md5({text}))"


def key_hash_sql(relation: str, key_columns: list[Column], qualifier: str = "") -> str:
    """Spark SQL expression of the key hash of each row of a keyed relation."""
    return tuple_id_sql("key:" + relation, key_columns, qualifier)


def _float_field(value: float | None) -> str | None:
    return None if value is None else encode_field(value, "DOUBLE")


def register_udfs(spark) -> None:
    """Register the UDFs the id expressions call (idempotent, per SparkSession)."""
    spark.udf.register(FLOAT_UDF, _float_field, "string")


# -- Arrow at the changeset boundary -------------------------------------------------------------------

def hugeint_to_binary(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A UHUGEINT column (DuckDB's Arrow export) as plain 16-byte binary, same bytes."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    plain = [(c.storage if isinstance(c, pa.ExtensionArray) else c).cast(pa.binary()) for c in chunks]
    return pa.concat_arrays(plain) if plain else pa.array([], pa.binary())


def hugeint_lists_to_binary(col: pa.ChunkedArray) -> pa.Array:
    """A column of UHUGEINT lists (monomials) as lists of 16-byte binaries."""
    out = [pa.ListArray.from_arrays(c.offsets, hugeint_to_binary(c.values)) for c in col.chunks]
    return pa.concat_arrays(out) if out else pa.array([], pa.list_(pa.binary()))


def binary_to_hugeint(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """16-byte binary values as DuckDB's Arrow UHUGEINT (opaque over fixed_size_binary[16])."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    fixed = arr.cast(pa.binary(16))
    return pa.ExtensionArray.from_storage(UHUGEINT, fixed)


def _reverse16(arr: pa.Array) -> pa.Array:
    fixed = arr.cast(pa.binary(16))
    valid = fixed.is_valid()
    raw = np.frombuffer(fixed.buffers()[1], dtype=np.uint8, count=16 * (len(fixed) + fixed.offset))
    rows = raw.reshape(-1, 16)[fixed.offset:][:, ::-1].copy()
    out = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(fixed), [None, pa.py_buffer(rows.tobytes())])
    return pc.if_else(valid, out, pa.nulls(len(fixed), pa.binary(16))).cast(pa.binary())


def stamp_to_spark(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Stamps from a changeset (UHUGEINT, little-endian) as big-endian binary, ordered like numbers."""
    return _reverse16(hugeint_to_binary(col))


def stamp_from_spark(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Big-endian stamps back into DuckDB's UHUGEINT."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return binary_to_hugeint(_reverse16(arr.cast(pa.binary())))


def stamp_bytes(stamp: int) -> bytes:
    """A stamp (Python int) as Spark keeps it: 16 bytes, big-endian."""
    return stamp.to_bytes(16, "big")
