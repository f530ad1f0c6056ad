"""What ``insert_many`` is given, made ready for a table: rows as Arrow, columns matched to the table's.

Both sites' ``insert_many`` (:func:`crr.site_dml.insert_many`, :meth:`crr.spark.SparkSite.insert_many`)
take Python tuples in column order, an Arrow table or a data frame. Values Arrow cannot put in one
column (a string among integers) are refused with a
:class:`crr.errors.TypeMismatchError` that names the table, before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from crr.catalog import Relation
from crr.changeset import check_duckdb_values
from crr.errors import CatalogError, ChangesetError, SqlError, TypeMismatchError
from crr.types import quote_ident


def rows_arrow(table: str, rows: Sequence[Sequence[object]], names: list[str]) -> pa.Table:
    """Python rows (each a tuple of values in column order) as an Arrow table whose columns are
    ``names``, each of the type Arrow infers from its values (an empty table: NULL columns)."""
    for r in rows:
        if not isinstance(r, (tuple, list)):
            raise TypeMismatchError(f"insert_many into {table}: each row must be a tuple or list of values in "
                                    f"column order ({', '.join(names)}), got a {type(r).__name__}; for rows "
                                    "keyed by column name pass pyarrow.Table.from_pylist(rows)")
    if any(len(r) != len(names) for r in rows):
        raise SqlError(f"insert_many into {table}: every row needs {len(names)} values ({', '.join(names)})")
    if not rows:
        return pa.table({n: pa.nulls(0) for n in names})
    return pa.table({n: _column(table, list(col)) for n, col in zip(names, zip(*rows))})


def input_arrow(table: str, rows: object, names: list[str]) -> tuple[pa.Table, bool]:
    """``insert_many``'s rows as Arrow (both kinds of site): a pyarrow Table as it is, a pandas
    DataFrame converted, anything else as Python rows (:func:`rows_arrow`); and whether they were
    Python rows, whose Arrow types were inferred here."""
    if isinstance(rows, pa.Table):
        return rows, False
    if hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # a pandas DataFrame
        try:
            return pa.Table.from_pandas(rows, preserve_index=False), False
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
            raise TypeMismatchError(f"insert_many into {table}: pyarrow cannot convert the DataFrame "
                                    f"({type(e).__name__}: {e}); give each column one type, or pass a "
                                    "pyarrow Table or a list of tuples") from None
    return rows_arrow(table, row_list(table, rows), names), True


def _column(table: str, values: list) -> pa.Array:
    """One column's values as the Arrow array Arrow infers; integers past 64 bits (for a HUGEINT,
    UBIGINT or UHUGEINT column, which DuckDB casts them into) as their decimal text."""
    try:
        array = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        if all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in values):
            return pa.array([None if v is None else str(v) for v in values], pa.string())
        raise TypeMismatchError(f"insert_many into {table}: the values of a column do not share one type "
                                f"({e}); nothing was written") from None
    if pa.types.is_decimal256(array.type) and array.type.scale <= 38:
        # Arrow gives 0 beside 1E-38 39 digits (one before the point), past the decimal128 DuckDB reads,
        # though both fit DECIMAL(38, 38) (a probe's case); values that need more digits stay as they are
        try:
            return array.cast(pa.decimal128(38, array.type.scale))
        except pa.ArrowInvalid:
            pass
    return array


UNREADABLE_ARROW = "Unsupported Internal Arrow Type"  # DuckDB's error for an Arrow type it has no reader for


def unreadable_arrow_error(rel: Relation, data: pa.Table, tuples: bool) -> TypeMismatchError:
    """The error of rows DuckDB has no Arrow reader for (float16, decimal256): an Arrow table's column
    to cast, or (``tuples``: rows given as Python values) a decimal of more than 38 digits."""
    types = ", ".join(f"{name} {field.type}" for name, field in zip(data.column_names, data.schema))
    fix = ("a value needs more digits than DuckDB's DECIMAL holds (38); round it to the column's type first" if tuples
           else "cast that column to a type DuckDB reads (float16 to float32, decimal256 to decimal128), or pass a "
                "list of tuples")
    return TypeMismatchError(f"insert_many into {rel.name}: DuckDB cannot read an Arrow type among the columns "
                             f"given ({types}); {fix}; nothing was written")


def table_name(table: object) -> str:
    """The name ``insert_many`` was given for its table; CatalogError when it is not a string."""
    if not isinstance(table, str):
        raise CatalogError(f"insert_many: the table must be named by a string, got {type(table).__name__}")
    return table


def row_list(table: str, rows: object) -> list:
    """``rows`` (any iterable of rows) as a list; TypeMismatchError when it is not one."""
    if rows is None or isinstance(rows, (str, bytes, dict)) or not hasattr(rows, "__iter__"):
        raise TypeMismatchError(f"insert_many into {table}: rows must be a list of tuples, a pyarrow Table or a "
                                f"data frame, got {type(rows).__name__}")
    return list(rows)


def column_positions(table: str, given: list[str], names: list[str]) -> dict[str, int]:
    """Where each of the table's columns ``names`` is among the input's columns ``given`` (folded
    names): by name when every name matches; else by position when the counts agree and no input
    column is named like one of the table's at another position (a data frame's ``0, 1, ...``, or
    ``k, value`` for ``k, v``), since reading ``v, kk`` by position would put ``v`` into ``k``."""
    if sorted(given) == sorted(names) and len(set(given)) == len(given):
        return {n: given.index(n) for n in names}
    misplaced = [g for i, g in enumerate(given) if g in names and (i >= len(names) or names[i] != g)]
    if len(given) == len(names) and not misplaced:
        return {n: i for i, n in enumerate(names)}
    detail = [f"{what}: {', '.join(cols)}" for what, cols in (
        ("unknown", [g for g in given if g not in names]), ("missing", [n for n in names if n not in given]),
        ("repeated", sorted({g for g in given if given.count(g) > 1}))) if cols]
    raise SqlError(f"insert_many into {table}: got columns {given}, expected {names}"
                   + (f" ({'; '.join(detail)})" if detail else "")
                   + "; name the input's columns as the table's, or in its order")


def named_input(rel: Relation, data: pa.Table, pick: dict[str, int]) -> pa.Table:
    """``data`` checked for values DuckDB cannot hold (a timestamp below its range), with each column
    named as the table's column it fills (``pick``: :func:`column_positions`), so a cast that fails
    names the user's column; TypeMismatchError, naming the table, for a value DuckDB cannot hold."""
    for name, col in zip(data.column_names, data.columns):
        try:
            check_duckdb_values(col, f"column {name}")
        except ChangesetError as e:
            raise TypeMismatchError(f"insert_many into {rel.name}: {str(e).split(': ', 1)[1]}; "
                                    "nothing was written") from None
    at = {i: name for name, i in pick.items()}
    return data.rename_columns([at[i] for i in range(data.num_columns)])


def typed_input_sql(rel: Relation, source: str) -> str:
    """The rows of :func:`named_input` read from ``source`` and cast by DuckDB to the relation's declared
    types, as its AUG columns ``c0, c1, ...``."""
    casts = ", ".join(f"CAST({quote_ident(c.name)} AS {a.type}) AS {a.name}"
                      for c, a in zip(rel.columns, rel.aug_columns))
    return f"SELECT {casts} FROM {source}"
