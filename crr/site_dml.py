"""Writes at a site, and the application's other SQL.

DML on a replicated table (:func:`run_dml`) takes the cheapest of four routes that can do it, each
its own transaction:

1. rows new to the site, with the maintenance of the relations reading the table: one statement
   (:meth:`crr.point.PointWrite.insert_new`, with :meth:`crr.maintain.Maintainer.appends`);
2. a DELETE, with the views' removals: one statement (:meth:`crr.point.PointWrite.delete`, with
   :meth:`crr.maintain.Maintainer.removals`);
3. a small write (:data:`crr.point.POINT_ROWS` rows): reads, then one writing statement with the
   views' maintenance inside it (:meth:`crr.point.PointWrite.write`,
   :meth:`crr.maintain.Maintainer.rewrites`);
4. the general path: the write as a batch (:func:`crr.writes.prepare_write`,
   :func:`crr.writes.prepare_update`) through the maintainer, in one transaction.

A route that cannot take the write writes nothing and hands it on. :func:`insert_many` takes the
general path's batch. Any other SQL (:func:`run_other`) runs as it is, unless it would change a crr
relation outside crr.
"""

from __future__ import annotations

import re
from typing import Any

import duckdb
from sqlglot import exp

from crr.batch_rows import Rows, RowsKind
from crr.bulk_input import (UNREADABLE_ARROW, column_positions, input_arrow, named_input, table_name,
                             typed_input_sql, unreadable_arrow_error)
from crr.catalog import SCHEMA, Relation, kind_text, refuse_source_reads, tables_read
from crr.causal import LocalEntries
from crr.cte import CteWrite
from crr.errors import (CatalogError, ReadOnlyRelationError, SqlError, TypeMismatchError,
                        UnsupportedSqlError)
from crr.id_sets import MAX_LISTED_IDS, ids_arrow
from crr.maintain import Batch, Maintainer
from crr.point import (ADDED, FLIPPED, GROWN_ENTRIES, NEW_TUPLES, PointResult, PointWrite, ThenWrites,
                       added_values_sql, flips_values_sql, keyed_update_texts, param_texts)
from crr.site_state import SiteState, ViewFailed, translated_errors, views_inside
from crr.sql import dml
from crr.sql.parse import STATEMENT_END
from crr.sql.statements import RESERVED_PREFIX, Dml, DmlKind, Other, RelationKind, fold_identifier, is_reserved
from crr.writes import prepare_update, prepare_write

POINT_TABLE = "_crr_point_arrow"  # the Arrow slot of a point write's flips and rows (crr.point)


def run_other(state: SiteState, stmt: Other, params) -> list[tuple]:
    """Run SQL that is not crr's (a query, or DDL and DML on the application's own tables); refuse
    what would read a remote source, which has no table here, or change a crr relation."""
    rels = state.rels
    # a statement creating or changing a source's name is refused below as a write, not as a read of it
    refuse_source_reads(rels, [t for t in stmt.tables if t not in stmt.writes])
    if not stmt.read_only:  # reading crr relations is fine; writing one (or anything in _crr) is not
        reserved = sorted(t for t in stmt.writes if is_reserved(t) and t not in rels)
        if reserved:  # crr's temporary tables: one of the app's own would hide or be hidden by it
            raise UnsupportedSqlError(f"this statement would create or change {', '.join(reserved)}: names starting "
                                      f"with {RESERVED_PREFIX} belong to crr (its own tables); pick another name")
        touched = {t for t in stmt.writes if t in rels or t == f"{SCHEMA}."}
        if touched:
            try:  # text DuckDB cannot parse (a typo: INSRT) is a syntax error, not a write
                state.con.extract_statements(stmt.sql)
            except duckdb.ParserException as e:
                raise SqlError(str(e).strip()) from None
            except duckdb.Error:
                pass  # parsed, but DuckDB would not run it (a partial index): the refusal below stands
            names = ", ".join(sorted(touched))
            raise UnsupportedSqlError(
                (f"this statement would change {names} outside crr" if stmt.tree is not None else
                 f"crr's SQL parser cannot read this statement (or reads it otherwise than DuckDB), which names "
                 f"{names}, so it may change {names} outside crr (if it is plain DML, write it more simply)")
                + "; crr relations change only through INSERT/UPDATE/DELETE on replicated tables and CREATE/DROP "
                "of crr DDL" + _outside_hint(state, stmt, touched))
    if not stmt.read_only:
        state.user_functions = None  # it may define or drop a macro (see crr.site_ddl), even if it fails
    with translated_errors():
        cur = state.con.execute(stmt.sql, params) if params else state.con.execute(stmt.sql)
        try:
            rows = cur.fetchall()
        except duckdb.InvalidInputException:
            return []
    if _SHOW_TABLES.match(stmt.sql):
        return _without_crr_temp_tables(rows, [d[0] for d in cur.description or []])
    return rows


CURRENT_DATABASE_SQL = "SELECT current_database()"
"""The name of the site's database (its file's stem; ``memory`` in memory)."""

_SHOW_TABLES = re.compile(r"^\s*show\s+(all\s+)?tables" + STATEMENT_END, re.I | re.S)


def _without_crr_temp_tables(rows: list[tuple], names: list[str]) -> list[tuple]:
    """SHOW [ALL] TABLES without crr's temporary tables and Arrow views (``_crr_...``), which the
    site's connection holds between writes; its schema ``_crr`` stays listed."""
    name = names.index("name") if "name" in names else 0
    temporary = names.index("temporary") if "temporary" in names else None
    return [r for r in rows if not (is_reserved(r[name]) and (temporary is None or r[temporary]))]


def _outside_hint(state: SiteState, stmt: Other, touched: set[str]) -> str:
    """What to write instead of a statement refused for changing crr relations outside crr, when its
    form tells: the site's relation named with the site's database (which crr reads as another
    database's table), another database's or schema's table named like a relation, or a schema change."""
    if stmt.tree is None:
        return ""
    try:
        own = fold_identifier(state.con.execute(CURRENT_DATABASE_SQL).fetchall()[0][0])
    except duckdb.Error:  # (a hint is not worth hiding the refusal behind another error)
        return ""
    named = [t for t in stmt.tree.find_all(exp.Table) if fold_identifier(t.name) in touched]
    elsewhere = [t for t in named if t.catalog and fold_identifier(t.catalog) != own
                 or fold_identifier(t.db) not in ("", "main", own)]
    if elsewhere:
        return (f" (crr refuses a write naming {elsewhere[0].sql('duckdb')} as it would one to its relation "
                f"{elsewhere[0].name}: change another database's or schema's table through a connection of your own)")
    if isinstance(stmt.tree, exp.Alter):
        return (" (a relation's columns do not change: declare a new relation, copy the rows into it with "
                "INSERT ... SELECT, and DROP the old one)")
    qualified = [t for t in named if t.catalog or t.db and fold_identifier(t.db) != "main"]
    if qualified:
        t = qualified[0]
        return f" (name the site's relation {t.name} or main.{t.name}, not {t.sql('duckdb')})"
    return ""


def _check_parameter_count(stmt: Dml, params) -> None:
    """Refuse values that do not fit the statement's parameters (too many, too few, a list for named
    ones): DuckDB would count crr's own parameters of the statement it runs too, and name one the
    user's statement does not have. ``params``' type was checked by the caller."""
    expected, names = stmt.parameters
    if names:
        if not isinstance(params, dict):
            raise SqlError(f"the statement has named parameters (${', $'.join(sorted(names))}); pass their "
                           "values as a dict")
        return  # DuckDB names a missing or unknown one itself
    given = len(params) if isinstance(params, (list, tuple)) else 0 if params is None else None
    if given is None or given == expected:
        return
    if not expected:
        raise SqlError(f"the statement has no parameters, got {given} value{'' if given == 1 else 's'}")
    which = "too many parameters" if given > expected else "too few parameters"
    raise SqlError(f"{which}: the statement takes {expected} value{'' if expected == 1 else 's'} (? or $1...), "
                   f"got {given}" + (" (remove the excess ones)" if given > expected else ""))


def writable(state: SiteState, name: str) -> Relation:
    """The replicated table ``name``; an error naming what it is when it is another relation."""
    rel = state.rels.get(name)
    if rel is None:
        raise CatalogError(f"no replicated table named {name} at this site")
    if not rel.is_base:
        raise ReadOnlyRelationError(
            f"{name} is a {kind_text(rel.kind)} and cannot be written here; "
            + ("its contents follow its query" if rel.kind is RelationKind.VIEW else
               "it only feeds this site's views" if rel.kind is RelationKind.SOURCE else
               "it changes only by merging changesets from the sites that hold it"))
    return rel


def run_dml(state: SiteState, stmt: Dml, params) -> list[tuple]:
    """INSERT, UPDATE or DELETE: on a replicated table by the routes of the module docstring; on an
    application's own table as it is. Returns ``[(rows affected,)]``."""
    if stmt.target not in state.rels:
        if is_reserved(stmt.target) or (stmt.tree.this and getattr(stmt.tree.this, "db", "") == SCHEMA):
            raise UnsupportedSqlError("crr's internal tables cannot be written directly")
        return run_other(state, Other(sql=stmt.tree.sql("duckdb"), tree=stmt.tree, read_only=True), params)
    rel = writable(state, stmt.target)
    _check_parameter_count(stmt, params)
    columns = [(c.name, c.type) for c in rel.columns]
    rq = state.rewritten.get(id(stmt))
    if rq is None:  # (a statement run again was checked when first run)
        refuse_source_reads(state.rels, tables_read(stmt.tree))
        rewrite = {DmlKind.INSERT: dml.insert_rows, DmlKind.UPDATE: dml.update_rows,
                   DmlKind.DELETE: dml.delete_rows}[stmt.kind]
        rq = state.rewritten[id(stmt)] = rewrite(stmt.tree, rel.name, columns)
    try:
        return _run_rows(state, stmt, rel, rq, params)
    except (SqlError, TypeMismatchError) as e:
        worded = rq.internal_names_named(str(e))
        if worded != str(e):
            raise type(e)(worded) from None
        if rq.width_checked and _SET_WIDTH in str(e):
            named = [c.name for c in stmt.tree.this.expressions] if isinstance(stmt.tree.this, exp.Schema) \
                else rel.column_names
            raise SqlError(f"INSERT into {rel.name}: its source gives another number of values than the "
                           f"{len(named)} columns it inserts into ({', '.join(named)}); give one value per "
                           "column") from None
        raise


_SET_WIDTH = "Set operations can only apply to expressions with the same number of result columns"


def _run_rows(state: SiteState, stmt: Dml, rel: Relation, rq: dml.RowQueries, params) -> list[tuple]:
    """:func:`run_dml` on a replicated table, given the statement's rows as queries."""
    given = param_texts(rel.columns, rq.params_at, params) if stmt.kind is DmlKind.INSERT else None
    by_key = (keyed_update_texts(rel, rq.by_key, params)
              if stmt.kind is DmlKind.UPDATE and not state.rels.unchecked_entries else None)
    source = rq.old if stmt.kind is DmlKind.DELETE else rq.new
    assert source is not None
    point_write = PointWrite(state.con, state.prepared)

    def write(new_tried: bool = False, then: ThenWrites | None = None) -> PointResult | None:
        with translated_errors(rewritten=True), views_inside(then is not None):
            return point_write.write(rel, source, old=stmt.kind is not DmlKind.INSERT,
                                     new=stmt.kind is not DmlKind.DELETE, params=params, clock=state.clock,
                                     seq=state.next_seq(), given=given,
                                     unchecked_entries=state.rels.unchecked_entries, new_tried=new_tried,
                                     then=then, by_key=by_key)

    derived = state.rels.derived_from(rel.name)  # the relations reading the table
    m = state.maintainer() if derived else None  # builds their statements for this write
    new_tried = False  # whether the one statement of rows new to the site ran (and wrote nothing)
    general = False  # whether a view failed inside a write's one statement: the general path names it
    appends = m.appends(rel, derived, NEW_TUPLES, one_row=len(given) == 1) if m is not None and given is not None else None
    if given is not None and (appends is not None or not derived):
        # 1. rows new to the site, with the maintenance of the relations reading the table if any:
        # one statement, no lookup, its own transaction (DuckDB commits it on its own)
        state.check_open()
        new_tried = True
        try:
            with translated_errors(rewritten=True), views_inside(bool(appends)):
                point = point_write.insert_new(rel, given, state.clock, state.next_seq(),
                                               unchecked_entries=state.rels.unchecked_entries, then=appends or ())
        except ViewFailed:
            point, general = None, True  # nothing written
        if point is not None:
            if point.changed:
                state.bump()
            return [(point.count,)]
    if stmt.kind is DmlKind.DELETE and rq.delete is not None and not isinstance(params, dict):
        removals = m.removals(rel, derived, GROWN_ENTRIES) if m is not None else []
        if removals is not None:
            # 2. the APP rows, the entries of their keys and the views' rows they held: one
            # statement, any number of rows, its own transaction
            state.check_open()
            with translated_errors(rewritten=True):
                count = point_write.delete(rel, rq.delete, rq.qualifier or rel.name, params, state.next_seq(),
                                           then=removals)
            if count:
                state.bump()
            return [(count,)]
    then = _rewrites(m, rel, derived) if m is not None and not general else None
    if not derived or then is not None:
        # 3. The point path's one writing statement (with the maintenance of the relations reading
        # the table, ``then``) is its own transaction (DuckDB commits it on its own), and the
        # reads before it see the state it changes, as nothing else writes through this site's
        # connection in between.
        state.check_open()
        try:
            point = write(new_tried=new_tried, then=then)
        except ViewFailed:  # nothing written
            general = True
        else:
            if point is not None:
                if point.changed:
                    state.bump()
                return [(point.count,)]
            derived = []  # more rows than the point path takes: the batch path below
    # 4. the general path
    with state.transaction():
        point = write(new_tried=new_tried) if derived else None
        if point is not None:  # a small write (else it takes the batch path below)
            if point.changed:
                _maintain_point(state, rel, point)
            return [(point.count,)]
        if stmt.kind is DmlKind.UPDATE:  # one query yields each row's old and new values
            assert rq.new is not None
            with translated_errors(rewritten=True):
                batch, count = prepare_update(state.con, rel, f"({rq.new})", state.clock, params,
                                              unchecked_entries=state.rels.unchecked_entries)
            state.apply(batch)
        elif stmt.kind is DmlKind.INSERT:
            count = _write(state, rel, None, f"({rq.new})", params)
        else:
            count = _write(state, rel, f"({rq.old})", None, params)
    return [(count,)]


def insert_many(state: SiteState, table: str, rows: Any) -> int:
    """Bulk-insert rows into a replicated table in one transaction (see :meth:`crr.site.Site.insert_many`)."""
    state.check_open()
    rel = writable(state, fold_identifier(table_name(table)))
    names = rel.column_names
    data, tuples = input_arrow(rel.name, rows, names)
    if tuples and not data.num_rows:
        return 0
    given = [fold_identifier(c) for c in data.column_names]
    # valid Arrow that DuckDB cannot hold (a timestamp below its range) would break the file
    data = named_input(rel, data, column_positions(rel.name, given, names))
    try:
        with state.transaction():
            bulk = state.slots.put("_crr_bulk", data)
            try:
                batch, _ = _prepare(state, rel, None, f"({typed_input_sql(rel, bulk)})")
            except TypeMismatchError as e:
                raise TypeMismatchError(f"insert_many into {rel.name}: {e}; nothing was written") from None
            finally:
                state.slots.release(bulk)
            state.apply(batch)
    except SqlError as e:
        if UNREADABLE_ARROW not in str(e):
            raise
        raise unreadable_arrow_error(rel, data, tuples) from None
    return data.num_rows


def _maintain_point(state: SiteState, rel: Relation, point: PointResult) -> None:
    """Maintain the relations deriving from ``rel`` after a point write changed it. Its flips and
    added rows are read from one Arrow slot."""
    state.slots.put(POINT_TABLE, point.as_arrow(rel))
    try:
        batch = Batch(local=LocalEntries(rel.name, len(point.flips), None), local_write=True,
                      applied_flips=Rows(POINT_TABLE, RowsKind.POINT_FLIPS), applied_flips_arrow=point.flips_arrow(rel),
                      applied_fresh=ids_arrow(point.fresh))
        if point.added:
            batch.base[rel.name] = Rows(POINT_TABLE, RowsKind.POINT_ADDED)
            if len(point.fresh) == len(point.added):  # every added row is new to the table
                batch.fresh = frozenset({rel.name})
        state.apply(batch, changed=True)
    finally:
        state.slots.release(POINT_TABLE)


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
        written = (ADDED, added_values_sql(rel, len(added)), [p for id_, values in added for p in (id_, *values)])
        gone = [id_ for id_, vis in flips if not vis]
        if fresh and {id_ for id_, _ in added} == {id_ for id_, vis in flips if vis}:
            # only the added rows turn visible, and they are new to the table (an INSERT of rows
            # whose ids have no visible entry, an UPDATE's new versions): the flips are not read
            if not gone:
                return [written, *m.rewrites(rel, views, FLIPPED, fresh, only_new=True, one_row=len(added) == 1)]
            if len(gone) <= MAX_LISTED_IDS:
                return [written, *m.rewrites(rel, views, FLIPPED, fresh, only_new=False, replaced=gone,
                                             one_row=len(added) == 1)]
        return [(FLIPPED, flips_values_sql(len(flips)), [p for flip in flips for p in flip]), written,
                *m.rewrites(rel, views, FLIPPED, fresh, only_new=False)]
    return then


def _prepare(state: SiteState, rel: Relation, old: str | None, new: str | None, params=None) -> tuple[Batch, int]:
    """The batch of a write whose removed/added rows ``old``/``new`` select (see prepare_write)."""
    with translated_errors(rewritten=True):
        return prepare_write(state.con, rel, old, new, state.clock, params,
                             unchecked_entries=state.rels.unchecked_entries)


def _write(state: SiteState, rel: Relation, old: str | None, new: str | None, params=None) -> int:
    """Apply a local write (inside the caller's transaction); return the rows it affected."""
    batch, count = _prepare(state, rel, old, new, params)
    state.apply(batch)
    return count
