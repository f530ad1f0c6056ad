"""Upgrading a site file written by an older crr to the current storage version, in place.

A file records its storage version in ``_crr.meta``. :func:`upgrade` brings a file of a version it
knows how to upgrade to :data:`crr.catalog.STORAGE_VERSION` inside the caller's transaction (so a
failed upgrade leaves the file as it was); a file too old for that is refused by the site with an
error that says what to do.

Steps, each from one version to the next:

* 3 -> 4: the inverted index ``_crr."<r>$i"`` of ids to the tuples holding them is gone (the tuples
  to re-evaluate are found from ``$m``, see :mod:`crr.catalog`); the catalog's ``indexed`` column,
  which said whether a relation kept one, becomes ``wide`` (its monomials may hold several ids),
  which is what it meant for every relation that had one. The ``$m`` of a narrow relation (a remote
  table or source not ``derived``) takes the narrow layout, ``mid`` and ``ids`` generated from
  ``vid``, after a check that every row has them so; a relation failing it is marked derived and
  keeps the full layout (it costs only a faster path).
"""

from __future__ import annotations

import dataclasses

import duckdb

from crr.catalog import (CATALOG_ROWS_SQL, SCHEMA, STORAGE_VERSION, Relation, aug_table, relation_from_row,
                         relayout_monomials_ddl)
from crr.merge import DERIVED_UPDATE_SQL

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


def upgradable(version: int) -> bool:
    """Whether :func:`upgrade` can bring a file of ``version`` to the current one."""
    return OLDEST_UPGRADABLE <= version < STORAGE_VERSION


def upgrade(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Upgrade the open file from ``version`` to :data:`STORAGE_VERSION` in the caller's transaction."""
    assert upgradable(version), version
    if version == 3:
        for (relation,) in con.execute(indexed_relations_sql()).fetchall():
            con.execute(drop_index_sql(relation))
        con.execute(rename_indexed_sql())
        for row in con.execute(CATALOG_ROWS_SQL).fetchall():
            rel = relation_from_row(row)
            if not (rel.narrow and rel.stored):
                continue
            if con.execute(not_narrow_rows_sql(rel)).fetchall()[0][0]:
                con.execute(DERIVED_UPDATE_SQL, [rel.name])
            else:  # its rows are in the full layout so far: move them to the narrow one
                for stmt in relayout_monomials_ddl(dataclasses.replace(rel, derived=True), rel):
                    con.execute(stmt)
    con.execute(set_version_sql(), [str(STORAGE_VERSION)])
