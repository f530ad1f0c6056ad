"""Where a batch's tuples are read: typed inputs, and the one place that renders them as SQL.

A merge, a batch write and a point write each leave the rows a batch adds somewhere (an Arrow slot
or a temp table) and hand the maintainer a :class:`Rows` saying where and how to read them; only
:func:`rows_sql` turns that into the FROM text the maintainer's statements read. A received table is
checked as it is read (:func:`tuple_check_sql`): a tuple id must be the hash of its values, and a
column this site declares NOT NULL must hold a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from crr.catalog import Relation
from crr.types import quote_str, text_value_sql, tuple_id_sql


class RowsKind(Enum):
    """How a table of a batch's rows is read."""

    RECEIVED = "received"  # a changeset's tuples (id column, then c0, c1, ...), checked as they are read
    CHECKED = "checked"  # rows already checked as they were copied (a received derived relation's)
    WRITTEN = "written"  # a batch write's rows (id, kh, c0, ...), an id possibly more than once
    POINT_ADDED = "point added"  # a point write's added rows, as texts (crr.point.PointResult.as_arrow)


@dataclass(frozen=True)
class Rows:
    """A table holding rows of a batch: its name (an Arrow slot or a qualified temp table), how to
    read it, and, for received tuples, the name of its id column (``id``, or ``vid`` for a view's)."""

    table: str
    kind: RowsKind
    id_column: str = "id"


def tuple_check_sql(rel: Relation, idcol: str) -> str:
    """SQL yielding ``idcol`` of received tuples, aborting the merge (``error()``) when an id is not
    the hash of its values or a column this site declares NOT NULL holds NULL."""
    forged = quote_str(f"crr: tuple ids of {rel.name} do not match their values; the changeset is corrupt "
                       "or forged")
    whens = [f"WHEN {idcol} IS DISTINCT FROM {tuple_id_sql(rel.name, rel.aug_columns)} THEN error({forged})"]
    for name in rel.not_null:
        null = quote_str(f"crr: relation {rel.name}: the changeset holds NULL in column {name}, which this "
                         "site declares NOT NULL; declare it alike at every site (or without NOT NULL here)")
        whens.append(f"WHEN {rel.aug_column(name)} IS NULL THEN error({null})")
    return f"CASE {' '.join(whens)} ELSE {idcol} END"


def rows_sql(rel: Relation, rows: Rows) -> str:
    """FROM text of the rows of ``rel`` that ``rows`` names: ``(id, c0, c1, ...)`` for a base
    relation, ``(vid, c0, c1, ...)`` for a view, remote table or source (a written table keeps its
    ``kh`` column; a checked copy is read as it is)."""
    cols = ", ".join(c.name for c in rel.aug_columns)
    if rows.kind is RowsKind.RECEIVED:
        as_id = "id" if rel.is_base else "vid"
        return f"(SELECT {tuple_check_sql(rel, rows.id_column)} AS {as_id}, {cols} FROM {rows.table})"
    if rows.kind is RowsKind.WRITTEN:  # one row per id
        return f"(SELECT * FROM {rows.table} WHERE rowid IN (SELECT min(rowid) FROM {rows.table} GROUP BY id))"
    if rows.kind is RowsKind.POINT_ADDED:
        texts = ", ".join(f"{text_value_sql(f'v{k}', c.type)} AS c{k}" for k, c in enumerate(rel.columns))
        return f"(SELECT CAST(id AS UHUGEINT) AS id, {texts} FROM {rows.table} WHERE kind = 'n')"
    return rows.table
