"""``SparkSite``: a crr site whose relations and views live in Parquet and are maintained by Spark jobs.

The same DDL as :class:`crr.Site`, the same changesets (bytes merge both ways, with the same tuple
ids), the same compiler: a view's delta plans are the sqlglot plans the DuckDB site runs, transpiled
to Spark SQL. Storage is a folder (:mod:`crr.spark.store`): each merge or insert is one transaction
that commits by an atomic manifest switch. An in-memory DuckDB connection on the driver only types
DDL and view queries (DuckDB's types are crr's canonical types, so a view has the same columns and
ids on both backends); no data passes through it.

What differs from the DuckDB site: local writes are bulk inserts (``insert_many``; UPDATE and DELETE
happen at edge sites and arrive by merge), ``execute`` runs crr DDL or read-only Spark SQL over the
APP relations, and aggregate views are not supported yet.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
import uuid
from typing import Any, Iterable, Iterator

import duckdb
import pyarrow as pa
import sqlglot
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from crr.aggregate import is_aggregate
from crr.bulk_input import (UNREADABLE_ARROW, column_positions, input_arrow, named_input, table_name,
                             typed_input_sql, unreadable_arrow_error)
from crr.catalog import (KIND_TEXT, Catalog, Relation, refuse_source_reads, relation_from_row, relation_row,
                         source_read_error, tables_read)
from crr.arrow_result import arrow_rows
from crr.changeset import Changeset, changes_request, check_since_known, cursor_in_history, received
from crr.clock import HybridClock, seq_floor
from crr.errors import CatalogError, ChangesetError, CrrError, ReadOnlyRelationError, SiteError, SqlError, \
    TypeMismatchError, UnsupportedSqlError, first_line
from crr.merge import (allowed_skew, grown_lineage, held_relations, learned_definitions, relineaged,
                       without_copies)
from crr.one_thread import one_thread_at_a_time
from crr.site_options import check_site_id, clock_skew
from crr.spark.encoding import quote, register_udfs, spark_type
from crr.spark.exchange import batch_of, check_changeset, collect_changes, values_frame
from crr.spark.expressions import spark_view_query
from crr.spark.maintain import SparkBatch, SparkMaintainer, SparkResult
from crr.spark.store import STORE_VERSION, Store, Transaction
from crr.spark.tables import CL, CL_SCHEMA, StateShape, app_key, relation_tables, tuples_key, user_view
from crr.spark.writes import insert_batch
from crr.tracked_cursors import check_peer_cursor_args, check_track, tracked_cursor
from crr.sql.compile import compile_view
from crr.sql.parse import WORD_GAP, fold_identifier, one_statement
from crr.sql.statements import CreateTable, CreateView, Dml, Drop, RelationKind, classify
from crr.sql.validate import check_relation_names
from crr.types import Column, quote_ident, type_family

@contextlib.contextmanager
def spark_errors() -> Iterator[None]:
    """A Spark job failing inside a merge refuses the changeset: a check that failed the job
    (``raise_error('crr: ...')``) with its own message, anything else with Spark's first line."""
    try:
        yield
    except CrrError:
        raise
    except Exception as e:
        if not type(e).__module__.startswith("pyspark"):
            raise
        text = str(e)
        if "crr: " in text:
            raise ChangesetError("malformed changeset: " + text.split("crr: ", 1)[1].splitlines()[0].strip()
                                 .rstrip("'\".")) from None
        raise ChangesetError(f"the changeset could not be merged ({text.splitlines()[0]}); nothing was changed") \
            from None


INTERRUPTED = "the operation was interrupted (SparkSite.interrupt); nothing was changed"

# the session settings a Spark site's jobs run with (SparkSite._pinned): an application's session may
# set them otherwise, and then Spark would compute or store other values than a DuckDB site
PINNED = {
    "spark.sql.session.timeZone": "UTC",  # a view's epoch(d) or date_trunc of a timestamp depends on it
    "spark.sql.ansi.enabled": "true",  # off, an overflow wraps round and a bad cast is NULL (a probe's case)
    # LEGACY shifts dates and timestamps before 1582-10-15 by the Julian calendar: a value would be stored
    # other than its tuple id says (a probe's case: 1582-10-05 stored as 1582-10-15)
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.outputTimestampType": "INT96",  # Spark's default; TIMESTAMP_MILLIS would drop microseconds
}

# statements only crr reads (a Spark site does not pass them on to Spark when crr cannot read them)
_G = WORD_GAP
_CRR_DDL = re.compile(rf"\s*(create{_G}(or{_G}replace{_G})?"
                      rf"(materialized{_G}view|replicated{_G}table|remote{_G}(table|source))"
                      rf"|drop{_G}(materialized{_G}view|replicated{_G}table|remote{_G}(table|source)))\b", re.I)


# threads sharing one SparkSite take turns on its lock (two merges at once would each commit over the
# same manifest, and one would be lost)
_one_thread_at_a_time = one_thread_at_a_time(lambda site: site._lock)


_INTEGERS = ("tinyint", "smallint", "int", "bigint")
_DECIMAL = re.compile(r"decimal\(\d+,\d+\)")


def _forget_cursors(txn: Transaction, relation: str) -> None:
    """Forget the peers' tracked cursors of ``relation`` (dropped, or declared: it starts at 0)."""
    for cursors in txn.meta.get("cursors", {}).values():
        cursors.pop(relation, None)


def _check_frame_type(rel: Relation, column: Column, source: str, given: str) -> None:
    """Refuse (TypeMismatchError) a DataFrame column whose values Spark would convert to the declared
    type otherwise than a DuckDB site converts them (a DOUBLE into an INTEGER: Spark truncates, DuckDB
    rounds; text into a number or date: the parsers differ). Conversions both make alike pass:
    integers and decimals among themselves (an overflow fails in both), numbers into DOUBLE or FLOAT,
    DATE and TIMESTAMP into each other, integers into VARCHAR, NULL columns into anything."""
    want = spark_type(column.type).lower()
    numbers = _INTEGERS + ("float", "double")
    alike = (given in (want, "void")
             or (want in _INTEGERS or _DECIMAL.fullmatch(want)) and (given in _INTEGERS or _DECIMAL.fullmatch(given))
             or want in ("float", "double") and (given in numbers)
             or {want, given} <= {"date", "timestamp_ntz"}
             or want == "string" and given in _INTEGERS)
    if not alike:
        raise TypeMismatchError(
            f"insert_many into {rel.name}: column {source} of the DataFrame is {given}, and {column.name} is "
            f"{column.type}; Spark would convert it otherwise than a DuckDB site does. Cast the column to "
            f"{want} first, or pass the rows as Arrow or tuples, which crr converts as a DuckDB site does; "
            "nothing was written")


class SparkSite:
    """A crr site on Spark: ``SparkSite(spark, path, site_id=None)`` opens or creates the site stored
    under folder ``path`` (any path the driver can write; see the README for a cluster)."""

    def __init__(self, spark: SparkSession, path: str, site_id: str | None = None, *,
                 max_clock_skew: float = 86_400.0) -> None:
        check_site_id(site_id)
        self.spark = spark
        self._lock = threading.RLock()
        self._job_tag = f"crr-site-{uuid.uuid4().hex}"  # the Spark jobs of this object's operations (interrupt)
        self._interrupted = False
        self.path = str(path)
        self.max_clock_skew = clock_skew(max_clock_skew)
        register_udfs(spark)
        self._store = Store(spark, self.path)
        try:
            self._open(site_id)
        except BaseException:
            self._store.close()  # a site that did not open holds no lock on its folder
            raise

    def _open(self, site_id: str | None) -> None:
        """Read (or create) the site's metadata and catalog from its store."""
        meta = self._store.meta
        if not meta:
            meta = {"site_id": site_id or f"site-{uuid.uuid4().hex[:12]}", "seq": 0, "hlc": 0, "relations": [],
                    "shape": StateShape().to_meta()}
            txn = self._store.transaction()
            txn.meta = meta
            txn.create(CL, CL_SCHEMA)
            txn.commit()
        elif site_id is not None and meta["site_id"] != site_id:
            raise SiteError(f"{self.path} belongs to site {meta['site_id']!r}, not {site_id!r}; "
                            "open it without site_id or with its own id")
        self.site_id: str = meta["site_id"]
        self._seq: int = int(meta["seq"])
        self._seq_floor = seq_floor()  # the least number the next change takes (see _next_seq)
        self._clock = HybridClock(self.site_id, int(meta["hlc"]))
        self._typer = duckdb.connect()  # types DDL, view queries and inserted rows; holds no data
        self._typer.execute("SET TimeZone = 'UTC'")
        catalog = Catalog()
        for row in meta["relations"]:
            rel = relation_from_row(tuple(row))
            self._type_table(rel)
            if rel.kind is RelationKind.VIEW:
                tree = sqlglot.parse_one(rel.definition or "", read="duckdb")
                rel = dataclasses.replace(rel, plan=self._compile(rel.name, tree, catalog, refuse=False))
            catalog = catalog.with_(rel)
        self._catalog = catalog
        self._closed = False
        if self._store.version < STORE_VERSION:
            self._upgrade()

    def _upgrade(self) -> None:
        """Bring a site an older crr stored (version 1: APP tables without counts) to this version, in
        one transaction: every view's and remote table's counted APP table is computed from its state."""
        def work(txn: Transaction, catalog: Catalog):
            m = SparkMaintainer(self.spark, txn, catalog, self._seq)
            try:
                m.recount()
            finally:
                m.close()
            return None, catalog, False
        self._run(work)

    # -- lifecycle -----------------------------------------------------------------------------------
    @_one_thread_at_a_time
    def close(self) -> None:
        """Close the site (committed state is in its folder; the SparkSession stays the caller's)."""
        if not self._closed:
            self._typer.close()
            self._store.close()
            self._closed = True

    def interrupt(self) -> None:
        """Stop the operation another thread is running on this site: its running Spark jobs are
        cancelled, and it raises :class:`SiteError` having changed nothing (a statement, merge or
        ``changes``). Between two jobs of an operation nothing is running to cancel, so a caller that
        must stop it calls again until it ends, as with :meth:`crr.Site.interrupt`. Without a running
        operation (or once the site is closed) it does nothing."""
        if not self._closed:
            self._interrupted = True
            self.spark.sparkContext.cancelJobsWithTag(self._job_tag)

    @contextlib.contextmanager
    def _jobs(self) -> Iterator[None]:
        """Run an operation's Spark jobs under this site's job tag (:meth:`interrupt` cancels them), and
        make an interrupted one a :class:`SiteError`."""
        self._interrupted = False
        context = self.spark.sparkContext
        context.addJobTag(self._job_tag)
        try:
            yield
        except Exception:  # a cancelled job's Spark error, or the CrrError it was translated into on the way
            if self._interrupted:
                raise SiteError(INTERRUPTED) from None
            raise
        finally:
            context.removeJobTag(self._job_tag)

    def __enter__(self) -> "SparkSite":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SparkSite({self.path!r}, site_id={self.site_id!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise SiteError("this SparkSite is closed; open a new SparkSite on its folder")

    @property
    def cursor(self) -> int:
        """The sequence number of the last committed change (``changes(since=cursor)`` is empty)."""
        return self._seq

    def relations(self) -> dict[str, str]:
        """The relations held here: name -> kind."""
        return {n: r.kind.value for n, r in self._catalog.items()}

    def relation(self, name: str) -> Relation:
        """A relation's catalog entry; CatalogError if there is none."""
        if not isinstance(name, str):
            raise CatalogError(f"a relation is named by a string, not {name!r}")
        rel = self._catalog.get(fold_identifier(name))
        if rel is None:
            raise CatalogError(f"no relation named {name} at this site")
        return rel

    # -- transactions --------------------------------------------------------------------------------
    def _commit(self, txn: Transaction, catalog: Catalog, seq: int) -> None:
        # txn.meta starts as a copy of the committed metadata; the work may have changed its "cursors"
        # (a tracked merge) and "shape" (a batch), and the commit adds the catalog and counters.
        txn.meta.update({"site_id": self.site_id, "seq": seq, "hlc": self._clock.last,
                         "relations": [relation_row(r, i) for i, r in enumerate(catalog.values())]})
        if seq > self._seq + 1:  # this opening's first change, which jumped to its floor: recorded with it
            txn.meta["openings"] = [*txn.meta.get("openings", []), [seq, self._seq]]
        txn.commit()
        self._catalog, self._seq = catalog, seq

    def _openings(self) -> list[tuple[int, int]]:
        """The recorded openings of this copy of the site, as a DuckDB site keeps them in
        ``_crr.openings`` (:func:`crr.changeset.cursor_in_history`): in the manifest."""
        return [(int(f), int(p)) for f, p in self._store.meta.get("openings", [])]

    def _next_seq(self) -> int:
        """The sequence number of the change a transaction makes: one more than the last, or the floor
        read when the site opened if that is larger, as at a DuckDB site (:func:`crr.clock.seq_floor`:
        a folder restored from an older copy never hands out again a number it handed out before)."""
        return max(self._seq + 1, self._seq_floor)

    def _run(self, work, catalog: Catalog | None = None) -> Any:
        """Run ``work(txn, catalog)`` in one transaction; it returns (result, catalog, changed).

        A failed transaction may leave the hybrid clock ahead of the committed ``hlc``, as at a DuckDB
        site: the clock only has to grow, and the stamps it issued were never committed."""
        txn = self._store.transaction()
        try:
            with self._jobs(), self._pinned():
                result, new_catalog, changed = work(txn, catalog if catalog is not None else self._catalog)
            self._commit(txn, new_catalog, self._next_seq() if changed else self._seq)
            return result
        except BaseException:
            txn.abort()
            raise

    @contextlib.contextmanager
    def _pinned(self) -> Iterator[None]:
        """Run Spark jobs with the session settings crr's results depend on set to :data:`PINNED` (the
        time zone UTC, as a DuckDB site pins its own; ANSI arithmetic, which fails an overflow as
        DuckDB does; dates and timestamps written and read as stored, never rebased to the Julian
        calendar), and give the session its own back: an application's SparkSession may differ."""
        before = {key: self.spark.conf.get(key, None) for key in PINNED}
        changed = {key: value for key, value in PINNED.items() if before[key] != value}
        for key, value in changed.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in changed:
                if before[key] is None:
                    self.spark.conf.unset(key)
                else:
                    self.spark.conf.set(key, before[key])

    def _maintain(self, txn: Transaction, catalog: Catalog, batch: SparkBatch) -> SparkResult:
        m = SparkMaintainer(self.spark, txn, catalog, self._next_seq())
        try:
            return m.apply(batch, catalog.views())
        finally:
            m.close()

    # -- statements ----------------------------------------------------------------------------------
    @_one_thread_at_a_time
    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        """Run crr DDL (CREATE REPLICATED TABLE / REMOTE TABLE / REMOTE SOURCE / MATERIALIZED VIEW, DROP),
        or a read-only Spark SQL query over the APP relations (returns its rows as tuples). ``params``
        is there for code written for both kinds of site: a Spark site takes none (write the values;
        an empty list, as such code passes for a statement without parameters, is none)."""
        self._check_open()
        if params is not None and not (isinstance(params, (list, tuple, dict)) and not params):
            raise SqlError("a Spark site's execute takes no parameters; write the values into the statement "
                           "(and insert rows with insert_many)")
        try:
            stmt = classify(sql)
        except SqlError:
            if not isinstance(sql, str) or _CRR_DDL.match(sql):
                raise  # crr DDL that crr could not read says why, not what Spark makes of it
            stmt = None  # DuckDB-only syntax, or Spark SQL: Spark decides (_query)
        if isinstance(stmt, CreateTable):
            return self._create_table(stmt)
        if isinstance(stmt, CreateView):
            return self._create_view(stmt)
        if isinstance(stmt, Drop):
            return self._drop(stmt)
        if isinstance(stmt, Dml):
            raise UnsupportedSqlError(f"{stmt.kind.value.upper()} is not supported on a Spark site: insert rows "
                                      "with insert_many(), and change or delete them at a DuckDB site whose "
                                      "changesets this site merges")
        return self._query(sql)

    def _query(self, sql: str) -> list[tuple]:
        try:
            trees = sqlglot.parse(sql, read="spark")
        except sqlglot.errors.SqlglotError as e:  # a parse or tokenizer error
            raise SqlError(f"cannot parse statement: {first_line(e)}") from None
        tree = one_statement(trees)
        if isinstance(tree, exp.Create) and str(tree.args.get("kind", "")).upper() in ("TABLE", "VIEW"):
            raise UnsupportedSqlError(
                f"a Spark site keeps crr relations only, not a plain CREATE {str(tree.args['kind']).upper()}: declare "
                "CREATE REPLICATED TABLE, CREATE REMOTE TABLE, CREATE REMOTE SOURCE or CREATE MATERIALIZED VIEW "
                "(for a Spark table of your own, use the SparkSession)")
        if not isinstance(tree, (exp.Select, exp.SetOperation, exp.Subquery)) or tree.find(exp.Insert, exp.Delete,
                                                                                         exp.Update, exp.Merge):
            raise UnsupportedSqlError("a Spark site runs crr DDL and read-only queries (SELECT ...); change data "
                                      "with insert_many() or by merging changesets")
        refuse_source_reads(self._catalog, tables_read(tree))
        names = [name for name, rel in self._catalog.items() if rel.has_app]
        # the session's own temp views of those names: hidden during the query, then put back
        shadowed = {name: self.spark.table(quote(name)) for name in names
                    if self.spark.catalog.tableExists(quote(name)) and self.spark.catalog.getTable(quote(name)).isTemporary}
        for name in names:
            self.table(name).createOrReplaceTempView(quote(name))
        try:
            with self._jobs(), self._pinned():
                return [tuple(r) for r in self.spark.sql(sql).collect()]
        except Exception as e:
            if type(e).__module__.startswith("pyspark"):
                raise SqlError(f"Spark could not run the query: {first_line(e)}") from None
            raise
        finally:
            for name in names:
                if name in shadowed:
                    shadowed[name].createOrReplaceTempView(quote(name))
                else:
                    self.spark.catalog.dropTempView(name)

    @_one_thread_at_a_time
    def table(self, name: str) -> DataFrame:
        """The APP relation ``name`` as a Spark DataFrame under the user's column names (the state of
        the last commit; read it again after a merge)."""
        self._check_open()
        rel = self.relation(name)
        if not rel.has_app:
            raise source_read_error(rel.name)
        return user_view(rel, self._store.read(app_key(rel)))

    def _type_table(self, rel: Relation) -> None:
        """Mirror a relation as an empty typed table in the typing connection (views are typed over it)."""
        cols = ", ".join(f"{quote_ident(c.name)} {c.type}" for c in rel.columns)
        self._typer.execute(f"CREATE OR REPLACE TABLE {quote_ident(rel.name)} ({cols})")

    def _name_taken(self, name: str, if_not_exists: bool) -> bool:
        if name in self._catalog:
            if if_not_exists:
                return True
            raise CatalogError(f"a relation named {name} already exists at this site; DROP it first or pick "
                               "another name")
        return False

    def _create_table(self, stmt: CreateTable) -> list[tuple]:
        if self._name_taken(stmt.name, stmt.if_not_exists):
            return []
        cols = ", ".join(f"{quote_ident(c.name)} {c.type_sql}" for c in stmt.columns)
        try:
            self._typer.execute(f"CREATE OR REPLACE TEMP TABLE _crr_probe ({cols})")
        except duckdb.Error as e:
            raise SqlError(f"invalid table definition: {first_line(e)}") from None
        columns = [Column(r[0], r[1]) for r in self._typer.execute("DESCRIBE temp.main._crr_probe").fetchall()]
        for c in columns:
            type_family(c.type)
            spark_type(c.type)
        rel = Relation(name=stmt.name, kind=stmt.kind, columns=columns,
                       key=stmt.key if stmt.kind is RelationKind.REPLICATED else [],
                       declared_key=stmt.key if stmt.kind is not RelationKind.REPLICATED else [],
                       not_null=[c.name for c in stmt.columns if c.not_null], wide=False,
                       stored=stmt.kind is not RelationKind.SOURCE)

        def work(txn: Transaction, catalog: Catalog):
            for key, schema in relation_tables(rel).items():
                txn.create(key, schema)
            _forget_cursors(txn, rel.name)
            return None, catalog.with_(rel), False
        self._run(work)
        self._type_table(rel)
        return []

    def _compile(self, name: str, tree: exp.Expression, catalog: Catalog, refuse: bool = True,
                 written: str | None = None):
        """The view's plan, from its query as a Spark site computes it (:mod:`crr.spark.expressions`):
        expressions Spark computes otherwise are rewritten, or refused unless ``refuse`` is false (a
        view stored before the checks, compiled again as its site opens)."""
        def columns(r: str):
            rel = catalog.get(r)
            return [(c.name, c.type) for c in rel.columns] if rel else None

        def describe(sql: str):
            try:
                return [(r[0], r[1]) for r in self._typer.execute(f"DESCRIBE {sql}").fetchall()]
            except duckdb.Error as e:
                raise SqlError(f"invalid view query: {first_line(e)}") from None
        plan = compile_view(name, tree, columns, describe, written)  # the query's own errors first
        spark_tree = spark_view_query(name, tree, describe, refuse, columns=plan.columns)
        return plan if spark_tree is tree else compile_view(name, spark_tree, columns, describe)

    def _create_view(self, stmt: CreateView) -> list[tuple]:
        if self._name_taken(stmt.name, stmt.if_not_exists):
            return []
        if is_aggregate(stmt.query):
            raise UnsupportedSqlError(f"view {stmt.name}: aggregate views are not supported on a Spark site yet; "
                                      "declare the aggregate at a DuckDB site")
        check_relation_names(stmt.query)
        plan = self._compile(stmt.name, stmt.query, self._catalog, written=stmt.written)
        columns = [Column(n, t) for n, t in plan.columns]
        for c in columns:
            type_family(c.type)
            spark_type(c.type)
        rel = Relation(name=stmt.name, kind=RelationKind.VIEW, columns=columns, definition=stmt.sql, plan=plan)
        to_store = self._catalog.sources_to_store(plan)

        def work(txn: Transaction, catalog: Catalog):
            for key, schema in relation_tables(rel).items():
                txn.create(key, schema)
            _forget_cursors(txn, rel.name)
            catalog = catalog.with_(*to_store, rel)
            m = SparkMaintainer(self.spark, txn, catalog, self._next_seq())
            try:
                result = m.populate(rel)
            finally:
                m.close()
            return None, catalog, result.changed
        self._run(work)
        self._type_table(rel)
        return []

    def _drop(self, stmt: Drop) -> list[tuple]:
        rel = self._catalog.get(stmt.name)
        if rel is None:
            if stmt.if_exists:
                return []
            raise CatalogError(f"no relation named {stmt.name} at this site")
        self._catalog.check_drop(rel, stmt.kind, stmt.plain)

        def work(txn: Transaction, catalog: Catalog):
            for key in relation_tables(rel):
                txn.drop(key)
            _forget_cursors(txn, rel.name)  # declared again, the name starts at 0
            # the entries of base relations nothing else here reads go too, as at a DuckDB site: a
            # relation declared again under the name would otherwise find its old rows' lengths
            gone = sorted(catalog.lineage(rel.name) - catalog.lineage_of_others(rel.name))
            if gone:
                txn.replace(CL, txn.read(CL).where(~F.col("rel").isin(gone)))
            return None, catalog.without(rel.name), False
        self._run(work)
        self._typer.execute(f"DROP TABLE IF EXISTS {quote_ident(rel.name)}")
        return []

    # -- writes ---------------------------------------------------------------------------------------
    @_one_thread_at_a_time
    def insert_many(self, table: str, rows: Any) -> int:
        """Insert rows into a replicated table in one transaction; returns the number of rows given.

        ``rows``: a Spark DataFrame, a pyarrow Table, or a list of tuples in column order (columns are
        matched by name when all names match, else by position).
        """
        self._check_open()
        rel = self.relation(table_name(table))
        if not rel.is_base:
            raise ReadOnlyRelationError(f"{rel.name} is a {KIND_TEXT[rel.kind]}; only replicated tables are "
                                        "written here (its rows come from merges)")
        frame, given = self._frame(rel, rows)
        if given == 0:
            return 0

        def work(txn: Transaction, catalog: Catalog):
            try:
                batch = insert_batch(rel, frame, txn.read(CL), txn.read(tuples_key(rel)), self._clock)
                result = self._maintain(txn, catalog, batch)
            except CrrError:
                raise
            except Exception as e:
                if not type(e).__module__.startswith("pyspark"):
                    raise
                raise TypeMismatchError(f"insert_many into {rel.name}: Spark could not store the rows "
                                        f"({first_line(e)}); nothing was written") from None
            return None, catalog, result.changed
        self._run(work)
        return given if given is not None else frame.count()

    def _frame(self, rel: Relation, rows: Any) -> tuple[DataFrame, int | None]:
        """The rows as a DataFrame of the relation's AUG columns, and how many there are (None for a
        DataFrame given, whose rows are not counted before they are written)."""
        names = rel.column_names
        if isinstance(rows, DataFrame):
            given = [fold_identifier(c) for c in rows.columns]
            pick = column_positions(rel.name, given, names)
            src = rows.columns
            for c in rel.columns:
                _check_frame_type(rel, c, src[pick[c.name]], rows.schema[pick[c.name]].dataType.simpleString())
            return rows.selectExpr(*[f"CAST({quote(src[pick[c.name]])} AS {spark_type(a.type)}) AS {a.name}"
                                     for c, a in zip(rel.columns, rel.aug_columns)]), None
        data, tuples = input_arrow(rel.name, rows, names)  # (a pandas DataFrame too, as a DuckDB site takes)
        pick = column_positions(rel.name, [fold_identifier(c) for c in data.column_names], names)
        if not data.num_rows:
            return self.spark.createDataFrame([], ", ".join(f"{a.name} {spark_type(a.type)}"
                                                            for a in rel.aug_columns)), 0
        try:
            typed = self._typed(rel, data, pick, tuples)
            return values_frame(self.spark, rel, typed, None, f"insert_many into {rel.name}"), data.num_rows
        except ChangesetError as e:  # a date or timestamp outside the years 1 to 9999, which Spark cannot hold
            raise TypeMismatchError(str(e).replace("nothing was changed", "nothing was written")) from None

    def _typed(self, rel: Relation, data: pa.Table, pick: dict[str, int], tuples: bool) -> pa.Table:
        """Python or Arrow rows cast to the relation's declared types by DuckDB, as a DuckDB site casts
        them (INTEGER 3.7 is 4, a DOUBLE into VARCHAR '1e-05'), so both store the same values and ids:
        Spark's casts differ. A value its column cannot hold is a TypeMismatchError, and so is a
        column DuckDB has no Arrow reader for (``tuples``: the rows were Python values)."""
        try:
            self._typer.register("_crr_insert", named_input(rel, data, pick))
            try:
                return arrow_rows(self._typer, typed_input_sql(rel, "_crr_insert"))
            finally:
                self._typer.unregister("_crr_insert")
        except duckdb.Error as e:
            if UNREADABLE_ARROW in str(e):
                raise unreadable_arrow_error(rel, data, tuples) from None
            raise TypeMismatchError(f"insert_many into {rel.name}: {first_line(e)}; "
                                    "nothing was written") from None

    # -- replication ----------------------------------------------------------------------------------
    @_one_thread_at_a_time
    def merge(self, changeset: Changeset | bytes, *, track: bool = False) -> SparkResult:
        """Merge a changeset (or its bytes) from any site: atomic, idempotent and commutative.

        Relations this site does not hold are ignored (the result's ``ignored`` names them, as a DuckDB
        site's :class:`~crr.merge.MergeResult` does); a schema mismatch or a forged value refuses the
        whole changeset (ChangesetError) and changes nothing. With ``track=True`` the changeset's source
        cursor is recorded per (source site, relation) in the same commit (see :meth:`peer_cursor`).
        """
        self._check_open()
        check_track(track)
        cs, copies = without_copies(self._catalog, received(changeset))
        held, ignored = held_relations(self._catalog, cs)
        grown = grown_lineage(held)
        stale = relineaged(self._catalog, grown)
        learned = learned_definitions(held)
        catalog = self._catalog.with_(*(dataclasses.replace(self._catalog[n], lineage=lin) for n, lin in grown.items()))
        catalog = catalog.with_(*(dataclasses.replace(catalog[n], copied_definition=d) for n, d in learned.items()))
        held = [(catalog[rel.name], rc) for rel, rc in held]

        if held:
            check_changeset(self._typer, catalog, cs, held, allowed_skew(self.max_clock_skew, self._clock.last))
            if cs.cl is not None and cs.cl.num_rows and cs.cl.column("stamp").null_count < cs.cl.num_rows:
                stamps = cs.cl.column("stamp").to_pylist()  # UHUGEINT: 16 little-endian bytes each
                self._clock.observe(max(int.from_bytes(s, "little") for s in stamps if s is not None))

        def work(txn: Transaction, catalog: Catalog):
            if track:  # recorded in this transaction's metadata: committed with the merge or not at all
                peer = txn.meta.setdefault("cursors", {}).setdefault(cs.source, {})
                for _, rc in held:
                    peer[rc.name] = tracked_cursor(peer.get(rc.name, 0), cs.since, cs.cursor)
            if not held:
                return SparkResult(), catalog, False
            with spark_errors():
                batch = dataclasses.replace(batch_of(self.spark, catalog, cs, held), revalued=stale)
                result = self._maintain(txn, catalog, batch)
            return result, catalog, result.changed or bool(grown)
        return dataclasses.replace(self._run(work, catalog), ignored=copies + ignored)

    @_one_thread_at_a_time
    def peer_cursor(self, peer: str, relation: str) -> int:
        """The source cursor of the last changeset of ``relation`` merged from ``peer`` with track=True (0 if none)."""
        self._check_open()
        check_peer_cursor_args(peer, relation)
        return int(self._store.meta.get("cursors", {}).get(peer, {}).get(fold_identifier(relation), 0))

    def peer_cursors(self) -> list[tuple[str, str, int, Any]]:
        """All tracked cursors, as :meth:`crr.Site.peer_cursors` gives them: (peer, relation, cursor,
        None: a Spark site does not record when one moved). Read from the committed manifest, without
        waiting for a merge another thread runs."""
        self._check_open()
        cursors = self._store.meta.get("cursors", {})
        return sorted((peer, rel, int(c), None) for peer, rels in cursors.items() for rel, c in rels.items())

    def lineage(self, name: str) -> set[str]:
        """The base relations whose tuple ids appear in a relation's provenance (as :meth:`crr.Site.lineage`)."""
        return set(self._catalog.lineage(self.relation(name).name))

    @_one_thread_at_a_time
    def knows_cursor(self, since: int) -> bool:
        """Whether ``changes(since=since)`` resumes a stream from this copy of the site, as
        :meth:`crr.Site.knows_cursor` (:func:`crr.changeset.cursor_in_history`)."""
        self._check_open()
        since, _ = changes_request(since, None)
        return cursor_in_history(since, self._seq, self._openings())

    @_one_thread_at_a_time
    def changes(self, since: int | None = None, relations: Iterable[str] | None = None) -> Changeset:
        """Everything changed after cursor ``since`` (None or 0: the full state), for the named relations
        (default: every relation but remote sources), as a changeset any site can merge."""
        self._check_open()
        since, given = changes_request(since, relations)
        check_since_known(since, self._seq, self._openings())
        names = self._catalog.names_to_send(None if given is None
                                            else list(dict.fromkeys(self.relation(r).name for r in given)))
        with self._jobs(), self._pinned():
            out, cl = collect_changes(self._store.read, self._catalog, names, since)
        return Changeset(source=self.site_id, since=since, cursor=self._seq, relations=out, cl=cl)

