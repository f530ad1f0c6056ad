"""The write guard (issue 8): a statement crr passes to DuckDB must not change a crr relation.

crr decides whether a statement is read-only by what DuckDB will execute, not by its first keyword.
Every bypass below once passed as a read and changed an APP table (or crr's internal ``_crr`` tables)
behind crr's back: views stopped equalling their queries and peers never heard of it. Each is now
refused, and the site is exactly as it was. Real reads, and writes to the user's own plain DuckDB
tables, still work, also when they read crr relations (``CREATE TABLE report AS SELECT * FROM t``):
the guard tells the tables a statement writes from those it only reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import crr
from crr.errors import UnsupportedSqlError
from crr.sql.guard import statement_effects
from crr.sql.statements import Other, classify

VIEW_QUERY = "SELECT a, b FROM t WHERE a > 1"


@pytest.fixture
def site() -> Iterator[crr.Site]:
    """A site with a keyed replicated table t, a view v over it, and a plain DuckDB table of the user's."""
    s = crr.Site(site_id="g0")
    s.execute("CREATE REPLICATED TABLE t (a INT PRIMARY KEY, b TEXT)")
    s.execute(f"CREATE MATERIALIZED VIEW v AS {VIEW_QUERY}")
    s.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, 'z')")
    s.execute("CREATE TABLE plain (a INT, b TEXT)")
    s.execute("INSERT INTO plain VALUES (10, 'p')")
    s.execute("CREATE SCHEMA other")
    yield s
    s.close()


@pytest.fixture
def csv_file(tmp_path: Path) -> str:
    """A one-row CSV file that COPY ... FROM could load."""
    path = tmp_path / "rows.csv"
    path.write_text("9,n\n")
    return str(path)


def rows(table: pa.Table | None) -> list[tuple]:
    """An Arrow table's rows in a canonical order."""
    if table is None:
        return []
    return sorted((tuple(repr(v) for v in r.values()) for r in table.to_pylist()))


def state(site: crr.Site) -> tuple:
    """Everything a bypass could change: APP rows of t and v, and all the site would send to a peer."""
    cs = site.changes()
    sent = {r.name: (rows(r.tuples), rows(r.monos)) for r in cs.relations}
    return (site.execute("SELECT * FROM t ORDER BY a"), site.execute("SELECT * FROM v ORDER BY a"),
            cs.cursor, sent, rows(cs.cl))


def assert_refused(site: crr.Site, sql: str, params: list | None = None) -> None:
    """``sql`` raises UnsupportedSqlError, and the site is unchanged and still consistent afterwards."""
    before = state(site)
    with pytest.raises(UnsupportedSqlError):
        site.execute(sql, params)
    assert state(site) == before
    assert site.execute("SELECT * FROM v ORDER BY a") == site.execute(f"{VIEW_QUERY} ORDER BY a")
    assert site.execute("SELECT current_schema()") == [("main",)]


def assert_crr_still_works(site: crr.Site) -> None:
    """crr's own (unqualified) statements still run and keep the view equal to its query."""
    site.execute("INSERT INTO t VALUES (4, 'w')")
    site.execute("UPDATE t SET b = 'u' WHERE a = 2")
    assert site.execute("SELECT * FROM v ORDER BY a") == [(2, "u"), (3, "z"), (4, "w")]
    assert site.execute("SELECT * FROM v ORDER BY a") == site.execute(f"{VIEW_QUERY} ORDER BY a")


# --- bypasses: EXPLAIN ANALYZE runs its statement ----------------------------------------------------

@pytest.mark.parametrize("sql", [
    "EXPLAIN ANALYZE DELETE FROM t",
    "EXPLAIN ANALYZE DELETE FROM t WHERE a = 2",
    "explain analyse delete from T",
    "/* a comment */ EXPLAIN\n  ANALYZE -- another\n  DELETE FROM main.t",
    "EXPLAIN (ANALYZE) DELETE FROM t",
    "EXPLAIN (FORMAT json, ANALYZE) DELETE FROM t",
    "EXPLAIN (ANALYZE false) DELETE FROM t",  # DuckDB still runs the DELETE
    "EXPLAIN ANALYZE INSERT INTO t VALUES (9, 'n')",
    "EXPLAIN ANALYZE UPDATE t SET b = 'q'",
    "EXPLAIN ANALYZE MERGE INTO t USING (SELECT 1 AS a) s ON t.a = s.a WHEN MATCHED THEN DELETE",
    "EXPLAIN ANALYZE WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
    "EXPLAIN ANALYZE CREATE TABLE t3 AS WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
    "EXPLAIN ANALYZE ALTER TABLE t RENAME TO t2",
    "EXPLAIN ANALYZE DROP TABLE t",
])
def test_explain_analyze_of_a_write_to_a_replicated_table_is_refused(site: crr.Site, sql: str) -> None:
    """EXPLAIN ANALYZE executes its statement: it is as read-only as that statement."""
    assert_refused(site, sql)


def test_explain_analyze_with_parameters_is_refused(site: crr.Site) -> None:
    """The guard holds when the statement takes parameters."""
    assert_refused(site, "EXPLAIN ANALYZE DELETE FROM t WHERE a = ?", [2])


def test_explain_analyze_copy_from_a_file_into_a_replicated_table_is_refused(site: crr.Site, csv_file: str) -> None:
    """EXPLAIN ANALYZE COPY t FROM a file would load rows into t."""
    assert_refused(site, f"EXPLAIN ANALYZE COPY t FROM '{csv_file}'")


@pytest.mark.parametrize("sql", [
    "EXPLAIN ANALYZE UPDATE v SET b = 'q'",
    "EXPLAIN ANALYZE DELETE FROM v",
    "EXPLAIN ANALYZE INSERT INTO v VALUES (7, 'q')",
])
def test_explain_analyze_of_a_write_to_a_view_is_refused(site: crr.Site, sql: str) -> None:
    """A materialized view changes only by maintenance; EXPLAIN ANALYZE must not write it."""
    assert_refused(site, sql)


@pytest.mark.parametrize("sql", [
    "EXPLAIN ANALYZE DELETE FROM _crr.cl",
    "EXPLAIN ANALYZE UPDATE _crr.cl SET cl = cl + 1",
    "EXPLAIN ANALYZE DELETE FROM _crr.\"t$t\"",
    "WITH d AS (DELETE FROM _crr.cl RETURNING *) SELECT count(*) FROM d",
    "WITH d AS (UPDATE _crr.cl SET cl = cl + 1 RETURNING *) SELECT count(*) FROM d",
])
def test_writes_to_crr_internal_tables_are_refused(site: crr.Site, sql: str) -> None:
    """crr's internal schema is as closed as its relations."""
    assert_refused(site, sql)


# --- bypasses: data-modifying CTEs -------------------------------------------------------------------

@pytest.mark.parametrize("sql", [
    "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
    "WITH d AS (DELETE FROM t RETURNING *) SELECT 1",  # an unused CTE still runs
    "WITH d AS MATERIALIZED (DELETE FROM t WHERE a = 3 RETURNING a) SELECT a FROM d",
    "WITH d AS (UPDATE t SET b = 'q' RETURNING *) SELECT * FROM d",
    "WITH d AS (INSERT INTO t VALUES (8, 'w') RETURNING *) SELECT * FROM d",
    "WITH d AS (DELETE FROM v RETURNING *) SELECT * FROM d",
    "WITH d AS (DELETE FROM t RETURNING *) INSERT INTO plain SELECT * FROM d",
    "WITH d AS (DELETE FROM t RETURNING a) DELETE FROM plain WHERE a IN (SELECT a FROM d)",
])
def test_data_modifying_cte_is_refused(site: crr.Site, sql: str) -> None:
    """A SELECT (or a write to a plain table) whose CTE writes a crr relation is not a read."""
    assert_refused(site, sql)


# --- bypasses: SQL text run by a table function, and PREPARE -----------------------------------------

SERIALIZED_DELETE = "json_serialize_sql('WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d')"


@pytest.mark.parametrize("sql", [
    f"SELECT * FROM json_execute_serialized_sql({SERIALIZED_DELETE})",
    f"INSERT INTO plain SELECT * FROM json_execute_serialized_sql({SERIALIZED_DELETE})",
    f"CALL json_execute_serialized_sql({SERIALIZED_DELETE})",
    "SELECT * FROM query('SELECT * FROM json_execute' || '_serialized_sql(' || "
    "'json_serialize_sql(''WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d'')' || ')')",
])
def test_table_functions_that_run_sql_text_crr_cannot_check_are_refused(site: crr.Site, sql: str) -> None:
    """json_execute_serialized_sql runs a serialized statement, data-modifying CTEs included."""
    assert_refused(site, sql)


def test_prepare_of_a_write_is_refused_so_execute_cannot_run_it(site: crr.Site) -> None:
    """What EXECUTE runs is not visible to crr: PREPARE takes only read-only statements."""
    assert_refused(site, "PREPARE p AS DELETE FROM t")
    assert_refused(site, "PREPARE p (INT) AS UPDATE t SET b = 'q' WHERE a = $1")
    assert_refused(site, "EXPLAIN ANALYZE PREPARE p AS DELETE FROM t")
    with pytest.raises(crr.CrrError):  # nothing named p was prepared
        site.execute("EXECUTE p")
    assert site.execute("SELECT count(*) FROM t") == [(3,)]


def test_prepare_of_a_write_to_a_plain_table_is_refused_too(site: crr.Site) -> None:
    """A prepared write could run later against a crr relation of the same name (DuckDB rebinds)."""
    with pytest.raises(UnsupportedSqlError):
        site.execute("PREPARE p AS DELETE FROM plain")
    assert site.execute("SELECT * FROM plain") == [(10, "p")]


# --- USE and the current schema (crr's own statements are unqualified) -------------------------------

@pytest.mark.parametrize("sql", [
    "USE other",
    "USE memory.other",
    "USE memory",
    "SET schema = 'other'",
    "SET schema TO other",
    "SET SESSION schema = 'other'",
    "SET search_path = 'other'",
    "SET search_path = 'other,main'",
    "SET GLOBAL search_path = 'other'",
    "PRAGMA search_path = 'other'",
    "EXPLAIN ANALYZE SET schema = 'other'",
])
def test_switching_the_current_schema_is_refused(site: crr.Site, sql: str) -> None:
    """After USE other_db crr's own statements fail or go elsewhere: refuse it and say to qualify names."""
    before = state(site)
    with pytest.raises(UnsupportedSqlError, match="main"):
        site.execute(sql)
    assert state(site) == before
    assert site.execute("SELECT current_schema()") == [("main",)]
    assert_crr_still_works(site)


@pytest.mark.parametrize("sql", [
    "SET integer_division = true",  # a view of a / 2 would store 2 for 5 where its query gives 2.5
    "PRAGMA default_collation = 'nocase'",
    "SET GLOBAL default_collation = 'nocase'",
    "SET arrow_lossless_conversion = false",  # changesets would carry ids no site can read
    "SET TimeZone = 'Asia/Tokyo'",  # CAST(ts AS DATE) of a TIMESTAMPTZ would differ between sites
    "RESET TimeZone",
    "SET python_enable_replacements = true",
])
def test_settings_that_change_what_sql_computes_are_refused(site: crr.Site, sql: str) -> None:
    """The site's connection maintains the views and exports changesets: a setting that changes what SQL
    computes there is refused (before, SET integer_division made a view store 2.0 for 5 / 2)."""
    assert_refused(site, sql)
    assert site.execute("SELECT current_setting('integer_division'), current_setting('TimeZone'), "
                        "current_setting('arrow_lossless_conversion')") == [(False, "UTC", True)]
    assert_crr_still_works(site)


@pytest.mark.parametrize("sql", ["SET threads = 1", "PRAGMA threads = 2", "SET memory_limit = '2GB'",
                                 "RESET threads", "SET VARIABLE answer = 42", "SET enable_progress_bar = false"])
def test_settings_of_resources_and_variables_are_allowed(site: crr.Site, sql: str) -> None:
    assert site.execute(sql) == []
    assert_crr_still_works(site)


def test_a_site_evaluates_in_utc_whatever_the_machines_time_zone(tmp_path: Path) -> None:
    """DuckDB takes its TimeZone from the machine; a view casting a TIMESTAMPTZ to a DATE gave each
    device's local date, so a remote copy of it held two days for one row. A site pins UTC."""
    script = (
        "import crr\n"
        "s = crr.Site()\n"
        "s.execute('CREATE REPLICATED TABLE e (id INTEGER, ts TIMESTAMPTZ)')\n"
        "s.execute('CREATE MATERIALIZED VIEW days AS SELECT id, CAST(ts AS DATE) AS day FROM e')\n"
        "s.execute(\"INSERT INTO e VALUES (1, '2024-01-01 20:00:00+00')\")\n"
        "print(s.execute(\"SELECT current_setting('TimeZone'), CAST(day AS VARCHAR) FROM days\"))\n")
    import os
    import subprocess
    import sys
    env = dict(os.environ, TZ="Asia/Tokyo")
    zone = "import duckdb; print(duckdb.sql(\"SELECT current_setting('TimeZone')\").fetchall())"
    check = subprocess.run([sys.executable, "-c", zone], env=env, capture_output=True, text=True, check=True)
    assert "Asia/Tokyo" in check.stdout  # the machine's zone reaches DuckDB
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[('UTC', '2024-01-01')]"


@pytest.mark.parametrize("sql", ["ATTACH ':memory:' AS _crr", "ATTACH ':memory:' AS _CRR"])
def test_attaching_a_database_named_like_crrs_schema_is_refused(site: crr.Site, sql: str) -> None:
    """A catalog named _crr makes every reference to crr's internal schema ambiguous."""
    assert_refused(site, sql)
    assert_crr_still_works(site)


@pytest.mark.parametrize("sql", [
    "CREATE MACRO greatest(a, b) AS 0",  # crr's merge SQL calls greatest(): merges would go wrong
    "CREATE OR REPLACE TEMP MACRO hash(x) AS 7",
    "CREATE MACRO IF NOT EXISTS md5_number(x) AS 1",
    "CREATE FUNCTION main.list_value(a) AS 9",
    'CREATE MACRO "Abs"(x) AS 42',
    "CREATE MACRO range(n) AS TABLE SELECT 1 AS x",
    "EXPLAIN ANALYZE CREATE MACRO greatest(a, b) AS 0",
])
def test_macros_that_replace_builtin_functions_are_refused(site: crr.Site, sql: str) -> None:
    """A macro named like a built-in function replaces it in crr's own statements too."""
    assert_refused(site, sql)
    assert site.execute("SELECT greatest(1, 2), hash(1) = hash(1)") == [(2, True)]
    assert_crr_still_works(site)


def test_macros_with_their_own_names_still_work(site: crr.Site) -> None:
    """Any macro name DuckDB does not have built in is the user's."""
    site.execute("CREATE MACRO my_greatest(a, b) AS greatest(a, b) + 1")
    site.execute("CREATE TEMP MACRO greatest_ever() AS 99")
    assert site.execute("SELECT my_greatest(1, 2), greatest_ever()") == [(3, 99)]
    assert_crr_still_works(site)


def test_import_database_is_refused(site: crr.Site, tmp_path: Path) -> None:
    """IMPORT DATABASE runs statements crr cannot check; an export holding a table t would load into t."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a INT, b TEXT); INSERT INTO t VALUES (7, 'i')")
    con.execute(f"EXPORT DATABASE '{tmp_path / 'dump'}'")
    con.close()
    assert_refused(site, f"IMPORT DATABASE '{tmp_path / 'dump'}'")


# --- what still works: reads -------------------------------------------------------------------------

@pytest.mark.parametrize("sql,expected", [
    ("SELECT * FROM t ORDER BY a", [(1, "x"), (2, "y"), (3, "z")]),
    ("WITH x AS (SELECT a FROM t WHERE a < 3) SELECT count(*) FROM x", [(2,)]),
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT n + 1 FROM r WHERE n < 3) SELECT max(n) FROM r", [(3,)]),
    ("SELECT * FROM v ORDER BY a", [(2, "y"), (3, "z")]),
    ("SELECT t.a FROM t JOIN v ON t.a = v.a WHERE t.a IN (SELECT a FROM v) ORDER BY 1", [(2,), (3,)]),
    ("FROM v SELECT a ORDER BY a", [(2,), (3,)]),
    ("TABLE v ORDER BY a", [(2, "y"), (3, "z")]),
    ("SELECT count(*) FROM _crr.cl", [(3,)]),
    ("SELECT * FROM query('SELECT count(*) FROM t')", [(3,)]),
    ("SELECT count(*) FROM query_table('v')", [(2,)]),
    ("SELECT column_name FROM (DESCRIBE t) ORDER BY 1", [("a",), ("b",)]),
    ("SELECT name FROM pragma_table_info('v') ORDER BY 1", [("a",), ("b",)]),
    ("SELECT * FROM plain", [(10, "p")]),
])
def test_reads_pass_and_return_rows(site: crr.Site, sql: str, expected: list) -> None:
    """Real reads run as before and change nothing."""
    before = state(site)
    assert site.execute(sql) == expected
    assert state(site) == before


@pytest.mark.parametrize("sql", [
    "EXPLAIN SELECT * FROM t",
    "EXPLAIN ANALYZE SELECT * FROM v",
    "EXPLAIN (FORMAT json) SELECT * FROM t",
    "EXPLAIN DELETE FROM t",  # only the plan: nothing runs
    "EXPLAIN UPDATE v SET b = 'q'",
    "EXPLAIN WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
    "DESCRIBE t",
    "DESCRIBE SELECT * FROM v",
    "SHOW TABLES",
    "SHOW t",
    "SUMMARIZE t",
    "SUMMARIZE SELECT * FROM v",
    "PRAGMA table_info('t')",
    "CALL pragma_table_info('v')",
    "PIVOT t ON b USING max(a)",
    "UNPIVOT t ON b INTO NAME k VALUE val",
    "VALUES (1), (2)",
    "ANALYZE t",
    "CHECKPOINT",
    "SET schema = 'main'",
    "SET search_path = 'main'",
    "RESET search_path",
    "SET VARIABLE top = (SELECT max(a) FROM t)",
])
def test_read_only_statements_pass(site: crr.Site, sql: str) -> None:
    """EXPLAIN (without ANALYZE) of anything, DESCRIBE, SHOW, SUMMARIZE, PRAGMA... run and change nothing."""
    before = state(site)
    rows = site.execute(sql)
    assert isinstance(rows, list)
    assert state(site) == before


def test_explain_returns_a_plan(site: crr.Site) -> None:
    """EXPLAIN and EXPLAIN ANALYZE of a read give DuckDB's plan."""
    plan = site.execute("EXPLAIN SELECT * FROM t WHERE a > 1")
    analyzed = site.execute("EXPLAIN ANALYZE SELECT * FROM v")
    assert plan[0][0] == "physical_plan" and "SCAN" in plan[0][1].upper()
    assert analyzed[0][0] == "analyzed_plan"


def test_prepared_reads_and_copy_to_a_file_pass(site: crr.Site, tmp_path: Path) -> None:
    """PREPARE of a read and EXECUTE of it; COPY of a relation or a query to a file."""
    before = state(site)
    site.execute("PREPARE q AS SELECT b FROM t WHERE a = $1")
    assert site.execute("EXECUTE q(2)") == [("y",)]
    assert site.execute(f"COPY t TO '{tmp_path / 't.csv'}'") == [(3,)]
    assert site.execute(f"COPY (SELECT * FROM v) TO '{tmp_path / 'v.csv'}'") == [(2,)]
    assert (tmp_path / "t.csv").read_text().count("\n") == 4  # header and 3 rows
    assert state(site) == before


# --- what still works: writes to the user's own plain DuckDB tables ---------------------------------

@pytest.mark.parametrize("sql,rows", [
    ("INSERT INTO plain VALUES (11, 'q')", [(10, "p"), (11, "q")]),
    ("INSERT INTO plain SELECT * FROM t WHERE a = 1", [(1, "x"), (10, "p")]),
    ("INSERT INTO plain SELECT * FROM query('SELECT a, b FROM v WHERE a = 3')", [(3, "z"), (10, "p")]),
    ("UPDATE plain SET b = 'r'", [(10, "r")]),
    ("DELETE FROM plain", []),
    ("TRUNCATE plain", []),
    ("WITH d AS (DELETE FROM plain RETURNING *) SELECT * FROM d", []),
    ("WITH d AS (UPDATE plain SET b = 'r' RETURNING *) SELECT * FROM d", [(10, "r")]),
    ("EXPLAIN ANALYZE DELETE FROM plain", []),
    ("EXPLAIN ANALYZE INSERT INTO plain VALUES (12, 's')", [(10, "p"), (12, "s")]),
    ("MERGE INTO plain USING (SELECT 10 AS a) s ON plain.a = s.a WHEN MATCHED THEN DELETE", []),
])
def test_writes_to_plain_tables_still_work(site: crr.Site, sql: str, rows: list) -> None:
    """The guard refuses writes to crr relations only; the user's own tables take any write."""
    before = state(site)
    site.execute(sql)
    assert site.execute("SELECT * FROM plain ORDER BY a") == rows
    assert state(site) == before


def test_plain_ddl_and_copy_from_a_file_still_work(site: crr.Site, csv_file: str) -> None:
    """Plain tables can be created, loaded, altered and dropped."""
    before = state(site)
    site.execute("CREATE TABLE other.p2 AS SELECT * FROM plain")
    site.execute(f"COPY plain FROM '{csv_file}'")
    site.execute("ALTER TABLE plain ADD COLUMN c INT")
    assert site.execute("SELECT * FROM plain ORDER BY a") == [(9, "n", None), (10, "p", None)]
    assert site.execute("SELECT * FROM other.p2") == [(10, "p")]
    site.execute("DROP TABLE other.p2")
    site.execute("ATTACH ':memory:' AS scratch")
    site.execute("CREATE TABLE scratch.s AS SELECT 1 AS one")
    assert site.execute("SELECT * FROM scratch.s") == [(1,)]
    assert state(site) == before


# --- the contract crr.site_dml.run_other relies on -----------------------------------------------------

@pytest.mark.parametrize("sql,read_only,tables", [
    ("SELECT * FROM t", True, {"t"}),
    ("SELECT * FROM _crr.cl", True, {"cl", "_crr."}),
    ("EXPLAIN DELETE FROM t", True, {"t"}),
    ("EXPLAIN ANALYZE DELETE FROM t", False, {"t"}),
    ("EXPLAIN ANALYZE SELECT * FROM t", True, {"t"}),
    ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", False, {"t"}),
    ("EXPLAIN ANALYZE UPDATE _crr.cl SET cl = 0", False, {"cl", "_crr."}),
    ("COPY t TO 'x.csv'", True, {"t"}),
    ("COPY t FROM 'x.csv'", False, {"t"}),
    ("SUMMARIZE t", True, {"t"}),
])
def test_classify_reports_what_duckdb_will_do(sql: str, read_only: bool, tables: set[str]) -> None:
    """``Other.read_only`` is True only if DuckDB will change no table; ``tables`` holds every table named."""
    stmt = classify(sql)
    assert isinstance(stmt, Other)
    assert stmt.read_only is read_only
    assert tables <= stmt.tables


# --- statements that only READ crr relations and write elsewhere pass; their twins that write crr do not

@pytest.mark.parametrize("sql,check,expected", [
    ("CREATE TABLE report AS SELECT * FROM t", "SELECT count(*) FROM report", [(3,)]),
    ("CREATE TABLE report AS FROM v", "SELECT count(*) FROM report", [(2,)]),
    ("CREATE TEMP TABLE report AS SELECT * FROM t WHERE a > 1", "SELECT count(*) FROM report", [(2,)]),
    ("CREATE TABLE other.report AS SELECT t.a, v.b FROM t JOIN v USING (a)", "SELECT count(*) FROM other.report",
     [(2,)]),
    ("CREATE OR REPLACE TABLE plain AS SELECT * FROM t", "SELECT count(*) FROM plain", [(3,)]),
    ("CREATE TABLE snap AS SELECT count(*) AS n FROM _crr.cl", "SELECT n FROM snap", [(3,)]),
    ("CREATE VIEW pv AS SELECT * FROM t WHERE a < 3", "SELECT count(*) FROM pv", [(2,)]),
    ("CREATE MACRO t_rows() AS (SELECT count(*) FROM t)", "SELECT t_rows()", [(3,)]),
    ("CREATE INDEX plain_a ON plain(a)", "SELECT count(*) FROM duckdb_indexes() WHERE index_name = 'plain_a'",
     [(1,)]),
    ("EXPLAIN ANALYZE INSERT INTO plain SELECT * FROM t", "SELECT count(*) FROM plain", [(4,)]),
    ("EXPLAIN ANALYZE CREATE TABLE report AS SELECT * FROM v", "SELECT count(*) FROM report", [(2,)]),
    ("WITH d AS (INSERT INTO plain SELECT * FROM t RETURNING *) SELECT count(*) FROM d",
     "SELECT count(*) FROM plain", [(4,)]),
    ("WITH d AS (UPDATE plain SET b = (SELECT max(b) FROM t) RETURNING *) SELECT * FROM d",
     "SELECT * FROM plain", [(10, "z")]),
    ("MERGE INTO plain USING t ON plain.a = t.a WHEN NOT MATCHED THEN INSERT VALUES (t.a, t.b)",
     "SELECT count(*) FROM plain", [(4,)]),
    ("INSERT INTO plain SELECT * FROM t", "SELECT count(*) FROM plain", [(4,)]),
])
def test_writing_elsewhere_what_is_read_from_crr_relations_passes(site: crr.Site, sql: str, check: str,
                                                                  expected: list) -> None:
    """Reading a crr relation into a plain table, view, macro or file changes no crr relation: it runs."""
    before = state(site)
    site.execute(sql)
    assert site.execute(check) == expected
    assert state(site) == before
    assert_crr_still_works(site)


def test_copy_of_a_query_over_crr_relations_to_a_file_passes(site: crr.Site, tmp_path: Path) -> None:
    """COPY (query) TO a file reads; the file holds the rows."""
    before = state(site)
    site.execute(f"COPY (SELECT t.* FROM t JOIN v USING (a)) TO '{tmp_path / 'j.csv'}'")
    assert (tmp_path / "j.csv").read_text().count("\n") == 3  # header and 2 rows
    assert state(site) == before


@pytest.mark.parametrize("sql", [
    "CREATE OR REPLACE TABLE t AS SELECT * FROM plain",
    "CREATE OR REPLACE TABLE main.t AS SELECT * FROM t",
    "CREATE TEMP TABLE t AS SELECT * FROM plain",  # would shadow t for crr's unqualified statements
    "CREATE TABLE temp.main.t AS SELECT * FROM plain",
    "CREATE TEMP VIEW v AS SELECT * FROM plain",
    "CREATE OR REPLACE VIEW v AS SELECT * FROM plain",
    "CREATE TABLE _crr.report AS SELECT * FROM t",
    "CREATE VIEW _crr.pv AS SELECT * FROM t",
    "CREATE INDEX t_b ON t(b)",
    "CREATE UNIQUE INDEX t_b ON t(b)",  # would make crr's own writes of t fail
    "CREATE INDEX plain_a ON plain(a) WHERE a IN (SELECT a FROM t)",
    "CREATE TABLE child (x INT REFERENCES t(a))",  # a foreign key constrains deletes from t
    "EXPLAIN ANALYZE INSERT INTO t SELECT * FROM plain",
    "EXPLAIN ANALYZE CREATE OR REPLACE TABLE t AS SELECT * FROM plain",
    "WITH d AS (INSERT INTO t SELECT * FROM plain RETURNING *) SELECT count(*) FROM d",
    "WITH d AS (UPDATE t SET b = (SELECT max(b) FROM plain) RETURNING *) SELECT * FROM d",
    "MERGE INTO t USING plain ON plain.a = t.a WHEN NOT MATCHED THEN INSERT VALUES (plain.a, plain.b)",
    "MERGE INTO v USING t ON v.a = t.a WHEN MATCHED THEN DELETE",
    "ALTER TABLE t ADD COLUMN c INT",
    "ALTER TABLE t RENAME TO t2",
    "ALTER VIEW v RENAME TO v2",
    "DROP TABLE t CASCADE",
    "DROP VIEW IF EXISTS main.v",
    "DROP TABLE _crr.cl",
    "DROP SCHEMA _crr CASCADE",
    "TRUNCATE t",
    "TRUNCATE _crr.cl",
    "COMMENT ON TABLE t IS 'mine'",
])
def test_writing_a_crr_relation_while_reading_elsewhere_is_refused(site: crr.Site, sql: str) -> None:
    """The twins of the statements above: each writes (or shadows) a crr relation or crr's schema."""
    assert_refused(site, sql)
    assert_crr_still_works(site)


@pytest.mark.parametrize("sql, near", [("INSRT INTO t VALUES (1, 'x')", "INSRT"), ("UPDAT t SET b = 'x'", "UPDAT"),
                                       ("DELETE t WHERE a = 1", "t")])
def test_a_misspelt_write_is_a_syntax_error(site: crr.Site, sql: str, near: str) -> None:
    """Text DuckDB cannot parse names t, so the guard cannot tell it from a write to t; the site's
    own parser tells: DuckDB's syntax error, where it was "would change t outside crr"."""
    with pytest.raises(crr.SqlError, match=f'syntax error at or near "{near}"'):
        site.execute(sql)
    assert_crr_still_works(site)


def test_copy_from_a_file_into_a_crr_relation_is_refused(site: crr.Site, csv_file: str) -> None:
    """COPY ... FROM a file writes its table: refused for crr relations and crr's schema, fine for plain tables."""
    assert_refused(site, f"COPY t FROM '{csv_file}'")
    assert_refused(site, f"COPY v FROM '{csv_file}'")
    assert_refused(site, f"COPY main.t FROM '{csv_file}' (HEADER false)")
    assert_refused(site, f"COPY _crr.cl FROM '{csv_file}'")
    site.execute(f"COPY plain FROM '{csv_file}'")
    assert site.execute("SELECT count(*) FROM plain") == [(2,)]


@pytest.mark.parametrize("sql,writes", [
    ("SELECT * FROM t", set()),
    ("COPY t TO 'x.csv'", set()),
    ("COPY (SELECT * FROM t) TO 'x.csv'", set()),
    ("EXPLAIN DELETE FROM t", set()),
    ("CREATE TABLE report AS SELECT * FROM t", {"report"}),
    ("CREATE TABLE other.r AS SELECT * FROM _crr.cl", {"r", "other."}),
    ("CREATE OR REPLACE TABLE t AS SELECT * FROM plain", {"t"}),
    ("CREATE VIEW pv AS SELECT * FROM v", {"pv"}),
    ("CREATE SCHEMA s2", {"s2."}),
    ("CREATE INDEX i ON plain(a)", {"plain"}),
    ("CREATE INDEX i ON t(a)", {"t"}),
    ("CREATE TABLE child (x INT REFERENCES t(a))", {"child", "t"}),
    ("EXPLAIN ANALYZE INSERT INTO plain SELECT * FROM t", {"plain"}),
    ("EXPLAIN ANALYZE UPDATE plain SET b = t.b FROM t WHERE plain.a = t.a", {"plain"}),
    ("EXPLAIN ANALYZE DELETE FROM plain USING t WHERE plain.a = t.a", {"plain"}),
    ("WITH d AS (INSERT INTO plain SELECT * FROM t RETURNING *) SELECT * FROM d", {"plain"}),
    ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", {"t"}),
    ("WITH d AS (DELETE FROM t RETURNING a) DELETE FROM plain WHERE a IN (SELECT a FROM d)", {"plain", "t"}),
    ("MERGE INTO plain USING t ON plain.a = t.a WHEN MATCHED THEN DELETE", {"plain"}),
    ("COPY t FROM 'x.csv'", {"t"}),
    ("DROP SCHEMA _crr CASCADE", {"_crr."}),
    ("TRUNCATE plain", {"plain"}),
    ("ALTER TABLE plain RENAME TO t", {"plain", "t"}),
])
def test_classify_tells_writes_from_reads(sql: str, writes: set[str]) -> None:
    """``Other.writes`` holds exactly the tables (and ``schema.``) a statement changes when crr can tell."""
    stmt = classify(sql)
    assert isinstance(stmt, Other)
    assert stmt.writes == writes
    assert writes <= stmt.tables


@pytest.mark.parametrize("sql,must_write", [
    ("COMMENT ON TABLE t IS 'x'", {"t"}),  # sqlglot's tree is not DuckDB's ALTER: every name may be written
    ("CREATE TABLE pv AS PIVOT t ON b USING max(a)", {"pv", "t"}),  # sqlglot cannot parse it
    ("INSERT INTO plain SELECT * FROM t ON CONFLICT (a) DO UPDATE SET b = excluded.b "
     "RETURNING (SELECT count(*) FROM (DELETE FROM t RETURNING *))", {"plain", "t"}),
    ("CREATE TABLE report AS SELECT * FROM query('SELECT * FROM t')", {"report"}),
])
def test_writes_over_approximate_when_crr_cannot_tell(sql: str, must_write: set[str]) -> None:
    """When crr cannot see which tables a statement changes, it may change every table it names."""
    try:
        stmt = classify(sql)
    except crr.CrrError:
        return  # refused outright: as safe
    assert isinstance(stmt, Other)
    assert not stmt.read_only
    assert must_write <= stmt.writes


def test_other_built_without_writes_may_write_all_it_names() -> None:
    """Code that builds an Other by hand keeps the old meaning: if it is not read-only, every table it names
    may change; a read-only Other changes nothing."""
    assert Other(sql="x", tree=None, read_only=False, tables={"t", "_crr."}).writes == {"t", "_crr."}
    assert Other(sql="x", tree=None, read_only=True, tables={"t"}).writes == set()
    assert Other(sql="x", tree=None, read_only=True, tables={"t"}, writes={"t"}).writes == set()


def test_statement_effects_is_the_guards_entry_point() -> None:
    """crr.sql.guard.statement_effects judges a statement without classifying it."""
    effects = statement_effects("CREATE TABLE report AS SELECT * FROM t")
    assert (effects.read_only, effects.writes) == (False, frozenset({"report"}))
    assert effects.tables >= {"report", "t"}
    assert statement_effects("SELECT 1").read_only


def test_classify_refuses_several_statements() -> None:
    """One statement at a time, also when sqlglot cannot parse it."""
    with pytest.raises(crr.CrrError, match="one SQL statement"):
        classify("SUMMARIZE t; DELETE FROM t")


@pytest.mark.parametrize("sql", [
    "/* /* */ DROP TABLE nosuch -- */ UPDATE x SET v = 99",  # DuckDB nests block comments
    "-- x\rDELETE FROM x;\nDROP TABLE IF EXISTS nosuch",  # and ends a -- comment at \r
    "drop table nosuch /* /* */ -- */ ; delete from x",
    "DROP TABLE IF EXISTS nosuch -- x\r; UPDATE x SET v = 7",
])
def test_a_drop_that_duckdb_reads_as_more_changes_nothing_outside_crr(sql: str) -> None:
    """Comments DuckDB reads otherwise than crr's DROP pattern hid a write after a plain DROP of a
    table crr does not hold, which ran as the user's text, unchecked: the APP table changed and the
    change was never replicated (found by a review). Whatever crr does with such text, the APP table
    stays what the site's changes bring a peer."""
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE x (k INT, v INT)")
    site.execute("INSERT INTO x VALUES (1, 1), (2, 2)")
    try:
        site.execute(sql)
    except crr.CrrError:
        pass
    peer = crr.Site()
    peer.execute("CREATE REPLICATED TABLE x (k INT, v INT)")
    peer.merge(site.changes())
    assert site.execute("SELECT * FROM x ORDER BY k") == peer.execute("SELECT * FROM x ORDER BY k")


def test_a_plain_drop_runs_as_rebuilt_from_its_name() -> None:
    """A DROP of a table that is not crr's runs as ``DROP TABLE [IF EXISTS] name``, not as the text given."""
    site = crr.Site()
    site.execute('CREATE TABLE "My Table" (a INT)')
    site.execute('/* tidy */ DROP TABLE "My Table" -- gone')
    site.execute("DROP TABLE IF EXISTS nosuch")
    with pytest.raises(crr.SqlError, match="nosuch"):
        site.execute("DROP VIEW nosuch")
    assert site.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'My Table'") == [(0,)]
