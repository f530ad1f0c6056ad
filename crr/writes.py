"""Local writes to a replicated table, turned into a batch of augmented changes.

The statement's affected rows arrive as temp tables (``old``: rows it removes, ``new``: rows it
adds, both with the table's columns). From them this module computes, set-at-a-time:

* the causal-length entries that change (DESIGN 1.1/1.2): deleting a present tuple adds 1,
  inserting an absent (never seen or deleted) tuple adds 1 (from 0 to 1 the first time); for keyed
  tables, removing a row deletes every locally present version of its key, and (re)inserting a
  version gives it a fresh stamp;
* the new base tuples (values with their ids).

Primary-key and NOT NULL rules are checked here, before anything is written.
"""

from __future__ import annotations

from typing import Any, Sequence

import duckdb

from crr.catalog import Relation
from crr.clock import HybridClock
from crr.errors import ChangesetError, ConstraintError
from crr.batch_rows import Rows, RowsKind, WrittenChanges, cols_sql, stored_cols_sql
from crr.causal import LocalEntries, disagreeing_entries_sql
from crr.maintain import Batch
from crr.maintain_sql import temp_table
from crr.types import key_hash_sql, quote_str, tuple_id_sql


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None):
    return (con.execute(sql, params) if params else con.execute(sql)).fetchall()[0]


def prepare_write(con: duckdb.DuckDBPyConnection, rel: Relation, old: str | None, new: str | None,
                  clock: HybridClock, params: list | dict | None = None, *, unchecked_entries: bool) -> tuple[Batch, int]:
    """Build the batch for a write; return it with the number of rows the statement affected.

    ``old`` and ``new`` are FROM texts (a query in parentheses, or a temp table) of the rows the
    statement removes and adds, with the table's AUG columns (``c0, c1, ...``); ``params`` are the statement's parameters,
    bound to the first of them read. A keyed write's stamp exceeds every stamp this site knows for
    the keys it writes, so the new version wins over each version it replaces (the hybrid clock
    observes them first). Two statements for a DELETE, three for an INSERT, four for an UPDATE; the
    maintainer then writes ``_crr.cl``, the AUG tuples and the APP table. ``unchecked_entries``: the
    site's :attr:`crr.catalog.Catalog.unchecked_entries`; then one statement more refuses a row whose
    id has a stored entry of another relation or key hash (:func:`disagreeing_entry_error`).
    """
    keyed = bool(rel.key)
    kh = key_hash_sql(rel.name, rel.key_aug_columns, "w") if keyed else "NULL::UHUGEINT"
    rid = tuple_id_sql(rel.name, rel.aug_columns, "w")
    cols = cols_sql(rel, "w")
    count = 0
    if old is not None:
        count = _one(con, f"""CREATE OR REPLACE TEMP TABLE _crr_wold AS
                              SELECT DISTINCT {rid} AS id, {kh} AS kh, {cols} FROM {old} w""", params)[0]
        params = None
    stamp = 0
    if new is not None:
        count = _one(con, f"""CREATE OR REPLACE TEMP TABLE _crr_wnew AS
                              SELECT {rid} AS id, {kh} AS kh, {stored_cols_sql(rel, 'w')} FROM {new} w""", params)[0]
        seen = _check_new_rows(con, rel, deleting=old is not None)
        if unchecked_entries and _one(con, disagreeing_entries_sql(rel.name, temp_table("_crr_wnew")))[0]:
            raise disagreeing_entry_error(rel)
        if keyed:
            clock.observe(seen)
            stamp = clock.tick()
    parts, ctes = [], []
    if old is not None:
        # deleting removes every locally present version of each removed key (or the tuple itself)
        which = (f"c.kh IN (SELECT kh FROM {temp_table('_crr_wold')})" if keyed
                 else f"c.id IN (SELECT id FROM {temp_table('_crr_wold')})")
        ctes.append(f"""del AS (SELECT c.id, c.rel, c.cl + 1 AS cl, c.kh, c.stamp, c.vis AS old_vis
                                FROM _crr.cl c WHERE {which} AND c.cl % 2 = 1)""")
        parts.append("SELECT id, rel, cl, kh, stamp, old_vis FROM del")
    if new is not None:
        deleted_cl = "del" if old is not None else "(SELECT NULL::UHUGEINT AS id, NULL::INTEGER AS cl LIMIT 0)"
        new_stamp = f"{stamp}::UHUGEINT" if keyed else "0::UHUGEINT"
        parts.append(f"""
            SELECT n.id, {quote_str(rel.name)} AS rel, cur + 1 AS cl, n.kh, {new_stamp} AS stamp, n.old_vis
            FROM (SELECT DISTINCT w.id, w.kh, coalesce(d.cl, c.cl, 0) AS cur, coalesce(c.vis, false) AS old_vis
                  FROM {temp_table('_crr_wnew')} w LEFT JOIN {deleted_cl} d ON d.id = w.id
                  LEFT JOIN _crr.cl c ON c.id = w.id) n
            WHERE n.cur % 2 = 0""")
    # Every entry here grows, so the batch hands the maintainer its exact changes (one row per id,
    # with the visibility before the write) and the maintainer need not look them up again.
    with_ = f"WITH {', '.join(ctes)} " if ctes else ""
    changes = _one(con, f"""CREATE OR REPLACE TEMP TABLE _crr_wcl AS {with_}
        SELECT id, any_value(rel) AS rel, any_value(kh) AS kh, max(cl) AS cl, max(stamp) AS stamp,
               any_value(old_vis) AS old_vis
        FROM ({' UNION ALL '.join(parts)}) GROUP BY id""")[0]
    batch = Batch(local=LocalEntries(rel.name, changes, temp_table("_crr_wcl")), local_write=True)
    written_old = Rows(temp_table("_crr_wold"), RowsKind.WRITTEN) if old is not None else None
    written_new = Rows(temp_table("_crr_wnew"), RowsKind.WRITTEN) if new is not None else None
    if written_new is not None:
        # (id, kh, cols...), one row per id: an INSERT may list a row twice, and a view's delta query
        # over one base table is trusted to yield each derivation once
        batch.base[rel.name] = written_new
    # The APP table equals the visible state, so the statement's own rows are exactly what appears
    # in it (new rows turned visible) and leaves it (old rows turned invisible).
    batch.app_changes[rel.name] = WrittenChanges(temp_table("_crr_wcl"), written_old, written_new)
    return batch, count


def prepare_update(con: duckdb.DuckDBPyConnection, rel: Relation, rows: str, clock: HybridClock,
                   params: list | dict | None = None, *, unchecked_entries: bool) -> tuple[Batch, int]:
    """The batch of an UPDATE whose rows ``rows`` (a FROM text) yields, each with its old values
    (``o0, o1, ...``) beside its new ones (``c0, c1, ...``); return it with the rows updated.

    The query runs once, into a temp table both sides are read from, so the rows removed are the
    rows rewritten even when the statement is not deterministic (``WHERE random() < 0.5``). That
    temp table is one statement more than :func:`prepare_write` runs for the old and new rows.
    """
    count = _one(con, f"CREATE OR REPLACE TEMP TABLE _crr_wrows AS SELECT * FROM {rows} w", params)[0]
    olds = ", ".join(f"o{i} AS c{i}" for i in range(len(rel.columns)))
    batch, _ = prepare_write(con, rel, f"(SELECT {olds} FROM {temp_table('_crr_wrows')})",
                             temp_table("_crr_wrows"), clock, unchecked_entries=unchecked_entries)
    return batch, count


def _check_new_rows(con: duckdb.DuckDBPyConnection, rel: Relation, deleting: bool) -> int | None:
    """Check NOT NULL and key rules for the rows in ``_crr_wnew`` (one query); return the largest
    stamp this site knows for their keys (None if unkeyed or none)."""
    new = temp_table("_crr_wnew")
    # one flag over all NOT NULL columns (per-column counts only when it is set: a wide table has many)
    nulls = " OR ".join(f"w.{rel.aug_column(c)} IS NULL" for c in rel.not_null)
    checks = [f"bool_or({nulls})"] if nulls else []
    source = f"{new} w"
    # a clash: another visible version of a new row's key; for an UPDATE (``deleting``), any visible
    # version of a key it does not itself delete, the row's own values too (SET k = 2 onto a row (2, v)
    # equal to the new one is a duplicate key in SQL, where merging the two rows would lose one)
    clash = (f"c.vis AND c.kh NOT IN (SELECT kh FROM {temp_table('_crr_wold')})" if deleting
             else "c.vis AND c.id <> w.id")
    if rel.key:
        # two values with one key: more distinct ids than keys
        checks += ["count(DISTINCT w.id) - count(DISTINCT w.kh)", f"count(*) FILTER (WHERE {clash})",
                   "max(c.stamp)"]
        if deleting:  # rows the UPDATE gives one key: fewer keys than the rows it rewrites
            checks.append(f"(SELECT count(DISTINCT id) FROM {temp_table('_crr_wold')}) - count(DISTINCT w.kh)")
        source += " LEFT JOIN _crr.cl c ON c.kh = w.kh"
    if not checks:
        return None
    found = _one(con, f"SELECT {', '.join(checks)} FROM {source}")
    if nulls and found[0]:
        for col in rel.not_null:
            n = _one(con, f"SELECT count(DISTINCT id) FROM {new} WHERE {rel.aug_column(col)} IS NULL")[0]
            if n:
                raise null_error(rel, col, n)
    if not rel.key:
        return None
    dup, clash, seen, *merged = found[1 if nulls else 0:]
    if dup:
        raise repeated_key_error(rel)
    if merged and merged[0] > 0:
        raise merged_rows_error(rel)
    if clash:
        *row, other = con.execute(f"""SELECT {cols_sql(rel, 'w')}, c.id FROM {new} w
                                      JOIN _crr.cl c ON c.kh = w.kh AND {clash} LIMIT 1""").fetchall()[0]
        raise key_clash_error(rel, row, held=clashing_row_held(con, rel, other))
    return seen


# The refusals of a local write (the batch path above and crr.point raise the same ones).

def null_error(rel: Relation, col: str, rows: int) -> ConstraintError:
    """``rows`` written rows give NULL in ``col``, which is NOT NULL (or part of the key)."""
    what = "PRIMARY KEY" if col in rel.key else "NOT NULL"
    return ConstraintError(f"{rel.name}.{col} is {what} and cannot be NULL ({rows} row(s) give NULL); "
                           "nothing was written")


def repeated_key_error(rel: Relation) -> ConstraintError:
    """The statement writes one key with two different rows."""
    return ConstraintError(f"the statement writes a key of {rel.name} ({', '.join(rel.key)}) more than once with "
                           "different values; nothing was written")


def merged_rows_error(rel: Relation) -> ConstraintError:
    """An UPDATE gives several rows one key (with the same values: a table is a set, so they would
    become one row)."""
    return ConstraintError(f"the UPDATE gives several rows of {rel.name} the same key ({', '.join(rel.key)}), "
                           "a duplicate key (they would become one row); nothing was written")


def disagreeing_entry_error(rel: Relation) -> ChangesetError:
    """A written row's id has a stored entry of another relation or key hash: a corrupt or forged
    changeset stored it without its tuple."""
    return ChangesetError(f"this site holds a causal-length entry with the id of a row written to {rel.name} but "
                          "another relation or key, which a corrupt or forged changeset stored; nothing was written. "
                          "Rebuild the site from a trusted peer (a fresh site merging the peer's changes())")


def key_clash_error(rel: Relation, row: Sequence[Any], held: bool = True, *, updates: bool = True) -> ConstraintError:
    """A written row (its values in column order) has the key of another visible row; ``held``: whether
    this site holds that row's values (it may know only its causal length, which a view's changes
    bring with the view's rows, until the table's own changes are merged); ``updates``: whether the
    site runs UPDATE (a Spark site does not)."""
    key_vals = ", ".join(f"{c}={row[rel.column_names.index(c)]!r}" for c in rel.key)
    if not held:
        then = ", then UPDATE the row" if updates else " first"
        return ConstraintError(f"duplicate key in {rel.name}: a row with {key_vals} exists at another site; this "
                               f"site has its causal length (the changes of a view over {rel.name} bring it) but not "
                               f"yet its values: merge {rel.name}'s changes{then} (nothing was written)")
    return ConstraintError(f"duplicate key in {rel.name}: a row with {key_vals} already exists; an INSERT of "
                           "other values for it is an UPDATE of that row, an UPDATE must not give a row the key "
                           "of another it leaves (nothing was written)")


def clashing_row_held_sql(rel: Relation) -> str:
    """Whether the table's AUG tuples hold a row (parameter: its id): asked only to word a key clash."""
    return f"SELECT count(*) FROM {rel.aug('t')} WHERE id = ?::UHUGEINT"


def clashing_row_held(con: duckdb.DuckDBPyConnection, rel: Relation, id_: int) -> bool:
    """Whether the table holds the values of the row of id ``id_`` a write's key clashes with
    (:func:`key_clash_error`'s ``held``)."""
    return bool(_one(con, clashing_row_held_sql(rel), [id_])[0])
