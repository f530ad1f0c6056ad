"""Where a batch's tuples are read: typed inputs, and the one place that renders them as SQL.

A merge, a batch write and a point write each leave the rows a batch adds somewhere (an Arrow slot
or a temp table) and hand the maintainer a :class:`Rows` saying where and how to read them; only
:func:`rows_sql` turns that into the FROM text the maintainer's statements read. A received table is
checked as it is read (:func:`tuple_check_sql`): a tuple id must be the hash of its values, and a
column this site declares NOT NULL must hold a value. A point write's flips are rows too
(``RowsKind.POINT_FLIPS``), and a batch write's exact APP changes are a :class:`WrittenChanges`,
rendered by :func:`written_app_changes_sql`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from crr.catalog import Relation
from crr.types import quote_ident, quote_str, stored_value_sql, text_value_sql, tuple_id_sql


class RowsKind(Enum):
    """How a table of a batch's rows is read."""

    RECEIVED = "received"  # a changeset's tuples (id column, then c0, c1, ...), checked as they are read
    CHECKED = "checked"  # rows already checked as they were copied (a received derived relation's)
    WRITTEN = "written"  # a batch write's rows (id, kh, c0, ...), an id possibly more than once
    POINT_ADDED = "point added"  # a point write's added rows, as texts (crr.point.PointResult.as_arrow)
    POINT_FLIPS = "point flips"  # a point write's flips (id, rel, vis), from the same Arrow table


@dataclass(frozen=True)
class Rows:
    """A table holding rows of a batch: its name (an Arrow slot or a qualified temp table), how to
    read it, and, for received tuples, the name of its id column (``id``, or ``vid`` for a view's)."""

    table: str
    kind: RowsKind
    id_column: str = "id"


@dataclass(frozen=True)
class WrittenChanges:
    """A batch write's exact APP changes: its entries table (``id, cl, old_vis``: the length after
    the write and the visibility before), and the rows the statement removed and added (``WRITTEN``
    rows, either may be absent). A row whose visibility the write flipped enters or leaves the APP
    table; nothing else changes (see :mod:`crr.writes`)."""

    entries: str
    old: Rows | None
    new: Rows | None


def cols_sql(rel: Relation, qualifier: str = "") -> str:
    """Comma-separated AUG column list of a relation (``c0, c1, ...``), optionally qualified."""
    q = f"{qualifier}." if qualifier else ""
    return ", ".join(q + c.name for c in rel.aug_columns)


def stored_cols_sql(rel: Relation, qualifier: str) -> str:
    """:func:`cols_sql` of written rows, each value as the site stores it
    (:func:`crr.types.stored_value_sql`: a float zero as ``+0.0``), named ``c0, c1, ...``."""
    return ", ".join(f"{stored_value_sql(f'{qualifier}.{c.name}', c.type)} AS {c.name}" for c in rel.aug_columns)


def app_cols_sql(rel: Relation, qualifier: str = "") -> str:
    """Comma-separated quoted list of the user's column names (the APP table's), optionally qualified."""
    q = f"{qualifier}." if qualifier else ""
    return ", ".join(q + quote_ident(c) for c in rel.column_names)


def app_match(rel: Relation, app: str, aug: str, non_null: frozenset[str] = frozenset()) -> str:
    """A join condition matching APP rows (user names) with AUG-named rows on all columns, NULLs equal.
    ``non_null``: AUG columns the AUG-named rows hold no NULL in, compared with ``=`` (the same match:
    a NULL never equals a value either way), which lets DuckDB push the join's key range into the
    APP table's scan, where ``IS NOT DISTINCT FROM`` reads every row."""
    return " AND ".join(f"{app}.{quote_ident(c.name)} {'=' if a.name in non_null else 'IS NOT DISTINCT FROM'} "
                        f"{aug}.{a.name}" for c, a in zip(rel.columns, rel.aug_columns))


def written_app_changes_sql(rel: Relation, changes: WrittenChanges) -> str:
    """SQL of a batch write's APP changes ``(c0, c1, ..., keep)``: the written rows whose visibility
    flipped, ``keep`` true for a row that entered the APP table, false for one that left it."""
    rows = [f"SELECT id, {cols_sql(rel)} FROM {r.table}" for r in (changes.old, changes.new) if r is not None]
    return f"""
        SELECT DISTINCT ON (w.id) {cols_sql(rel, "w")}, d.cl % 2 = 1 AS keep
        FROM ({' UNION ALL '.join(rows)}) w JOIN {changes.entries} d ON d.id = w.id
        WHERE (d.cl % 2 = 1) <> d.old_vis"""


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
    ``kh`` column; a checked copy is read as it is); for ``POINT_FLIPS``, ``(id, rel, vis)``."""
    cols = cols_sql(rel)
    if rows.kind is RowsKind.RECEIVED:
        as_id = "id" if rel.is_base else "vid"
        return f"(SELECT {tuple_check_sql(rel, rows.id_column)} AS {as_id}, {cols} FROM {rows.table})"
    if rows.kind is RowsKind.WRITTEN:  # one row per id
        return f"(SELECT * FROM {rows.table} WHERE rowid IN (SELECT min(rowid) FROM {rows.table} GROUP BY id))"
    if rows.kind is RowsKind.POINT_ADDED:
        texts = ", ".join(f"{text_value_sql(f'v{k}', c.type)} AS c{k}" for k, c in enumerate(rel.columns))
        return f"(SELECT CAST(id AS UHUGEINT) AS id, {texts} FROM {rows.table} WHERE kind = 'n')"
    if rows.kind is RowsKind.POINT_FLIPS:
        return f"(SELECT CAST(id AS UHUGEINT) AS id, {quote_str(rel.name)} AS rel, vis FROM {rows.table} WHERE kind = 'f')"
    return rows.table
