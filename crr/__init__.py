"""crr: replicated incremental view maintenance for edge relations.

Sites hold replicated tables and materialized views in DuckDB; changesets carry their augmented
state (causal lengths and p-semiring provenance) between sites in any order, any number of times.

    import crr
    site = crr.Site("edge.duckdb", site_id="s0")
    site.execute("CREATE REPLICATED TABLE r (a INT, b INT)")
    other.merge(site.changes())
"""

from __future__ import annotations

from crr.errors import (CatalogError, ChangesetError, ConstraintError, CrrError, ReadOnlyRelationError,
                        SchemaMismatchError, SiteError, SqlError, TypeMismatchError, UnsupportedSqlError,
                        ViewQueryError)

__all__ = [
    "Site", "Changeset", "CrrError", "SqlError", "UnsupportedSqlError", "CatalogError",
    "ReadOnlyRelationError", "ConstraintError", "TypeMismatchError", "ChangesetError",
    "SchemaMismatchError", "SiteError", "ViewQueryError",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Site and Changeset are imported lazily so that `crr.sql` (which crr.site imports) can import
    # crr.errors without a circular import.
    if name == "Site":
        from crr.site import Site
        return Site
    if name == "Changeset":
        from crr.changeset import Changeset
        return Changeset
    raise AttributeError(f"module 'crr' has no attribute {name!r}")
