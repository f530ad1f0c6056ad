"""The point path: a small local write to a replicated table.

Such a write changes the table's own state (its causal-length entries, its AUG tuples and its APP
table), so it needs none of the batch pipeline's set-at-a-time machinery (:mod:`crr.writes`):
one query reads the statement's rows, another what the site knows about them,
Python decides the new causal lengths exactly as the batch path would (DESIGN 1.1/1.2), and one
parameterized statement writes the result. No temp table, no catalog DDL. The relations that read
the table are maintained either inside that one statement, by the statements the caller passes
(``then``: :meth:`crr.maintain.Maintainer.appends`, :meth:`~crr.maintain.Maintainer.removals`,
:meth:`~crr.maintain.Maintainer.rewrites`, when every such relation is a view those cover), or by
the caller after it, from the result (the general path: the write and the maintainer in one
transaction).

Statements per write (:class:`Statement` names them, and tests count them, with and without views):

========================  ======================================================================
INSERT of new rows        rows, new rows insert                                         (2)
DELETE                    delete                                                        (1)
UPDATE                    rows, lookup, write                                           (3)
UPDATE by key             key lookup, write                                             (2)
========================  ======================================================================

The writes a statement makes to the table's state (causal-length entries, AUG tuples, APP rows)
are one DuckDB statement: data-modifying CTEs (DuckDB 2.0) run several INSERT, UPDATE and DELETE
statements once each, to completion and in order, each seeing what the ones before it wrote
(:func:`write_sql`, :func:`new_rows_insert_sql`). An INSERT ... VALUES whose values are all ``?``
parameters (or NULL) of the common types skips the rows statement: Python writes their texts
(:func:`param_texts`), so such an INSERT of a new row runs 1, and into a table no other relation
here reads, the site runs it without a transaction around it (DuckDB commits the one statement on
its own, so the write is still atomic). A keyed UPDATE whose SET and WHERE are parameters and
literals Python writes, its WHERE the key's columns (:class:`crr.sql.dml.KeyedUpdate`,
:func:`keyed_update_texts`), reads the row and the entries of its old and new keys in one statement
(:func:`key_lookup_sql`). An INSERT of a key (unkeyed: a row) the site has an entry of, or into a
table that may hold tuples without entries (:attr:`crr.catalog.Relation.orphans`), runs the general
sequence (rows, lookup, write; one statement more when the new-rows INSERT was tried first and
wrote nothing). At a site whose ``_crr.cl`` may hold entries that came without their
tuples (:attr:`crr.catalog.Catalog.unchecked_entries`), a write adding rows that takes the general
sequence runs one statement more, which refuses an added row whose id has an entry of another
relation or key hash. Tuple ids and key hashes are computed in Python (:func:`crr.types.tuple_id_of_texts`),
equal to the SQL computation, which would cost more to plan than the whole lookup costs to run.
Values travel between the statements as DuckDB's own text form of each value
(:func:`crr.types.value_text_sql`, cast back by :func:`crr.types.text_value_sql`), which is exact
for every type crr supports: Python's own types would lose infinite dates and timestamps.

A statement writing more than :data:`POINT_ROWS` rows returns ``None`` from :func:`point_write`
before writing anything, and the caller takes the batch path.

A merge of rows new to the site runs the same new-rows statement (:meth:`PointWrite.insert_received`),
or one built like it (:func:`new_rows_writes_sql`), as :mod:`crr.point_merge` decides.
"""

from __future__ import annotations

import datetime
import decimal
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

import duckdb
import pyarrow as pa

from crr.arrow_build import bools, strings
from crr.catalog import SCHEMA, Relation
from crr.cte import CteWrite, cte_values, ctes
from crr.clock import HybridClock
from crr.id_sets import ids_arrow
from crr.prepared import Prepared
from crr.sql.dml import Cell, Constant, KeyedUpdate
from crr.errors import TypeMismatchError
from crr.types import (INT_RANGE, Column, TypeFamily, decimal_text, key_hash_of_texts, key_hash_sql, quote_ident,
                       quote_str, is_utf8, text_value_sql, tuple_id_of_texts, tuple_id_sql, type_family, value_text_sql)
from crr.writes import (clashing_row_held, disagreeing_entry_error, key_clash_error, merged_rows_error, null_error,
                        repeated_key_error)

POINT_ROWS = 64  # largest number of written rows the point path takes
# (a further statement of a one-statement write, run as a CTE after the write's own, is a
# crr.cte.CteWrite: the maintenance of the relations reading the table, crr.maintain.Maintainer.appends,
# removals, rewrites, and its inputs)
# given a write's flips (id, visible now), added rows (id, values as text) and whether all of those
# are new to the table, the statements that maintain the relations reading it (PointWrite.write)
ThenWrites = Callable[[list[tuple[int, bool]], list[tuple[int, tuple[str | None, ...]]], bool], Sequence[CteWrite]]
# names of the CTEs of the one-statement writes that the maintenance run inside them reads
NEW_TUPLES = "tuples"  # new_rows_insert_sql: the tuples written (id and AUG columns)
GROWN_ENTRIES = "entries"  # delete_sql: the ids of the entries grown to an even length
FLIPPED = "_crr_flipped"  # write_sql's then: the ids whose visibility the write flipped (flips_values_sql)
ADDED = "_crr_written"  # write_sql's then: the rows the write added (added_values_sql)


class Statement(Enum):
    """The statements of the point path (see the module docstring)."""

    ROWS = "rows"  # the written rows' values, as text
    LOOKUP = "lookup"  # the site's causal-length entries of their keys (or ids), and which it stores
    KEY_LOOKUP = "key lookup"  # an UPDATE by key: the entries of its old and new key, and the APP row of the key
    NEW_ROWS_INSERT = "new rows insert"  # an INSERT's entries, tuples and APP rows, unless some key (id) has an entry here
    DELETE = "delete"  # a DELETE's APP rows, the entries of their keys (ids), and the views' rows they held
    WRITE = "write"  # the entries, tuples and APP rows a write changes (its parts: :class:`Part`)
    DISAGREEING_ENTRIES = "disagreeing entries"  # entries of added ids under another relation or key


class Part(Enum):
    """The writes :data:`Statement.WRITE` runs, in this order, each only when the write needs it."""

    CL_UPDATE = "cl update"  # causal-length entries the site already has
    CL_INSERT = "cl insert"  # causal-length entries of ids new to the site
    TUPLES_INSERT = "tuples insert"  # AUG tuples new to the table
    APP_DELETE = "app delete"
    APP_INSERT = "app insert"
    APP_UPDATE = "app update"  # one row replaced by another


@dataclass
class _Row:
    """One written row as the rows query returns it."""

    new: bool  # added (True) or removed (False) by the statement
    id: int
    kh: int | None
    values: tuple[str | None, ...]  # DuckDB's text of each value
    stored: bool  # whether the table's AUG tuples hold it already (looked up for added rows only)
    versions: list[tuple[int, int, int, bool, int]]  # (id, cl, stamp, vis, rowid) of its key's versions (its own, unkeyed)


@dataclass
class PointResult:
    """What a point write did: the rows the statement affected, whether replicated state changed,
    and, for the relations that derive from the table, the ids whose visibility flipped and the
    rows the statement added (the delta views join)."""

    count: int
    changed: bool
    flips: list[tuple[int, bool]]  # (id, visible now)
    added: list[tuple[int, tuple[str | None, ...]]]  # (id, values as text) of each distinct new row
    fresh: list[int] = field(default_factory=list)  # ids of added rows the table did not hold before

    def as_arrow(self, rel: Relation) -> pa.Table:
        """The flips (``kind`` 'f') and added rows (``kind`` 'n') as one table of texts, read by
        :func:`crr.batch_rows.rows_sql` (``RowsKind.POINT_FLIPS`` and ``RowsKind.POINT_ADDED``)."""
        n = len(rel.columns)
        kinds = ["f"] * len(self.flips) + ["n"] * len(self.added)
        ids = [str(i) for i, _ in self.flips] + [str(i) for i, _ in self.added]
        vis = [v for _, v in self.flips] + [None] * len(self.added)
        values = [[None] * len(self.flips) + [row[k] for _, row in self.added] for k in range(n)]
        return pa.table({"kind": strings(kinds), "id": strings(ids), "vis": bools(vis),
                         **{f"v{k}": strings(values[k]) for k in range(n)}})

    def flips_arrow(self, rel: Relation) -> pa.Table:
        """The flips as the maintainer reads a batch's written entries: (id, rel, vis), ids laid out as
        DuckDB's UHUGEINT arrives."""
        return pa.table({"id": ids_arrow([i for i, _ in self.flips]), "rel": strings([rel.name] * len(self.flips)),
                         "vis": bools([v for _, v in self.flips])})


@dataclass
class _Entry:
    """A causal-length entry the write changes."""

    id: int
    kh: int | None
    cl: int
    stamp: int
    old_vis: bool
    known: bool  # the site has an entry for the id already
    rowid: int | None = None  # the known entry's row in ``_crr.cl`` (read by the lookup, in this transaction)

    @property
    def vis(self) -> bool:
        """Visibility after a local write: plain parity (the write's stamp is the largest)."""
        return self.cl % 2 == 1


# -- statement builders ---------------------------------------------------------------------------

def rows_sql(rel: Relation, source: str, old: bool, new: bool) -> str:
    """``Statement.ROWS``: at most ``POINT_ROWS + 1`` rows that ``source`` yields, as the texts of their
    values (:func:`crr.types.value_text_sql`): the old values, then the new ones, as the write has them.

    ``source`` yields the new values as ``c0, c1, ...`` and, for an UPDATE, the old ones as
    ``o0, o1, ...``; ``old``/``new`` say which of them the statement removes and adds.
    """
    prefixes = (["o" if new else "c"] if old else []) + (["c"] if new else [])
    texts = [value_text_sql(f"w.{p}{i}", c.type) for p in prefixes for i, c in enumerate(rel.columns)]
    return f"SELECT {', '.join(texts)} FROM ({source}) w LIMIT {POINT_ROWS + 1}"


def lookup_sql(rel: Relation, probes: int, new_ids: int) -> str:
    """``Statement.LOOKUP``: the site's causal-length entries ``(id, kh, cl, stamp, vis, false, rowid)``
    of ``probes`` key hashes (keyed) or ids (unkeyed), and ``(id, NULL, NULL, NULL, NULL, true, NULL)``
    for each of ``new_ids`` ids (those of the rows the write adds) the table's AUG tuples hold: a
    removed row is an APP row, so its tuple is held, and a DELETE does not scan the tuples.
    Parameters: the key hashes (ids), then the new ids. An entry's ``rowid`` lets
    :data:`Part.CL_UPDATE` find its row without scanning ``_crr.cl`` (DuckDB reads only the row
    group of a ``rowid = ?`` filter; a row keeps its rowid within the transaction)."""
    probe = f"{_probe_column(rel)} IN ({', '.join(['?::UHUGEINT'] * probes)})"
    # ``rel``: redundant (ids and key hashes hash the relation's name) but lets DuckDB skip the row
    # groups of other relations' entries by their zone maps
    entries = f"SELECT id, kh, cl, stamp, vis, false, rowid FROM {SCHEMA}.cl WHERE rel = {quote_str(rel.name)} AND {probe}"
    if not new_ids:
        return entries
    return f"""{entries} UNION ALL SELECT id, NULL, NULL, NULL, NULL, true, NULL FROM {rel.aug('t')}
               WHERE id IN ({', '.join(['?::UHUGEINT'] * new_ids)})"""


def key_lookup_sql(rel: Relation, probes: int) -> str:
    """``Statement.KEY_LOOKUP``, for an UPDATE of a keyed table by its key (:class:`KeyedUpdate`):
    the site's causal-length entries of ``probes`` key hashes ``(id, kh, cl, stamp, vis, rowid,
    NULL...)``, as :func:`lookup_sql` finds them, and the APP row of the key, at most one, as the
    texts of its values ``(NULL x 6, text...)``. Parameters: the key hashes, then the key's values as
    text, in key order."""
    nulls = ", ".join(["NULL"] * len(rel.columns))
    probe = f"kh IN ({', '.join(['?::UHUGEINT'] * probes)})"
    entries = (f"SELECT id, kh, cl, stamp, vis, rowid, {nulls} FROM {SCHEMA}.cl "
               f"WHERE rel = {quote_str(rel.name)} AND {probe}")
    texts = ", ".join(value_text_sql(quote_ident(c.name), c.type) for c in rel.columns)
    match = " AND ".join(f"{quote_ident(c.name)} = {text_value_sql('?', c.type)}" for c in rel.key_columns)
    return f"{entries} UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, {texts} FROM {rel.app} WHERE {match}"


def cl_update_sql(count: int) -> str:
    """``Part.CL_UPDATE`` of ``count`` entries: parameters (cl, stamp, vis, seq, rowid) for one
    entry; else seq, then (cl, stamp, vis, id) per entry."""
    if count == 1:
        return f"UPDATE {SCHEMA}.cl SET cl = ?, stamp = ?::UHUGEINT, vis = ?, seq = ? WHERE rowid = ?"
    rows = ", ".join(["(?, ?::UHUGEINT, ?, ?::UHUGEINT)"] * count)
    return (f"UPDATE {SCHEMA}.cl SET cl = d.cl, stamp = d.stamp, vis = d.vis, seq = ? "
            f"FROM (VALUES {rows}) d(cl, stamp, vis, id) WHERE {SCHEMA}.cl.id = d.id")


def cl_insert_sql(rel: Relation, count: int) -> str:
    """``Part.CL_INSERT`` of ``count`` entries: parameters (id, cl, kh, stamp, vis, seq) per entry."""
    row = f"(?::UHUGEINT, {quote_str(rel.name)}, ?, ?::UHUGEINT, ?::UHUGEINT, ?, ?)"
    return f"INSERT INTO {SCHEMA}.cl (id, rel, cl, kh, stamp, vis, seq) VALUES {', '.join([row] * count)}"


def new_rows_insert_sql(rel: Relation, count: int, unchecked_entries: bool,
                        then: Sequence[CteWrite] = (), counted: bool = True) -> str:
    """``Statement.NEW_ROWS_INSERT``: an INSERT of ``count`` rows new to the site, written whole or
    not at all, in one statement: their causal-length entries (each of length 1 and visible),
    written only if the site has no entry of any of their key hashes (keyed) or ids (unkeyed), then
    their AUG tuples and their APP rows, written only if the entries were. Parameters: (id, kh,
    stamp, seq) per row; the rows' key hashes (keyed) or ids (unkeyed), ``count`` of them (distinct:
    the caller refused a key written twice); with ``unchecked_entries``, the ids again; then (id,
    values as text..., seq) per row. Its count (the APP rows written) says whether it wrote them. It stands for the
    lookup and the entry, tuple and APP INSERTs of a write of rows new to the site
    (:meth:`PointWrite._insert_new`); its text depends only on the relation, ``count`` and the
    flag, so the site prepares it once (:class:`crr.prepared.Prepared`).

    The three writes are data-modifying CTEs (DuckDB 2.0): DuckDB runs each once, to completion and
    in order, and the last one reads the rows the one before returned. One statement costs about a
    third less than the three it replaces (2.0 against 3.3 ms for one row, measured alone, committed).

    When ``_crr.cl`` may hold entries whose key hash went unchecked (``unchecked_entries``), an entry
    of one of the ids under any relation or key hash stops it too: the lookup then finds it and the
    write is refused (:func:`disagreeing_entries_sql`). Otherwise an id's stored entry has the same
    relation and key hash as the row (an id is a hash of the relation and the values).

    ``then``: further writes, ``(name, sql, parameters)``, run after the APP rows as data-modifying CTEs of the
    same statement: the maintenance of the relations that derive from the table
    (:meth:`crr.maintain.Maintainer.appends`), which reads the CTE :data:`NEW_TUPLES` (the written tuples,
    ``id`` and AUG columns) and their entries, and, for a merge, the tracked cursor
    (:mod:`crr.tracked_cursors`); their parameters follow the others. The statement
    returns one row: the count of APP rows of the table it wrote, then, if ``counted``, the count
    of rows each further write returned, in order (a merge reports them; a local INSERT has no use
    for them, and leaving their subqueries out took 0.7-0.9 ms off a 10-12 ms INSERT into a table
    with a projection and a join view, measured interleaved in one process, stop 64)."""
    params = ", ".join(["?::UHUGEINT"] * count)
    # any entry of a key: a check of present versions and ids only (a key whose versions are all
    # deleted is new rows too) cost 0.2 ms (200 rows) to 0.5 ms (1M) more, as DuckDB then reads two
    # columns more (measured interleaved in one process, stop 62); an INSERT after a DELETE of its
    # key takes the lookup instead
    stored = f"rel = {quote_str(rel.name)} AND {_probe_column(rel)} IN ({params})"
    if unchecked_entries:
        stored = f"({stored}) OR id IN ({params})"
    entry = f"?::UHUGEINT, {quote_str(rel.name)}, 1, ?::UHUGEINT, ?::UHUGEINT, true, ?"
    tuple_ = f"?::UHUGEINT, {_typed_row(rel)}, ?"
    if count == 1:  # no subquery, so no join to plan: 2.0 against 2.2 ms for the EXISTS forms below
        entries = f"""SELECT {entry} FROM (SELECT count(*) AS n FROM {SCHEMA}.cl WHERE {stored}) WHERE n = 0"""
        tuples = f"SELECT {tuple_} FROM entries"
    else:
        entries = f"{_select_rows(entry, count)} WHERE NOT EXISTS (SELECT 1 FROM {SCHEMA}.cl WHERE {stored})"
        tuples = f"{_select_rows(tuple_, count)} WHERE EXISTS (SELECT 1 FROM entries)"
    return new_rows_writes_sql(rel, entries, tuples, then, counted)


def new_rows_writes_sql(rel: Relation, entries: str, tuples: str, then: Sequence[CteWrite] = (),
                        counted: bool = True) -> str:
    """The writes of rows new to the site, as one statement of data-modifying CTEs: their
    causal-length entries (``entries``: a SELECT of ``id, rel, cl, kh, stamp, vis, seq``, which
    selects nothing when the rows are not all new), their AUG tuples (``tuples``: a SELECT of ``id,
    AUG columns..., seq``, selecting nothing when the CTE ``entries`` returned nothing), their APP
    rows, and ``then`` (see :func:`new_rows_insert_sql`, which writes rows given as parameters, and
    :func:`crr.point_merge.received_rows_insert_sql`, rows of a changeset). Returns the count of
    the APP rows written (with ``then`` and ``counted``: then the rows each of ``then`` returned;
    ``then``'s writes run whether the statement counts their rows or not)."""
    names = ", ".join(c.name for c in rel.aug_columns)
    cols = ", ".join(quote_ident(c) for c in rel.column_names)
    head = (f"WITH entries AS (INSERT INTO {SCHEMA}.cl (id, rel, cl, kh, stamp, vis, seq) {entries} RETURNING id), "
            f"{NEW_TUPLES} AS (INSERT INTO {rel.aug('t')} {tuples} RETURNING {'id, ' if then else ''}{names}) ")
    app = f"INSERT INTO {rel.app} ({cols}) SELECT {names} FROM {NEW_TUPLES}"
    if not then:
        return head + app
    counted_ctes = ["app", *(name for name, _, _ in then)] if counted else ["app"]
    counts = ", ".join(f"(SELECT count(*) FROM {name})" for name in counted_ctes)
    return head + f", app AS ({app} RETURNING 1), " + ", ".join(ctes(then)) + f" SELECT {counts}"


def delete_sql(rel: Relation, statement: str, qualifier: str, then: Sequence[CteWrite] = ()) -> str:
    """``Statement.DELETE``: a DELETE from a table as one statement of any number of rows:
    ``statement`` (the application's DELETE, :attr:`crr.sql.dml.RowQueries.delete`)
    removes the APP rows and returns their key hashes (keyed) or ids (unkeyed), computed in SQL
    over the rows' columns (``qualifier``: the name they go by in it), and every present version of
    those keys (the tuples themselves), an entry of odd causal length, grows by one: invisible, as
    a local write's stamp is the largest, and stamped with the write's sequence number. That is the
    rule the lookup and :meth:`PointWrite._entries` apply row by row (DESIGN 1.2: a removed row
    deletes its key's present versions). Parameters: the statement's, then the sequence number.
    Its one row is the number of APP rows it removed.

    ``then``: further writes, ``(name, sql, parameters)``, run after them as data-modifying CTEs of
    the same statement: the maintenance of the relations that read the table
    (:meth:`crr.maintain.Maintainer.removals`), which reads the CTE :data:`GROWN_ENTRIES` (the ids
    of the entries grown) and the visibility the update left; their parameters follow."""
    probe = (key_hash_sql(rel.name, rel.key_columns, quote_ident(qualifier))
             if rel.key else tuple_id_sql(rel.name, list(rel.columns), quote_ident(qualifier)))
    grown = " RETURNING id" if then else ""
    more = "".join(f", {cte}" for cte in ctes(then))
    return (f"WITH gone AS ({statement} RETURNING {probe} AS probe), "
            f"{GROWN_ENTRIES} AS (UPDATE {SCHEMA}.cl SET cl = cl + 1, vis = false, seq = ? "
            f"WHERE rel = {quote_str(rel.name)} AND {_probe_column(rel)} IN (SELECT probe FROM gone) "
            f"AND cl % 2 = 1{grown}){more} SELECT count(*) FROM gone")


def _probe_column(rel: Relation) -> str:
    """The ``_crr.cl`` column a write's rows are looked up by: their key hashes (keyed), or their ids."""
    return "kh" if rel.key else "id"


def _select_rows(row: str, count: int) -> str:
    """A SELECT of ``count`` rows of parameters ``row``: one row as a plain SELECT (1.0 against 1.3 ms
    from a one-row VALUES list, measured alone on 200 rows), more as a VALUES list."""
    return f"SELECT {row}" if count == 1 else f"SELECT * FROM (VALUES {', '.join([f'({row})'] * count)})"


def disagreeing_entries_sql(rel: Relation, count: int) -> str:
    """``Statement.DISAGREEING_ENTRIES``: how many entries carry the id of one of ``count`` rows a write
    adds (parameters (id, kh) per row) under another relation or key hash; run only when ``_crr.cl``
    may hold entries whose key hash went unchecked (see :func:`crr.causal.disagreeing_entries_sql`,
    the batch path's)."""
    rows = ", ".join(["(?::UHUGEINT, ?::UHUGEINT)"] * count)
    return (f"SELECT count(*) FROM (VALUES {rows}) w(id, kh) JOIN {SCHEMA}.cl c ON c.id = w.id "
            f"WHERE c.rel <> {quote_str(rel.name)} OR c.kh IS DISTINCT FROM w.kh")


def _typed_row(rel: Relation) -> str:
    return ", ".join(text_value_sql("?", c.type) for c in rel.columns)


def tuples_insert_sql(rel: Relation, count: int) -> str:
    """``Part.TUPLES_INSERT`` of ``count`` tuples: parameters (id, values as text..., seq) per tuple."""
    row = f"(?::UHUGEINT, {_typed_row(rel)}, ?)"
    return f"INSERT INTO {rel.aug('t')} VALUES {', '.join([row] * count)}"


def app_insert_sql(rel: Relation, count: int) -> str:
    """``Part.APP_INSERT`` of ``count`` rows: the values as text per row."""
    cols = ", ".join(quote_ident(c) for c in rel.column_names)
    return f"INSERT INTO {rel.app} ({cols}) VALUES {', '.join([f'({_typed_row(rel)})'] * count)}"


def _app_row_match(rel: Relation) -> str:
    return " AND ".join(f"{quote_ident(c.name)} IS NOT DISTINCT FROM {text_value_sql('?', c.type)}"
                        for c in rel.columns)


def app_delete_sql(rel: Relation, count: int) -> str:
    """``Part.APP_DELETE`` of ``count`` rows (matched on every column, NULLs equal): values as text per row."""
    return f"DELETE FROM {rel.app} WHERE " + " OR ".join([f"({_app_row_match(rel)})"] * count)


def app_update_sql(rel: Relation) -> str:
    """``Part.APP_UPDATE``: one row replaced by another; parameters: new values, then old values."""
    sets = ", ".join(f"{quote_ident(c.name)} = {text_value_sql('?', c.type)}" for c in rel.columns)
    return f"UPDATE {rel.app} SET {sets} WHERE {_app_row_match(rel)}"


def write_sql(parts: Sequence[str], then: Sequence[CteWrite] = ()) -> str:
    """``Statement.WRITE``: the :class:`Part` statements a write needs, run as one statement in the
    order given, with the effect of running them one after another: each but the last is a
    data-modifying CTE, which DuckDB (2.0 on) runs once, to completion and in order, each seeing
    what the ones before it wrote. Parameters: each part's, in that order.

    ``then``: further statements ``(name, sql, parameters)`` after the parts, as CTEs of the same
    statement (then every part is one): the maintenance of the relations that read the table
    (:meth:`crr.maintain.Maintainer.rewrites`) and its inputs, :func:`flips_values_sql` and
    :func:`added_values_sql`; a SELECT among them is computed once, where it stands (:func:`crr.cte.ctes`).
    Their parameters follow the parts'."""
    if then:
        named = [f"part{i} AS ({sql})" for i, sql in enumerate(parts)] + ctes(then)
        return "WITH " + ", ".join(named) + " SELECT 1"
    *first, last = parts
    if not first:
        return last
    return "WITH " + ", ".join(f"part{i} AS ({sql})" for i, sql in enumerate(first)) + " " + last


def flips_values_sql(count: int) -> str:
    """SELECT of ``count`` ids whose visibility a write flipped, ``(id, vis)``: parameters (id, vis)
    per id; none: an empty SELECT."""
    if not count:
        return "SELECT NULL::UHUGEINT AS id, NULL::BOOLEAN AS vis WHERE false"
    return f"SELECT * FROM (VALUES {', '.join(['(?::UHUGEINT, ?::BOOLEAN)'] * count)}) f(id, vis)"


def added_values_sql(rel: Relation, count: int) -> str:
    """SELECT of ``count`` rows a write added to ``rel``, ``(id, c0, c1, ...)``: parameters (id, values
    as text...) per row; none: an empty SELECT."""
    names = ", ".join(["id"] + [c.name for c in rel.aug_columns])
    if not count:
        return f"SELECT * FROM (SELECT NULL::UHUGEINT, {_typed_row(rel).replace('?', 'NULL')}) a({names}) WHERE false"
    return f"SELECT * FROM (VALUES {', '.join([f'(?::UHUGEINT, {_typed_row(rel)})'] * count)}) a({names})"


def param_texts(columns: Sequence[Column], params_at: tuple[tuple[Cell, ...], ...] | None,
                params: list | dict | None) -> list[tuple[str | None, ...]] | None:
    """The texts :data:`Statement.ROWS` would return for an INSERT of parameters and literals into
    a table of ``columns`` (:attr:`crr.sql.dml.RowQueries.params_at`), written by Python, or None
    when some value's text is not certainly DuckDB's: only NULL, a ``str`` for VARCHAR, an ``int`` in
    its integer column's range, a ``Decimal`` (or a 64-bit ``int``) for DECIMAL, a ``bool`` for
    BOOLEAN, a ``float`` (or an ``int`` it holds exactly) for DOUBLE or FLOAT, a ``date`` for DATE,
    a naive ``datetime`` for TIMESTAMP, an aware one for TIMESTAMPTZ, a naive ``time`` for TIME, ``bytes`` for BLOB and a
    ``uuid.UUID`` for UUID are taken (exactly those classes, no subclass such as pandas' Timestamp),
    whether a parameter or a literal (a float literal is none: :func:`crr.sql.dml._constant` reads
    no :class:`Constant` of it; other values and types run the statement, which also refuses what
    DuckDB cannot cast)."""
    params = [] if params is None else params
    if params_at is None or not isinstance(params, list) or not 0 < len(params_at) <= POINT_ROWS:
        return None
    if not _uses_every_param([c for at in params_at for c in at], params):
        return None  # too few or too many values: the statement runs, and DuckDB's error says which
    rows = []
    for at in params_at:
        row = value_texts(columns, [_cell_value(c, params) for c in at])
        if row is None:
            return None
        rows.append(row)
    return rows


_NOT_SIMPLE = object()


def _uses_every_param(cells: Sequence[Cell], params: list) -> bool:
    """Whether ``cells`` (:data:`crr.sql.dml.Cell`) name each of ``params`` by its position, and no other."""
    return {c for c in cells if type(c) is int} == set(range(len(params)))


def _cell_value(cell: Cell, params: list) -> object:
    """The value a :data:`crr.sql.dml.Cell` stands for: its literal's, its parameter's, or NULL's."""
    return cell.value if isinstance(cell, Constant) else None if cell is None else params[cell]


@dataclass(frozen=True)
class ByKey:
    """An UPDATE of one row of a keyed table found by its key (:class:`crr.sql.dml.KeyedUpdate`),
    with the texts Python wrote for its values: the key's, in key order, and each SET column's, by
    the column's position."""

    key: tuple[str | None, ...]
    sets: dict[int, str | None]


def keyed_update_texts(rel: Relation, by_key: KeyedUpdate | None, params: list | dict | None) -> ByKey | None:
    """The texts of an UPDATE of ``rel`` by its key (``by_key``, :attr:`crr.sql.dml.RowQueries.by_key`),
    when its WHERE equates exactly the key's columns with values and Python writes the text of every
    value as DuckDB does (:func:`param_texts`); None otherwise, or when the table may hold tuples
    without entries (:attr:`crr.catalog.Relation.orphans`: the write then looks its tuples up)."""
    params = [] if params is None else params
    if by_key is None or not rel.key or rel.orphans or not isinstance(params, list):
        return None
    where = dict(by_key.where)
    if set(where) != set(rel.key):
        return None
    if not _uses_every_param([c for _, c in (*by_key.sets, *by_key.where)], params):
        return None  # too few or too many values: the statement runs, and DuckDB's error says which
    types = {c.name: c.type for c in rel.columns}

    def text(column: str, cell: Cell) -> object:
        return _param_text(types[column], _cell_value(cell, params))

    key = tuple(text(c.name, where[c.name]) for c in rel.key_columns)
    sets = {rel.column_names.index(column): text(column, cell) for column, cell in by_key.sets}
    if any(t is _NOT_SIMPLE for t in (*key, *sets.values())):
        return None
    return ByKey(key, sets)  # type: ignore[arg-type]


def value_texts(columns: Sequence[Column], values: Sequence[object]) -> tuple[str | None, ...] | None:
    """DuckDB's texts of one row's values in ``columns`` (as :func:`param_texts` writes them), or None
    when some value's text is not certainly DuckDB's (the types :func:`param_texts` takes)."""
    texts = tuple(_param_text(col.type, value) for col, value in zip(columns, values))
    return None if any(text is _NOT_SIMPLE for text in texts) else texts  # type: ignore[return-value]


def _param_text(duckdb_type: str, value: object) -> object:
    """DuckDB's text of ``value`` cast to ``duckdb_type`` (:func:`crr.types.value_text_sql`), None
    for NULL, or ``_NOT_SIMPLE``."""
    if value is None:
        return None
    family = type_family(duckdb_type)
    if type(value) is str and family is TypeFamily.STRING:
        return value if is_utf8(value) else _NOT_SIMPLE  # DuckDB refuses lone surrogates
    if type(value) is int and family is TypeFamily.INTEGER:
        lo, hi = INT_RANGE[duckdb_type.upper().strip()]
        return str(value) if lo <= value <= hi else _NOT_SIMPLE
    if type(value) is bool and family is TypeFamily.BOOLEAN:
        return "true" if value else "false"
    if type(value) is float and family is TypeFamily.FLOAT:
        return _float_text(duckdb_type, value)
    if type(value) is int and family is TypeFamily.FLOAT and abs(value) <= _EXACT_INTS[duckdb_type.upper().strip()]:
        return _double_text(float(value))  # the float holds it exactly, as DuckDB's cast of the integer does
    if type(value) is datetime.date and family is TypeFamily.DATE:
        return value.isoformat()  # DuckDB's too, years 1-9999 (all Python holds)
    if type(value) is datetime.datetime and value.tzinfo is None and family is TypeFamily.TIMESTAMP:
        return _timestamp_text(value)
    if type(value) is uuid.UUID and family is TypeFamily.UUID:
        return str(value)  # lower case, hyphenated, as DuckDB writes a UUID
    if family is TypeFamily.DECIMAL and (type(value) is decimal.Decimal
                                         or type(value) is int and _INT64[0] <= value <= _INT64[1]):
        try:
            return decimal_text(value, duckdb_type)
        except TypeMismatchError:
            return _NOT_SIMPLE  # not stored exactly as given, or out of range: the statement says so
    if type(value) is datetime.datetime and family is TypeFamily.TIMESTAMPTZ:
        return _utc_text(value)
    if type(value) is datetime.time and value.tzinfo is None and family is TypeFamily.TIME:
        return _time_text(value)
    if type(value) is bytes and family is TypeFamily.BLOB:
        return value.hex().upper()  # DuckDB's hex(), as value_text_sql writes a BLOB
    return _NOT_SIMPLE


def _time_text(value: datetime.time) -> str:
    """DuckDB's text of a TIME holding the naive ``value`` (``01:02:03.0004``)."""
    return _with_fraction(f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}", value.microsecond)


def _utc_text(value: datetime.datetime) -> object:
    """DuckDB's text of a TIMESTAMPTZ holding the aware ``value``, as a site carries it: the UTC
    wall clock (:func:`crr.types.value_text_sql`). A naive ``value`` is ``_NOT_SIMPLE`` (DuckDB reads
    it in the session's time zone), as is one whose UTC time falls outside Python's years."""
    offset = value.utcoffset()
    if offset is None:
        return _NOT_SIMPLE
    try:
        return _timestamp_text(value.replace(tzinfo=None) - offset)
    except OverflowError:
        return _NOT_SIMPLE


def _timestamp_text(value: datetime.datetime) -> str:
    """DuckDB's text of a TIMESTAMP holding the naive ``value``: ISO with a space, and the fraction of
    a second without its trailing zeros (``12:00:00.5``), none when it is zero."""
    return _with_fraction(value.replace(microsecond=0).isoformat(sep=" "), value.microsecond)


def _with_fraction(whole_seconds: str, microsecond: int) -> str:
    """A time's text ``whole_seconds`` with the fraction of a second as DuckDB writes it: without its
    trailing zeros, none when it is zero."""
    return f"{whole_seconds}.{microsecond:06d}".rstrip("0") if microsecond else whole_seconds


def _float_text(duckdb_type: str, value: float) -> object:
    """DuckDB's text of the FLOAT or DOUBLE a site stores for ``value``: a FLOAT's is the text of the
    double its single-precision value widens to (:func:`crr.types.value_text_sql`), rounded as
    DuckDB's cast rounds (to nearest, ties to even: struct's ``f`` packing rounds alike, and refuses
    alike a finite value that rounds past the largest float, which is ``_NOT_SIMPLE`` here, so the
    statement runs and DuckDB's error says so)."""
    if duckdb_type.upper().strip() == "FLOAT":
        try:
            (value,) = _SINGLE.unpack(_SINGLE.pack(value))
        except OverflowError:
            return _NOT_SIMPLE
    return _double_text(value)


_SINGLE = struct.Struct("<f")
_EXACT_INTS = {"DOUBLE": 2**53, "FLOAT": 2**24}  # the ints each float type holds exactly (larger ones round)
_INT64 = INT_RANGE["BIGINT"]  # the ints DuckDB binds as an integer (a DECIMAL column casts them exactly)


def _double_text(value: float) -> str:
    """DuckDB's text of the DOUBLE a site stores for ``value`` (:func:`crr.types.value_text_sql`): a
    zero as ``0.0`` and a NaN as ``nan`` (:func:`crr.types.stored_value_sql`; Python writes a NaN of
    either sign so), any other value as Python's ``repr``, the shortest text that reads back as the
    same double, which DuckDB writes too (``1e+16``, ``5e-324``, ``inf``; tuple ids rely on it
    already, :mod:`crr.types`)."""
    return "0.0" if value == 0 else repr(value)


# -- the write ------------------------------------------------------------------------------------

class PointWrite:
    """Runs point-path writes on one connection (inside the caller's transaction)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, prepared: Prepared) -> None:
        self.con = con
        self.prepared = prepared  # the site's statements prepared on ``con``

    def _run(self, sql: str, params: list | dict | None) -> list[tuple]:
        return (self.con.execute(sql, params) if params else self.con.execute(sql)).fetchall()

    def delete(self, rel: Relation, statement: str, qualifier: str, params: list | None, seq: int,
               then: Sequence[CteWrite] = ()) -> int:
        """A DELETE as the one statement :data:`Statement.DELETE`, with the maintenance of the
        relations that read the table, ``then`` (see :func:`delete_sql`); returns the rows removed.
        Prepared when the application's statement has parameters (then its text repeats; one with
        its values written in may not, and would only fill the cache) and their values allow."""
        sql = delete_sql(rel, statement, qualifier, then)
        values = [*(params or []), seq, *cte_values(then)]
        if not params:
            return self._run(sql, values)[0][0]
        return self.prepared.run(self.con, sql, values)[0][0]

    def insert_new(self, rel: Relation, given: list[tuple[str | None, ...]], clock: HybridClock, seq: int, *,
                   unchecked_entries: bool, then: Sequence[CteWrite] = ()) -> PointResult | None:
        """An INSERT of rows whose texts are ``given`` (:func:`param_texts`) as the one statement
        :data:`Statement.NEW_ROWS_INSERT`, or None, having written nothing, when some key (id) has
        an entry here or the table may hold tuples without entries: the caller then runs
        :meth:`write`. Being one statement, it may run without a transaction of its own around it.
        ``then``: the maintenance of the relations deriving from the table, run inside it (see
        :func:`new_rows_insert_sql`)."""
        if rel.orphans or not given or len(given) > POINT_ROWS:
            return None
        return self._insert_new(rel, self._added_rows(rel, given), clock, seq, unchecked_entries, then)

    def insert_received(self, rel: Relation, given: list[tuple[str | None, ...]], ids: list[int],
                        key_hashes: list[int | None], stamps: list[int], seq: int, *, unchecked_entries: bool,
                        then: Sequence[CteWrite] = ()) -> tuple[int, ...] | None:
        """A merge's rows new to the site (:mod:`crr.point_merge`): texts ``given``, tuple ids
        ``ids`` and key hashes ``key_hashes`` (recomputed and checked by the caller), each with its
        entry of length 1 and its stamp (``stamps``), as the one statement
        :data:`Statement.NEW_ROWS_INSERT`, with ``then`` inside it. Returns the statement's counts
        (the APP rows written, then the rows each of ``then`` returned), or None, having written
        nothing, when some key (id) has an entry here: the caller takes the general path. The
        caller checked the rows (NOT NULL, one row per id and key, at most :data:`POINT_ROWS`)."""
        assert not rel.orphans and 0 < len(given) <= POINT_ROWS
        rows = [_Row(True, i, kh, texts, False, []) for i, kh, texts in zip(ids, key_hashes, given)]
        counts = self._new_rows(rel, rows, stamps, seq, unchecked_entries, then)
        return counts if counts[0] else None

    @staticmethod
    def _added_rows(rel: Relation, found: list[tuple[str | None, ...]]) -> list[_Row]:
        """The rows an INSERT adds, with their ids and key hashes, from their texts."""
        key_at = key_positions(rel)
        return [_text_row(rel, key_at, texts, True) for texts in found]

    def write(self, rel: Relation, source: str, old: bool, new: bool, params: list | dict | None,
              clock: HybridClock, seq: int, given: list[tuple[str | None, ...]] | None = None, *,
              unchecked_entries: bool, new_tried: bool = False, then: ThenWrites | None = None,
              by_key: ByKey | None = None) -> PointResult | None:
        """Apply a write whose rows ``source`` yields (see :func:`rows_sql`) to the table's own state.

        ``given``: the rows' texts when the caller has them already (:func:`param_texts`); then
        ``source`` is not run. Returns what it did, or None, having written nothing, when the
        statement writes more than :data:`POINT_ROWS` rows. Relations deriving from the table are
        the caller's to maintain from the result, or ``then``'s: given the write's flips, added rows
        and whether they are all new to the table (as :class:`PointResult` has them), it returns the
        statements that maintain them, which run inside the write's one statement (:func:`write_sql`).
        ``unchecked_entries``: the site's
        :attr:`crr.catalog.Catalog.unchecked_entries` (then an added row whose id has an entry of another
        relation or key hash is refused, by one statement more). ``new_tried``: :meth:`insert_new`
        was called for these rows and wrote nothing. ``by_key``: an UPDATE of one row found by its key
        (:func:`keyed_update_texts`): one statement reads the row and the entries of its keys
        (:data:`Statement.KEY_LOOKUP`), in place of the rows statement and the lookup.
        """
        looked_up: dict[int, list[tuple[int, int, int, bool, int]]] | None = None
        if by_key is not None:
            assert old and new and not unchecked_entries
            found, looked_up = self._row_by_key(rel, by_key)
        else:
            found = given if given is not None else self._run(rows_sql(rel, source, old, new), params)
        if len(found) > POINT_ROWS:
            return None
        width = len(rel.columns)
        key_at = key_positions(rel)
        rows: dict[tuple[int, bool], _Row] = {}
        for n, texts in enumerate(found):
            halves = [texts[:width], texts[width:]] if old and new else [texts]
            for half, is_new in zip(halves, [False, True] if old and new else [new]):
                rows[(n, is_new)] = _text_row(rel, key_at, half, is_new)
        if not rows:
            return PointResult(0, False, [], [])
        if new and not old and not rel.orphans and not new_tried and then is None:
            inserted = self._insert_new(rel, list(rows.values()), clock, seq, unchecked_entries)
            if inserted is not None:
                return inserted
        if new and unchecked_entries:
            added = list({r.id: r for r in rows.values() if r.new}.values())
            if self._run(disagreeing_entries_sql(rel, len(added)), [p for r in added for p in (r.id, r.kh)])[0][0]:
                raise disagreeing_entry_error(rel)
        ids = sorted({r.id for r in rows.values()})
        versions: dict[int, list[tuple[int, int, int, bool, int]]] = {}  # per key hash (keyed) or id
        stored: set[int] = set()
        probes = sorted({r.kh for r in rows.values()}) if rel.key else ids
        new_ids = sorted({r.id for r in rows.values() if r.new})
        if looked_up is not None:
            # no entry came without its tuple (SiteFlag.UNCHECKED_ENTRIES), and none of the table's
            # tuples lacks its entry (``orphans``): a new row's tuple is stored if its key has its entry
            versions = looked_up
            stored = set(new_ids) & {v[0] for vs in versions.values() for v in vs}
        else:
            for id_, kh, cl, stamp, vis, in_table, rowid in self._run(
                    lookup_sql(rel, len(probes), len(new_ids)), probes + new_ids):
                if in_table:
                    stored.add(int(id_))
                else:
                    versions.setdefault(int(kh) if rel.key else int(id_), []).append(
                        _version(id_, cl, stamp, vis, rowid))
        for row in rows.values():
            row.stored = row.id in stored
            row.versions = versions.get(row.kh if rel.key else row.id, [])
        olds = [r for r in rows.values() if not r.new]
        news = [r for r in rows.values() if r.new]
        count = len({r.id for r in olds}) if old and not new else len(found)
        entries = self._entries(rel, olds, news, clock)
        flips = [(e.id, e.vis) for e in entries.values() if e.vis != e.old_vis]
        added = list({r.id: (r.id, r.values) for r in news}.values())
        fresh = sorted({r.id for r in news if not r.stored})
        more = then(flips, added, len(fresh) == len(added)) if then is not None and (entries or fresh) else ()
        changed = self._write(rel, entries, olds, news, seq, more)
        return PointResult(count, changed, flips, added, fresh)

    def _row_by_key(self, rel: Relation, by_key: ByKey) -> tuple[list[tuple[str | None, ...]],
                                                                  dict[int, list[tuple[int, int, int, bool, int]]]]:
        """An UPDATE by key's row as :func:`rows_sql` returns it (old texts, then new ones; none when
        the APP table has no row of the key) and the entries of its old and new keys, per key hash,
        as :meth:`write` reads them from :func:`lookup_sql`: one statement, :func:`key_lookup_sql`."""
        key_at = key_positions(rel)
        new_key = [by_key.sets.get(at, by_key.key[n]) for n, at in enumerate(key_at)]
        probes = sorted({key_hash_of_texts(rel.name, rel.key_columns, list(by_key.key)),
                         key_hash_of_texts(rel.name, rel.key_columns, new_key)})
        found: list[tuple[str | None, ...]] = []
        versions: dict[int, list[tuple[int, int, int, bool, int]]] = {}
        for row in self._run(key_lookup_sql(rel, len(probes)), [*probes, *by_key.key]):
            if row[0] is None:  # the APP row
                texts = tuple(row[6:])
                found.append(texts + tuple(by_key.sets.get(at, text) for at, text in enumerate(texts)))
            else:
                id_, kh, cl, stamp, vis, rowid = row[:6]
                versions.setdefault(int(kh), []).append(_version(id_, cl, stamp, vis, rowid))
        return found, versions

    def _insert_new(self, rel: Relation, news: list[_Row], clock: HybridClock, seq: int,
                    unchecked_entries: bool, then: Sequence[CteWrite] = ()) -> PointResult | None:
        """An INSERT whose keys (ids, unkeyed) the site has no entry of: one statement writes their
        entries, tuples and APP rows (:func:`new_rows_insert_sql`, in place of the lookup and three
        INSERTs). Every tuple of the table has an entry (``rel.orphans`` is false), so none of them
        is stored yet. Returns None, having written nothing, when some key (id) has an entry: the
        caller looks them up. The checks are the general path's, which finds no version of any key
        here."""
        distinct = list({r.id: r for r in news}.values())
        _check_not_null(rel, distinct)
        stamp = 0
        if rel.key:
            _check_keys(rel, distinct, freed=set(), updating=False)
            stamp = clock.tick()
        # a local INSERT reads only its own count
        if not self._new_rows(rel, distinct, [stamp] * len(distinct), seq, unchecked_entries, then, counted=False)[0]:
            return None
        ids = [r.id for r in distinct]
        return PointResult(len(news), True, [(i, True) for i in ids], [(r.id, r.values) for r in distinct], sorted(ids))

    def _new_rows(self, rel: Relation, distinct: list[_Row], stamps: list[int], seq: int,
                  unchecked_entries: bool, then: Sequence[CteWrite], counted: bool = True) -> tuple[int, ...]:
        """Run :data:`Statement.NEW_ROWS_INSERT` for rows of distinct ids and keys, each with its
        entry's stamp; return its counts (the first is 0 when it wrote nothing; then, if
        ``counted``, the rows each of ``then``'s writes returned)."""
        ids = [r.id for r in distinct]
        probe = [r.kh for r in distinct] if rel.key else ids  # distinct: the callers refused a repeated key
        params = [p for r, stamp in zip(distinct, stamps) for p in (r.id, r.kh, stamp, seq)] + probe + \
            (ids if unchecked_entries else []) + [p for r in distinct for p in (r.id, *r.values, seq)] + cte_values(then)
        # prepared: binding it costs more than running it (the rows and lookup statements gain
        # nothing from it, measured)
        sql = new_rows_insert_sql(rel, len(distinct), unchecked_entries, then, counted)
        return self.prepared.run(self.con, sql, params)[0]

    def _entries(self, rel: Relation, olds: list[_Row], news: list[_Row], clock: HybridClock) -> dict[int, _Entry]:
        """The causal-length entries the write changes, checking NOT NULL and key rules first."""
        entries: dict[int, _Entry] = {}
        for row in olds:  # removing a row deletes every present version of its key (or the tuple itself)
            for vid, vcl, vstamp, vvis, vrow in row.versions:
                if vcl % 2 == 1 and vid not in entries:
                    entries[vid] = _Entry(vid, row.kh, vcl + 1, vstamp, vvis, True, vrow)
        if not news:
            return entries
        _check_not_null(rel, news)
        stamp = 0
        if rel.key:
            _check_keys(rel, news, freed={r.kh for r in olds}, updating=bool(olds),
                        held=lambda id_: clashing_row_held(self.con, rel, id_))
            if len({r.kh for r in news}) < len({r.id for r in olds}):  # an UPDATE giving rows one key
                raise merged_rows_error(rel)
            clock.observe(max((v[2] for r in news for v in r.versions), default=None))
            stamp = clock.tick()
        for row in news:
            if row.id in entries:
                cur = entries[row.id].cl
                if cur % 2 == 0:  # deleted by this statement and written again (UPDATE SET v = v)
                    entries[row.id].cl, entries[row.id].stamp = cur + 1, max(stamp, entries[row.id].stamp)
                continue
            own = [v for v in row.versions if v[0] == row.id]
            cur, old_stamp, old_vis, rowid = (own[0][1], own[0][2], own[0][3], own[0][4]) if own else (0, 0, False, None)
            if cur % 2 == 0:
                entries[row.id] = _Entry(row.id, row.kh, cur + 1, max(stamp, old_stamp), old_vis, bool(own), rowid)
        return entries

    def _write(self, rel: Relation, entries: dict[int, _Entry], olds: list[_Row], news: list[_Row],
               seq: int, then: Sequence[CteWrite] = ()) -> bool:
        """Write the entries, the new tuples and the APP changes (one :data:`Statement.WRITE`), and
        run ``then`` inside it; return whether anything changed."""
        parts: list[tuple[str, list]] = []
        known = [e for e in entries.values() if e.known]
        fresh = [e for e in entries.values() if not e.known]
        if len(known) == 1:
            e = known[0]
            parts.append((cl_update_sql(1), [e.cl, e.stamp, e.vis, seq, e.rowid]))
        elif known:
            parts.append((cl_update_sql(len(known)), [seq] + [p for e in known for p in (e.cl, e.stamp, e.vis, e.id)]))
        if fresh:
            parts.append((cl_insert_sql(rel, len(fresh)), [p for e in fresh for p in (e.id, e.cl, e.kh, e.stamp, e.vis, seq)]))
        tuples = list({r.id: r for r in news if not r.stored}.values())
        if tuples:
            parts.append((tuples_insert_sql(rel, len(tuples)), [p for r in tuples for p in (r.id, *r.values, seq)]))
        # the APP table equals the visible state: rows whose visibility flipped appear or leave, and
        # so do rows whose visible entry came before their tuple (from a merge), which the write adds
        flipped = {e.id for e in entries.values() if e.vis != e.old_vis}
        gone = list({r.id: r for r in olds if r.id in flipped and not entries[r.id].vis}.values())
        came = list({r.id: r for r in news if (r.id in flipped and entries[r.id].vis)
                     or (not r.stored and r.id not in entries and _visible_entry(r))}.values())
        if len(gone) == 1 and len(came) == 1:
            parts.append((app_update_sql(rel), [*came[0].values, *gone[0].values]))
        else:
            if gone:
                parts.append((app_delete_sql(rel, len(gone)), [v for r in gone for v in r.values]))
            if came:
                parts.append((app_insert_sql(rel, len(came)), [v for r in came for v in r.values]))
        if parts:
            self.prepared.run(self.con, write_sql([sql for sql, _ in parts], then),
                              [p for _, params in parts for p in params] + cte_values(then))
        return bool(entries or tuples)


def _version(id_: object, cl: object, stamp: object, vis: object, rowid: object) -> tuple[int, int, int, bool, int]:
    """A looked-up entry of a key (or id) as :attr:`_Row.versions` holds it: (id, cl, stamp, vis, rowid)."""
    return int(id_), int(cl), int(stamp or 0), bool(vis), int(rowid)  # type: ignore[arg-type]


def _text_row(rel: Relation, key_at: list[int], texts: tuple[str | None, ...], new: bool) -> _Row:
    """A written row from its values' texts, with its id and (keyed) key hash computed in Python;
    ``key_at``: :func:`key_positions`."""
    kh = key_hash_of_texts(rel.name, rel.key_columns, [texts[i] for i in key_at]) if rel.key else None
    return _Row(new, tuple_id_of_texts(rel.name, rel.columns, texts), kh, texts, False, [])


def key_positions(rel: Relation) -> list[int]:
    """The positions of the key columns in a row, in the order the key hash encodes them: the
    columns' declared order (:attr:`crr.catalog.Relation.key_columns`, as the SQL computation
    :func:`crr.types.key_hash_sql` has them), not the order ``PRIMARY KEY (...)`` lists them in."""
    return [i for i, c in enumerate(rel.columns) if c.name in rel.key]


def _visible_entry(row: _Row) -> bool:
    """Whether the site's entry of the row's own id (looked up with its key's versions) is visible."""
    return any(vid == row.id and vvis for vid, _, _, vvis, _ in row.versions)


def _check_not_null(rel: Relation, news: list[_Row]) -> None:
    for col in rel.not_null:
        i = rel.column_names.index(col)
        n = len({r.id for r in news if r.values[i] is None})
        if n:
            raise null_error(rel, col, n)


def _check_keys(rel: Relation, news: list[_Row], freed: set, updating: bool,
                held: Callable[[int], bool] = lambda _id: True) -> None:
    """Refuse two values for one key in the statement, or a key another visible version holds; for an
    UPDATE (``updating``) any visible version of a key it does not delete itself, one equal to the new
    row too (a duplicate key in SQL: merging the two rows would lose one). ``held(id)``: whether the
    table holds the values of the version clashing (asked only to word the error)."""
    if len({r.id for r in news}) > len({r.kh for r in news}):
        raise repeated_key_error(rel)
    for row in news:
        clashing = [vid for vid, _, _, vvis, _ in row.versions if vvis and (updating or vid != row.id)]
        if row.kh not in freed and clashing:
            raise key_clash_error(rel, row.values, held(clashing[0]))
