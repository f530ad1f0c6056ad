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

import duckdb

from crr.catalog import Relation
from crr.clock import HybridClock
from crr.errors import ConstraintError
from crr.maintain import Batch, cols_sql, temp_table
from crr.types import key_hash_sql, quote_ident, quote_str, tuple_id_sql


def _one(con: duckdb.DuckDBPyConnection, sql: str):
    return con.execute(sql).fetchall()[0]


def prepare_write(con: duckdb.DuckDBPyConnection, rel: Relation, old: str | None, new: str | None,
                  clock: HybridClock) -> Batch:
    """Build the batch for a write whose removed/added rows are in temp tables ``old``/``new``.

    A keyed write's stamp exceeds every stamp this site knows for the keys it writes, so the new
    version wins over each version it replaces (the hybrid clock observes them first).
    """
    keyed = bool(rel.key)
    kh = key_hash_sql(rel.name, rel.key_columns, "w") if keyed else "NULL::UHUGEINT"
    rid = tuple_id_sql(rel.name, rel.columns, "w")
    parts = []
    if new is not None:
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _crr_wnew AS
                        SELECT {rid} AS id, {kh} AS kh, {cols_sql(rel, 'w')} FROM {temp_table(new)} w""")
        _check_not_null(con, rel)
    if old is not None:
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _crr_wold AS
                        SELECT DISTINCT {rid} AS id, {kh} AS kh FROM {temp_table(old)} w""")
        if keyed:
            # every locally present version of each removed key
            deleted = f"""SELECT c.id, c.rel, c.cl + 1 AS cl, c.kh, c.stamp, c.vis AS old_vis FROM _crr.cl c
                          WHERE c.kh IN (SELECT kh FROM {temp_table('_crr_wold')}) AND c.cl % 2 = 1"""
        else:
            deleted = f"""SELECT c.id, c.rel, c.cl + 1 AS cl, c.kh, c.stamp, c.vis AS old_vis FROM _crr.cl c
                          JOIN {temp_table('_crr_wold')} o ON o.id = c.id WHERE c.cl % 2 = 1"""
        con.execute(f"CREATE OR REPLACE TEMP TABLE _crr_wdel AS {deleted}")
        parts.append(f"SELECT id, rel, cl, kh, stamp, old_vis FROM {temp_table('_crr_wdel')}")
    if new is not None:
        if keyed:
            _check_keys(con, rel, deleting=old is not None)
        stamp = 0
        if keyed:
            seen = _one(con, f"""SELECT max(stamp) FROM _crr.cl
                                 WHERE kh IN (SELECT kh FROM {temp_table('_crr_wnew')})""")[0]
            clock.observe(seen)
            stamp = clock.tick()
        deleted_cl = (f"(SELECT id, cl FROM {temp_table('_crr_wdel')})" if old is not None
                      else "(SELECT NULL::UHUGEINT AS id, NULL::INTEGER AS cl LIMIT 0)")
        new_stamp = f"{stamp}::UHUGEINT" if keyed else "0::UHUGEINT"
        parts.append(f"""
            SELECT n.id, {quote_str(rel.name)} AS rel, cur + 1 AS cl, n.kh, {new_stamp} AS stamp, n.old_vis
            FROM (SELECT DISTINCT w.id, w.kh, coalesce(d.cl, c.cl, 0) AS cur, coalesce(c.vis, false) AS old_vis
                  FROM {temp_table('_crr_wnew')} w LEFT JOIN {deleted_cl} d ON d.id = w.id
                  LEFT JOIN _crr.cl c ON c.id = w.id) n
            WHERE n.cur % 2 = 0""")
    # Every entry here grows, so the batch hands the maintainer its exact changes (one row per id,
    # with the visibility before the write) and the maintainer need not look them up again.
    changes = con.execute(f"""CREATE OR REPLACE TEMP TABLE _crr_wcl AS
        SELECT id, any_value(rel) AS rel, any_value(kh) AS kh, max(cl) AS cl, max(stamp) AS stamp,
               any_value(old_vis) AS old_vis
        FROM ({' UNION ALL '.join(parts)}) GROUP BY id""").fetchall()[0][0]
    batch = Batch(cl=temp_table("_crr_wcl"), cl_relation=rel.name, cl_keyed=keyed, cl_unkeyed=not keyed,
                  cl_changes=changes)
    if new is not None:
        batch.base[rel.name] = "_crr_wnew"  # (id, kh, cols...): the pipeline reads id and the columns
    return batch


def _check_not_null(con: duckdb.DuckDBPyConnection, rel: Relation) -> None:
    for col in rel.not_null:
        n = _one(con, f"SELECT count(*) FROM {temp_table('_crr_wnew')} WHERE {quote_ident(col)} IS NULL")[0]
        if n:
            what = "PRIMARY KEY" if col in rel.key else "NOT NULL"
            raise ConstraintError(f"{rel.name}.{col} is {what} and cannot be NULL ({n} row(s) give NULL); "
                                  "nothing was written")


def _check_keys(con: duckdb.DuckDBPyConnection, rel: Relation, deleting: bool) -> None:
    keys = ", ".join(rel.key)
    dup = _one(con, f"""SELECT count(*) FROM (SELECT kh FROM {temp_table('_crr_wnew')}
                         GROUP BY kh HAVING count(DISTINCT id) > 1)""")[0]
    if dup:
        raise ConstraintError(f"the statement writes {dup} key(s) of {rel.name} ({keys}) more than once with "
                              "different values; nothing was written")
    freed = f"AND c.kh NOT IN (SELECT kh FROM {temp_table('_crr_wold')})" if deleting else ""
    clash = con.execute(f"""SELECT {cols_sql(rel, 'w')} FROM {temp_table('_crr_wnew')} w
                            JOIN _crr.cl c ON c.kh = w.kh AND c.vis AND c.id <> w.id {freed}
                            LIMIT 1""").fetchall()
    clash = clash[0] if clash else None
    if clash:
        key_vals = ", ".join(f"{c}={clash[rel.column_names.index(c)]!r}" for c in rel.key)
        raise ConstraintError(f"duplicate key in {rel.name}: a row with {key_vals} already exists with other "
                              "values; use UPDATE to change it (nothing was written)")
