"""Merging a changeset: checking it against the site's schemas and turning it into a batch.

:func:`plan_merge` reads a validated :class:`~crr.changeset.Changeset` into a
:class:`~crr.maintain.Batch` for the maintainer, inside the site's merge transaction. Every value
that could be forged is checked as it is read, by SQL that aborts the merge with ``error('crr: ...')``
(:func:`changeset_errors` turns that into a :class:`ChangesetError`):

* a tuple id must be the hash of its values, and a column this site declares NOT NULL must hold a
  value (:func:`crr.batch_rows.tuple_check_sql`);
* a causal-length entry needs an id, a relation and a length from 1 to
  :data:`crr.causal.MAX_CAUSAL_LENGTH`, a stamp at most ``max_clock_skew`` seconds ahead (one on
  every entry with a key hash), and a key
  hash exactly when its replicated table is keyed, equal to the one recomputed from the values the
  changeset carries: the merge hands :mod:`crr.causal` a :class:`~crr.causal.ReceivedEntries`
  saying so, and its statements check the entries as they read them.

Schemas are compared before any data is read (:func:`check_schema`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Iterator

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from crr.arrow_build import int64_scalar, strings
from crr.arrow_slots import ArrowSlots
from crr.catalog import SCHEMA, TABLE_DEFINITION, Catalog, Relation
from crr.changeset import ChangeKind, Changeset, RelationChanges
from crr.errors import ChangesetError, SchemaMismatchError
from crr.id_sets import all_in, distinct_keys, id_storage, index_in
from crr.batch_rows import Rows, RowsKind, cols_sql, tuple_check_sql
from crr.causal import KeyHashSource, ReceivedEntries
from crr.colocated import ColocatedBatch, homes_of
from crr import replica
from crr.maintain import Batch, BatchResult
from crr.maintain_sql import temp_table
from crr.sql.statements import RelationKind, fold_identifier


LINEAGE_UPDATE_SQL = f"UPDATE {SCHEMA}.relations SET lineage = ? WHERE name = ?"
"""Store a relation's grown lineage: parameters (lineage as JSON, name)."""

DERIVED_UPDATE_SQL = f"UPDATE {SCHEMA}.relations SET derived = true WHERE name = ?"
"""Record that a remote table or source received a view's monomials: parameter (name)."""


class MergeResult(dict):
    """Counts of a merge: ``{relation: {inserted, deleted, new_tuples, new_monomials}}``.

    ``inserted``/``deleted`` count APP rows; ``new_tuples`` AUG tuples added to a replicated table;
    ``new_monomials`` derivations added to a view, remote table or remote source.

    Attributes: ``cl_changed`` (causal-length entries that grew), ``ignored`` (relations in the
    changeset this site does not hold), ``changed`` (whether anything was written).
    """

    def __init__(self, result: BatchResult, ignored: list[str]) -> None:
        super().__init__({k: v.as_dict() for k, v in result.relations.items()})
        self.cl_changed = result.cl_changed
        self.ignored = ignored
        self.changed = result.changed


@contextlib.contextmanager
def changeset_errors() -> Iterator[None]:
    """Every DuckDB failure inside a merge is a ChangesetError: the checks that abort a merge from inside
    SQL (``error('crr: ...')``) with their own message, anything else with DuckDB's."""
    try:
        yield
    except duckdb.Error as e:
        text = str(e)
        if "crr: " in text:
            raise ChangesetError("malformed changeset: " + text.split("crr: ", 1)[1].strip()) from None
        raise ChangesetError(f"the changeset could not be merged ({type(e).__name__}: {text.strip()}); "
                             "nothing was changed") from None


def held_relations(catalog: Catalog, cs: Changeset) -> tuple[list[tuple[Relation, RelationChanges]], list[str]]:
    """The changeset's relations this site merges (schemas checked), and the names it ignores:
    relations it does not hold, and its own views (computed here from their inputs, never merged).
    A peer's copies of its replicated tables are the caller's to take out first (:func:`without_copies`,
    which takes their causal lengths out too)."""
    held, ignored = [], []
    for rc in cs.relations:
        rel = catalog.get(rc.name)
        if rel is None or rel.kind is RelationKind.VIEW:
            ignored.append(rc.name)
            continue
        check_schema(rel, rc)
        held.append((rel, rc))
    return held, ignored


def without_copies(catalog: Catalog, cs: Changeset) -> tuple[Changeset, list[str]]:
    """``cs`` without a peer's remote copies of tables replicated here (see :func:`_copy_of_replicated`)
    and without their causal-length entries, and the copies' names. A copy's entries may be of rows
    another writer wrote, which the copy holds and this site does not: merged alone, without their
    rows, they would block their keys here while showing no row."""
    copies = [rc.name for rc in cs.relations
              if (rel := catalog.get(rc.name)) is not None and _copy_of_replicated(rel, rc)]
    if not copies:
        return cs, []
    cl = cs.cl
    if cl is not None and cl.num_rows:
        cl = cl.filter(pc.invert(pc.is_in(cl.column("rel"), value_set=pa.array(copies, pa.string()))))
    return dataclasses.replace(cs, relations=[rc for rc in cs.relations if rc.name not in copies], cl=cl), copies


def _copy_of_replicated(rel: Relation, rc: RelationChanges) -> bool:
    """Whether ``rc`` is a peer's remote copy of replicated table ``rel`` (rows it states as a
    replicated table's, or none yet), which ``rel`` ignores: a replicated table merges only its
    replicas, and its copies hold nothing its replicas do not send (a site merging all of a peer's
    changes gets its own table's copy back). A view of its name is refused (:func:`check_schema`)."""
    return rel.is_base and rc.kind is not ChangeKind.BASE and rc.definition in (None, "", TABLE_DEFINITION)


def check_schema(rel: Relation, rc: RelationChanges) -> None:
    """Refuse (SchemaMismatchError) a relation's changes whose schema differs from the local declaration.
    Names compare as DuckDB compares them (a view's column keeps DuckDB's name for its expression,
    ``CAST(f AS INTEGER)``, which a remote table declared elsewhere stores folded)."""
    local = [(fold_identifier(c.name), c.type) for c in rel.columns]
    if [(fold_identifier(n), t) for n, t in rc.columns] != local:
        raise SchemaMismatchError(
            f"schema mismatch for relation {rel.name}: the changeset has {rc.schema_text}, this site "
            f"declares {rel.schema_text()}; declare the relation with the same columns and types")
    if rel.is_base and rc.kind is not ChangeKind.BASE:
        raise SchemaMismatchError(f"relation {rel.name} is a replicated table here but a view "
                                  "at the source; a replicated table merges only replicas of itself")
    _check_key(rel, rc)
    _check_definition(rel, rc)
    relayed = _relayed_copy(rel, rc)
    # a relay's copy declared without the key forwards the table's rows, whose key columns hold values
    # (a NULL is refused row by row all the same: crr.batch_rows.tuple_check_sql)
    extra = [c for c in rel.not_null if c not in rc.not_null and not (relayed and c in rel.stated_key)]
    if extra:
        # NOT NULL is part of the schema: a receiver may refuse NULL only where the source does
        source = ("does not" if rc.kind is ChangeKind.BASE else
                  "(a remote copy of the table there) does not" if relayed else "(a view) cannot")
        # a view states no NOT NULL (crr.changeset), so only a table's (or its copy's) can be added there
        fix = "" if rc.kind is not ChangeKind.BASE and not relayed else ", or NOT NULL at the source too"
        raise SchemaMismatchError(
            f"schema mismatch for relation {rel.name}: this site declares {', '.join(extra)} NOT NULL but the "
            f"source {source} guarantee it; declare the relation here without that NOT NULL{fix}")


def table_key(rel: Relation, rc: RelationChanges) -> list[str] | None:
    """The key of the replicated table whose rows ``rc`` brings remote relation ``rel`` (empty: it
    has none), or None when the changes do not say: a view's rows, or a relay's rows of its copy of
    the table that neither it nor this site declares keyed (a relay declared without the key
    forwards keyed entries all the same). A relay's rows are the table's tuples, its vids their ids."""
    if rc.kind is ChangeKind.BASE:
        return list(rc.key)
    if set(rc.lineage) <= {rel.name}:
        return list(rc.key) or list(rel.stated_key) or None
    return None


def _relayed_copy(rel: Relation, rc: RelationChanges) -> bool:
    """Whether ``rc`` are a relay's rows of its remote copy of table ``rel`` (rows of no other
    relation's ids, stating no key: the relay declared the copy without one)."""
    return rc.kind is ChangeKind.DERIVED and not rc.key and set(rc.lineage) <= {rel.name}


def _check_key(rel: Relation, rc: RelationChanges) -> None:
    """Refuse changes whose key differs from the one declared here (checked before NOT NULL, which a key
    implies, so the message names the key).

    A replicated table merges only replicas of the same key. A remote relation declared with a key
    (not enforced here: :attr:`crr.catalog.Relation.declared_key`) merges a replicated table of that
    key, or a relay's remote copy that states that key or none (a relay declared without one
    forwards the source's rows all the same); a view's rows, which no key constrains, are refused.
    """
    mine, theirs = list(rel.stated_key), list(rc.key)
    if not mine and not rel.is_base:
        return
    if rc.kind is ChangeKind.DERIVED and not theirs and not _relayed_copy(rel, rc):
        raise SchemaMismatchError(
            f"schema mismatch for relation {rel.name}: this site declares PRIMARY KEY ({', '.join(mine)}) but the "
            f"source is a view (of {', '.join(sorted(rc.lineage))}), whose rows no key constrains; declare "
            f"{rel.name} here without PRIMARY KEY")
    if mine != theirs and (rc.kind is ChangeKind.BASE or theirs):
        def said(key: list[str]) -> str:
            return f"PRIMARY KEY ({', '.join(key)})" if key else "no PRIMARY KEY"
        raise SchemaMismatchError(
            f"schema mismatch for relation {rel.name}: this site declares {said(mine)}, the changeset's source "
            f"has {said(theirs)}; declare {rel.name} with the source's key"
            f"{'' if rel.is_base else ' (or, for a remote table, none)'}")


def _check_definition(rel: Relation, rc: RelationChanges) -> None:
    """Refuse rows of another definition than the rows a remote copy holds (see
    :attr:`crr.catalog.Relation.copied_definition`): merged beside them, rows an old query derived would
    stay although the view no longer has them."""
    theirs, mine = _stated_definition(rc), rel.copied_definition
    if rel.kind not in (RelationKind.REMOTE, RelationKind.SOURCE) or theirs is None or mine is None or theirs == mine:
        return
    if TABLE_DEFINITION in (theirs, mine):
        held, brought = ("a replicated table's", "a view's") if mine == TABLE_DEFINITION else ("a view's", "a replicated table's")
        why = f"relation {rel.name} here holds {held} rows, the changeset brings {brought}"
    else:
        why = (f"the changeset brings rows of another definition of the view {rel.name} than the rows this site "
               f"holds (the view, or a view it reads, was dropped and declared again with another query at its "
               f"source, or sites declare it with different queries, or one site's view reads a replicated "
               f"table and another's a remote copy of it, which count apart)")
    raise SchemaMismatchError(f"relation {rel.name}: {why}; to follow the changeset's source, drop {rel.name} "
                              f"here (and the views reading it) and declare it again")


def _stated_definition(rc: RelationChanges) -> str | None:
    """The definition a relation's rows in a changeset follow (:meth:`crr.catalog.Catalog.definition_id`)."""
    return TABLE_DEFINITION if rc.kind is ChangeKind.BASE else rc.definition


def learned_definitions(held: list[tuple[Relation, RelationChanges]]) -> dict[str, str]:
    """The remote tables and sources that receive rows stating a definition for the first time, with
    that definition (:attr:`crr.catalog.Relation.copied_definition`); a changeset without rows of the
    relation teaches nothing."""
    return {rel.name: theirs for rel, rc in held
            if rel.kind in (RelationKind.REMOTE, RelationKind.SOURCE) and rel.copied_definition is None
            and not rc.empty and (theirs := _stated_definition(rc)) is not None}


def grown_lineage(held: list[tuple[Relation, RelationChanges]]) -> dict[str, frozenset[str]]:
    """The remote tables and sources whose lineage the changeset extends, with their new lineage."""
    return {rel.name: rel.lineage | frozenset(rc.lineage) for rel, rc in held
            if rel.kind in (RelationKind.REMOTE, RelationKind.SOURCE) and not set(rc.lineage) <= rel.lineage}


def relineaged(catalog: Catalog, grown: dict[str, frozenset[str]]) -> frozenset[str]:
    """The relations whose every tuple a merge growing lineages (:func:`grown_lineage`; ``catalog``:
    the one before it) must value again: the remote tables and sources whose lineage was in use
    (not empty) and grows, and the views reading them. Their ``in?`` read the entries of the
    narrower lineage only, so an id of a relation outside it counted invisible, and its entry,
    which may have arrived since, flipped none of their tuples; a lineage stated too narrow (a
    forged changeset) would otherwise leave tuples out for good, depending on the order of merges."""
    stale = {name for name in grown if catalog[name].lineage}
    if not stale:
        return frozenset()
    for view in catalog.views():  # an input is created before the views reading it
        plan = catalog[view].plan
        if plan is not None and stale & set(plan.inputs):
            stale.add(view)
    return frozenset(stale)


def newly_derived(held: list[tuple[Relation, RelationChanges]]) -> list[str]:
    """The remote tables and sources that receive a view's monomials for the first time."""
    return [rel.name for rel, rc in held if rel.kind in (RelationKind.REMOTE, RelationKind.SOURCE)
            and rc.kind is ChangeKind.DERIVED and not rel.derived]


class MergeInputs:
    """The Arrow tables of one merge, registered with the connection (and some copied into temp
    tables), checked against the columns expected; :meth:`close` releases them after the transaction.

    ``accepted`` caches, per expected column list, the Arrow schema already checked (shared by the
    site's merges, so a stream of like changesets needs no DESCRIBE each time).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, slots: ArrowSlots, accepted: dict[tuple, pa.Schema]) -> None:
        self.con = con
        self.slots = slots
        self.accepted = accepted
        self.names: list[str] = []

    def register(self, name: str, table: pa.Table, expected: list[tuple[str, str]], what: str) -> str:
        """Put an Arrow table in a slot (:mod:`crr.arrow_slots`) after checking its column names and
        types; return the slot's name."""
        view = self.slots.put(f"{name}_arrow", table)
        self.names.append(view)
        key = tuple(expected)
        if not table.schema.equals(self.accepted.get(key, pa.schema([]))):
            got = [(r[0], r[1]) for r in self.con.execute(f"DESCRIBE {view}").fetchall()]
            if [(n.lower(), t) for n, t in got] != [(n.lower(), t) for n, t in expected]:
                raise ChangesetError(f"malformed changeset: {what} has columns {got}, expected {expected}")
            self.accepted[key] = table.schema
        return view

    def load(self, name: str, table: pa.Table, expected: list[tuple[str, str]], what: str, select: str) -> str:
        """Copy an Arrow table into a temp table (``select`` over its columns) after checking it; return
        the temp table's qualified name."""
        view = self.register(name, table, expected, what)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {select} FROM {view}")
        self.names.append(name)
        return temp_table(name)

    def close(self, drop_tables: bool) -> None:
        """Release the Arrow slots; drop the temp tables too if ``drop_tables`` (a large merge's:
        a small merge's are replaced by the next one)."""
        for name in self.names:
            try:
                if name.endswith("_arrow"):
                    self.slots.release(name)
                elif drop_tables:
                    self.con.execute(f"DROP TABLE IF EXISTS {temp_table(name)}")
            except duckdb.Error:
                pass  # cleanup only: it must not hide the error that ended the merge
        self.names.clear()


MONOMIAL_COLUMNS = [("vid", "UHUGEINT"), ("ids", "UHUGEINT[]")]
"""The columns (and DuckDB types) of a changeset's monomials table."""

ENTRY_COLUMNS = [("id", "UHUGEINT"), ("rel", "VARCHAR"), ("cl", "INTEGER"), ("kh", "UHUGEINT"), ("stamp", "UHUGEINT")]
"""The columns (and DuckDB types) of a changeset's causal-length entries table."""


def tuple_columns(rel: Relation, idcol: str = "id") -> list[tuple[str, str]]:
    """The columns (and DuckDB types) of a changeset's tuples table of ``rel``: its id (``id`` for a
    replicated table's, ``vid`` for a derived relation's) and its AUG columns."""
    return [(idcol, "UHUGEINT")] + [(c.name, c.type) for c in rel.aug_columns]


def allowed_skew(max_clock_skew: float, clock_last: int) -> float:
    """The skew a merge allows: ``max_clock_skew`` seconds past the later of this site's wall clock and
    its hybrid clock (``clock_last``: :attr:`crr.clock.HybridClock.last`, whose upper 48 bits are a
    millisecond). A site whose wall clock ran ahead, or that accepted a stamp ahead, and was then set
    right keeps merging what it holds itself (its own changes again, a peer's copy of them)."""
    ahead = (clock_last >> 16) / 1000 - time.time()
    return max_clock_skew + max(0.0, ahead)


def max_stamp(max_clock_skew: float) -> int:
    """The largest stamp a received entry may carry: the largest :mod:`crr.clock` stamp of the
    millisecond ``max_clock_skew`` seconds after this site's wall clock."""
    # a stamp's upper 64 bits are the millisecond (48 bits) and a counter: a skew past that range
    # (``float("inf")``: no bound) accepts every stamp
    millis = min((time.time() + max_clock_skew) * 1000, 2**48 - 1)
    return ((int(millis) << 16 | 0xFFFF) << 64) | (2**64 - 1)


def entries_taken(catalog: Catalog, lineage: set[str]) -> set[str]:
    """The relations whose causal-length entries a merge takes: those in the lineage its held
    relations state (``lineage``) or in the lineage of a relation of the site."""
    interest = set(lineage)
    for name in catalog:
        interest |= catalog.lineage(name)
    return interest


def plan_merge(con: duckdb.DuckDBPyConnection, catalog: Catalog, cs: Changeset,
               held: list[tuple[Relation, RelationChanges]], inputs: MergeInputs, max_clock_skew: float,
               keeps_replicas: bool = True) -> Batch:
    """The batch of a changeset's held relations and causal lengths, every input checked as it is read.
    ``keeps_replicas``: whether the site keeps its replicas' entries with their tuples
    (:mod:`crr.replica`; a DuckDB site does, the Spark site, which checks changesets here, does not)."""
    batch = Batch()
    lineage: set[str] = set()
    key_hashes: list[KeyHashSource] = []  # keyed replicated tables' received tuples: key hashes to recompute
    remote_keys: dict[str, KeyHashSource] = {}  # the same of remote copies and sources of a keyed table
    homes = homes_of(catalog)  # co-located source -> its view (crr.colocated)
    colocated_tuples: dict[str, Rows] = {}  # their received tuples
    # relations keeping their entries with their tuples (crr.replica)
    replica_rels = [rel for rel in catalog.values() if rel.replica] if keeps_replicas else []
    replicas = {rel.name for rel in replica_rels}
    replica_tuples: dict[str, Rows] = {}
    tupled: list[pa.ChunkedArray] = []  # ids of the received tuples of replicated tables ...
    keyed_tupled: list[pa.ChunkedArray] = []  # ... and of keyed ones (their entries' key hashes are recomputed)
    # remote relations holding a replicated table's rows whose entries must carry key hashes, or none
    keyed_remotes: set[str] = set()
    unkeyed_remotes: set[str] = set()

    def copy_of_table(rel: Relation, rc: RelationChanges, table: str, id_column: str) -> None:
        """Note the key of the table whose rows ``rc`` brings remote relation ``rel`` (read from ``table``)."""
        key = table_key(rel, rc)
        if key:
            keyed_remotes.add(rel.name)
            if not rc.empty:
                remote_keys[rel.name] = KeyHashSource(table, rel.name, tuple(
                    a for a, c in zip(rel.aug_columns, rel.columns) if c.name in key), id_column)
        elif key is not None:
            unkeyed_remotes.add(rel.name)

    for i, (rel, rc) in enumerate(held):
        lineage |= set(rc.lineage)
        idcol = "id" if rc.kind is ChangeKind.BASE else "vid"
        as_id = "id" if rel.is_base else "vid"
        expected = tuple_columns(rel, idcol)
        if rc.kind is ChangeKind.BASE:
            # base tuples are read once (by one anti-join or one delta query): straight from Arrow, checked there
            view = inputs.register(f"_crr_in_t{i}", rc.tuples, expected, rc.name)
            if not rel.is_base:
                copy_of_table(rel, rc, view, idcol)
            if rc.empty:
                continue  # nothing to add or derive from: only the columns are checked
            received = Rows(view, RowsKind.RECEIVED, idcol)
            if rel.is_base:
                batch.base[rel.name] = received
                tupled.append(rc.tuples.column(idcol))
                if rel.key:
                    key_hashes.append(KeyHashSource(view, rel.name, tuple(rel.key_aug_columns)))
                    keyed_tupled.append(tupled[-1])
                continue
            if rel.name in homes:
                colocated_tuples[rel.name] = received
            elif rel.name in replicas:
                replica_tuples[rel.name] = received
            else:
                batch.derived[rel.name] = (received, None)
            continue
        if rc.monos is None:
            raise ChangesetError(f"malformed changeset: derived relation {rc.name} has no monomials")
        if rc.empty:  # nothing to add or derive from: only the columns are checked
            inputs.register(f"_crr_in_t{i}", rc.tuples, expected, rc.name)
            inputs.register(f"_crr_in_m{i}", rc.monos, MONOMIAL_COLUMNS, rc.name)
            copy_of_table(rel, rc, "", as_id)
            continue
        tuples = inputs.load(f"_crr_in_t{i}", rc.tuples, expected, rc.name,
                             f"{tuple_check_sql(rel, idcol)} AS {as_id}, {cols_sql(rel)}")
        copy_of_table(rel, rc, tuples, as_id)  # a relay's copy: its rows' vids are the table's tuple ids
        monos = inputs.load(f"_crr_in_m{i}", rc.monos, MONOMIAL_COLUMNS, rc.name,
                            "vid, CASE WHEN ids IS NULL OR len(ids) = 0 OR list_contains(ids, NULL) "
                            "THEN error('crr: a monomial without ids') ELSE ids END AS ids")
        orphans = con.execute(f"SELECT count(*) FROM {monos} m ANTI JOIN {tuples} t ON t.vid = m.vid").fetchall()[0][0]
        if orphans:
            raise ChangesetError(f"malformed changeset: relation {rc.name} has {orphans} monomials without their tuples")
        batch.derived[rel.name] = (Rows(tuples, RowsKind.CHECKED), Rows(monos, RowsKind.CHECKED))
    by_home: dict[str, ReceivedEntries] = {}  # by home: "" for _crr.cl, else the co-located source's or replica's name
    if cs.cl is not None and cs.cl.num_rows and held:
        interest = entries_taken(catalog, lineage)
        # read straight from Arrow by the causal-length statements (checked there)
        view = inputs.register("_crr_in_cl", cs.cl, ENTRY_COLUMNS, "causal lengths")
        # a co-located source's entries are merged into its view's table (crr.colocated), a replica's
        # into its own (crr.replica), the others into _crr.cl
        # (relations, key hashes to recompute, tables of ids kept in other homes) by home
        def remote_key(name: str) -> tuple[KeyHashSource, ...]:
            return (remote_keys[name],) if name in remote_keys else ()
        in_cl = [source for name, source in remote_keys.items() if name not in homes and name not in replicas]
        wanted = {"": (interest - set(homes) - replicas, (*key_hashes, *in_cl), replica.elsewhere(replica_rels, None))}
        wanted.update({source: ({source}, remote_key(source), ()) for source in homes if source in interest})
        wanted.update({name: ({name}, remote_key(name), replica.elsewhere(replica_rels, name))
                       for name in replicas if name in interest})
        named = set(cs.cl.column("rel").unique().to_pylist())
        for home, (relations, sources, elsewhere) in wanted.items():
            if named & relations:
                entries = received_entries(catalog, view, cs.cl if named <= relations else _of(cs.cl, relations),
                                    frozenset(relations), sources, max_clock_skew, elsewhere,
                                    frozenset(keyed_remotes), frozenset(unkeyed_remotes))
                if entries is not None:
                    by_home[home] = entries
    if "" in by_home and not catalog.unchecked_entries:  # else neither is read (crr.maintain._merge_cl)
        by_home[""] = _with_tuples_noted(by_home[""], tupled, keyed_tupled)
    batch.received = by_home.pop("", None)
    for source, co in homes.items():
        if source in colocated_tuples or source in by_home:
            batch.colocated.append(ColocatedBatch(co.name, source, colocated_tuples.get(source), by_home.get(source)))
    for name in sorted(replicas):
        if name in replica_tuples or name in by_home:
            batch.replicas.append(replica.ReplicaBatch(name, replica_tuples.get(name), by_home.get(name)))
    return batch


def _with_tuples_noted(entries: ReceivedEntries, tupled: list[pa.ChunkedArray],
                       keyed_tupled: list[pa.ChunkedArray]) -> ReceivedEntries:
    """``entries`` (of ``_crr.cl``) with ``keys_checked`` and ``untupled`` set from the ids of the
    batch's received tuples of replicated tables (``tupled``) and of keyed ones (``keyed_tupled``):
    one id lookup (:func:`crr.id_sets.index_in`, about 9 ms per 100k entries), two when some
    received tuples are an unkeyed table's."""
    assert entries.ids is not None
    ids = id_storage(entries.ids)
    found = index_in(ids, _ids_of(tupled)) if tupled else None
    untupled = ids if found is None else ids.filter(pc.is_null(found))
    keys_checked = (not entries.some_unkeyed and not len(untupled) and bool(keyed_tupled)
                    and (len(keyed_tupled) == len(tupled) or all_in(ids, _ids_of(keyed_tupled))))
    return dataclasses.replace(entries, keys_checked=keys_checked, untupled=untupled if len(untupled) else None)


def _ids_of(columns: list[pa.ChunkedArray]) -> pa.Array:
    """The ids of several received tuple tables as one array of 16-byte values."""
    arrays = [id_storage(col) for col in columns]
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _of(cl: pa.Table, relations: set[str]) -> pa.Table:
    """The entries of ``cl`` of the given relations."""
    return cl.filter(pc.is_in(cl.column("rel"), value_set=strings(sorted(relations))))


def received_entries(catalog: Catalog, table: str, cl: pa.Table, relations: frozenset[str],
              key_hashes: tuple[KeyHashSource, ...], max_clock_skew: float,
              elsewhere: tuple[str, ...], keyed_remotes: frozenset[str] = frozenset(),
              unkeyed_remotes: frozenset[str] = frozenset()) -> ReceivedEntries | None:
    """The :class:`~crr.causal.ReceivedEntries` of the entries ``cl`` (read from ``table``) this site
    takes for ``relations``; None when there are none. ``cl`` decides the MERGE's form (which entries
    are keyed, whether two share a key). ``keyed_remotes``, ``unkeyed_remotes``: remote relations
    holding a table's rows the changeset says are keyed, or not (:func:`table_key`), whose entries
    must carry key hashes, or none, as a replicated table's do."""
    if not cl.num_rows or not relations:
        return None
    kh = id_storage(cl.column("kh"))
    names = cl.column("rel").unique().to_pylist()
    return ReceivedEntries(
        table=table, relations=relations,
        keyed=frozenset(r.name for r in catalog.values() if r.is_base and r.key) | keyed_remotes,
        unkeyed=frozenset(r.name for r in catalog.values() if r.is_base and not r.key) | unkeyed_remotes,
        key_hashes=key_hashes, max_stamp=max_stamp(max_clock_skew), max_clock_skew=max_clock_skew,
        some_keyed=kh.null_count < len(kh), some_unkeyed=kh.null_count > 0,
        one_per_key=distinct_keys(kh),
        relation=names[0] if len(names) == 1 else None, ids=cl.column("id"),
        first_lengths=pc.all(pc.equal(cl.column("cl"), _ONE)).as_py() is True,
        later_lengths=pc.all(pc.greater(cl.column("cl"), _ONE)).as_py() is True,
        deletions_only=pc.all(pc.equal(pc.bit_wise_and(cl.column("cl"), _ONE), _ZERO)).as_py() is True,
        elsewhere=elsewhere)


_ZERO, _ONE = int64_scalar(0), int64_scalar(1)  # built without pyarrow's pandas probe (crr.arrow_build)
