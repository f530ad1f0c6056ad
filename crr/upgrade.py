"""Upgrading a site file written by an older crr to the current storage version, in place.

A file records its storage version in ``_crr.meta``. :func:`upgrade` brings a file of a version it
knows how to upgrade to :data:`crr.catalog.STORAGE_VERSION` inside the caller's transaction (so a
failed upgrade leaves the file as it was); a file too old for that is refused by the site with an
error that says what to do.

Steps, each from one version to the next:

* 3 -> 4: the inverted index ``_crr."<r>$i"`` of ids to the tuples holding them is gone (the tuples
  to re-evaluate are found from ``$m``, see :mod:`crr.catalog`); the catalog's ``indexed`` column,
  which said whether a relation kept one, becomes ``wide`` (its monomials may hold several ids),
  which is what it meant for every relation that had one. A narrow relation (a remote table or
  source not ``derived``) whose ``$m`` holds a row that is not its tuple's own one monomial is
  marked derived (it costs only a faster path).
* 4 -> 5: a stored narrow relation becomes a replica (:mod:`crr.replica`): its tuples (from ``$m``,
  in either layout version 4 knew) and its entries (from ``_crr.cl``) move into one ``$e`` table,
  and ``$m`` becomes a view of it.
* 5 -> 6: the catalog gains ``orphans`` (:attr:`crr.catalog.Relation.orphans`), added as true for
  every relation by :data:`crr.catalog.CATALOG_DDL`; a replicated table's is set to whether its
  ``$t`` holds a tuple without an entry in ``_crr.cl``, one anti-join per table.
* 6 -> 7: ``_crr.meta`` gains ``unchecked_entries`` (:attr:`crr.catalog.Catalog.unchecked_entries`),
  true: which of the stored entries arrived with their tuples was never recorded, so the file keeps
  the merge's probe by id (it only costs a faster path).
* 7 -> 8: ``_crr.meta`` gains ``rival_versions`` (:attr:`crr.catalog.SiteFlag.RIVAL_VERSIONS`), true:
  whether some key has two present versions was never recorded, so the file keeps the count before
  a batch of deletes (it only costs a faster path).
* 8 -> 9: the point path hashed a key in the order ``PRIMARY KEY (...)`` lists its columns, where
  every other path (the batch path, the merge's check, Spark) hashes them in declared column order;
  a table whose key lists its columns in another order kept entries whose ``kh`` other sites refuse.
  Such a table's entries get their key hash again, from their tuples (:func:`rehash_keys_sql`), and
  ``rival_versions`` is set (two versions of one key may have met under their two hashes).
"""

from __future__ import annotations

import duckdb

from crr.catalog import (CATALOG_ROWS_SQL, SCHEMA, STORAGE_VERSION, Relation, SiteFlag, aug_table, flag_set_sql,
                         orphans_update_sql, relation_from_row, replica_table_ddl, replica_view_ddl)
from crr.causal import tuples_without_entries_sql
from crr.merge import DERIVED_UPDATE_SQL
from crr.replica import convert_sql
from crr.types import key_hash_sql, quote_str

OLDEST_UPGRADABLE = 3


def rename_indexed_sql() -> str:
    """3 -> 4: the catalog column ``indexed`` becomes ``wide``."""
    return f"ALTER TABLE {SCHEMA}.relations RENAME COLUMN indexed TO wide"


def indexed_relations_sql() -> str:
    """3 -> 4: the relations that kept a ``$i`` index table."""
    return f"SELECT name FROM {SCHEMA}.relations WHERE indexed"


def drop_index_sql(relation: str) -> str:
    """3 -> 4: drop a relation's ``$i`` index table."""
    return f"DROP TABLE IF EXISTS {aug_table(relation, 'i')}"


def not_narrow_rows_sql(rel: Relation) -> str:
    """3 -> 4: how many of a relation's stored monomials are not the tuple's own one monomial."""
    return f"SELECT count(*) FROM {rel.aug('m')} WHERE mid IS DISTINCT FROM vid OR ids IS DISTINCT FROM [vid]"


def set_version_sql() -> str:
    """Record the storage version in ``_crr.meta`` (one parameter: the version as text)."""
    return f"UPDATE {SCHEMA}.meta SET v = ? WHERE k = 'version'"


def flag_row_sql(flag: SiteFlag) -> str:
    """6 -> 7 (``unchecked_entries``), 7 -> 8 (``rival_versions``): a ``_crr.meta`` row for a flag an
    older file lacks, true (unknown for such a file)."""
    return f"INSERT INTO {SCHEMA}.meta VALUES ('{flag.value}', 'true') ON CONFLICT DO NOTHING"


def rehash_keys_sql(rel: Relation) -> str:
    """8 -> 9: the key hash of each of a replicated table's entries that has its tuple, computed
    from the tuple's key columns in declared order (:func:`crr.types.key_hash_sql`)."""
    return (f"UPDATE {SCHEMA}.cl SET kh = {key_hash_sql(rel.name, rel.key_aug_columns, 't')} "
            f"FROM {rel.aug('t')} t WHERE {SCHEMA}.cl.id = t.id AND {SCHEMA}.cl.rel = {quote_str(rel.name)}")


def key_out_of_order(rel: Relation) -> bool:
    """8 -> 9: whether a replicated table's ``PRIMARY KEY (...)`` lists its columns in another order
    than the table declares them (only then did the point path hash its keys differently)."""
    return rel.is_base and list(rel.key) != [c.name for c in rel.key_columns]


def upgradable(version: int) -> bool:
    """Whether :func:`upgrade` can bring a file of ``version`` to the current one."""
    return OLDEST_UPGRADABLE <= version < STORAGE_VERSION


def _relations(con: duckdb.DuckDBPyConnection) -> list[Relation]:
    """Every relation the file's catalog holds."""
    return [relation_from_row(row) for row in con.execute(CATALOG_ROWS_SQL).fetchall()]


def _stored_narrow(con: duckdb.DuckDBPyConnection) -> list[Relation]:
    return [rel for rel in _relations(con) if rel.narrow and rel.stored]


def upgrade(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Upgrade the open file from ``version`` to :data:`STORAGE_VERSION` in the caller's transaction."""
    assert upgradable(version), version
    if version == 3:
        for (relation,) in con.execute(indexed_relations_sql()).fetchall():
            con.execute(drop_index_sql(relation))
        con.execute(rename_indexed_sql())
        for rel in _stored_narrow(con):
            if con.execute(not_narrow_rows_sql(rel)).fetchall()[0][0]:
                con.execute(DERIVED_UPDATE_SQL, [rel.name])
        version = 4
    if version == 4:
        for rel in _stored_narrow(con):
            con.execute(replica_table_ddl(rel))
            for stmt in convert_sql(rel, rel.aug("m")):
                con.execute(stmt)
            con.execute(replica_view_ddl(rel))
        version = 5
    if version == 5:
        for rel in _relations(con):
            if rel.is_base:
                orphans = con.execute(tuples_without_entries_sql(rel.aug("t"))).fetchall()[0][0] > 0
                con.execute(orphans_update_sql(), [orphans, rel.name])
        version = 6
    if version == 6:
        con.execute(flag_row_sql(SiteFlag.UNCHECKED_ENTRIES))
        version = 7
    if version == 7:
        con.execute(flag_row_sql(SiteFlag.RIVAL_VERSIONS))
        version = 8
    if version == 8:
        rehashed = [rel for rel in _relations(con) if key_out_of_order(rel)]
        for rel in rehashed:
            con.execute(rehash_keys_sql(rel))
        if rehashed:
            con.execute(flag_set_sql(SiteFlag.RIVAL_VERSIONS))
    con.execute(set_version_sql(), [str(STORAGE_VERSION)])
