"""A site: one device's database, with its APP and AUG layers, in one DuckDB file.

:class:`Site` is the public API and a facade: it opens the file (catalog, counters, upgrades) and
hands each call to the module that does the work, with the state they share
(:class:`crr.site_state.SiteState`): crr DDL to :mod:`crr.site_ddl`, writes and other SQL to
:mod:`crr.site_dml`, merges to :mod:`crr.site_merge`, changes to :mod:`crr.changes`.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any, Iterable

import duckdb

from crr import colocated, open_files, site_ddl, site_dml, site_merge
from crr.catalog import (APP_TABLES_SQL, CATALOG_DDL, CATALOG_ROWS_SQL, META_INSERT_SQL, META_SQL, META_TABLE_EXISTS_SQL,
                         STORAGE_VERSION, Catalog, Relation, SiteFlag, relation_from_row)
from crr.changeset import Changeset, changes_request, check_since_known, cursor_in_history
from crr.changes import base_provenance_sql, collect_changes, derived_provenance_sql
from crr.clock import HybridClock, seq_floor
from crr.counters import largest_seq_sql, largest_stamp_sql
from crr.errors import CatalogError, CrrError, SiteError, SqlError, first_line
from crr.merge import MergeResult
from crr.one_thread import one_thread_at_a_time
from crr.params import check_bindable
from crr.prepared import Prepared
from crr.site_options import check_site_id, clock_skew
from crr.site_state import SiteState
from crr.sql.statements import CreateTable, CreateView, Dml, Drop, RelationKind, classify, fold_identifier
from crr.tracked_cursors import PEER_CURSOR_SQL, PEER_CURSORS_SQL, check_peer_cursor_args, check_track
from crr.upgrade import upgradable, upgrade
from crr.types import is_utf8


# threads sharing one Site take turns on its state's lock (a second thread waits for the first's
# statement, merge or read to finish)
_one_thread_at_a_time = one_thread_at_a_time(lambda site: site._state.lock)


_DUCKDB_MAGIC = (8, b"DUCK")  # where a DuckDB database file says what it is
_NOT_DUCKDB = "it is not a DuckDB database; give a crr site file's path, or a new path to create one"


def _duckdb_file_or_new(path: str) -> bool:
    """Whether ``path`` is a DuckDB database file, or names none yet (or an in-memory database, or
    a file this process cannot read, which DuckDB's own error then explains)."""
    if path.startswith(":memory:") or not path:
        return True
    offset, magic = _DUCKDB_MAGIC
    try:
        with open(path, "rb") as f:
            head = f.read(offset + len(magic))
    except OSError:
        return True
    return not head or head[offset:] == magic


def _open_advice(error: duckdb.Error) -> str:
    """What to do about a file DuckDB would not open (``error``)."""
    text = str(error)
    if "No such file or directory" in text:
        return "check the path: its folder must exist (crr creates the file, not its folders)"
    if "Permission denied" in text or "Read-only" in text:
        return "check the permissions of the file and its folder: a site writes both (its file and a .wal beside it)"
    if "not a valid DuckDB database" in text:
        return _NOT_DUCKDB
    return ("if the file is damaged, restore it from a backup, or start a new site and sync it from a peer "
            "(crr.Site(new_path).merge(peer.changes()))")


class Site:
    """One device's replicated database.

    ``Site(path=":memory:", site_id=None)`` opens or creates the DuckDB file at ``path``. The site id
    is generated once and persisted; passing a different ``site_id`` for an existing file is an error.
    ``max_clock_skew`` (seconds) bounds how far ahead of this site's clock a merged stamp may be.
    Threads may share a Site: its statements, merges and reads take turns on its one connection.
    """

    def __init__(self, path: str | os.PathLike = ":memory:", site_id: str | None = None, *,
                 max_clock_skew: float = 86_400.0) -> None:
        check_site_id(site_id)
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise SiteError(f"a site's path is a string or a path-like object (or ':memory:'), not {path!r}")
        self.path = ":memory:" if path is None else os.fspath(path)  # None: a new in-memory site, as the default
        if not isinstance(self.path, str):  # bytes from os.fspath of a bytes path-like
            raise SiteError(f"a site's path is a string or a path-like object of one, not {path!r}")
        if "\x00" in self.path or not is_utf8(self.path):
            raise SiteError(f"a site's path holds a NUL character or is not valid Unicode (a lone surrogate): "
                            f"{self.path!r}; name the file by a path the file system can store")
        skew = clock_skew(max_clock_skew)
        with open_files.opening():
            self._connect(site_id, skew)

    def _connect(self, site_id: str | None, skew: float) -> None:
        """Open the file (under :func:`crr.open_files.opening`) and claim it for this site."""
        if open_files.holder(self.path) is not None:
            raise SiteError(f"{self.path} is already open in this process by another crr.Site; use that object, "
                            "or close() it before opening the file again")
        if not _duckdb_file_or_new(self.path):  # (DuckDB would fetch an extension to read a SQLite file)
            raise SiteError(f"cannot open site database {self.path}: {_NOT_DUCKDB}")
        try:
            con = duckdb.connect(self.path)
        except duckdb.Error as e:
            raise SiteError(f"cannot open site database {self.path}: {first_line(e)}; {_open_advice(e)}") from None
        con.execute("SET arrow_lossless_conversion = true")
        con.execute("SET python_enable_replacements = false")  # an unknown name is no Python variable of crr's
        con.execute("SET TimeZone = 'UTC'")  # views over TIMESTAMPTZ (a cast to DATE...) agree on every device
        self._state = SiteState(self.path, con, skew)
        try:
            self._open(site_id)
        except CrrError:
            con.close()
            raise
        except (ValueError, KeyError, TypeError, duckdb.Error) as e:  # a _crr schema changed outside crr
            con.close()
            raise SiteError(f"cannot open {self.path}: its crr catalog (schema _crr) is damaged ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else e!r}); restore the file from a backup, or "
                            "rebuild the site: a fresh site merging a peer's changes()") from None
        except BaseException:
            con.close()
            raise
        open_files.claim(self.path, self._state)

    # the shared state, as benchmarks and tests reach it (each is the state's own)
    @property
    def max_clock_skew(self) -> float:
        """How far ahead of this site's clock (seconds) a merged stamp may be; settable (checked as
        at opening), for the merges after."""
        return self._state.max_clock_skew

    @max_clock_skew.setter
    def max_clock_skew(self, seconds: float) -> None:
        self._state.max_clock_skew = clock_skew(seconds)

    @property
    def _con(self) -> duckdb.DuckDBPyConnection:
        return self._state.con

    @_con.setter
    def _con(self, con: duckdb.DuckDBPyConnection) -> None:
        self._state.con = con

    @property
    def _prepared(self) -> Prepared:
        return self._state.prepared

    @property
    def _catalog(self) -> Catalog:
        return self._state.catalog

    @property
    def _rels(self) -> Catalog:
        return self._state.rels

    # -- opening -------------------------------------------------------------------------------
    @staticmethod
    def _stored_meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
        """The file's ``_crr.meta`` rows, before any DDL; empty when it has none (a new site)."""
        if not con.execute(META_TABLE_EXISTS_SQL).fetchall()[0][0]:
            return {}
        return dict(con.execute(META_SQL).fetchall())

    def _check_meta(self, meta: dict[str, str], site_id: str | None) -> None:
        """Refuse a file of another site (``site_id`` given), of a newer storage version, or of an older
        one this crr cannot upgrade."""
        if site_id is not None and meta.get("site_id") != site_id:
            raise SiteError(f"{self.path} belongs to site {meta.get('site_id')!r}, not {site_id!r}; "
                            "open it without site_id or with its own id")
        version = int(meta["version"])
        if version > STORAGE_VERSION:
            raise SiteError(f"{self.path} was written by a newer crr (storage version {version}); upgrade crr")
        if version < STORAGE_VERSION and not upgradable(version):
            raise SiteError(f"{self.path} uses storage version {version}, older than this crr's "
                            f"{STORAGE_VERSION}; create a fresh site and merge a peer's full state into it "
                            "(site.merge(peer.changes()))")

    def _open(self, site_id: str | None) -> None:
        state = self._state
        con = state.con
        con.begin()
        try:
            meta = self._stored_meta(con)
            if meta:  # refused before any DDL: another site's file, or one of a layout not this crr's, stays as it is
                self._check_meta(meta, site_id)
            for ddl in CATALOG_DDL:
                con.execute(ddl)
            meta = dict(con.execute(META_SQL).fetchall())
            if not meta:
                meta = {"site_id": site_id or f"site-{uuid.uuid4().hex[:12]}", "version": str(STORAGE_VERSION),
                        "seq": "0", "hlc": "0", **{flag.value: "false" for flag in SiteFlag}}
                con.executemany(META_INSERT_SQL, list(meta.items()))
            if upgradable(int(meta["version"])):  # (another site's file was refused above)
                upgrade(con, int(meta["version"]))
                meta = dict(con.execute(META_SQL).fetchall())
            con.commit()
        except BaseException:
            con.rollback()
            raise
        self.site_id: str = meta["site_id"]
        state.site_id = self.site_id
        state.catalog = Catalog(flags=frozenset(flag for flag in SiteFlag if meta.get(flag.value) != "false"))
        stored = [relation_from_row(row) for row in con.execute(CATALOG_ROWS_SQL).fetchall()]
        present = {name for (name,) in con.execute(APP_TABLES_SQL).fetchall()}
        missing = [rel.name for rel in stored if rel.has_app and rel.name not in present]
        if missing:
            raise SiteError(f"{self.path}: the APP table of {', '.join(missing)} is missing (dropped outside crr?); "
                            "restore the file from a backup, or rebuild the site: a fresh site that declares the "
                            "same relations and merges a peer's changes()")
        for rel in stored:
            if rel.kind is RelationKind.VIEW:
                plan, spec = site_ddl.compile_definition(state, rel.name, rel.definition or "")
                rel = dataclasses.replace(rel, plan=plan, aggregate=spec)
            state.catalog = state.catalog.with_(rel)
        state.seq, last = self._recover_counters(int(meta["seq"]), int(meta["hlc"]))
        state.open_numbering(seq_floor())
        state.clock = HybridClock(self.site_id, last)

    def _recover_counters(self, seq: int, hlc: int) -> tuple[int, int]:
        """The sequence number and clock at open: the stored ones, or what the AUG rows show if larger.

        Writes and merges do not update ``_crr.meta`` (one statement less per transaction): every
        one of them stores its sequence number in the AUG rows it writes and its stamps in
        ``_crr.cl``, so the largest of those is the counter. DDL, which can drop such rows, and
        ``close`` store both counters in ``_crr.meta``.
        """
        con, rels = self._state.con, self._state.rels
        seen = con.execute(largest_seq_sql(rels)).fetchall()[0][0] or 0
        stamp = con.execute(largest_stamp_sql(rels)).fetchall()[0][0] or 0
        return max(seq, int(seen)), max(hlc, int(stamp) >> 64)

    # -- lifecycle -----------------------------------------------------------------------------
    @_one_thread_at_a_time
    def close(self) -> None:
        """Close the site; committed state is durable in its file."""
        state = self._state
        if not state.closed:
            state.closed = True
            try:
                state.save_counters()
            except duckdb.Error:
                pass  # the counters are recovered from the AUG rows at the next open
            state.close_reader()
            state.con.close()

    def __getstate__(self) -> object:
        raise SiteError("a Site holds an open database connection and cannot be pickled or copied; open "
                        "its file (crr.Site(path)) where it is needed, after closing it here")

    def __enter__(self) -> "Site":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Site({self.path!r}, site_id={self.site_id!r})"

    def interrupt(self) -> None:
        """Stop the statement another thread is running on this site (it raises, and a write or merge it
        was changes nothing); call it from a thread other than the one running the statement. Without
        a running statement (or once the site is closed) it does nothing."""
        if not self._state.closed:
            self._state.con.interrupt()

    # -- introspection -------------------------------------------------------------------------
    @property
    def cursor(self) -> int:
        """The sequence number of the site's last committed change: ``changes(since=site.cursor)`` is
        empty. Read without waiting for a write another thread runs (which it does not count yet).

        Numbers grow by one a change, but the first change after the site opens takes at least the
        wall clock in microseconds (:func:`crr.clock.seq_floor`), so a site restored from an older
        copy of its file never numbers new rows with a cursor a peer already holds."""
        return self._state.committed_seq

    def relations(self) -> dict[str, str]:
        """The crr relations held here: ``{name: kind}`` with kind replicated, remote, source or view."""
        return {n: r.kind.value for n, r in self._rels.items()}

    def relation(self, name: str) -> Relation:
        """The catalog entry of a relation (columns, key, kind, view plan)."""
        if not isinstance(name, str):
            raise CatalogError(f"a relation is named by a string, not {name!r}")
        rel = self._rels.get(fold_identifier(name))
        if rel is None:
            raise CatalogError(f"no relation named {name} at site {self.site_id}")
        return rel

    def lineage(self, name: str) -> set[str]:
        """The base relations whose tuple ids appear in a relation's provenance."""
        return set(self._rels.lineage(self.relation(name).name))

    @_one_thread_at_a_time
    def provenance(self, name: str) -> dict[tuple, list[list[int]]]:
        """Each AUG tuple's provenance in canonical form: ``{values: [sorted ids of each monomial]}``."""
        rel = self.relation(name)
        self._state.check_open()
        if not rel.stored:
            raise CatalogError(f"{rel.name} is a remote source that keeps no tuples at this site (no view joins it)")
        if rel.is_base:
            rows = self._state.con.execute(base_provenance_sql(rel)).fetchall()
            return {tuple(r[:-1]): [[r[-1]]] for r in rows}
        if rel.colocated:
            return {tuple(r[:-1]): r[-1] for r in self._state.con.execute(colocated.provenance_sql(rel)).fetchall()}
        rows = self._state.con.execute(derived_provenance_sql(rel)).fetchall()
        return {tuple(r[:-1]): r[-1] for r in rows}

    # -- statements ----------------------------------------------------------------------------
    @_one_thread_at_a_time
    def execute(self, sql: str, params: Iterable[Any] | dict | None = None) -> list[tuple]:
        """Run one statement: crr DDL, DML on a replicated table, or any read-only query.

        A query returns its rows as a list of tuples; DML returns ``[(rows_affected,)]``; DDL ``[]``.
        """
        state = self._state
        state.check_open()
        if params is not None and (isinstance(params, (str, bytes)) or not isinstance(params, dict)
                                   and not hasattr(params, "__iter__")):
            raise SqlError(f"execute's parameters must be a list or tuple of values (or a dict for $name "
                           f"parameters), got {type(params).__name__}")
        stmt = self._classify(sql)
        params = list(params) if params is not None and not isinstance(params, dict) else params
        check_bindable(params)
        if isinstance(stmt, (CreateTable, CreateView, Drop)):
            if params:
                n = len(params)
                raise SqlError(f"crr DDL takes no parameters, got {n} value{'' if n == 1 else 's'}; write the "
                               "statement whole")
            state.forget_statements()
        if isinstance(stmt, CreateTable):
            return site_ddl.create_table(state, stmt)
        if isinstance(stmt, CreateView):
            return site_ddl.create_view(state, stmt)
        if isinstance(stmt, Drop):
            return site_ddl.drop(state, stmt)
        if isinstance(stmt, Dml):
            return site_dml.run_dml(state, stmt, params)
        return site_dml.run_other(state, stmt, params)

    def _classify(self, sql: str):
        """Parse a statement, reusing the parse of DML seen before (apps repeat their statements)."""
        parsed = self._state.parsed
        stmt = parsed.get(sql) if isinstance(sql, str) else None
        if stmt is None:
            stmt = classify(sql)
            if isinstance(stmt, Dml):
                if len(parsed) >= 256:
                    self._state.forget_statements()
                parsed[sql] = stmt
        return stmt

    @_one_thread_at_a_time
    def insert_many(self, table: str, rows: Any) -> int:
        """Bulk-insert rows into a replicated table in one transaction; returns rows given.

        ``rows`` is a list of tuples (in column order), a pyarrow Table, or a pandas DataFrame
        (columns matched by name when all names match, else by position, unless some column is
        named like a table column at another position, which is refused: a SqlError).
        """
        return site_dml.insert_many(self._state, table, rows)

    # -- replication ---------------------------------------------------------------------------
    @_one_thread_at_a_time
    def changes(self, since: int | None = None, relations: Iterable[str] | None = None) -> Changeset:
        """Everything changed after cursor ``since`` (None or 0: the full state) for some relations.

        ``relations`` defaults to every relation held here. The result's ``cursor`` resumes the stream.
        """
        self._state.check_open()
        since, given = changes_request(since, relations)
        named = None if given is None else list(dict.fromkeys(self.relation(r).name for r in given))  # each once
        names = self._state.rels.names_to_send(named)
        with self._state.transaction():
            cursor = self._state.seq
            check_since_known(since, cursor, self._state.openings)
            out, cl = collect_changes(self._state.con, self._state.rels, names, since)
        return Changeset(source=self.site_id, since=since, cursor=cursor, relations=out, cl=cl)

    @_one_thread_at_a_time
    def knows_cursor(self, since: int) -> bool:
        """Whether ``changes(since=since)`` resumes a stream from this copy of the site: ``since`` is 0
        or a cursor it handed out (:func:`crr.changeset.cursor_in_history`). A cursor past its last
        change, or one another copy of its file handed out (the file was restored from a backup
        since), is not: ask for the full state instead, which merges as safely."""
        self._state.check_open()
        since, _ = changes_request(since, None)
        cursor = self._state.seq
        return cursor_in_history(since, cursor, self._state.openings)

    @_one_thread_at_a_time
    def merge(self, changeset: Changeset | bytes, *, track: bool = False) -> MergeResult:
        """Merge a changeset (or its bytes): atomic, idempotent and commutative.

        Relations this site does not hold are ignored; a relation whose schema differs from the
        local declaration makes the whole merge fail with changing nothing.
        With ``track=True`` the changeset's source cursor is recorded per (source site, relation)
        in the same transaction (see :meth:`peer_cursor`), so a stream resumes where it stopped: an
        incremental changeset moves it forward only (and not past a gap it leaves), a full state
        (``since`` 0) sets it (:func:`crr.tracked_cursors.tracked_cursor`).
        """
        check_track(track)
        return site_merge.merge(self._state, changeset, track)

    def peer_cursor(self, peer: str, relation: str) -> int:
        """The source cursor of the last changeset of ``relation`` merged from ``peer`` with track=True (0 if
        none). Read as committed, without waiting for a statement another thread runs on the site."""
        check_peer_cursor_args(peer, relation)
        self._state.check_open()
        stream = (peer, fold_identifier(relation))
        # a tracked merge of this opening wrote it; while one runs (on another thread), its commit may
        # precede its snapshot, so the file answers
        known = None if self._state.tracking else self._state.recorded_cursors.get(stream)
        if known is not None:
            return known
        rows = self._state.read_committed(PEER_CURSOR_SQL, list(stream))
        return int(rows[0][0]) if rows else 0

    def peer_cursors(self) -> list[tuple[str, str, int, Any]]:
        """All tracked cursors: (peer, relation, cursor, last update time). Read as committed, without
        waiting for a statement another thread runs on the site."""
        return self._state.read_committed(PEER_CURSORS_SQL)
