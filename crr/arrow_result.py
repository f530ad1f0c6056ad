"""Run one statement and take its rows as an Arrow table, with one parse and one bind.

``con.sql(text).to_arrow_table()`` parses and binds the text once to learn its schema and again to
run it; for the engine's long batch statements that costs about a millisecond more than
``con.execute(text)`` (measured with ``crr bench paper``). The DB-API path copies the rows once more,
which DuckDB warns about; the batch-sized results read here make that copy cheap next to the second
parse, so the warning is silenced here and nowhere else.
"""

from __future__ import annotations

import warnings

import duckdb
import pyarrow as pa
import pyarrow.compute as pc


def arrow_rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pa.Table:
    """The rows ``sql`` returns (a query, or DML with RETURNING), as an Arrow table."""
    cursor = con.execute(sql, params) if params else con.execute(sql)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Arrow output on a DB-API result", category=UserWarning)
        return cursor.to_arrow_table()


def bool_column(values: pa.Array) -> pa.Array:
    """A BOOLEAN column as Arrow booleans (DuckDB's lossless Arrow output sends ``arrow.bool8``, one
    byte a value)."""
    values = getattr(values, "storage", values)
    return values if pa.types.is_boolean(values.type) else pc.cast(values, pa.bool_())
