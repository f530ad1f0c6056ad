"""Delta plans are backend-neutral: the same sqlglot plan runs on DuckDB and on Spark SQL with equal results."""

from __future__ import annotations

import shutil

import duckdb
import pytest
import sqlglot

import crr

VIEWS = {
    "sel": "SELECT a, b FROM r WHERE a > 1",
    "jn": "SELECT r.a, q.c, r.a + q.c AS total FROM r JOIN q ON r.b = q.b",
    "selfj": "SELECT x.a, y.b FROM r x JOIN r y ON x.b = y.a",
    "uni": "SELECT a FROM r UNION SELECT c FROM q WHERE c < 5",
}
# inputs as delta plans read them: AUG columns named by position (r: c0 = a, c1 = b; q: c0 = b, c1 = c)
R = [(1, 2, [10]), (2, 3, [11]), (3, 2, [12]), (2, 2, [13])]
Q = [(2, 4, [20]), (3, 9, [21])]


def _plans():
    site = crr.Site()
    site.execute("CREATE REPLICATED TABLE r (a INT, b INT)")
    site.execute("CREATE REPLICATED TABLE q (b INT, c INT)")
    for name, sql in VIEWS.items():
        site.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    src = lambda rel, delta: sqlglot.parse_one(f"SELECT * FROM {'d_' if delta else ''}{rel}").subquery()  # noqa: E731
    out = {name: site.relation(name).plan.delta_queries({"r", "q"}, src) for name in VIEWS}
    site.close()
    return out


def _rows(rows):
    return sorted((tuple(r[:-1]), tuple(sorted(r[-1]))) for r in rows)


def test_plans_transpile_to_spark_sql():
    for name, plans in _plans().items():
        for plan in plans:
            spark_sql = plan.sql("spark")
            assert "LIST_" not in spark_sql.upper(), f"{name}: DuckDB-only function in {spark_sql}"
            sqlglot.parse_one(spark_sql, read="spark")


def _duckdb_results(plans):
    con = duckdb.connect()
    for table, rows, cols in (("r", R, "c0 INT, c1 INT"), ("q", Q, "c0 INT, c1 INT")):
        for prefix in ("", "d_"):
            con.execute(f"CREATE TABLE {prefix}{table} ({cols}, _crr_ids INT[])")
            con.executemany(f"INSERT INTO {prefix}{table} VALUES (?, ?, ?)", rows)
    return [_rows(con.execute(p.sql("duckdb")).fetchall()) for p in plans]


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime (Java 17 is on CI)")
def test_plans_give_the_same_rows_on_spark_and_duckdb():
    pytest.importorskip("pyspark")
    from crr.bench.gupta_spark import spark_session
    spark = spark_session()
    for table, rows, schema in (("r", R, "c0 int, c1 int, _crr_ids array<int>"),
                                ("q", Q, "c0 int, c1 int, _crr_ids array<int>")):
        df = spark.createDataFrame(rows, schema)
        for prefix in ("", "d_"):
            df.createOrReplaceTempView(prefix + table)
    for name, plans in _plans().items():
        duck = _duckdb_results(plans)
        for plan, expected in zip(plans, duck):
            got = _rows([tuple(r) for r in spark.sql(plan.sql("spark")).collect()])
            assert got == expected, f"view {name}: Spark and DuckDB differ for {plan.sql('spark')}"
