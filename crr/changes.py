"""Reading a site's changes after a cursor into a changeset (the sending side of replication).

Every AUG row carries the sequence number of the transaction that wrote it, so the changes after
cursor ``since`` are the rows with a larger one:

* a replicated table sends its tuples that are new, or whose causal-length entry changed
  (:func:`base_tuples_sql`): a receiver may lack the values of a tuple it hears about again;
* a view, remote table or source sends its new monomials (:func:`monomials_sql`) and the values of
  their tuples (:func:`derived_tuples_sql`);
* the causal-length entries that changed, for every base relation in the lineage of what is sent
  (:func:`cl_entries_sql`; a co-located view keeps its source's, :mod:`crr.colocated`, and a replica
  its own, :mod:`crr.replica`).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from crr import colocated, replica
from crr.arrow_result import arrow_rows
from crr.catalog import SCHEMA, Catalog, Relation
from crr.changeset import ChangeKind, RelationChanges
from crr.batch_rows import cols_sql
from crr.types import quote_str


def base_tuples_sql(rel: Relation, since: int) -> str:
    """Tuples ``(id, c0, c1, ...)`` of a replicated table that are new after ``since`` or whose entry changed."""
    return f"""SELECT id, {cols_sql(rel)} FROM {rel.aug('t')}
               WHERE seq > {int(since)} OR id IN (SELECT id FROM {SCHEMA}.cl WHERE rel = {quote_str(rel.name)}
                                                  AND seq > {int(since)})"""


def monomials_sql(rel: Relation, since: int) -> str:
    """Monomials ``(vid, ids)`` of a derived relation added after ``since``."""
    return f"SELECT vid, ids FROM {rel.aug('m')} WHERE seq > {int(since)}"


def derived_tuples_sql(rel: Relation, since: int) -> str:
    """Tuples ``(vid, c0, c1, ...)`` of the monomials :func:`monomials_sql` returns, one row each."""
    return f"SELECT DISTINCT ON (vid) vid, {cols_sql(rel)} FROM {rel.aug('m')} WHERE seq > {int(since)}"


def base_provenance_sql(rel: Relation) -> str:
    """Every tuple ``(c0, c1, ..., id)`` of a replicated table (``Site.provenance``): each is its own
    provenance."""
    return f"SELECT {cols_sql(rel)}, id FROM {rel.aug('t')}"


def derived_provenance_sql(rel: Relation) -> str:
    """Every tuple ``(c0, c1, ..., monomials)`` of a derived relation's ``$m`` (``Site.provenance``),
    each monomial's ids sorted."""
    return f"SELECT {cols_sql(rel)}, list_sort(list(ids)) FROM {rel.aug('m')} GROUP BY vid, {cols_sql(rel)}"


def cl_entries_sql(relations: set[str], since: int) -> str:
    """Causal-length entries ``(id, rel, cl, kh, stamp)`` of the given base relations changed after ``since``."""
    rels = ", ".join(quote_str(r) for r in sorted(relations)) or "NULL"
    return f"SELECT id, rel, cl, kh, stamp FROM {SCHEMA}.cl WHERE seq > {int(since)} AND rel IN ({rels})"


def collect_changes(con: duckdb.DuckDBPyConnection, catalog: Catalog, names: list[str],
                    since: int) -> tuple[list[RelationChanges], pa.Table]:
    """The changes of the named relations after ``since`` and the causal-length entries of their
    lineage, read in the caller's transaction (so they are one consistent snapshot)."""
    out: list[RelationChanges] = []
    lineage: set[str] = set()
    for name in names:
        rel = catalog[name]
        rel_lineage = catalog.lineage(name)
        lineage |= rel_lineage
        if rel.is_base:
            tuples = arrow_rows(con, base_tuples_sql(rel, since))
            monos = None
        elif rel.colocated:
            monos = arrow_rows(con, colocated.monomials_sql(rel, since))
            tuples = arrow_rows(con, colocated.tuples_sql(rel, since))
        else:
            monos = arrow_rows(con, monomials_sql(rel, since))
            tuples = arrow_rows(con, derived_tuples_sql(rel, since))
        out.append(RelationChanges(
            name=name, kind=ChangeKind.BASE if rel.is_base else ChangeKind.DERIVED,
            columns=[(c.name, c.type) for c in rel.columns], key=list(rel.stated_key), not_null=list(rel.not_null),
            fingerprint=rel.fingerprint, lineage=sorted(rel_lineage), tuples=tuples, monos=monos,
            definition=None if rel.is_base else catalog.definition_id(name)))
    homes = colocated.homes_of(catalog)  # co-located sources' entries live with their views
    replicas = [rel for rel in catalog.values() if rel.replica and rel.name in lineage]  # and replicas' with them
    parts = [cl_entries_sql(lineage - set(homes) - {r.name for r in replicas}, since)]
    parts += [colocated.entries_sql(view, source, since) for source, view in homes.items() if source in lineage]
    parts += [replica.changed_entries_sql(rel, since) for rel in replicas]
    return out, arrow_rows(con, " UNION ALL ".join(f"({p})" for p in parts))
