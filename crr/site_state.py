"""What the operations of one open site share: its connection, its catalog, its counters, its caches.

:class:`crr.site.Site` is a facade: it opens the file, and its methods hand a :class:`SiteState` to
the module that does the work (:mod:`crr.site_ddl` for crr DDL, :mod:`crr.site_dml` for writes and
other SQL, :mod:`crr.site_merge` for merges). This module holds what they have in common:

* the catalog as an immutable snapshot (:class:`crr.catalog.Catalog`), replaced only when a
  transaction commits (:meth:`SiteState.transaction`): a statement inside one stages the snapshot
  it will commit (:meth:`SiteState.stage`) and reads it through :attr:`SiteState.rels`;
* the sequence number and the hybrid clock (see :mod:`crr.counters`);
* what one transaction's maintenance needs (:meth:`SiteState.maintainer`, :meth:`SiteState.apply`);
* the translation of DuckDB's errors on the application's SQL into :class:`crr.CrrError`
  (:func:`translated_errors`), and of a view failing inside a one-statement write
  (:func:`views_inside`).
"""

from __future__ import annotations

import contextlib
import threading
import re
from collections.abc import Iterator

import duckdb
import pyarrow as pa

from crr import colocated
from crr.arrow_slots import ArrowSlots
from crr.catalog import Catalog, Relation, SiteFlag, flag_set_sql
from crr.clock import HybridClock
from crr.counters import OPENING_INSERT_SQL, OPENINGS_SQL, counters_update_sql
from crr.errors import ConstraintError, CrrError, SiteError, SqlError, TypeMismatchError
from crr.maintain import Batch, BatchResult, Maintainer, view_query_failed
from crr.prepared import Prepared
from crr.sql import dml
from crr.sql.statements import Dml
from crr.tracked_cursors import RecordedCursors

_DUCKDB_ERRORS: list[tuple[type, type]] = [
    (duckdb.ConstraintException, ConstraintError),
    (duckdb.ConversionException, TypeMismatchError),
    (duckdb.OutOfRangeException, TypeMismatchError),  # an overflow, a value past its type's range
    (duckdb.TypeMismatchException, TypeMismatchError),
    (duckdb.InvalidTypeException, TypeMismatchError),
    (duckdb.NotImplementedException, SqlError),  # e.g. a parameter of a Python type DuckDB cannot bind
    (duckdb.BinderException, SqlError),
    (duckdb.ParserException, SqlError),
    (duckdb.CatalogException, SqlError),
    (duckdb.InvalidInputException, SqlError),
]


INTERRUPTED = "the statement was interrupted (Site.interrupt); nothing was changed"


def _roll_back(con: duckdb.DuckDBPyConnection) -> None:
    """End the open transaction, changing nothing. ``Site.interrupt`` from another thread can cut a
    ROLLBACK short too (DuckDB raises InterruptException), which left the transaction open and
    aborted: every later statement of the site failed ("Current transaction is aborted") until it
    was opened again. So the ROLLBACK is repeated until it ends; any other error means no transaction
    is open (a COMMIT that failed has ended it)."""
    for _ in range(_ROLLBACK_TRIES):
        try:
            con.rollback()
            return
        except duckdb.InterruptException:
            continue
        except duckdb.Error:
            return
    raise SiteError(f"a transaction could not be rolled back: {_ROLLBACK_TRIES} attempts were interrupted "
                    "(Site.interrupt); close the site and open it again (nothing it held is lost)")


_ROLLBACK_TRIES = 1000


@contextlib.contextmanager
def translated_errors(rewritten: bool = False) -> Iterator[None]:
    """Re-raise DuckDB errors from user SQL as CrrError subclasses. ``rewritten``: the statement DuckDB
    ran is crr's rewrite of the user's (DML), so DuckDB's excerpt of it (``LINE 1: ...``), which
    shows crr's own text, is left out."""
    try:
        yield
    except duckdb.InterruptException:
        raise CrrError(INTERRUPTED) from None
    except duckdb.Error as e:
        text = str(e).strip()
        if "Corrupt database file" in text or "Could not read enough bytes" in text:  # damaged, or cut short
            raise SiteError(f"the site's database file is damaged ({text}); restore it from a backup, or start a "
                            "new site and sync it from a peer") from None
        if rewritten:
            text = re.split(r"\n\s*LINE \d+:", text, maxsplit=1)[0].strip()
        for src, dst in _DUCKDB_ERRORS:
            if isinstance(e, src):
                raise dst(text) from None
        raise CrrError(f"DuckDB error: {text}") from None


class ViewFailed(Exception):
    """A view's query failed on a write's or merge's rows inside its one statement, which wrote
    nothing: the caller takes the general path, whose error names the view (not a CrrError: it
    never leaves the site)."""


@contextlib.contextmanager
def views_inside(active: bool) -> Iterator[None]:
    """Turn a view's query failing (:func:`crr.maintain.view_query_failed`) into :class:`ViewFailed`
    when views are maintained inside the statement (``active``); other errors pass on."""
    try:
        yield
    except duckdb.Error as e:
        if not (active and view_query_failed(e)):
            raise
        raise ViewFailed() from None


class SiteState:
    """One open site's shared state (see the module docstring). ``site_id``, ``seq`` and ``clock``
    are set when the site is opened (:meth:`crr.site.Site._open`)."""

    def __init__(self, path: str, con: duckdb.DuckDBPyConnection, max_clock_skew: float) -> None:
        self.path = path
        self.con = con
        self.max_clock_skew = max_clock_skew
        self.slots = ArrowSlots(con)  # where statements read Arrow tables (registered once each)
        self.catalog = Catalog()  # the committed catalog snapshot
        self.staged: Catalog | None = None  # the snapshot the open transaction will commit, if it changes it
        self.site_id = ""
        self.seq = 0  # the sequence number of the last transaction that changed replicated state
        self.seq_floor = 0  # the least number the next one takes (crr.clock.seq_floor, set at open)
        # the file's _crr.openings rows (read at open; see next_seq), and whether this opening is one
        self.openings: tuple[tuple[int, int], ...] = ()
        self.opening_recorded = False
        self._opening_staged: tuple[int, int] | None = None  # recorded by the running transaction
        self._seq_before: int | None = None  # while a transaction runs: ``seq`` when it began
        self.clock = HybridClock("", 0)
        self.closed = False
        # held by every Site method that uses the connection: one thread at a time runs statements on it
        # (DuckDB's connection hands a statement's result to whichever thread fetches next)
        self.lock = threading.RLock()
        # a second connection to the database, for reads of committed state that must not wait for a
        # statement another thread runs (read_committed); its own lock, as it is one connection too
        self._reader: duckdb.DuckDBPyConnection | None = None
        self._reader_lock = threading.Lock()
        # caches, each valid until crr DDL changes the catalog (forget_statements), but ``widths``,
        # which DDL keeps up to date itself (a DROP forgets the relation's, a new view records its own)
        # and a rolled-back transaction clears
        self.widths: dict[str, tuple[int, int]] = {}  # monomial lengths of relations (see Maintainer)
        self.parsed: dict[str, Dml] = {}  # statement text -> parsed DML (a small cache)
        self.rewritten: dict[int, dml.RowQueries] = {}  # id(parsed DML) -> its row queries
        self.accepted: dict[tuple, pa.Schema] = {}  # expected columns -> Arrow schema already checked
        self.delta_sql: dict[tuple, tuple[str, bool]] = {}  # views' generated delta SQL (see Maintainer)
        self.prepared = Prepared()  # point-path statements prepared on the connection
        # per (source site, relation): the largest cursor of a changeset merged here since the site
        # opened, and where the last one merged in full started (its ``since``); a hint only, of when
        # a changeset may repeat one merged before (crr.site_merge._repeated)
        self.merged_cursors: dict[tuple[str, str], tuple[int, int]] = {}
        # the tracked cursors known to be stored, as committed (crr.tracked_cursors): replaced after the
        # commit of a tracked merge, and before a DDL deletes rows of _crr.cursors
        self.recorded_cursors = RecordedCursors()
        self.tracking = False  # while a tracked merge runs, from before its commit until its snapshot is in place
        # the names of the macros defined at this site, read once (crr.site_ddl); None again after a
        # statement of the application's that is not read-only (CREATE MACRO, ATTACH, ...) runs. A new
        # in-memory database has none (a file may keep some from before it was opened)
        self.user_functions: frozenset[str] | None = frozenset() if path == ":memory:" else None

    # -- the catalog and transactions ------------------------------------------------------------
    @property
    def rels(self) -> Catalog:
        """The catalog as the code running now sees it: the open transaction's staged snapshot, if
        it has one, else the committed one."""
        return self.staged if self.staged is not None else self.catalog

    def stage(self, catalog: Catalog) -> None:
        """Make ``catalog`` the snapshot the open transaction commits (its DDL is in the same transaction)."""
        self.staged = catalog

    def check_open(self) -> None:
        """Raise :class:`SiteError` if the site was closed."""
        if self.closed:
            raise SiteError("the site is closed; open it again with crr.Site(path)")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One DuckDB transaction; a catalog snapshot staged in it replaces the committed one only
        when it commits (so a rolled-back transaction leaves the catalog as the file has it)."""
        self.check_open()
        seq = self._seq_before = self.seq
        try:
            # DuckDB failing under crr's own statements (a damaged file, a full disk), or Site.interrupt
            # from another thread landing on any of them, the BEGIN too
            with translated_errors():
                self.con.begin()
                yield
                self.con.commit()
            self.slots.committed()
            if self.staged is not None:
                self.catalog = self.staged
            if self._opening_staged is not None:
                self.openings = (*self.openings, self._opening_staged)
        except BaseException:
            # nothing the transaction wrote is committed: its sequence number goes to the next one (a
            # cursor handed out after it would otherwise skip that one's rows once the site reopens)
            self.seq = seq
            if self._opening_staged is not None:  # its record of the opening is gone with it
                self.opening_recorded = False
            self.slots.rolled_back()
            self.widths.clear()  # a cache of monomial lengths, possibly of rolled-back rows
            _roll_back(self.con)
            raise
        finally:
            self.staged = None
            self._seq_before = None
            self._opening_staged = None

    @property
    def committed_seq(self) -> int:
        """The sequence number of the last committed transaction (``Site.cursor``): ``seq``, but the
        one before it while a transaction runs (it is bumped before the commit, and a rollback takes
        it back). Read without the lock, from any thread."""
        seq, before = self.seq, self._seq_before  # (in this order: a transaction may begin between them)
        return seq if before is None else min(seq, before)

    def read_committed(self, sql: str, params: list | None = None) -> list[tuple]:
        """Rows of a query over committed state, read on a connection of its own: it does not wait for
        the site's lock, which a long statement may hold (crr status while crr serve runs a query)."""
        with self._reader_lock:
            self.check_open()
            if self._reader is None:
                self._reader = self.con.cursor()
            return self._reader.execute(sql, params or []).fetchall()

    def close_reader(self) -> None:
        """Close the connection :meth:`read_committed` uses (the site is closing)."""
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def forget_statements(self) -> None:
        """Drop cached DML and delta SQL, and the prepared statements (after DDL, which they depend on)."""
        self.parsed.clear()
        self.rewritten.clear()
        self.delta_sql.clear()
        self.prepared.forget(self.con)

    # -- counters --------------------------------------------------------------------------------
    def next_seq(self) -> int:
        """The sequence number the running change stamps its AUG rows with: one more than the last, or
        the floor set when the site opened if that is larger (:func:`crr.clock.seq_floor`: numbers
        handed out before a restore are never handed out again). The first time it jumps to the
        floor, the opening is recorded first (:data:`crr.counters.OPENING_INSERT_SQL`; inside the
        running transaction, or as a statement of its own before a point write's), so ``changes``
        can tell this copy's cursors from another copy's (:func:`crr.changeset.cursor_in_history`).
        An opening recorded by a change that then wrote nothing hands out no number: harmless."""
        seq = max(self.seq + 1, self.seq_floor)
        if seq > self.seq + 1 and not self.opening_recorded:
            with translated_errors():  # (Site.interrupt may land on it, outside any statement's translation)
                self.con.execute(OPENING_INSERT_SQL, [seq, self.seq])
            self.opening_recorded = True
            if self._seq_before is not None:  # known once the transaction commits
                self._opening_staged = (seq, self.seq)
            else:  # (a point write's statement of its own: committed)
                self.openings = (*self.openings, (seq, self.seq))
        return seq

    def bump(self) -> None:
        """Advance the sequence number after a transaction wrote AUG rows stamped with it."""
        self.seq = self.next_seq()

    def open_numbering(self, floor: int) -> None:
        """Read the file's recorded openings (:data:`crr.counters.OPENINGS_SQL`) when the site opens, and
        set this opening's floor: ``floor`` (:func:`crr.clock.seq_floor`), or above the last recorded
        floor if the wall clock has stepped back since. An opening is recorded before its first change
        writes, so one whose change then wrote nothing handed out no number; the floors still have to
        grow, as :func:`crr.changeset.cursor_in_history` reads the ranges in their order. ``openings``
        then follows the ones this process records (see :meth:`next_seq`)."""
        self.openings = tuple((int(f), int(p)) for f, p in self.con.execute(OPENINGS_SQL).fetchall())
        self.seq_floor = max(floor, self.openings[-1][0] + 1 if self.openings else 0)

    def save_counters(self) -> None:
        """Store the sequence number and clock in ``_crr.meta`` (see :mod:`crr.counters`)."""
        self.con.execute(counters_update_sql(), [str(self.seq), str(self.clock.last)])

    # -- maintenance -----------------------------------------------------------------------------
    def maintainer(self) -> Maintainer:
        """A maintainer for one transaction, writing with the next sequence number."""
        rels = self.rels
        m = Maintainer(self.con, self.slots, rels, self.next_seq(), self.widths)
        m.lineage = {name: set(lin) for name in rels if (lin := rels.lineage(name))}
        m.sql_cache = self.delta_sql
        return m

    def apply(self, batch: Batch, changed: bool = False) -> BatchResult:
        """Run a batch through the maintainer (inside the caller's transaction); the sequence number
        advances if it (or, ``changed``, the caller's own writes in this transaction) changed
        replicated state."""
        m = self.maintainer()
        try:
            result = m.apply(batch, self.rels.views())
        finally:
            m.cleanup()
        self.stage_marked(m)
        if result.changed or changed:
            self.bump()
        return result

    def stage_marked(self, m: Maintainer) -> None:
        """Stage the relations whose catalog entry the maintainer changed (it recorded them in the file)."""
        if m.marked:
            self.stage(self.rels.with_(*(m.rels[name] for name in m.marked)))
        for flag in m.raised:  # flags it set (and recorded in the file)
            if flag not in self.rels.flags:
                self.stage(self.rels.with_flag(flag))

    def note_unchecked_entries(self) -> None:
        """Record in the open transaction that ``_crr.cl`` may hold entries whose key hash went
        unchecked (:attr:`crr.catalog.Catalog.unchecked_entries`): entries moved in from a replica's or
        a co-located view's table, whose merges recompute no key hash."""
        if not self.rels.unchecked_entries:
            self.con.execute(flag_set_sql(SiteFlag.UNCHECKED_ENTRIES))
            self.stage(self.rels.with_flag(SiteFlag.UNCHECKED_ENTRIES))

    def uncolocate(self, catalog: Catalog, views: list[Relation] | None = None) -> None:
        """Move the co-located views whose conditions ``catalog`` breaks (or ``views``) to the standard
        layout, inside the open transaction, and stage them so (see :mod:`crr.colocated`)."""
        for view in (colocated.broken(catalog) if views is None else views):
            for stmt in colocated.uncolocate_sql(view, colocated.source_of(view)):
                self.con.execute(stmt)
            self.stage(self.rels.changed(view.name, colocated=False))
            self.note_unchecked_entries()
