"""Whether a changeset brings a site nothing new: a repeated delivery, told by one statement.

A network repeats deliveries (a peer resends from an old cursor, a neighbour forwards what the source
sent too, a device without a cursor sends all it has), and a merge takes maxima (DESIGN 1.1): when
every causal-length entry a changeset brings is matched by a stored one of the same id, relation and
key hash, at least as long and as late, and every tuple and derivation it brings is stored with the
same values, merging it writes nothing. :func:`repeated` finds that out with one query
(:func:`unheld_rows_sql`), and the site then skips the general path's statements (a repeated small
changeset took 25-30 ms on the convergence tests' sites; with the query, 6-8 ms in all).

The comparison is as strict as the general path's checks: a stored row matches a received one only
when the received one is a row that path would accept and that would change nothing (a tuple's values
equal, by :func:`crr.types.value_text_sql`, to those stored under its id, which were checked against
the id when stored; an entry's length at least 1; a derivation's ids equal to a stored derivation's
of its tuple, and its tuple in the changeset). A forged or corrupt changeset therefore never passes
as repeated: some row of it matches nothing stored, and the general path refuses it.

Only homes whose rows can be compared are covered (:class:`Home`): ``_crr.cl``, a replicated table's
``$t``, a replica's ``$e`` and a stored relation's ``$m``. A changeset bringing rows to any other
home (a remote source that keeps no tuples, a co-located view's ``$w``), or teaching the catalog
something (lineage, a first derivation, a view definition), is not checked: the general path runs.
The query scans the homes it compares with, as the general path's statements do, so the site asks it
only of a changeset that overlaps one merged before (:func:`crr.site_merge._repeated`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import duckdb

from crr.catalog import SCHEMA, Catalog, Relation
from crr.changeset import ChangeKind, Changeset, RelationChanges
from crr.colocated import homes_of
from crr.merge import (ENTRY_COLUMNS, MONOMIAL_COLUMNS, MergeInputs, entries_taken, grown_lineage,
                       learned_definitions, newly_derived, tuple_columns)
from crr.sql.statements import RelationKind
from crr.types import quote_str, value_text_sql


class Home(Enum):
    """Where a site keeps what a changeset brings, as :func:`unheld_rows_sql` compares it."""

    ENTRIES = "entries"  # causal-length entries in _crr.cl
    REPLICA_ENTRIES = "replica entries"  # a replica's entries, in its $e rows
    BASE_TUPLES = "base tuples"  # a replicated table's tuples, in its $t
    REPLICA_TUPLES = "replica tuples"  # a replica's tuples, in the $e rows that hold values
    NARROW_TUPLES = "narrow tuples"  # a replicated table's tuples at a stored remote relation: each its own derivation in $m
    DERIVED_TUPLES = "derived tuples"  # a view's tuples at a remote relation, in its $m rows
    DERIVATIONS = "derivations"  # a view's derivations (vid, ids) at a remote relation, in $m


@dataclass(frozen=True)
class Received:
    """One table of a changeset to compare with one home: the Arrow slot it is read from, the
    relation whose home it is (for entries: the relations whose entries are read, by name), and, for
    derivations, the slot of their tuples."""

    home: Home
    slot: str
    relation: Relation | None = None
    relations: tuple[str, ...] = ()
    tuples_slot: str = ""


def _values_match(rel: Relation, received: str, stored: str) -> str:
    """Condition: the values of a received row equal a stored row's, as the texts the ids hash."""
    return " AND ".join(f"{value_text_sql(f'{received}.{c.name}', col.type)} IS NOT DISTINCT FROM "
                        f"{value_text_sql(f'{stored}.{c.name}', col.type)}"
                        for c, col in zip(rel.aug_columns, rel.columns)) or "true"


def _entry_held(stored: str) -> str:
    """Condition: stored entry ``stored`` (matched on id) holds received entry ``e``: as long and as
    late, of the same key hash; an entry without a stamp only of an unkeyed table (one with a key
    hash and no stamp is forged)."""
    return (f"e.cl >= 1 AND {stored}.cl >= e.cl AND {stored}.kh IS NOT DISTINCT FROM e.kh "
            f"AND (e.stamp IS NULL AND e.kh IS NULL OR {stored}.stamp >= e.stamp)")


# per home of tuples: its table's suffix, and the condition matching a stored row ``t`` to a received
# one ``r`` (besides equal values)
_TUPLE_HOMES = {
    Home.BASE_TUPLES: ("t", "t.id = r.id"),
    Home.REPLICA_TUPLES: ("e", "t.id = r.id AND t.tseq IS NOT NULL"),
    Home.NARROW_TUPLES: ("m", "t.vid = r.id AND t.ids = [r.id]"),
    Home.DERIVED_TUPLES: ("m", "t.vid = r.vid"),
}


def unheld_sql(part: Received) -> str:
    """The rows of one received table that the site does not hold (see the module docstring): a
    SELECT of one column, ``n``, that returns a row for each. (An ``ANTI JOIN`` is planned in about
    two thirds of the time of the ``NOT EXISTS`` that says the same.)"""
    rel = part.relation
    if part.home is Home.ENTRIES:
        names = ", ".join(quote_str(n) for n in part.relations)
        return (f"SELECT 1 AS n FROM (SELECT * FROM {part.slot} WHERE rel IN ({names})) e ANTI JOIN {SCHEMA}.cl c "
                f"ON c.id = e.id AND c.rel = e.rel AND {_entry_held('c')}")
    assert rel is not None
    if part.home is Home.REPLICA_ENTRIES:
        return (f"SELECT 1 AS n FROM (SELECT * FROM {part.slot} WHERE rel = {quote_str(rel.name)}) e "
                f"ANTI JOIN {rel.aug('e')} c ON c.id = e.id AND {_entry_held('c')}")
    if part.home in _TUPLE_HOMES:
        suffix, match = _TUPLE_HOMES[part.home]
        return (f"SELECT 1 AS n FROM {part.slot} r ANTI JOIN {rel.aug(suffix)} t "
                f"ON {match} AND {_values_match(rel, 'r', 't')}")
    # a derivation is held when its tuple's vid has a stored derivation of the same ids; one whose
    # tuple the changeset lacks is malformed (the general path refuses it): never held
    return (f"SELECT 1 AS n FROM {part.slot} d ANTI JOIN {rel.aug('m')} m ON m.vid = d.vid AND m.ids = d.ids "
            f"UNION ALL SELECT 1 AS n FROM {part.slot} d ANTI JOIN {part.tuples_slot} r ON r.vid = d.vid")


def unheld_rows_sql(parts: list[Received]) -> str:
    """Whether some received row is not held (one BOOLEAN): the query :func:`repeated` runs."""
    return f"SELECT EXISTS ({' UNION ALL '.join(unheld_sql(p) for p in parts)})"


def _tuples_home(rel: Relation, rc: RelationChanges, colocated: set[str]) -> Home | None:
    """Where ``rel`` keeps the tuples ``rc`` brings, when :func:`unheld_sql` can compare them."""
    if rc.kind is ChangeKind.BASE:
        if rel.is_base:
            return Home.BASE_TUPLES
        if rel.name in colocated:
            return None
        if rel.replica:
            return Home.REPLICA_TUPLES
        return Home.NARROW_TUPLES if rel.stored else None
    if rel.kind in (RelationKind.REMOTE, RelationKind.SOURCE) and rel.derived and rel.stored \
            and not rel.replica and rel.name not in colocated:
        return Home.DERIVED_TUPLES
    return None


def received_parts(catalog: Catalog, cs: Changeset, held: list[tuple[Relation, RelationChanges]],
                   inputs: MergeInputs) -> list[Received] | None:
    """The changeset's tables to compare, registered in ``inputs`` (columns checked as a merge checks
    them); None when some table brings rows to a home :func:`unheld_sql` cannot compare, or the
    changeset teaches the catalog something."""
    if grown_lineage(held) or newly_derived(held) or learned_definitions(held):
        return None
    colocated = set(homes_of(catalog))
    parts: list[Received] = []
    lineage: set[str] = set()
    for i, (rel, rc) in enumerate(held):
        lineage |= set(rc.lineage)
        idcol = "id" if rc.kind is ChangeKind.BASE else "vid"
        tuples = inputs.register(f"_crr_in_t{i}", rc.tuples, tuple_columns(rel, idcol), rc.name)
        monos = None
        if rc.kind is not ChangeKind.BASE:
            if rc.monos is None:
                return None  # malformed: the general path says so
            monos = inputs.register(f"_crr_in_m{i}", rc.monos, MONOMIAL_COLUMNS, rc.name)
        if rc.empty:
            continue
        home = _tuples_home(rel, rc, colocated)
        if home is None:
            return None
        parts.append(Received(home, tuples, rel))
        if monos is not None:
            parts.append(Received(Home.DERIVATIONS, monos, rel, tuples_slot=tuples))
    if cs.cl is not None and cs.cl.num_rows and held:
        named = set(cs.cl.column("rel").unique().to_pylist()) & entries_taken(catalog, lineage)
        if named & colocated:
            return None
        slot = inputs.register("_crr_in_cl", cs.cl, ENTRY_COLUMNS, "causal lengths")
        replicas = {n for n in named if n in catalog and catalog[n].replica}
        if named - replicas:
            parts.append(Received(Home.ENTRIES, slot, relations=tuple(sorted(named - replicas))))
        parts.extend(Received(Home.REPLICA_ENTRIES, slot, catalog[n]) for n in sorted(replicas))
    return parts


def repeated(con: duckdb.DuckDBPyConnection, catalog: Catalog, cs: Changeset,
             held: list[tuple[Relation, RelationChanges]], inputs: MergeInputs) -> bool:
    """Whether merging ``cs`` (its ``held`` relations) would write nothing here, as far as one query
    can tell (see the module docstring); False also when it cannot tell."""
    parts = received_parts(catalog, cs, held, inputs)
    if parts is None:
        return False
    if not parts:
        return True
    return not con.execute(unheld_rows_sql(parts)).fetchall()[0][0]
