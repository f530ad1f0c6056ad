"""The catalog: which relations a site holds, their schemas, view definitions and lineage.

It lives in the site's DuckDB file (``_crr.relations``), so reopening a site restores it; view plans
are recompiled from their stored SQL at open (compiling is cheap, and it keeps old files readable
by newer plan compilers).

Storage layout of one site (all inside one DuckDB file):

* ``main.<r>`` -- APP layer: one ordinary table per relation with exactly the user's columns (a remote
  source has none: it only feeds this site's views).
* ``_crr.meta`` -- site id, storage version, sequence counter, hybrid clock, and the site's flags
  (:class:`SiteFlag`: whether ``_crr.cl`` may hold entries whose key hash went unchecked, whether a
  home of entries may hold two present versions of one key).
* ``_crr.relations`` -- this catalog (one row per relation; ``derived`` marks a remote table or
  source that has received a view's monomials, which the maintainer's append-only path needs to know;
  ``definition`` holds a view's query, and for a remote table or source the id of the view
  definition whose rows it holds, :attr:`Relation.copied_definition`).
* ``_crr.cursors`` -- per peer and relation, the source cursor of the last changeset merged from it
  (advanced in the merge's own transaction, so a restarted sync resumes exactly).
* ``_crr.cl`` -- causal-length entries ``(id, rel, cl, kh, stamp, vis, seq)`` of every base tuple the
  site knows of (but those a replica's ``$e`` or a co-located view's ``$w`` keeps, below); ``vis`` is
  a derived cache of DESIGN 1.2's ``visible(t)``.
* AUG tables name the user's columns positionally, ``c0, c1, ...`` (``cols...`` below), so no user
  column name can collide with an internal one; only APP tables carry the user's names.
* ``_crr."<r>$t"`` -- AUG tuples of a replicated table: ``(id, cols..., seq)``.
* ``_crr."<r>$m"`` -- AUG tuples of a view, remote table or stored remote source, one row per
  derivation (monomial): ``(vid, mid, ids, cols..., seq)``. ``vid`` is the hash of the values under
  the relation's name, ``ids`` the sorted id list of the monomial, ``mid`` a hash of it; the values
  sit beside each derivation so no separate tuple table has to be written and joined. A tuple is
  present when one of its monomials has only visible ids; that is evaluated for the tuples a batch
  touches. A *narrow* relation (a remote table or source that has only received a replicated
  table's tuples: not ``derived``) holds each tuple as its own one monomial, so ``mid`` is ``vid``
  and ``ids`` is ``[vid]``. A remote source keeps no AUG tuples (``stored`` false) until a view
  joins it: a select/project view needs only each batch's new tuples.
* ``_crr."<r>$e"`` -- in place of ``$m`` and of the relation's rows in ``_crr.cl``, for a narrow
  relation that keeps its tuples (a *replica*, :mod:`crr.replica`): one row per tuple id with the
  entry and the values, ``(id, cl, kh, stamp, vis, seq, cols..., tseq)``; ``$m`` is then a view of
  it in the columns above. The merge that first brings a view's monomials for a replica moves it to
  the standard layout, in that merge's transaction (:func:`crr.replica.release_sql`).
* ``_crr."<v>$w"`` -- in place of ``$m``, for the one select/project view of a remote source that
  keeps nothing: the source's causal-length entries (not in ``_crr.cl``) and the view's derivations,
  one row per tuple id (``colocated`` in the catalog; see :mod:`crr.colocated`).
* No index from ids to the monomials holding them: when ids flip, the tuples to re-evaluate are
  found by a scan of ``$m`` (``mid`` when every monomial holds one id; each position of ``ids``
  otherwise, see :func:`crr.maintain_sql.holding_flipped_sql`). DuckDB answers a join by
  scanning the big side in full anyway, so an index table ``(id, vid)`` (storage version 3's ``$i``)
  cost a statement per batch and a quarter of a join view's state, and saved 0-2 ms per lookup.
* An aggregate view ``v`` is a view whose tuples are the rows of its FROM/WHERE core (``$m`` as
  above); the core's present rows are ``_crr."v$r"`` (in place of an APP table), per-group state
  ``_crr."v$g"``, COUNT(DISTINCT) multiplicities ``_crr."v$d<j>"``, and ``main.v`` holds the
  aggregate's rows (see :mod:`crr.aggregate`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

from typing import TYPE_CHECKING

from sqlglot import exp

from crr.errors import CatalogError
from crr.types import Column, quote_ident
from crr.sql.compile import ViewPlan
from crr.sql.parse import canonical_sql, fold_identifier
from crr.sql.statements import RelationKind

if TYPE_CHECKING:
    from crr.aggregate import AggregateSpec

SCHEMA = "_crr"
STORAGE_VERSION = 9  # 3: AUG tables name the user's columns positionally (c0, c1, ...); 4: no $i index;
# 5: replicas keep their entries with their tuples ($e); 6: the catalog's ``orphans`` flag;
# 7: ``_crr.meta``'s ``unchecked_entries``; 8: its ``rival_versions`` (SiteFlag); 9: key hashes of
# keys declared out of column order recomputed (crr.upgrade)


class SiteFlag(Enum):
    """A fact about a site's stored entries that, once true, stays true: a ``_crr.meta`` row (key: the
    flag's value; value ``'true'`` or ``'false'``), and in the catalog snapshot (:attr:`Catalog.flags`).
    While a flag is false the maintainer takes a shortcut that its being false proves safe; a new site
    starts with every flag false, a file that predates a flag gets it true (unknown)."""

    UNCHECKED_ENTRIES = "unchecked_entries"
    """``_crr.cl`` may hold an entry that arrived without its tuple, so that its relation and key hash
    were never compared with the tuple's values (set by a merge storing one, and by moving a replica's
    or co-located view's entries into ``_crr.cl``). While false, an entry's key hash tells whether its
    id is stored (:class:`crr.causal.NewEntryProbe`)."""
    RIVAL_VERSIONS = "rival_versions"
    """Some home of entries may hold two present versions of one key (set by a merge whose entries
    were written after a count found another present version of a key, or that brought two versions
    of one key). A local write never stores a second present version (it refuses a key clash and
    deletes the versions it replaces), and moving entries between homes stores none. While false, a
    batch of deletes needs no count of other present versions: a deleted version had no rival to
    make visible (:meth:`crr.maintain.Maintainer._single_versions`)."""


def aug_table(relation: str, suffix: str) -> str:
    """Qualified name of the internal table ``<relation>$<suffix>``."""
    return f"{SCHEMA}.{quote_ident(relation + '$' + suffix)}"


@dataclass(frozen=True)
class Relation:
    """A relation held at a site: a replicated table, a remote table or source, or a materialized view.

    Immutable: a change (a grown lineage, a first monomial of several ids) is a new Relation in a new
    :class:`Catalog` snapshot.
    """

    name: str
    kind: RelationKind
    columns: list[Column]
    key: list[str] = field(default_factory=list)
    not_null: list[str] = field(default_factory=list)
    definition: str | None = None
    lineage: frozenset[str] = frozenset()  # learned lineage (remote tables and sources)
    plan: ViewPlan | None = None
    wide: bool = True  # whether its monomials may hold more than one id (then ``mid`` is not the id)
    stored: bool = True  # whether AUG tuples are kept (false only for a source no view joins)
    aggregate: "AggregateSpec | None" = None  # an aggregate view: its tuples are the core's rows (crr.aggregate)
    # a remote table or source that has received a view's monomials, not only a replicated table's
    # tuples (then an id may sit in several of its tuples, which may arrive in different merges)
    derived: bool = False
    # a view whose derivations live with its source's causal lengths in ``$w`` (crr.colocated)
    colocated: bool = False
    # a replicated table's: whether its ``$t`` may hold a tuple without an entry in ``_crr.cl`` (a merge
    # brought the tuple before its entry). While it does not, an id whose entry a merge inserts into
    # ``_crr.cl`` has no tuple here yet, so its received tuple is added without looking in ``$t``.
    # Set by the merge that stores such a tuple, never cleared.
    orphans: bool = False
    # a remote table's or source's declared PRIMARY KEY. Its rows are the source's, so the key is not
    # enforced here (while versions arrive, two of one key may be present at once), but a merge is
    # refused unless the source is a replicated table with that key (crr.merge.check_schema).
    # Stored in the catalog's ``key`` column, which a remote relation does not otherwise use.
    declared_key: list[str] = field(default_factory=list)
    # a remote table's or source's: which definition its rows follow (:meth:`Catalog.definition_id`),
    # learned from the first changeset bringing it rows (None until then): a view's id, or
    # :data:`TABLE_DEFINITION` for a replicated table's rows. A changeset of rows of another
    # definition (the view, or a view it reads, declared again with another query at its source) is
    # refused (crr.merge.check_schema). Stored in the catalog's ``definition`` column, which a remote
    # relation does not otherwise use.
    copied_definition: str | None = None

    @property
    def narrow(self) -> bool:
        """Whether each monomial is a tuple's own one, ``mid`` = ``vid`` and ``ids`` = ``[vid]``: a
        remote table or source that has received only a replicated table's tuples (see the module
        docstring)."""
        return self.kind in (RelationKind.REMOTE, RelationKind.SOURCE) and not self.derived

    @property
    def replica(self) -> bool:
        """Whether the relation keeps each tuple's causal-length entry in the tuple's row, ``$e``, with
        ``$m`` a view of it (:mod:`crr.replica`): a narrow relation that keeps its tuples."""
        return self.narrow and self.stored

    @property
    def is_base(self) -> bool:
        """True for replicated tables, whose tuples are their own provenance."""
        return self.kind is RelationKind.REPLICATED

    @property
    def has_app(self) -> bool:
        """Whether the relation has an APP table (everything but remote sources)."""
        return self.kind is not RelationKind.SOURCE

    @property
    def column_names(self) -> list[str]:
        """The user's column names, in declaration order."""
        return [c.name for c in self.columns]

    @property
    def stated_key(self) -> list[str]:
        """The key its changesets state: a replicated table's PRIMARY KEY, a remote relation's declared one
        (a view's: none)."""
        return self.key if self.is_base else self.declared_key

    @property
    def key_columns(self) -> list[Column]:
        """The PRIMARY KEY columns (empty for an unkeyed relation)."""
        return [c for c in self.columns if c.name in self.key]

    @property
    def aug_columns(self) -> list[Column]:
        """The user's columns as the AUG layer names them: ``c0, c1, ...`` in declaration order.

        Internal tables and queries never use the user's names, so no user name (``id``, ``seq``,
        ``keep``, ...) can collide with crr's own columns; only APP tables carry the user's names.
        """
        return [Column(aug_name(i), c.type) for i, c in enumerate(self.columns)]

    @property
    def key_aug_columns(self) -> list[Column]:
        """The PRIMARY KEY columns under their AUG names."""
        return [a for a, c in zip(self.aug_columns, self.columns) if c.name in self.key]

    def aug_column(self, name: str) -> str:
        """The AUG name of the user's column ``name``."""
        return aug_name(self.column_names.index(name))

    @property
    def fingerprint(self) -> str:
        """Schema fingerprint: a hash of the column names and types, in order."""
        return schema_fingerprint(self.columns)

    def schema_text(self) -> str:
        """Human-readable schema, for error messages."""
        cols = ", ".join(f"{c.name} {c.type}" for c in self.columns)
        key = f", PRIMARY KEY ({', '.join(self.stated_key)})" if self.stated_key else ""
        return f"({cols}{key})"

    def aug(self, suffix: str) -> str:
        """Qualified name of one of the relation's AUG tables (suffix ``t``, ``m`` or ``w``)."""
        return aug_table(self.name, suffix)

    @property
    def app(self) -> str:
        """Qualified name of the relation's APP table."""
        return f"main.{quote_ident(self.name)}"

    @property
    def members(self) -> str:
        """The table of the relation's present tuples: its APP table, or an aggregate view's core rows."""
        return self.aggregate.rows_table() if self.aggregate is not None else self.app


class Catalog(Mapping[str, Relation]):
    """An immutable snapshot of the relations a site holds, in creation order (name -> Relation).

    A site replaces its snapshot only when a transaction commits (see :meth:`crr.site_state.SiteState.stage`); the ``with_``
    and ``without`` methods return new snapshots and never change this one.
    """

    def __init__(self, relations: Mapping[str, Relation] | None = None, *,
                 flags: frozenset[SiteFlag] = frozenset(SiteFlag)) -> None:
        self._relations: dict[str, Relation] = dict(relations or {})
        self._lineage: dict[str, frozenset[str]] = {}  # computed on demand (the snapshot never changes)
        self._definitions: dict[str, str | None] = {}  # the same
        self.flags = flags  # the site's flags that are true (every one when unknown)

    @property
    def unchecked_entries(self) -> bool:
        """Whether ``_crr.cl`` may hold entries whose key hash went unchecked (:attr:`SiteFlag.UNCHECKED_ENTRIES`)."""
        return SiteFlag.UNCHECKED_ENTRIES in self.flags

    def __getitem__(self, name: str) -> Relation:
        return self._relations[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._relations)

    def __len__(self) -> int:
        return len(self._relations)

    def __repr__(self) -> str:
        return f"Catalog({', '.join(self._relations)})"

    def with_(self, *relations: Relation) -> "Catalog":
        """A snapshot with these relations added or replaced (new ones after the existing ones)."""
        return Catalog({**self._relations, **{r.name: r for r in relations}}, flags=self.flags)

    def without(self, name: str) -> "Catalog":
        """A snapshot without the relation ``name``."""
        return Catalog({n: r for n, r in self._relations.items() if n != name}, flags=self.flags)

    def with_flag(self, flag: SiteFlag) -> "Catalog":
        """A snapshot in which ``flag`` is true."""
        return Catalog(self._relations, flags=self.flags | {flag})

    def changed(self, name: str, **fields: object) -> "Catalog":
        """A snapshot in which relation ``name`` has the given fields changed."""
        return self.with_(dataclasses.replace(self._relations[name], **fields))

    def lineage(self, name: str) -> frozenset[str]:
        """The base relations whose tuple ids appear in a relation's provenance."""
        if name not in self._lineage:
            rel = self._relations[name]
            if rel.is_base:
                self._lineage[name] = frozenset({rel.name})
            elif rel.kind in (RelationKind.REMOTE, RelationKind.SOURCE):
                self._lineage[name] = rel.lineage
            else:
                assert rel.plan is not None
                self._lineage[name] = frozenset().union(*(self.lineage(r) for r in rel.plan.inputs))
        return self._lineage[name]

    def definition_id(self, name: str) -> str | None:
        """Which definition a relation's rows follow, as its changesets state it: for a view, a hash of
        its query and of the definitions of the views and tables it reads (:func:`view_definition_id`),
        so a view over a view declared again with another query states another id too;
        :data:`TABLE_DEFINITION` for a replicated table; a remote table's or source's learned
        :attr:`Relation.copied_definition` (None while it has received no rows).

        A remote copy a view reads counts as :data:`COPY_INPUT`, not as the definition it learned: a
        copy learns its definition when its first rows arrive, after the view may have sent rows, and
        a view's id must not change but when it is declared. So a copy declared again under a view
        (to follow its source's new definition) leaves the view's id as it was: copies of the view
        elsewhere have to be declared again too (the README's known limits)."""
        if name not in self._definitions:
            rel = self._relations[name]
            if rel.is_base:
                self._definitions[name] = TABLE_DEFINITION
            elif rel.kind in (RelationKind.REMOTE, RelationKind.SOURCE):
                self._definitions[name] = rel.copied_definition
            else:
                assert rel.plan is not None
                self._definitions[name] = view_definition_id(rel.definition or "", tuple(
                    (r, self.definition_id(r) if self._relations[r].kind in (RelationKind.VIEW, RelationKind.REPLICATED)
                     else COPY_INPUT) for r in rel.plan.inputs))
        return self._definitions[name]

    def lineage_of_others(self, name: str) -> frozenset[str]:
        """The base relations in the lineage of some relation other than ``name``: what a DROP of
        ``name`` must keep the causal-length entries of (both backends delete the rest)."""
        return frozenset().union(*(self.lineage(n) for n in self._relations if n != name))

    def derived_from(self, name: str) -> list[str]:
        """The other relations whose lineage holds ``name`` (they change when its tuples do)."""
        return [n for n in self._relations if n != name and name in self.lineage(n)]

    def views(self) -> list[str]:
        """The materialized views, in creation order (an input is always created before its views)."""
        return [n for n, r in self._relations.items() if r.kind is RelationKind.VIEW]

    # -- rules both backends apply -------------------------------------------------------------------
    def sources_to_store(self, plan: ViewPlan) -> list[Relation]:
        """The remote sources a new view joins that keep nothing yet, as they are once they keep their
        tuples (a join reads an input's whole state); CatalogError for a source that already received
        data without keeping it (a new view over it could not be filled)."""
        joined = {o.relation for b in plan.branches if len(b.occurrences) > 1 for o in b.occurrences}
        out = []
        for name in plan.inputs:
            source = self._relations[name]
            if source.kind is not RelationKind.SOURCE or source.stored:
                continue
            if source.lineage:
                raise CatalogError(
                    f"remote source {name} has already received data without keeping its tuples, so a new view "
                    f"over it cannot be filled; create views over a source before merging into it, or declare "
                    f"{name} as CREATE REMOTE TABLE")
            if name in joined:
                out.append(dataclasses.replace(source, stored=True))
        return out

    def check_drop(self, rel: Relation, kind: RelationKind | None, plain: str) -> None:
        """Refuse (CatalogError) a DROP that names the wrong kind of relation, or one a view reads.
        ``kind``: the kind the statement names (None for a plain DROP TABLE / VIEW, ``plain``)."""
        wanted = {"table": (RelationKind.REPLICATED, RelationKind.REMOTE, RelationKind.SOURCE),
                  "view": (RelationKind.VIEW,)}.get(plain, (kind,))
        if rel.kind not in wanted:
            text = KIND_TEXT[rel.kind]
            raise CatalogError(f"{rel.name} is a {text}; use DROP {text.upper()} {rel.name}")
        users = [v.name for v in self._relations.values() if v.plan is not None and rel.name in v.plan.inputs]
        if users:
            raise CatalogError(f"cannot drop {rel.name}: view(s) {', '.join(users)} read it; drop them first")

    def names_to_send(self, relations: list[str] | None) -> list[str]:
        """The relations ``changes()`` covers: those named (folded), or every one a changeset can carry
        (not remote sources, whose tuples this site does not keep, nor aggregate views, computed
        wherever they are declared); CatalogError for a named one that cannot be sent."""
        if relations is None:
            return [n for n, r in self._relations.items() if r.kind is not RelationKind.SOURCE and r.aggregate is None]
        for n in relations:
            rel = self._relations.get(n)
            if rel is None:
                raise CatalogError(f"no relation named {n} at this site")
            if rel.aggregate is not None:
                raise CatalogError(f"{n} is an aggregate view: its rows are never replicated; declare the same "
                                   "aggregate over a remote copy of its input at the other site")
            if rel.kind is RelationKind.SOURCE:
                raise CatalogError(f"{n} is a remote source: this site keeps no copy of it to send; "
                                   "get its changes from the sites that hold it")
        return list(relations)


KIND_TEXT = {RelationKind.REPLICATED: "replicated table", RelationKind.REMOTE: "remote table",
             RelationKind.SOURCE: "remote source", RelationKind.VIEW: "materialized view"}
"""How messages name each kind of relation."""


def kind_text(kind: RelationKind | None) -> str:
    """How a message names a kind of relation (``relation`` when the kind is not known)."""
    return KIND_TEXT.get(kind, "relation") if kind is not None else "relation"


def source_read_error(name: str) -> CatalogError:
    """The error of a statement reading remote source ``name``, which keeps no table at a site (the
    database would say only that no such table exists)."""
    return CatalogError(f"{name} is a remote source: this site keeps no table of it; query the views "
                        "over it, or declare it as CREATE REMOTE TABLE to keep a readable copy")


def refuse_source_reads(catalog: Mapping[str, Relation], names: Iterable[str]) -> None:
    """Raise :func:`source_read_error` for the first of the tables a statement reads (``names``,
    folded) that is a remote source of ``catalog``."""
    for name in names:
        if name in catalog and catalog[name].kind is RelationKind.SOURCE:
            raise source_read_error(name)


def tables_read(tree: exp.Expression) -> list[str]:
    """The tables a statement's ``tree`` names without a schema, but not its CTEs (folded, in the
    order it names them)."""
    ctes = {fold_identifier(c.alias) for c in tree.find_all(exp.CTE)}
    names = [fold_identifier(t.name) for t in tree.find_all(exp.Table) if not t.db]
    return [n for n in dict.fromkeys(names) if n not in ctes]


def aug_name(position: int) -> str:
    """The AUG-layer name of the user column at ``position`` (0-based)."""
    return f"c{position}"


TABLE_DEFINITION = "table"
"""The definition a replicated table's rows follow, as a relay's changesets and its copies state it (a
view's is a hex hash, :func:`view_definition_id`)."""


COPY_INPUT = "copy"
"""How a view's definition id counts a remote table or source it reads (:meth:`Catalog.definition_id`)."""


@functools.lru_cache(maxsize=256)
def view_definition_id(query: str, inputs: tuple[tuple[str, str | None], ...] = ()) -> str:
    """The id of a view definition: a hash of its query's canonical text
    (:func:`crr.sql.parse.canonical_sql`) and of ``inputs``, the ``(name, definition id)`` of each
    relation it reads. Sites that declare a view with the same query over the same definitions state
    the same id, whatever the query's spacing, letter case or comments; a view declared again with
    another query, or over an input declared again so, states another (so does the same query written
    with other redundant parentheses or qualifications: sqlglot keeps them)."""
    text = json.dumps([canonical_sql(query), [list(i) for i in inputs]])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def schema_fingerprint(columns: list[Column]) -> str:
    """A short stable hash of column names and types."""
    text = json.dumps([[c.name, c.type] for c in columns])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


CATALOG_DDL = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (k VARCHAR PRIMARY KEY, v VARCHAR)",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.relations (
        name VARCHAR PRIMARY KEY, kind VARCHAR, columns VARCHAR, key VARCHAR, not_null VARCHAR,
        definition VARCHAR, lineage VARCHAR, wide BOOLEAN, position INTEGER, stored BOOLEAN, derived BOOLEAN)""",
    # files written before ``derived`` existed: unknown, so assumed (it only costs a faster path)
    f"ALTER TABLE {SCHEMA}.relations ADD COLUMN IF NOT EXISTS derived BOOLEAN DEFAULT true",
    f"ALTER TABLE {SCHEMA}.relations ADD COLUMN IF NOT EXISTS colocated BOOLEAN DEFAULT false",
    # files written before ``orphans`` existed: assumed until the upgrade to version 6 looks
    f"ALTER TABLE {SCHEMA}.relations ADD COLUMN IF NOT EXISTS orphans BOOLEAN DEFAULT true",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.cursors (
        peer VARCHAR, relation VARCHAR, cursor BIGINT, updated TIMESTAMP, PRIMARY KEY (peer, relation))""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.cl (
        id UHUGEINT, rel VARCHAR, cl INTEGER, kh UHUGEINT, stamp UHUGEINT, vis BOOLEAN, seq BIGINT)""",
    # the openings of the site that changed something, each by its first sequence number and the last
    # one before it (crr.counters; a file without rows predates them, and every cursor up to its last
    # change is its own)
    f"CREATE TABLE IF NOT EXISTS {SCHEMA}.openings (floor BIGINT PRIMARY KEY, previous BIGINT)",
]


CATALOG_COLUMNS = ("name, kind, columns, key, not_null, definition, lineage, wide, position, stored, derived, "
                   "colocated, orphans")
"""``_crr.relations``'s columns in :func:`relation_row`'s order (an older file got some of them by ALTER
TABLE, at the end: read them by name)."""

def flag_set_sql(flag: SiteFlag) -> str:
    """Record in ``_crr.meta`` that ``flag`` is true (it never turns false again)."""
    return f"UPDATE {SCHEMA}.meta SET v = 'true' WHERE k = '{flag.value}'"


META_SQL = f"SELECT k, v FROM {SCHEMA}.meta"
"""Every ``_crr.meta`` row ``(k, v)``: site id, storage version, counters, flags (:class:`SiteFlag`)."""

META_TABLE_EXISTS_SQL = (f"SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                         f"AND schema_name = '{SCHEMA}' AND table_name = 'meta' AND NOT temporary")
"""Whether the file has a ``_crr.meta`` table (it is a site's file)."""

META_INSERT_SQL = f"INSERT INTO {SCHEMA}.meta VALUES (?, ?)"
"""Add a ``_crr.meta`` row: parameters (key, value)."""

NEXT_POSITION_SQL = f"SELECT coalesce(max(position), 0) + 1 FROM {SCHEMA}.relations"
"""The catalog position of the next relation declared (relations are read back in that order)."""

RELATION_DELETE_SQL = f"DELETE FROM {SCHEMA}.relations WHERE name = ?"
"""Remove a relation's catalog row: parameter (name)."""

COPIED_DEFINITION_UPDATE_SQL = f"UPDATE {SCHEMA}.relations SET definition = ? WHERE name = ?"
"""Record the view definition a remote table's or source's rows follow (:attr:`Relation.copied_definition`):
parameters (definition id, name)."""

STORED_UPDATE_SQL = f"UPDATE {SCHEMA}.relations SET stored = true WHERE name = ?"
"""Mark a remote source as keeping its tuples (a join over it is declared): parameter (name)."""

APP_TABLE_EXISTS_SQL = ("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main' AND "
                        "translate(table_name, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') = ?")
"""Whether the main schema has a table of that name, its ASCII letters in any case, as DuckDB compares
names (``lower`` would fold ``É`` too: DuckDB holds ``"étab"`` and ``"Étab"`` apart); parameter: the
folded name (:func:`crr.sql.parse.fold_identifier`)."""


def relation_insert_sql() -> str:
    """Add a relation's catalog row (parameters: :func:`relation_row`)."""
    return f"INSERT INTO {SCHEMA}.relations ({CATALOG_COLUMNS}) VALUES ({', '.join('?' * len(CATALOG_COLUMNS.split(',')))})"


def stand_in_view_sql(rel: Relation) -> str:
    """An empty temp view typed as a remote source (which has no APP table), so that DuckDB can type a
    view's query over it (``DESCRIBE``) while the view is declared; :func:`stand_in_drop_sql` drops it."""
    typed = ", ".join(f"CAST(NULL AS {c.type}) AS {quote_ident(c.name)}" for c in rel.columns)
    return f"CREATE TEMP VIEW {quote_ident(rel.name)} AS SELECT {typed} LIMIT 0"


def describe_query_sql(query: str) -> str:
    """The columns ``(name, type, ...)`` DuckDB gives a query's result (a view's, as it is declared)."""
    return f"DESCRIBE {query}"


def stand_in_drop_sql(rel: Relation) -> str:
    """Drop :func:`stand_in_view_sql`'s view."""
    return f"DROP VIEW IF EXISTS temp.main.{quote_ident(rel.name)}"


def orphans_update_sql() -> str:
    """Set a relation's ``orphans`` flag (parameters: the flag, the relation's name)."""
    return f"UPDATE {SCHEMA}.relations SET orphans = ? WHERE name = ?"


APP_TABLES_SQL = ("SELECT table_name FROM duckdb_tables() "
                  "WHERE database_name = current_database() AND schema_name = 'main'")
"""The tables of the site's ``main`` schema, where each relation's APP table is (checked at open)."""

CATALOG_ROWS_SQL = f"SELECT {CATALOG_COLUMNS} FROM {SCHEMA}.relations ORDER BY position"
"""The catalog's rows, for :func:`relation_from_row`, in declaration order."""


def relation_row(rel: Relation, position: int) -> list:
    """The catalog row of a relation."""
    return [rel.name, rel.kind.value, json.dumps([[c.name, c.type] for c in rel.columns]), json.dumps(rel.stated_key),
            json.dumps(rel.not_null), rel.copied_definition if rel.kind in (RelationKind.REMOTE, RelationKind.SOURCE)
            else rel.definition, json.dumps(sorted(rel.lineage)), rel.wide, position,
            rel.stored, rel.derived, rel.colocated, rel.orphans]


def relation_from_row(row: tuple) -> Relation:
    """Rebuild a relation (without its compiled plan) from a catalog row."""
    name, kind, columns, key, not_null, definition, lineage, wide, _, stored = row[:10]
    kind = RelationKind(kind)
    # a row written before ``derived`` existed (a Spark manifest's): unknown, so assumed for remote relations
    remote = kind in (RelationKind.REMOTE, RelationKind.SOURCE)
    derived = remote and (row[10] if len(row) > 10 else True)
    colocated = bool(row[11]) if len(row) > 11 else False
    orphans = row[12] is not False if len(row) > 12 else True  # unknown (a row written before it, NULL): assumed
    key = json.loads(key)
    return Relation(name=name, kind=kind, columns=[Column(n, t) for n, t in json.loads(columns)],
                    key=[] if remote else key, declared_key=key if remote else [],
                    not_null=json.loads(not_null), definition=None if remote else definition,
                    copied_definition=definition if remote else None,
                    lineage=frozenset(json.loads(lineage)), wide=bool(wide), stored=bool(stored),
                    derived=bool(derived), colocated=colocated, orphans=orphans)


def aug_ddl(rel: Relation) -> list[str]:
    """DDL creating a relation's AUG tables and its APP table (a source: its AUG tables once stored)."""
    cols = ", ".join(f"{c.name} {c.type}" for c in rel.aug_columns)
    app_cols = ", ".join(
        f"{quote_ident(c.name)} {c.type}{' NOT NULL' if c.name in rel.not_null else ''}" for c in rel.columns
    )
    # an aggregate view's APP, state and core-row tables come from crr.aggregate.create_sql
    stmts = [f"CREATE TABLE {rel.app} ({app_cols})"] if rel.has_app and rel.aggregate is None else []
    if not rel.stored:
        return stmts
    if rel.is_base:
        stmts.append(f"CREATE TABLE {rel.aug('t')} (id UHUGEINT, {cols}, seq BIGINT)")
    elif rel.colocated:
        stmts.append(f"""CREATE TABLE {rel.aug('w')} (id UHUGEINT, cl INTEGER, kh UHUGEINT, stamp UHUGEINT,
                         vis BOOLEAN, seq BIGINT, vid UHUGEINT, {cols}, dseq BIGINT)""")
    elif rel.replica:
        stmts += replica_ddl(rel)
    else:
        stmts.append(monomials_ddl(rel))
    return stmts


def monomials_ddl(rel: Relation) -> str:
    """DDL creating a derived relation's monomials table ``$m``: ``(vid, mid, ids, cols..., seq)``."""
    cols = ", ".join(f"{c.name} {c.type}" for c in rel.aug_columns)
    return f"CREATE TABLE {rel.aug('m')} (vid UHUGEINT, mid UHUGEINT, ids UHUGEINT[], {cols}, seq BIGINT)"


def replica_ddl(rel: Relation) -> list[str]:
    """DDL creating a replica's table ``$e`` and its view ``$m`` (see :mod:`crr.replica`)."""
    return [replica_table_ddl(rel), replica_view_ddl(rel)]


def replica_table_ddl(rel: Relation) -> str:
    """DDL creating a replica's table ``$e``: each tuple's causal-length entry and values in one row,
    ``(id, cl, kh, stamp, vis, seq, cols..., tseq)``."""
    cols = ", ".join(f"{c.name} {c.type}" for c in rel.aug_columns)
    return f"""CREATE TABLE {rel.aug('e')} (id UHUGEINT, cl INTEGER, kh UHUGEINT, stamp UHUGEINT, vis BOOLEAN,
                                            seq BIGINT, {cols}, tseq BIGINT)"""


def replica_view_ddl(rel: Relation) -> str:
    """DDL creating a replica's ``$m``: a view of its ``$e`` rows with values, in the columns of a
    monomials table ``(vid, mid, ids, cols..., seq)``, each tuple its own one monomial."""
    names = ", ".join(c.name for c in rel.aug_columns)
    return f"""CREATE VIEW {rel.aug('m')} AS SELECT id AS vid, id AS mid, [id] AS ids, {names}, tseq AS seq
               FROM {rel.aug('e')} WHERE tseq IS NOT NULL"""


def drop_ddl(rel: Relation) -> list[str]:
    """DDL dropping a relation's AUG and APP tables."""
    stmts = [f"DROP TABLE IF EXISTS {rel.app}"] if rel.has_app else []
    if rel.is_base:
        stmts.append(f"DROP TABLE IF EXISTS {rel.aug('t')}")
    elif rel.replica:
        stmts += [f"DROP VIEW IF EXISTS {rel.aug('m')}", f"DROP TABLE IF EXISTS {rel.aug('e')}"]
    else:
        stmts += [f"DROP TABLE IF EXISTS {rel.aug(x)}" for x in ("m", "w")]
    if rel.aggregate is not None:
        stmts += [f"DROP TABLE IF EXISTS {t}" for t in rel.aggregate.tables()]
    return stmts
