"""A Spark site's views compute DuckDB's values, or are refused when declared (crr.spark.expressions).

The views below are declared at a DuckDB site and at a Spark site over the same rows; every value of
every view must be the same, NaN, infinities and the sign of zero included (a different value is a
different view tuple, so the copies of the view would diverge). The rows hold what tells the
engines apart: divisors of zero, halves to round, days of the week, non-ASCII text.
"""

from __future__ import annotations

import gc
import math
import shutil

import duckdb
import pytest
import sqlglot
from sqlglot import exp

import crr
from crr.errors import CrrError, UnsupportedSqlError
from crr.spark.expressions import spark_view_query

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime (Java 17 is on CI)")
pyspark = pytest.importorskip("pyspark")

from crr.spark import SparkSite  # noqa: E402

TABLE = ("(k INTEGER PRIMARY KEY, i INTEGER, j BIGINT, s VARCHAR, f DOUBLE, d DATE, ts TIMESTAMP, "
         "m DECIMAL(10,2), b BOOLEAN, z INTEGER, g DOUBLE)")
ROWS = """
 (1, 1, 10, 'abc', 2.5, DATE '2024-02-29', TIMESTAMP '2024-02-29 13:45:10', 12.35, true, 0, CAST('NaN' AS DOUBLE)),
 (2, -7, -3, 'Ünïcode ß', -2.5, DATE '1999-12-31', TIMESTAMP '1999-12-31 23:59:59.123456', -0.05, false, 3, CAST('Infinity' AS DOUBLE)),
 (3, 0, 0, '', 0.0, DATE '2000-01-01', TIMESTAMP '2000-01-01 00:00:00', 0, NULL, -2, -1.5),
 (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (5, 3, 7, 'a,b,,c', 0.5, DATE '2024-12-31', TIMESTAMP '2024-06-15 12:00:00', 1.5, false, 1, CAST('-Infinity' AS DOUBLE)),
 (6, -21483, 5, '42', -0.125, DATE '2024-03-03', TIMESTAMP '2024-03-03 03:03:03', -1.5, true, 7, 0.0),
 (7, 5, 9, 'bcd', 1.5, DATE '2023-01-01', TIMESTAMP '2023-01-01 23:00:00', 2.5, true, -4, CAST('NaN' AS DOUBLE)),
 (8, 4, 1, 'a' || chr(13) || 'c', 0.7, DATE '2023-01-07', TIMESTAMP '2024-03-31 02:30:00', 0.5, false, 2, 2.5)
"""
# expressions rewritten for Spark (division, casts to integers, days of the week) and ones that agree as
# they are; each view keeps k so that a row's values are compared with the same row's
VIEWS = {
    "nums": "SELECT k, i / z AS q1, f / z AS q2, m / z AS q3, j / i AS q4, m / 3 AS q5, i / -f AS q6, "
            "CAST(f AS INTEGER) AS c1, CAST(m AS INTEGER) AS c2, CAST(f AS BIGINT) AS c3, "
            "TRY_CAST(f AS SMALLINT) AS c4, CAST(b AS INTEGER) AS c5, i // 3 AS d1, i % 3 AS d2, -i AS n1, "
            "abs(f) AS n2, round(f) AS n3, round(m, 1) AS n4, floor(m) AS n5, sqrt(abs(f)) AS n6, "
            "CAST(m AS DOUBLE) AS n7, i & 6 AS n8, sign(f) AS n9, f * 3 - 1 AS n10, f % z AS n11, "
            "TRY_CAST(f * 1e10 AS INTEGER) AS c6, sign(g) AS n12, g / z AS q7, round(g) AS n13, g % 3 AS n14, "
            "g > 1 AS n15 FROM t",
    "texts": "SELECT k, s || '!' AS t1, concat(s, 'x') AS t2, length(s) AS t3, substring(s, 2, 3) AS t4, "
             "left(s, 2) AS t5, right(s, 2) AS t6, trim(s) AS t7, replace(s, 'a', 'X') AS t8, lpad(s, 6, '*') AS t9, "
             "strpos(s, 'b') AS t10, starts_with(s, 'a') AS t11, regexp_matches(s, '^[a-z]+') AS t12, "
             "regexp_replace(s, '[a-c]', 'Z', 'g') AS t13, split_part(s, ',', 2) AS t14, md5(s) AS t15, "
             "CAST(i AS VARCHAR) AS t16, CAST(m AS VARCHAR) AS t17, CAST(d AS VARCHAR) AS t18, s NOT LIKE '%b%' AS t19, "
             "coalesce(s, 'none') AS t20, regexp_matches(s, 'a.c') AS t21, regexp_replace(s, 'a.', '_', 'g') AS t22, "
             "s LIKE 'a%' AS t23 FROM t WHERE s IS NULL OR s <> '42'",
    "dates": "SELECT k, year(d) AS y, month(d) AS mo, dayofweek(d) AS dw, isodow(d) AS iw, weekday(ts) AS wd, "
             "dayofyear(d) AS dy, quarter(d) AS qu, hour(ts) AS h, date_trunc('month', d) AS dtm, d + 1 AS dn, "
             "date_diff('day', d, DATE '2024-01-01') AS dd, extract(year FROM ts) AS ey, "
             "strftime(ts, '%Y-%m-%d %H:%M') AS sf, CAST(ts AS DATE) AS cd, ts + INTERVAL 1 HOUR AS th, "
             "last_day(d) AS ld, epoch(d) AS ep, date_trunc('hour', ts) AS th2 FROM t "
             "WHERE d IS NULL OR d > DATE '1999-06-01'",
    "unnamed": "SELECT k, i / z, CAST(f AS INTEGER) FROM t",
}


@pytest.fixture(scope="module")
def spark():
    from crr.bench.gupta_spark import spark_session
    return spark_session()


def _exact(rows) -> list[tuple]:
    """Rows with floats by their repr (so NaN equals NaN and -0.0 differs from 0.0), sorted."""
    def one(v):
        return ("float", repr(v)) if isinstance(v, float) else v
    return sorted((tuple(one(v) for v in r) for r in rows), key=repr)


def _sites(spark, tmp_path) -> tuple[crr.Site, SparkSite]:
    duck = crr.Site(site_id="edge")
    site = SparkSite(spark, str(tmp_path / "cloud"), site_id="cloud")
    duck.execute(f"CREATE REPLICATED TABLE t {TABLE}")
    site.execute(f"CREATE REMOTE TABLE t {TABLE}")
    return duck, site


def test_spark_views_compute_duckdbs_values(spark, tmp_path):
    """Every view over the rows is the same at the Spark site as at the DuckDB site, value for value,
    after a merge and after the Spark site reopens and merges more rows; a fresh DuckDB site holding
    the Spark site's changes agrees too. Fails without the rewrites: Spark refuses the merge (division
    by zero), truncates 0.7 and 1.5 where DuckDB rounds them, and counts days of the week from 1."""
    duck, site = _sites(spark, tmp_path)
    for name, sql in VIEWS.items():
        duck.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        site.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    assert [c.name for c in site.relation("unnamed").columns] == [c.name for c in duck.relation("unnamed").columns]
    duck.execute(f"INSERT INTO t VALUES {ROWS}")
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Europe/Berlin")  # the application's; the site computes in UTC
    try:
        site.merge(duck.changes().to_bytes())
        assert spark.conf.get("spark.sql.session.timeZone") == "Europe/Berlin"
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    for name in VIEWS:
        _same(_exact(site.table(name).collect()), _exact(duck.execute(f"SELECT * FROM {name}")), name)
    cursor = duck.cursor
    site.close()
    site = SparkSite(spark, str(tmp_path / "cloud"))
    duck.execute("INSERT INTO t VALUES (9, 9, 9, 'b', -0.5, DATE '2023-01-02', TIMESTAMP '2023-01-02 10:00:00', "
                 "-2.5, NULL, 0, CAST('NaN' AS DOUBLE))")
    site.merge(duck.changes(since=cursor).to_bytes())
    for name in VIEWS:
        assert _exact(site.table(name).collect()) == _exact(duck.execute(f"SELECT * FROM {name}")), name
    fresh = crr.Site(site_id="fresh")
    fresh.execute(f"CREATE REMOTE TABLE t {TABLE}")
    for name in VIEWS:
        fresh.execute(f"CREATE REMOTE TABLE {name} {_remote_columns(duck, name)}")
    fresh.merge(site.changes().to_bytes())
    for name in VIEWS:
        assert _exact(fresh.execute(f"SELECT * FROM {name}")) == _exact(duck.execute(f"SELECT * FROM {name}")), name
    site.close()


def _same(spark_rows: list[tuple], duck_rows: list[tuple], name: str) -> None:
    """Assert the rows are equal, naming the first differing values (row key, column position)."""
    diffs = [(a[0], i, a[i], b[i]) for a, b in zip(spark_rows, duck_rows) for i in range(len(a)) if a[i] != b[i]]
    assert (len(spark_rows), diffs[:5]) == (len(duck_rows), []), name


def _remote_columns(duck: crr.Site, name: str) -> str:
    return "(" + ", ".join(f'"{c.name}" {c.type}' for c in duck.relation(name).columns) + ")"


REFUSED = [
    ("upper(s)", "upper"),
    ("lower(s)", "lower"),
    ("CAST(f AS VARCHAR)", "float to string"),
    ("CAST(s AS INTEGER)", "parses text"),
    ("ln(f)", "ln"),
    ("sin(f)", "sin"),
    ("power(f, 2)", "power"),
    ("hash(s)", "hash"),
    ("floor(f)", "rounds a DOUBLE"),
    ("round(f, 1)", "rounds a DOUBLE"),
    ("regexp_replace(s, 'a', 'b')", "first match"),
    ("date_diff('month', d, DATE '2024-01-01')", "unit boundaries"),
    ("date_diff('day', ts, TIMESTAMP '2024-01-01 10:00:00')", "unit boundaries"),
    ("d - DATE '2000-01-01'", "date arithmetic"),
    ("d + INTERVAL 1 DAY", "date arithmetic"),
    ("epoch(ts)", "fraction of a second"),
    ("substring(s, 0, 2)", "positions and lengths"),
    ("substring(s, i, 2)", "positions and lengths"),
    ("concat(s, i)", "not all VARCHAR"),
    ("extract(dow FROM d)", "only the parts"),
    ("strftime(d, '%a')", "format codes"),
    ("i << 2", "BITWISELEFTSHIFT"),
    ("f // 2", "DIV takes integers"),
    ("CAST('2.5' AS INTEGER)", "read the text '2.5' otherwise; write the INTEGER literal as digits, optionally signed"),
    ("CAST('2024-01-01 24:00:00' AS TIMESTAMP)", "literal as YYYY-MM-DD, optionally with hh:mm"),
    # a probe's case: these were told to write the text "in ISO form", which no form of theirs passes
    ("f < CAST('NaN' AS DOUBLE)", "(no exponent, NaN or infinity)"),
    ("CAST('2024-03-10T07:00:00+00:00' AS TIMESTAMPTZ)", "no text of a TIMESTAMP WITH TIME ZONE literal is known"),
    ("CAST(f AS FLOAT)", "FLOAT's range"),
    ("CAST(i AS HUGEINT)", "no type holding"),
    ("TRY_CAST(m AS UBIGINT)", "no type holding"),
    ("s LIKE 'a\\_%'", "backslash"),
    ("s ILIKE 'a%'", "folds case"),
    ("chr(8364)", "modulo 256"),
    ("split_part(s, '', 1)", "non-empty literal delimiter"),
    ("split_part(s, ',', 0)", "non-empty literal delimiter"),
    ("reverse(s)", "reverse"),
    ("regexp_matches(s, 'abc$')", "Java reads $"),
    ("regexp_matches(s, '[[:alpha:]]+')", "POSIX"),
    ("regexp_matches(s, 'A', 'i')", "options"),
    ("regexp_matches(s, '\\s')", "escapes other than"),
    ("regexp_replace(s, '(b)', '\\1', 'g')", "replacement"),
    ("regexp_extract(s, s)", "literal pattern"),
    ("date_trunc('decade', d)", "truncates only"),
    ("strftime(d, 'day %d')", "format codes"),
    ("CAST(m AS DECIMAL(38,10)) * m", "38"),
    ("s = 42", "compares text"),
    ("ts + INTERVAL '1 month 2 days'", "one literal number"),
]


def test_the_applications_session_settings_change_no_value_the_site_computes_or_stores(spark, tmp_path):
    """A probe's cases: with the application's session at ANSI off, an overflowing view value wrapped
    round (DuckDB refuses the merge), and with Parquet's LEGACY rebase a DATE in 1582's calendar gap
    was stored ten days later under its old tuple id, so every later changes() of the table was
    refused as forged. The site's jobs run with those settings pinned, and the session keeps its own."""
    import datetime as dt
    settings = {"spark.sql.ansi.enabled": "false", "spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY",
                "spark.sql.parquet.int96RebaseModeInWrite": "LEGACY"}
    before = {key: spark.conf.get(key, None) for key in settings}
    src = crr.Site(site_id="src")
    src.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, x DOUBLE, d DATE, ts TIMESTAMPTZ)")
    src.execute("INSERT INTO t VALUES (0, 1.5, DATE '1582-10-05', TIMESTAMPTZ '1582-10-14 00:00:00+00'), "
                "(2147483000, 3e9, DATE '2024-01-01', NULL)")
    duck = crr.Site(site_id="duck")
    site = SparkSite(spark, str(tmp_path / "cloud"), site_id="cloud")
    for s in (duck, site):
        s.execute("CREATE REMOTE TABLE t (k INTEGER PRIMARY KEY, x DOUBLE, d DATE, ts TIMESTAMPTZ)")
        s.execute("CREATE MATERIALIZED VIEW w AS SELECT k + 1000 AS y, CAST(x AS INTEGER) AS xi FROM t")
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        cs = src.changes().to_bytes()
        with pytest.raises(crr.ViewQueryError, match="(?i)overflow"):
            duck.merge(cs)
        with pytest.raises(crr.ChangesetError):
            site.merge(cs)
        assert site.execute("SELECT count(*) FROM t") == [(0,)]
        site.execute("DROP MATERIALIZED VIEW w")
        site.merge(cs)
        assert {key: spark.conf.get(key) for key in settings} == settings
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    rows = sorted(site.table("t").toArrow().to_pylist(), key=lambda r: r["k"])
    assert [(r["k"], r["d"]) for r in rows] == [(0, dt.date(1582, 10, 5)), (2147483000, dt.date(2024, 1, 1))]
    assert rows[0]["ts"] == dt.datetime(1582, 10, 14, tzinfo=dt.timezone.utc)
    back = crr.Site(site_id="back")
    back.execute("CREATE REMOTE TABLE t (k INTEGER PRIMARY KEY, x DOUBLE, d DATE, ts TIMESTAMPTZ)")
    back.merge(site.changes().to_bytes())  # was refused: tuple ids of t do not match their values
    assert back.execute("SELECT * FROM t ORDER BY k") == src.execute("SELECT * FROM t ORDER BY k")
    site.close()


def test_a_view_spark_would_compute_otherwise_is_refused(spark, tmp_path):
    """A view whose expression Spark computes otherwise than DuckDB is refused when declared, by name and
    reason, and leaves nothing behind; the same view is declared at a DuckDB site."""
    duck, site = _sites(spark, tmp_path)
    for n, (expression, why) in enumerate(REFUSED):
        sql = f"SELECT k, {expression} AS x FROM t"
        duck.execute(f"CREATE MATERIALIZED VIEW v{n} AS {sql}")
        with pytest.raises(UnsupportedSqlError, match="Spark site cannot compute") as e:
            site.execute(f"CREATE MATERIALIZED VIEW v{n} AS {sql}")
        assert why in str(e.value) and f"view v{n}" in str(e.value), expression
    with pytest.raises(UnsupportedSqlError, match="column 2 of the UNION.*DOUBLE in one branch and VARCHAR"):
        site.execute("CREATE MATERIALIZED VIEW u AS SELECT k, f FROM t UNION SELECT k, s FROM t")
    assert site.relations() == {"t": "remote"}
    site.execute("CREATE MATERIALIZED VIEW v0 AS SELECT k FROM t")  # the name is still free
    site.close()


def test_spark_rewrites_are_the_same_query_to_duckdb():
    """The rewritten query computes, in DuckDB, exactly the original's values (so a Spark site's view
    has the tuple ids every DuckDB site gives it), and a query needing no rewrite comes back as it is."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t {TABLE}")
    con.execute(f"INSERT INTO t VALUES {ROWS}")

    def describe(sql):
        try:
            return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {sql}").fetchall()]
        except duckdb.Error as e:
            raise CrrError(str(e)) from None
    for name, sql in VIEWS.items():
        tree = sqlglot.parse_one(sql, read="duckdb")
        rewritten = spark_view_query("v", tree, describe)
        assert rewritten is not tree
        assert _exact(con.execute(rewritten.sql("duckdb")).fetchall()) == _exact(con.execute(sql).fetchall())
    plain = sqlglot.parse_one("SELECT k, i + 1 AS x FROM t WHERE s LIKE 'a%'", read="duckdb")
    assert spark_view_query("v", plain, describe) is plain
    zeros = "SELECT 0 / 0 AS x, 1 / -CAST(0 AS DOUBLE) AS y, -1 / CAST(0 AS DOUBLE) AS z, NULL / 0 AS w"
    got = con.execute(spark_view_query("v", sqlglot.parse_one(zeros), describe).sql("duckdb")).fetchall()[0]
    assert math.isnan(got[0]) and got[1:] == (-math.inf, -math.inf, None)


def test_a_freed_expressions_type_is_not_given_to_another():
    """The types of a view's expressions were cached by id(): a node made after another was freed may
    get its id, and then got its type. The CI run of this stop caught it: after a reopen, the Spark
    site computed CAST(m AS DOUBLE) as the integer cast of an earlier CAST(m AS INTEGER) (-3.0 for
    -2.5), once in a while."""
    from crr.spark.expressions import _Types
    types = _Types(lambda sql: [("_crr_x", sql)])  # a "type" naming the expression described
    for _ in range(50):
        first = sqlglot.parse_one("CAST(m AS INTEGER) + 1", read="duckdb")
        for node in first.walk():
            types.name_of(node)
        del first, node
        gc.collect()  # the nodes (parent links make cycles) are freed: new ones may take their memory
        second = sqlglot.parse_one("CAST(m AS DOUBLE) * 2", read="duckdb")
        for node in second.walk():
            assert types.name_of(node) == exp.select(node.copy().as_("_crr_x")).sql("duckdb").upper()
