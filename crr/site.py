"""A site: one device's database, with its APP and AUG layers, in one DuckDB file."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import uuid
from typing import Any, Iterable, Iterator

import duckdb
import pyarrow as pa

from crr.aggregate import AggregateSpec, analyse_aggregate, is_aggregate
from crr.aggregate import create_sql as aggregate_create_sql
from crr import colocated, replica
from crr.arrow_slots import ArrowSlots
from crr.catalog import (APP_TABLE_EXISTS_SQL, CATALOG_DDL, CATALOG_ROWS_SQL, KIND_TEXT, META_INSERT_SQL, META_SQL,
                         NEXT_POSITION_SQL, RELATION_DELETE_SQL, SCHEMA, STORAGE_VERSION, STORED_UPDATE_SQL,
                         Catalog, Relation, SiteFlag, aug_ddl, describe_query_sql, drop_ddl, relation_from_row, relation_insert_sql, relation_row,
                         stand_in_drop_sql, stand_in_view_sql, flag_set_sql)
from crr.changeset import Changeset, RelationChanges, check_duckdb_values
from crr.clock import HybridClock
from crr.errors import (CatalogError, ChangesetError, ConstraintError, CrrError, ReadOnlyRelationError,
                        SiteError, SqlError, TypeMismatchError, UnsupportedSqlError)
from crr.prepared import Prepared
from crr.cte import CteWrite, cte_values
from crr.point import (ADDED, FLIPPED, GROWN_ENTRIES, NEW_TUPLES, PointResult, PointWrite, ThenWrites,
                       added_values_sql, flips_values_sql, param_texts)
from crr.id_sets import ids_arrow
from crr.maintain import Batch, BatchResult, Maintainer, view_errors, view_query_failed
from crr.batch_rows import Rows, RowsKind
from crr.causal import KeyHashSource, LocalEntries, relation_entries_delete_sql
from crr.changes import base_provenance_sql, collect_changes, derived_provenance_sql
from crr.counters import counters_update_sql, largest_seq_sql, largest_stamp_sql
from crr.merge import (CURSOR_UPSERT_SQL, DERIVED_UPDATE_SQL, LINEAGE_UPDATE_SQL, PEER_CURSOR_SQL, PEER_CURSORS_SQL,
                       ENTRY_COLUMNS, MergeInputs, MergeResult, changeset_errors, grown_lineage, held_relations,
                       newly_derived, plan_merge, received_entries, tracked_cursors_sql, tuple_columns)
from crr.point_merge import received_new_batch, received_new_rows, received_rows_insert_sql
from crr.types import Column, type_family, type_probe_sql
from crr.upgrade import upgradable, upgrade
from crr.writes import prepare_update, prepare_write
from crr.sql import dml
from crr.sql.compile import compile_view
from crr.sql.statements import (CreateTable, CreateView, Dml, DmlKind, Drop, Other, RelationKind, classify,
                            fold_identifier)

_DUCKDB_ERRORS: list[tuple[type, type]] = [
    (duckdb.ConstraintException, ConstraintError),
    (duckdb.ConversionException, TypeMismatchError),
    (duckdb.BinderException, SqlError),
    (duckdb.ParserException, SqlError),
    (duckdb.CatalogException, SqlError),
    (duckdb.InvalidInputException, SqlError),
]


@contextlib.contextmanager
def _translated_errors() -> Iterator[None]:
    """Re-raise DuckDB errors from user SQL as CrrError subclasses."""
    try:
        yield
    except duckdb.Error as e:
        for src, dst in _DUCKDB_ERRORS:
            if isinstance(e, src):
                raise dst(str(e).strip()) from None
        raise CrrError(f"DuckDB error: {str(e).strip()}") from None


class _ViewFailed(Exception):
    """A view's query failed on a point write's rows inside the write's one statement, which wrote
    nothing: the write goes to the general path, whose error names the view (not a CrrError: it never
    leaves the site)."""


@contextlib.contextmanager
def _views_inside(active: bool) -> Iterator[None]:
    """Turn a view's query failing (:func:`crr.maintain.view_query_failed`) into :class:`_ViewFailed`
    when views are maintained inside the statement (``active``); other errors pass on."""
    try:
        yield
    except duckdb.Error as e:
        if not (active and view_query_failed(e)):
            raise
        raise _ViewFailed() from None


POINT_TABLE = "_crr_point_arrow"  # the Arrow slot of a point write's flips and rows (crr.point)


class Site:
    """One device's replicated database.

    ``Site(path=":memory:", site_id=None)`` opens or creates the DuckDB file at ``path``. The site id
    is generated once and persisted; passing a different ``site_id`` for an existing file is an error.
    ``max_clock_skew`` (seconds) bounds how far ahead of this site's clock a merged stamp may be.
    """

    def __init__(self, path: str | os.PathLike = ":memory:", site_id: str | None = None, *,
                 max_clock_skew: float = 86_400.0) -> None:
        self.path = str(path)
        try:
            self.max_clock_skew = float(max_clock_skew)
        except (TypeError, ValueError):
            self.max_clock_skew = float("nan")
        if not self.max_clock_skew >= 0:  # NaN too
            raise SiteError(f"max_clock_skew must be a number of seconds >= 0 (float('inf'): no bound), "
                            f"not {max_clock_skew!r}")
        try:
            self._con = duckdb.connect(self.path)
        except duckdb.Error as e:
            raise SiteError(f"cannot open site database {self.path}: {e}") from None
        self._con.execute("SET arrow_lossless_conversion = true")
        self._slots = ArrowSlots(self._con)  # where statements read Arrow tables (registered once each)
        self._catalog = Catalog()  # the committed catalog snapshot
        self._staged: Catalog | None = None  # the snapshot the open transaction will commit, if it changes it
        self._widths: dict[str, tuple[int, int]] = {}
        self._parsed: dict[str, Dml] = {}  # statement text -> parsed DML (a small cache)
        self._accepted: dict[tuple, pa.Schema] = {}  # expected columns -> Arrow schema already checked
        self._rewritten: dict[int, dml.RowQueries] = {}  # id(parsed DML) -> its row queries
        self._delta_sql: dict[tuple, tuple[str, bool]] = {}  # views' generated delta SQL (see Maintainer)
        self._prepared = Prepared()  # point-path statements prepared on the connection
        self._closed = False
        try:
            self._open(site_id)
        except BaseException:
            self._con.close()
            raise

    # -- opening -------------------------------------------------------------------------------
    def _open(self, site_id: str | None) -> None:
        con = self._con
        con.begin()
        try:
            for ddl in CATALOG_DDL:
                con.execute(ddl)
            meta = dict(con.execute(META_SQL).fetchall())
            if not meta:
                meta = {"site_id": site_id or f"site-{uuid.uuid4().hex[:12]}", "version": str(STORAGE_VERSION),
                        "seq": "0", "hlc": "0", **{flag.value: "false" for flag in SiteFlag}}
                con.executemany(META_INSERT_SQL, list(meta.items()))
            if upgradable(int(meta["version"])) and (site_id is None or meta["site_id"] == site_id):
                upgrade(con, int(meta["version"]))
                meta = dict(con.execute(META_SQL).fetchall())
            con.commit()
        except BaseException:
            con.rollback()
            raise
        if site_id is not None and meta["site_id"] != site_id:
            raise SiteError(f"{self.path} belongs to site {meta['site_id']!r}, not {site_id!r}; "
                            "open it without site_id or with its own id")
        if int(meta["version"]) > STORAGE_VERSION:
            raise SiteError(f"{self.path} was written by a newer crr (storage version {meta['version']}); upgrade crr")
        if int(meta["version"]) < STORAGE_VERSION:
            raise SiteError(f"{self.path} uses storage version {meta['version']}, older than this crr's "
                            f"{STORAGE_VERSION}; create a fresh site and merge a peer's full state into it "
                            "(site.merge(peer.changes()))")
        self.site_id: str = meta["site_id"]
        self._catalog = Catalog(flags=frozenset(flag for flag in SiteFlag if meta.get(flag.value) != "false"))
        rows = con.execute(CATALOG_ROWS_SQL).fetchall()
        for row in rows:
            rel = relation_from_row(row)
            if rel.kind is RelationKind.VIEW:
                plan, spec = self._compile(rel.name, rel.definition or "")
                rel = dataclasses.replace(rel, plan=plan, aggregate=spec)
            self._catalog = self._catalog.with_(rel)
        self._seq, last = self._recover_counters(int(meta["seq"]), int(meta["hlc"]))
        self._clock = HybridClock(self.site_id, last)

    def _recover_counters(self, seq: int, hlc: int) -> tuple[int, int]:
        """The sequence number and clock at open: the stored ones, or what the AUG rows show if larger.

        Writes and merges do not update ``_crr.meta`` (one statement less per transaction): every
        one of them stores its sequence number in the AUG rows it writes and its stamps in
        ``_crr.cl``, so the largest of those is the counter. DDL, which can drop such rows, and
        ``close`` store both counters in ``_crr.meta``.
        """
        seen = self._con.execute(largest_seq_sql(self._rels)).fetchall()[0][0] or 0
        stamp = self._con.execute(largest_stamp_sql(self._rels)).fetchall()[0][0] or 0
        return max(seq, int(seen)), max(hlc, int(stamp) >> 64)

    def _save_counters(self) -> None:
        """Store the sequence number and clock in ``_crr.meta`` (see :meth:`_recover_counters`)."""
        self._con.execute(counters_update_sql(), [str(self._seq), str(self._clock.last)])

    def _compile(self, name: str, sql: str):
        from crr.sql.statements import parse_one
        return self._compile_tree(name, parse_one(sql))

    def _compile_tree(self, name: str, tree) -> tuple[Any, AggregateSpec | None]:
        """Compile a view query: its delta plan, and for an aggregate view its spec (the plan is then
        its core's; see :mod:`crr.aggregate`)."""
        def columns(r: str):
            rel = self._rels.get(r)
            if rel is not None and rel.aggregate is not None:
                raise UnsupportedSqlError(f"materialized views do not support reading aggregate view {r}; "
                                          "declare the view over the aggregate's inputs instead")
            return [(c.name, c.type) for c in rel.columns] if rel else None

        def describe(sql: str):
            # remote sources have no APP table: stand in empty typed views while DuckDB types the query
            sources = [r for r in self._rels.values() if r.kind is RelationKind.SOURCE]
            for r in sources:
                self._con.execute(stand_in_view_sql(r))
            try:
                with _translated_errors():
                    return [(r[0], r[1]) for r in self._con.execute(describe_query_sql(sql)).fetchall()]
            finally:
                for r in sources:
                    self._con.execute(stand_in_drop_sql(r))

        if is_aggregate(tree):
            spec = analyse_aggregate(name, tree, columns, describe)
            return compile_view(name, spec.core, columns, describe), spec
        return compile_view(name, tree, columns, describe), None

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the site; committed state is durable in its file."""
        if not self._closed:
            self._closed = True
            try:
                self._save_counters()
            except duckdb.Error:
                pass  # the counters are recovered from the AUG rows at the next open
            self._con.close()

    def __enter__(self) -> "Site":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Site({self.path!r}, site_id={self.site_id!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise SiteError("the site is closed; open it again with crr.Site(path)")

    @property
    def _rels(self) -> Catalog:
        """The catalog as the code running now sees it: the open transaction's staged snapshot, if
        it has one, else the committed one."""
        return self._staged if self._staged is not None else self._catalog

    def _stage(self, catalog: Catalog) -> None:
        """Make ``catalog`` the snapshot the open transaction commits (its DDL is in the same transaction)."""
        self._staged = catalog

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One DuckDB transaction; a catalog snapshot staged in it replaces the committed one only
        when it commits (so a rolled-back transaction leaves the catalog as the file has it)."""
        self._check_open()
        self._con.begin()
        try:
            yield
            self._con.commit()
            self._slots.committed()
            if self._staged is not None:
                self._catalog = self._staged
        except BaseException:
            self._con.rollback()
            self._slots.rolled_back()
            self._widths.clear()  # a cache of monomial lengths, possibly of rolled-back rows
            raise
        finally:
            self._staged = None

    # -- introspection -------------------------------------------------------------------------
    @property
    def cursor(self) -> int:
        """The site's current sequence number: ``changes(since=site.cursor)`` is empty."""
        return self._seq

    def relations(self) -> dict[str, str]:
        """The crr relations held here: ``{name: kind}`` with kind replicated, remote, source or view."""
        return {n: r.kind.value for n, r in self._rels.items()}

    def relation(self, name: str) -> Relation:
        """The catalog entry of a relation (columns, key, kind, view plan)."""
        rel = self._rels.get(fold_identifier(name))
        if rel is None:
            raise CatalogError(f"no relation named {name} at site {self.site_id}")
        return rel

    def lineage(self, name: str) -> set[str]:
        """The base relations whose tuple ids appear in a relation's provenance."""
        return set(self._rels.lineage(self.relation(name).name))

    def provenance(self, name: str) -> dict[tuple, list[list[int]]]:
        """Each AUG tuple's provenance in canonical form: ``{values: [sorted ids of each monomial]}``."""
        rel = self.relation(name)
        self._check_open()
        if not rel.stored:
            raise CatalogError(f"{rel.name} is a remote source that keeps no tuples at this site (no view joins it)")
        if rel.is_base:
            rows = self._con.execute(base_provenance_sql(rel)).fetchall()
            return {tuple(r[:-1]): [[r[-1]]] for r in rows}
        if rel.colocated:
            return {tuple(r[:-1]): r[-1] for r in self._con.execute(colocated.provenance_sql(rel)).fetchall()}
        rows = self._con.execute(derived_provenance_sql(rel)).fetchall()
        return {tuple(r[:-1]): r[-1] for r in rows}

    # -- statements ----------------------------------------------------------------------------
    def execute(self, sql: str, params: Iterable[Any] | dict | None = None) -> list[tuple]:
        """Run one statement: crr DDL, DML on a replicated table, or any read-only query.

        A query returns its rows as a list of tuples; DML returns ``[(rows_affected,)]``; DDL ``[]``.
        """
        self._check_open()
        stmt = self._classify(sql)
        params = list(params) if params is not None and not isinstance(params, dict) else params
        if isinstance(stmt, (CreateTable, CreateView, Drop)):
            self._forget_statements()
        if isinstance(stmt, CreateTable):
            return self._create_table(stmt)
        if isinstance(stmt, CreateView):
            return self._create_view(stmt)
        if isinstance(stmt, Drop):
            return self._drop(stmt, sql)
        if isinstance(stmt, Dml):
            return self._dml(stmt, params)
        return self._other(stmt, params)

    def _classify(self, sql: str):
        """Parse a statement, reusing the parse of DML seen before (apps repeat their statements)."""
        stmt = self._parsed.get(sql)
        if stmt is None:
            stmt = classify(sql)
            if isinstance(stmt, Dml):
                if len(self._parsed) >= 256:
                    self._forget_statements()
                self._parsed[sql] = stmt
        return stmt

    def _forget_statements(self) -> None:
        """Drop cached DML and delta SQL (after DDL, which they depend on)."""
        self._parsed.clear()
        self._rewritten.clear()
        self._delta_sql.clear()
        self._prepared.forget(self._con)

    def _other(self, stmt: Other, params) -> list[tuple]:
        for t in stmt.tables:
            if t in self._rels and self._rels[t].kind is RelationKind.SOURCE:
                raise CatalogError(f"{t} is a remote source: this site keeps no table of it; query the views "
                                   "over it, or declare it as CREATE REMOTE TABLE to keep a readable copy")
        if not stmt.read_only:  # reading crr relations is fine; writing one (or anything in _crr) is not
            touched = {t for t in stmt.writes if t in self._rels or t == f"{SCHEMA}."}
            if touched:
                raise UnsupportedSqlError(
                    f"this statement would change {', '.join(sorted(touched))} outside crr; crr relations "
                    "change only through INSERT/UPDATE/DELETE on replicated tables and CREATE/DROP of crr DDL")
        with _translated_errors():
            cur = self._con.execute(stmt.sql, params) if params else self._con.execute(stmt.sql)
            try:
                return cur.fetchall()
            except duckdb.InvalidInputException:
                return []

    def _create_table(self, stmt: CreateTable) -> list[tuple]:
        if self._name_taken(stmt.name, stmt.if_not_exists):
            return []
        with self._transaction():
            create, describe, drop = type_probe_sql([(c.name, c.type_sql) for c in stmt.columns])
            with _translated_errors():
                self._con.execute(create)
            described = self._con.execute(describe).fetchall()
            self._con.execute(drop)
            columns = [Column(r[0], r[1]) for r in described]
            for c in columns:
                type_family(c.type)
            rel = Relation(name=stmt.name, kind=stmt.kind, columns=columns,
                           key=stmt.key if stmt.kind is RelationKind.REPLICATED else [],
                           not_null=[c.name for c in stmt.columns if c.not_null], wide=False,
                           stored=stmt.kind is not RelationKind.SOURCE)
            self._add_relation(rel)
            self._stage(self._rels.with_(rel))
        return []

    def _name_taken(self, name: str, if_not_exists: bool) -> bool:
        """True if ``name`` is a crr relation and IF NOT EXISTS was given; raise if it is taken otherwise."""
        if name in self._rels or self._app_exists(name):
            if if_not_exists and name in self._rels:
                return True
            raise CatalogError(f"a relation or table named {name} already exists at this site; "
                               "DROP it first or pick another name")
        return False

    def _app_exists(self, name: str) -> bool:
        return bool(self._con.execute(APP_TABLE_EXISTS_SQL, [name]).fetchall()[0][0])

    def _create_aug(self, rel: Relation) -> None:
        """Create a relation's AUG and APP tables; a replica takes in the entries ``_crr.cl`` kept for
        its name (a source a join starts keeping, or a relation declared again after a drop: see
        :mod:`crr.replica`)."""
        for ddl in aug_ddl(rel):
            self._con.execute(ddl)
        if rel.replica:
            for stmt in replica.adopt_sql(rel):
                self._con.execute(stmt)

    def _add_relation(self, rel: Relation) -> None:
        self._create_aug(rel)
        pos = self._con.execute(NEXT_POSITION_SQL).fetchall()[0][0]
        self._con.execute(relation_insert_sql(), relation_row(rel, pos))

    def _create_view(self, stmt: CreateView) -> list[tuple]:
        if self._name_taken(stmt.name, stmt.if_not_exists):
            return []
        plan, spec = self._compile_tree(stmt.name, stmt.query)
        columns = [Column(n, t) for n, t in plan.columns]
        for c in columns:
            type_family(c.type)
        # Monomials of a join of replicated tables have a known length; views over remote tables or
        # views start narrow and are marked wide when a longer monomial first arrives.
        width = plan.width(lambda r: 1 if self._rels[r].is_base else None)
        rel = Relation(name=stmt.name, kind=RelationKind.VIEW, columns=columns, definition=stmt.sql, plan=plan,
                       wide=width is not None and width > 1, aggregate=spec)
        to_store = self._rels.sources_to_store(plan)
        rel = dataclasses.replace(rel, colocated=colocated.eligible(self._rels, rel))
        with self._transaction():
            self._uncolocate(self._rels.with_(rel))  # a view over a co-located view or its source
            for source in to_store:
                self._create_aug(source)
                self._con.execute(STORED_UPDATE_SQL, [source.name])
            self._add_relation(rel)
            if spec is not None:
                for ddl in aggregate_create_sql(spec, plan.columns):
                    self._con.execute(ddl)
            self._stage(self._rels.with_(*to_store, rel))
            self._populate(rel)
            self._save_counters()
        return []

    def _maintainer(self) -> Maintainer:
        """A maintainer for one transaction, writing with the next sequence number."""
        m = Maintainer(self._con, self._slots, self._rels, self._seq + 1, self._widths)
        m.lineage = {name: set(lin) for name in self._rels if (lin := self._rels.lineage(name))}
        m.sql_cache = self._delta_sql
        return m

    def _populate(self, view: Relation) -> None:
        """Fill a new view from the current AUG state of its inputs."""
        m = self._maintainer()
        try:
            with view_errors(view.name):  # the query failing on the data held: refused by name
                m.populate(view)
        except BaseException:
            m.release()  # the transaction rolls back, its temp tables with it
            raise
        m.cleanup(force=True)
        self._stage_marked(m)
        if m.result.changed:
            self._bump()

    def _drop(self, stmt: Drop, sql: str) -> list[tuple]:
        rel = self._rels.get(stmt.name)
        if rel is None:
            if stmt.kind is None:  # plain DROP TABLE / DROP VIEW of a non-crr object
                return self._other(Other(sql=sql, tree=None, read_only=True), None)
            if stmt.if_exists:
                return []
            raise CatalogError(f"no {self._kind_text(stmt.kind)} named {stmt.name} at this site")
        self._rels.check_drop(rel, stmt.kind, stmt.plain)
        with self._transaction():
            if rel.colocated:  # its source's entries stay, in _crr.cl, as they would in the standard layout
                self._uncolocate(self._rels, [rel])
                rel = self._rels[rel.name]
            remaining = set()
            for other in self._rels.values():
                if other.name != rel.name:
                    remaining |= self.lineage(other.name)
            if rel.replica and rel.name in remaining:  # its entries stay, in _crr.cl, for the relations holding it
                self._con.execute(replica.keep_entries_sql(rel))
                self._note_unchecked_entries()
            for ddl in drop_ddl(rel):
                self._con.execute(ddl)
            self._con.execute(RELATION_DELETE_SQL, [rel.name])
            for base in self.lineage(rel.name) - remaining:
                self._con.execute(relation_entries_delete_sql(), [base])
            self._save_counters()  # the rows dropped may have held the largest sequence number
            self._stage(self._rels.without(rel.name))
        self._widths.pop(rel.name, None)
        return []

    @staticmethod
    def _kind_text(kind: RelationKind | None) -> str:
        return KIND_TEXT.get(kind, "relation") if kind is not None else "relation"

    def _writable(self, name: str) -> Relation:
        rel = self._rels.get(name)
        if rel is None:
            raise CatalogError(f"no replicated table named {name} at this site")
        if not rel.is_base:
            raise ReadOnlyRelationError(
                f"{name} is a {self._kind_text(rel.kind)} and cannot be written here; "
                + ("its contents follow its query" if rel.kind is RelationKind.VIEW else
                   "it only feeds this site's views" if rel.kind is RelationKind.SOURCE else
                   "it changes only by merging changesets from the sites that hold it"))
        return rel

    def _dml(self, stmt: Dml, params) -> list[tuple]:
        if stmt.target not in self._rels:
            if stmt.target.startswith("_crr") or (stmt.tree.this and getattr(stmt.tree.this, "db", "") == SCHEMA):
                raise UnsupportedSqlError("crr's internal tables cannot be written directly")
            return self._other(Other(sql=stmt.tree.sql("duckdb"), tree=stmt.tree, read_only=True), params)
        rel = self._writable(stmt.target)
        columns = [(c.name, c.type) for c in rel.columns]
        rq = self._rewritten.get(id(stmt))
        if rq is None:
            rewrite = {DmlKind.INSERT: dml.insert_rows, DmlKind.UPDATE: dml.update_rows,
                       DmlKind.DELETE: dml.delete_rows}[stmt.kind]
            rq = self._rewritten[id(stmt)] = rewrite(stmt.tree, rel.name, columns)
        given = param_texts(rel.columns, rq.params_at, params) if stmt.kind is DmlKind.INSERT else None
        source = rq.old if stmt.kind is DmlKind.DELETE else rq.new
        assert source is not None
        point_write = PointWrite(self._con, self._prepared)

        def write(new_tried: bool = False, then: ThenWrites | None = None) -> PointResult | None:
            with _translated_errors(), _views_inside(then is not None):
                return point_write.write(rel, source, old=stmt.kind is not DmlKind.INSERT,
                                         new=stmt.kind is not DmlKind.DELETE, params=params, clock=self._clock,
                                         seq=self._seq + 1, given=given,
                                         unchecked_entries=self._rels.unchecked_entries, new_tried=new_tried,
                                         then=then)

        derived = self._rels.derived_from(rel.name)  # the relations reading the table
        m = self._maintainer() if derived else None  # builds their statements for this write
        new_tried = False  # whether the one statement of rows new to the site ran (and wrote nothing)
        general = False  # whether a view failed inside a write's one statement: the general path names it
        appends = m.appends(rel, derived, NEW_TUPLES) if m is not None and given is not None else None
        if given is not None and (appends is not None or not derived):
            # rows new to the site, with the maintenance of the relations reading the table if any:
            # one statement, no lookup, its own transaction (DuckDB commits it on its own)
            self._check_open()
            new_tried = True
            try:
                with _translated_errors(), _views_inside(bool(appends)):
                    point = point_write.insert_new(rel, given, self._clock, self._seq + 1,
                                                   unchecked_entries=self._rels.unchecked_entries, then=appends or ())
            except _ViewFailed:
                point, general = None, True  # nothing written
            if point is not None:
                if point.changed:
                    self._bump()
                return [(point.count,)]
        if stmt.kind is DmlKind.DELETE and rq.delete is not None and not isinstance(params, dict):
            removals = m.removals(rel, derived, GROWN_ENTRIES) if m is not None else []
            if removals is not None:
                # the APP rows, the entries of their keys and the views' rows they held: one
                # statement, any number of rows, its own transaction
                self._check_open()
                with _translated_errors():
                    count = point_write.delete(rel, rq.delete, rq.qualifier or rel.name, params, self._seq + 1,
                                               then=removals)
                if count:
                    self._bump()
                return [(count,)]
        then = self._rewrites(m, rel, derived) if m is not None and not general else None
        if not derived or then is not None:
            # The point path's one writing statement (with the maintenance of the relations reading
            # the table, ``then``) is its own transaction (DuckDB commits it on its own), and the
            # reads before it see the state it changes, as nothing else writes through this site's
            # connection in between.
            self._check_open()
            try:
                point = write(new_tried=new_tried, then=then)
            except _ViewFailed:  # nothing written
                general = True
            else:
                if point is not None:
                    if point.changed:
                        self._bump()
                    return [(point.count,)]
                derived = []  # more rows than the point path takes: the batch path below
        with self._transaction():
            point = write(new_tried=new_tried) if derived else None
            if point is not None:  # a small write (else it takes the batch path below)
                if point.changed:
                    self._maintain_point(rel, point)
                return [(point.count,)]
            if stmt.kind is DmlKind.UPDATE:  # one query yields each row's old and new values
                assert rq.new is not None
                with _translated_errors():
                    batch, count = prepare_update(self._con, rel, f"({rq.new})", self._clock, params,
                                                  unchecked_entries=self._rels.unchecked_entries)
                self._apply(batch)
            elif stmt.kind is DmlKind.INSERT:
                count = self._write(rel, None, f"({rq.new})", params)
            else:
                count = self._write(rel, f"({rq.old})", None, params)
        return [(count,)]

    def _maintain_point(self, rel: Relation, point: PointResult) -> None:
        """Maintain the relations deriving from ``rel`` after a point write changed it. Its flips and
        added rows are read from one Arrow slot."""
        self._slots.put(POINT_TABLE, point.as_arrow(rel))
        try:
            batch = Batch(local=LocalEntries(rel.name, len(point.flips), None), local_write=True,
                          applied_flips=Rows(POINT_TABLE, RowsKind.POINT_FLIPS), applied_flips_arrow=point.flips_arrow(rel),
                          applied_fresh=ids_arrow(point.fresh))
            if point.added:
                batch.base[rel.name] = Rows(POINT_TABLE, RowsKind.POINT_ADDED)
                if len(point.fresh) == len(point.added):  # every added row is new to the table
                    batch.fresh = frozenset({rel.name})
            self._apply(batch, changed=True)
        finally:
            self._slots.release(POINT_TABLE)

    @staticmethod
    def _rewrites(m: Maintainer, rel: Relation, derived: list[str]) -> ThenWrites | None:
        """The maintenance of the relations ``derived`` from ``rel`` after a point write, as statements
        that run inside the write's one statement (``m``'s :meth:`Maintainer.rewrites`, given the
        write's flips and added rows as they are known before it runs), or None when one of them
        needs the general path."""
        views = m.one_statement_views(rel, derived, ADDED)
        if views is None:
            return None

        def then(flips: list[tuple[int, bool]], added: list[tuple[int, tuple[str | None, ...]]],
                 fresh: bool) -> list[CteWrite]:
            only_new = fresh and {id_ for id_, _ in added} == {id_ for id_, vis in flips if vis} and all(v for _, v in flips)
            return [(FLIPPED, flips_values_sql(len(flips)), [p for flip in flips for p in flip]),
                    (ADDED, added_values_sql(rel, len(added)), [p for id_, values in added for p in (id_, *values)]),
                    *m.rewrites(rel, views, FLIPPED, fresh, only_new)]
        return then

    def insert_many(self, table: str, rows: Any) -> int:
        """Bulk-insert rows into a replicated table in one transaction; returns rows given.

        ``rows`` is a list of tuples (in column order), a pyarrow Table, or a pandas DataFrame
        (columns matched by name when all names match, else by position).
        """
        self._check_open()
        rel = self._writable(fold_identifier(table))
        names = rel.column_names
        if isinstance(rows, pa.Table):
            data = rows
        elif hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # pandas DataFrame
            data = pa.Table.from_pandas(rows, preserve_index=False)
        else:
            rows = list(rows)
            if any(len(r) != len(names) for r in rows):
                raise SqlError(f"insert_many into {rel.name}: every row needs {len(names)} values ({', '.join(names)})")
            data = pa.table({n: pa.array(list(col)) for n, col in zip(names, zip(*rows))}) if rows else None
            if data is None:
                return 0
        given = [fold_identifier(c) for c in data.column_names]
        if sorted(given) == sorted(names):
            pick = {n: given.index(n) for n in names}
        elif len(given) == len(names):
            pick = {n: i for i, n in enumerate(names)}
        else:
            raise SqlError(f"insert_many into {rel.name}: got columns {data.column_names}, expected {names}")
        for name, col in zip(data.column_names, data.columns):
            try:  # valid Arrow that DuckDB cannot hold (a timestamp below its range) would break the file
                check_duckdb_values(col, f"column {name}")
            except ChangesetError as e:
                raise TypeMismatchError(f"insert_many into {rel.name}: {str(e).split(': ', 1)[1]}; "
                                        "nothing was written") from None
        data = data.rename_columns([f"g{i}" for i in range(len(given))])
        casts = ", ".join(f"CAST(g{pick[c.name]} AS {a.type}) AS {a.name}" for c, a in zip(rel.columns, rel.aug_columns))
        with self._transaction():
            bulk = self._slots.put("_crr_bulk", data)
            try:
                batch, _ = self._prepare(rel, None, f"(SELECT {casts} FROM {bulk})")
            finally:
                self._slots.release(bulk)
            self._apply(batch)
        return data.num_rows

    def _prepare(self, rel: Relation, old: str | None, new: str | None, params=None) -> tuple[Batch, int]:
        """The batch of a write whose removed/added rows ``old``/``new`` select (see prepare_write)."""
        with _translated_errors():
            return prepare_write(self._con, rel, old, new, self._clock, params,
                                 unchecked_entries=self._rels.unchecked_entries)

    def _write(self, rel: Relation, old: str | None, new: str | None, params=None) -> int:
        """Apply a local write (inside the caller's transaction); return the rows it affected."""
        batch, count = self._prepare(rel, old, new, params)
        self._apply(batch)
        return count

    def _apply(self, batch: Batch, changed: bool = False) -> BatchResult:
        """Run a batch through the maintainer; the sequence number advances if it (or, ``changed``,
        the caller's own writes in this transaction) changed replicated state."""
        m = self._maintainer()
        try:
            result = m.apply(batch, self._rels.views())
        finally:
            m.cleanup()
        self._stage_marked(m)
        if result.changed or changed:
            self._bump()
        return result

    def _stage_marked(self, m: Maintainer) -> None:
        """Stage the relations whose catalog entry the maintainer changed (it recorded them in the file)."""
        if m.marked:
            self._stage(self._rels.with_(*(m.rels[name] for name in m.marked)))
        for flag in m.raised:  # flags it set (and recorded in the file)
            if flag not in self._rels.flags:
                self._stage(self._rels.with_flag(flag))

    def _note_unchecked_entries(self) -> None:
        """Record in the open transaction that ``_crr.cl`` may hold entries whose key hash went
        unchecked (:attr:`crr.catalog.Catalog.unchecked_entries`): entries moved in from a replica's or
        a co-located view's table, whose merges recompute no key hash."""
        if not self._rels.unchecked_entries:
            self._con.execute(flag_set_sql(SiteFlag.UNCHECKED_ENTRIES))
            self._stage(self._rels.with_flag(SiteFlag.UNCHECKED_ENTRIES))

    def _uncolocate(self, catalog: Catalog, views: list[Relation] | None = None) -> None:
        """Move the co-located views whose conditions ``catalog`` breaks (or ``views``) to the standard
        layout, inside the open transaction, and stage them so (see :mod:`crr.colocated`)."""
        for view in (colocated.broken(catalog) if views is None else views):
            for stmt in colocated.uncolocate_sql(view, colocated.source_of(view)):
                self._con.execute(stmt)
            self._stage(self._rels.changed(view.name, colocated=False))
            self._note_unchecked_entries()

    def _bump(self) -> None:
        """Advance the sequence number after a transaction wrote AUG rows stamped with it."""
        self._seq += 1

    # -- replication ---------------------------------------------------------------------------
    def changes(self, since: int | None = None, relations: Iterable[str] | None = None) -> Changeset:
        """Everything changed after cursor ``since`` (None or 0: the full state) for some relations.

        ``relations`` defaults to every relation held here. The result's ``cursor`` resumes the stream.
        """
        self._check_open()
        since = since or 0
        named = [self.relation(r).name for r in relations] if relations is not None else None
        names = self._rels.names_to_send(named)
        with self._transaction():
            cursor = self._seq
            out, cl = collect_changes(self._con, self._rels, names, since)
        return Changeset(source=self.site_id, since=since, cursor=cursor, relations=out, cl=cl)

    def merge(self, changeset: Changeset | bytes, *, track: bool = False) -> MergeResult:
        """Merge a changeset (or its bytes): atomic, idempotent and commutative.

        Relations this site does not hold are ignored; a relation whose schema differs from the
        local declaration makes the whole merge fail with changing nothing.
        With ``track=True`` the changeset's source cursor is recorded per (source site, relation)
        in the same transaction (see :meth:`peer_cursor`), so a stream resumes where it stopped.
        """
        self._check_open()
        # bytes are validated as they are decoded; an object built in Python is validated here
        cs = changeset.validate() if isinstance(changeset, Changeset) else Changeset.from_bytes(changeset)
        held, ignored = held_relations(self._rels, cs)
        point = self._merge_new_rows(cs, held, track)
        if point is not None:
            return MergeResult(point, ignored)
        inputs = MergeInputs(self._con, self._slots, self._accepted)
        try:
            with self._transaction(), changeset_errors():
                grown = grown_lineage(held)
                if grown:  # staged: the committed catalog changes only if the merge commits
                    self._stage(self._rels.with_(*(dataclasses.replace(self._rels[n], lineage=lin)
                                                   for n, lin in grown.items())))
                    self._con.executemany(LINEAGE_UPDATE_SQL, [[json.dumps(sorted(lin)), n] for n, lin in grown.items()])
                derived = newly_derived(held)
                if derived:
                    now = [dataclasses.replace(self._rels[n], derived=True) for n in derived]
                    for rel in now:  # a replica takes the standard layout before monomials arrive
                        if self._rels[rel.name].replica:
                            for stmt in replica.release_sql(self._rels[rel.name], rel):
                                self._con.execute(stmt)
                            self._note_unchecked_entries()
                    self._stage(self._rels.with_(*now))
                    self._con.executemany(DERIVED_UPDATE_SQL, [[n] for n in derived])
                if grown or derived:
                    self._uncolocate(self._rels)
                batch = plan_merge(self._con, self._rels, cs, held, inputs, self.max_clock_skew)
                result = self._apply(batch) if held else BatchResult()
                if track:
                    self._con.executemany(CURSOR_UPSERT_SQL, [[cs.source, rc.name, cs.cursor] for rc in cs.relations])
        finally:
            inputs.close(drop_tables=len(cs) > 10_000)
        return MergeResult(result, ignored)

    def _merge_new_rows(self, cs: Changeset, held: list[tuple[Relation, RelationChanges]], track: bool) -> BatchResult | None:
        """Merge a changeset of rows new to the site as one statement, with the maintenance of the
        views reading their table and the tracked cursors inside it (:mod:`crr.point_merge`): a few
        rows checked in Python (:func:`received_new_rows`) as parameters, more read from Arrow
        through the general path's checks (:func:`received_new_batch`). None, having written
        nothing, when it is not one, or a view needs the general path."""
        rows = received_new_rows(held, cs, self.max_clock_skew)
        batch = received_new_batch(held, cs) if rows is None else None
        if rows is not None:
            rel = rows.relation
        elif batch is not None:
            rel, received = batch
        else:
            return None
        derived = self._rels.derived_from(rel.name)
        m = self._maintainer()
        appends = m.appends(rel, derived, NEW_TUPLES) if derived else []
        if appends is None:
            return None
        then = list(appends)
        if track:
            then.append(("_crr_cursors", tracked_cursors_sql(len(cs.relations), NEW_TUPLES),
                         [p for rc in cs.relations for p in (cs.source, rc.name, cs.cursor)]))
        try:
            with changeset_errors(), _views_inside(bool(appends)):
                if rows is not None:
                    counts = PointWrite(self._con, self._prepared).insert_received(
                        rel, rows.texts, rows.ids, rows.key_hashes, rows.stamps, self._seq + 1,
                        unchecked_entries=self._rels.unchecked_entries, then=then)
                    tuples = len(rows.texts)
                else:
                    counts = self._insert_received(rel, received, cs, then)
                    tuples = received.tuples.num_rows
        except _ViewFailed:
            return None  # nothing written: the general path names the view
        if counts is None:
            return None
        self._bump()
        return m.appended_result(rel, tuples, counts[0], dict(zip((name for name, _, _ in then), counts[1:])),
                                 [r.name for r, _ in held])

    def _insert_received(self, rel: Relation, rc: RelationChanges, cs: Changeset,
                         then: list[CteWrite]) -> tuple[int, ...] | None:
        """Run :func:`received_rows_insert_sql` on the changeset's tables, put in Arrow slots; its
        counts, or None when it wrote nothing."""
        assert cs.cl is not None
        inputs = MergeInputs(self._con, self._slots, self._accepted)
        try:
            cl = inputs.register("_crr_in_cl", cs.cl, ENTRY_COLUMNS, "causal lengths")
            tuples = inputs.register("_crr_in_t0", rc.tuples, tuple_columns(rel), rc.name)
            sources = (KeyHashSource(tuples, rel.name, tuple(rel.key_aug_columns)),) if rel.key else ()
            entries = received_entries(self._rels, cl, cs.cl, frozenset({rel.name}), sources, self.max_clock_skew, ())
            assert entries is not None
            sql = received_rows_insert_sql(rel, entries, tuples, self._rels.unchecked_entries, then)
            counts = self._con.execute(sql, [self._seq + 1, self._seq + 1, *cte_values(then)]).fetchall()[0]
        finally:
            inputs.close(drop_tables=False)
        return counts if counts[0] else None

    def peer_cursor(self, peer: str, relation: str) -> int:
        """The source cursor of the last changeset of ``relation`` merged from ``peer`` with track=True (0 if none)."""
        self._check_open()
        rows = self._con.execute(PEER_CURSOR_SQL, [peer, fold_identifier(relation)]).fetchall()
        return int(rows[0][0]) if rows else 0

    def peer_cursors(self) -> list[tuple[str, str, int, Any]]:
        """All tracked cursors: (peer, relation, cursor, last update time)."""
        self._check_open()
        return self._con.execute(PEER_CURSORS_SQL).fetchall()
