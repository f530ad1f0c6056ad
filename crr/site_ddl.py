"""crr DDL at a site: CREATE REPLICATED/REMOTE TABLE, CREATE REMOTE SOURCE, CREATE MATERIALIZED VIEW, DROP.

Each runs in one transaction (:meth:`crr.site_state.SiteState.transaction`) that writes the
relation's tables and its catalog row and stages the catalog snapshot it commits. A new view is
compiled (:func:`compile_tree`: its delta plans, and for an aggregate view its spec) and filled from
the current AUG state of its inputs in the same transaction.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import duckdb
from sqlglot import exp

from crr import colocated, replica
from crr.aggregate import AggregateSpec, analyse_aggregate, is_aggregate
from crr.aggregate import create_sql as aggregate_create_sql
from crr.aggregate import empty_view_sql as aggregate_empty_view_sql
from crr.catalog import (APP_TABLE_EXISTS_SQL, NEXT_POSITION_SQL, RELATION_DELETE_SQL, STORED_UPDATE_SQL,
                         Relation, aug_ddl, describe_query_sql, drop_ddl, relation_insert_sql, relation_row,
                         kind_text, stand_in_drop_sql, stand_in_view_sql)
from crr.causal import relation_entries_delete_sql
from crr.errors import CatalogError, SqlError, UnsupportedSqlError
from crr.maintain import view_errors
from crr.site_dml import run_other
from crr.site_state import SiteState, translated_errors
from crr.sql.compile import compile_view
from crr.sql.guard import builtin_functions
from crr.sql.validate import check_relation_names, function_name, refuse
from crr.sql.statements import RESERVED_PREFIX, CreateTable, CreateView, Drop, Other, RelationKind, is_reserved, parse_one
from crr.tracked_cursors import CURSORS_FORGET_SQL
from crr.types import Column, quote_ident, type_family, type_probe_sql

USER_FUNCTIONS_SQL = "SELECT DISTINCT lower(function_name) FROM duckdb_functions() WHERE NOT internal"
"""The names of the functions and macros defined at this site (``CREATE MACRO``), not DuckDB's own."""


def compile_definition(state: SiteState, name: str, sql: str) -> tuple[Any, AggregateSpec | None]:
    """Compile a stored view definition (see :func:`compile_tree`)."""
    return compile_tree(state, name, parse_one(sql))


def compile_tree(state: SiteState, name: str, tree, written: str | None = None) -> tuple[Any, AggregateSpec | None]:
    """Compile a view query: its delta plan, and for an aggregate view its spec (the plan is then
    its core's; see :mod:`crr.aggregate`). ``written``: the query's text as the application wrote it,
    after which DuckDB names unaliased columns (:func:`crr.sql.compile.unaliased_names`)."""
    def columns(r: str):
        rel = state.rels.get(r)
        if rel is not None and rel.aggregate is not None:
            raise UnsupportedSqlError(f"materialized views do not support reading aggregate view {r}; "
                                      "declare the view over the aggregate's inputs instead")
        return [(c.name, c.type) for c in rel.columns] if rel else None

    def describe(sql: str):
        # remote sources have no APP table: stand in empty typed views while DuckDB types the query
        sources = [r for r in state.rels.values() if r.kind is RelationKind.SOURCE]
        for r in sources:
            state.con.execute(stand_in_view_sql(r))
        try:
            with translated_errors():
                return [(r[0], r[1]) for r in state.con.execute(describe_query_sql(sql)).fetchall()]
        finally:
            for r in sources:
                state.con.execute(stand_in_drop_sql(r))

    if is_aggregate(tree):
        spec = analyse_aggregate(name, tree, columns, describe, written)
        return compile_view(name, spec.core, columns, describe), spec
    return compile_view(name, tree, columns, describe, written), None


def _check_no_user_functions(state: SiteState, query) -> None:
    """Refuse a view calling a macro defined at this site (``CREATE MACRO``, which may also shadow one
    of DuckDB's functions): other sites do not have it, and redefining it would change what the view
    computes for new rows only. (Checked when the view is declared; a stored view is not refused.)"""
    # the names are read once (listing DuckDB's functions takes about 18 ms) and again when the view
    # calls a function that is neither DuckDB's nor a known macro (created on another connection to
    # the database, which crr does not see)
    unknown = {function_name(node) for node in query.find_all(exp.Anonymous)} - builtin_functions()
    if state.user_functions is None or unknown - state.user_functions:
        state.user_functions = frozenset(r[0] for r in state.con.execute(USER_FUNCTIONS_SQL).fetchall())
    defined = state.user_functions
    for node in query.find_all(exp.Func):
        name = function_name(node)
        if name in defined:
            raise refuse(f"{name}(), a macro defined at this site",
                         "a view may call only DuckDB's own functions, which every site has; write the "
                         "macro's expression in the view")


def create_table(state: SiteState, stmt: CreateTable) -> list[tuple]:
    """CREATE REPLICATED TABLE, CREATE REMOTE TABLE or CREATE REMOTE SOURCE."""
    if _name_taken(state, stmt.name, stmt.if_not_exists):
        return []
    with state.transaction():
        create, describe, drop = type_probe_sql([(c.name, c.type_sql) for c in stmt.columns])
        with translated_errors():
            try:
                state.con.execute(create)
            except (duckdb.CatalogException, duckdb.BinderException, duckdb.ParserException,
                    duckdb.InvalidInputException) as e:
                raise _column_type_error(stmt, e) from None
        described = state.con.execute(describe).fetchall()
        state.con.execute(drop)
        columns = [Column(r[0], r[1]) for r in described]
        for c in columns:
            type_family(c.type)
        rel = Relation(name=stmt.name, kind=stmt.kind, columns=columns,
                       key=stmt.key if stmt.kind is RelationKind.REPLICATED else [],
                       declared_key=stmt.key if stmt.kind is not RelationKind.REPLICATED else [],
                       not_null=[c.name for c in stmt.columns if c.not_null], wide=False,
                       stored=stmt.kind is not RelationKind.SOURCE)
        _add_relation(state, rel)
        state.stage(state.rels.with_(rel))
    return []


def _column_type_error(stmt: CreateTable, error: duckdb.Error) -> SqlError:
    """A column type DuckDB refused (``SERIAL``, a misspelt name), said of the statement given, not of
    the table crr typed the columns with (:func:`crr.types.type_probe_sql`), whose text DuckDB quotes."""
    said = " ".join(str(error).strip().split("\n\nLINE")[0].split())
    return SqlError(f"CREATE {kind_text(stmt.kind).upper()} {stmt.name}: {said}")


def create_view(state: SiteState, stmt: CreateView) -> list[tuple]:
    """CREATE MATERIALIZED VIEW: compiled, declared and filled in one transaction."""
    if _name_taken(state, stmt.name, stmt.if_not_exists):
        return []
    check_relation_names(stmt.query)
    plan, spec = compile_tree(state, stmt.name, stmt.query, stmt.written)
    _check_no_user_functions(state, stmt.query)
    columns = [Column(n, t) for n, t in plan.columns]
    for c in columns:
        type_family(c.type)
    # Monomials of a join of replicated tables have a known length; views over remote tables or
    # views start narrow and are marked wide when a longer monomial first arrives.
    width = plan.width(lambda r: 1 if state.rels[r].is_base else None)
    rel = Relation(name=stmt.name, kind=RelationKind.VIEW, columns=columns, definition=stmt.sql, plan=plan,
                   wide=width is not None and width > 1, aggregate=spec)
    to_store = state.rels.sources_to_store(plan)
    rel = dataclasses.replace(rel, colocated=colocated.eligible(state.rels, rel))
    with state.transaction():
        state.uncolocate(state.rels.with_(rel))  # a view over a co-located view or its source
        for source in to_store:
            _create_aug(state, source)
            state.con.execute(STORED_UPDATE_SQL, [source.name])
        _add_relation(state, rel)
        if spec is not None:
            for ddl in aggregate_create_sql(spec, plan.columns):
                state.con.execute(ddl)
        state.stage(state.rels.with_(*to_store, rel))
        _populate(state, rel)
        empty_row = aggregate_empty_view_sql(spec) if spec is not None else None
        if empty_row is not None:
            with view_errors(rel.name, state.rels):  # over no rows the query may fail (10 // count(*))
                state.con.execute(empty_row)
        state.save_counters()
    return []


def plain_drop_sql(stmt: Drop) -> str:
    """``DROP TABLE|VIEW [IF EXISTS] name`` of an object that is not a crr relation."""
    return f"DROP {stmt.plain.upper()} {'IF EXISTS ' if stmt.if_exists else ''}{quote_ident(stmt.name)}"


def drop(state: SiteState, stmt: Drop) -> list[tuple]:
    """DROP of a crr relation (a plain DROP TABLE or DROP VIEW of anything else runs as it is)."""
    rel = state.rels.get(stmt.name)
    if rel is None:
        if stmt.kind is None and is_reserved(stmt.name):
            raise UnsupportedSqlError(f"{stmt.name} belongs to crr (names starting with {RESERVED_PREFIX} are its "
                                      "own tables) and cannot be dropped")
        if stmt.kind is None:  # plain DROP TABLE / DROP VIEW of a non-crr object: rebuilt from its parts,
            # so no text the DROP pattern passed over (a comment DuckDB reads otherwise) runs unchecked
            return run_other(state, Other(sql=plain_drop_sql(stmt), tree=None, read_only=True), None)
        if stmt.if_exists:
            return []
        raise CatalogError(f"no {kind_text(stmt.kind)} named {stmt.name} at this site")
    state.rels.check_drop(rel, stmt.kind, stmt.plain)
    with state.transaction():
        if rel.colocated:  # its source's entries stay, in _crr.cl, as they would in the standard layout
            state.uncolocate(state.rels, [rel])
            rel = state.rels[rel.name]
        remaining = state.rels.lineage_of_others(rel.name)
        if rel.replica and rel.name in remaining:  # its entries stay, in _crr.cl, for the relations holding it
            state.con.execute(replica.keep_entries_sql(rel))
            state.note_unchecked_entries()
        for ddl in drop_ddl(rel):
            state.con.execute(ddl)
        state.con.execute(RELATION_DELETE_SQL, [rel.name])
        _forget_cursors(state, rel.name)  # a relation declared again under the name starts at 0
        for base in set(state.rels.lineage(rel.name)) - remaining:
            state.con.execute(relation_entries_delete_sql(), [base])
        state.save_counters()  # the rows dropped may have held the largest sequence number
        state.stage(state.rels.without(rel.name))
    state.widths.pop(rel.name, None)
    return []


def _forget_cursors(state: SiteState, relation: str) -> None:
    """Delete the tracked cursors of ``relation``, forgetting them in the site's snapshot first (which
    then asks the file, should the transaction roll back)."""
    state.recorded_cursors = state.recorded_cursors.without_relation(relation)
    state.con.execute(CURSORS_FORGET_SQL, [relation])


def _name_taken(state: SiteState, name: str, if_not_exists: bool) -> bool:
    """True if ``name`` is a crr relation and IF NOT EXISTS was given; raise if it is taken otherwise."""
    if name in state.rels or state.con.execute(APP_TABLE_EXISTS_SQL, [name]).fetchall()[0][0]:
        if if_not_exists and name in state.rels:
            return True
        raise CatalogError(f"a relation or table named {name} already exists at this site; "
                           "DROP it first or pick another name")
    return False


def _create_aug(state: SiteState, rel: Relation) -> None:
    """Create a relation's AUG and APP tables; a replica takes in the entries ``_crr.cl`` kept for
    its name (a source a join starts keeping, or a relation declared again after a drop: see
    :mod:`crr.replica`)."""
    for ddl in aug_ddl(rel):
        state.con.execute(ddl)
    if rel.replica:
        for stmt in replica.adopt_sql(rel):
            state.con.execute(stmt)


def _add_relation(state: SiteState, rel: Relation) -> None:
    _create_aug(state, rel)
    _forget_cursors(state, rel.name)  # a peer's cursor of another relation of the name
    pos = state.con.execute(NEXT_POSITION_SQL).fetchall()[0][0]
    state.con.execute(relation_insert_sql(), relation_row(rel, pos))


def _populate(state: SiteState, view: Relation) -> None:
    """Fill a new view from the current AUG state of its inputs."""
    m = state.maintainer()
    try:
        with view_errors(view.name, state.rels):  # the query failing on the data held
            m.populate(view)
    except BaseException:
        m.release()  # the transaction rolls back, its temp tables with it
        raise
    m.cleanup(force=True)
    state.stage_marked(m)
    if m.result.changed:
        state.bump()
