"""Shared helpers for the crr tests."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import importlib.util
import itertools
import os
import shlex
from typing import Iterator

import duckdb
import pytest

import crr
from crr import site_merge
from crr.bench import gupta_spark
from crr.types import quote_str


def pytest_configure(config: pytest.Config) -> None:
    """The tests' SparkSession shuffles into 2 partitions, not the benchmarks' 4: the tests' tables
    are small, each shuffle task costs time whatever its size, and 2 still spreads every shuffle over
    several partitions (about 7% off the Spark tests here)."""
    gupta_spark.SHUFFLE_PARTITIONS = 2
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", TEST_JVM_ARGS)


def _spark_jars_first() -> str:
    """``--conf spark.driver.extraClassPath=...`` naming the jars of Spark's own classes (core, SQL,
    Catalyst, Scala's library), which the JVM then searches before the other jars of pyspark's
    folder; empty when pyspark is not installed. Spark reads the class files of every job's closures
    (its ClosureCleaner) and looks classes up by name for py4j, and the JVM searches the class path
    in order, jar by jar: ``jars/*`` puts about 280 jars there in the folder's own order. A Flight
    Recorder profile of small merges found 14% of the JVM's samples in the closure cleaner, most of
    them in those jar lookups."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return ""
    folder = os.path.join(list(spec.submodule_search_locations)[0], "jars")
    jars = [j for pattern in ("spark-core_*.jar", "spark-sql_*.jar", "spark-catalyst_*.jar", "spark-sql-api_*.jar",
                              "spark-common-utils_*.jar", "scala-library-*.jar")
            for j in sorted(glob.glob(os.path.join(folder, pattern)))]
    return f"--conf {shlex.quote('spark.driver.extraClassPath=' + ':'.join(jars))} " if jars else ""


TEST_JVM_ARGS = ("--driver-java-options '-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m' "
                 "--conf spark.sql.codegen.wholeStage=false --conf spark.sql.codegen.factoryMode=NO_CODEGEN "
                 f"{_spark_jars_first()}pyspark-shell")
"""How the tests' JVMs run Spark (``PYSPARK_SUBMIT_ARGS``, which the children the tests start inherit;
one set in the environment is kept: ``PYSPARK_SUBMIT_ARGS=pyspark-shell`` runs Spark's defaults).
The tests' plans are many and their data small, so a JVM spent most of its CPU compiling: its C2
JIT compiler (26 s of 50 s of CPU in one 66 s test) and the code Spark generates for every new plan,
which the JVM compiles again. Here the JIT stops at C1 and Spark evaluates expressions without
generating code (its own tests run both modes; the results are the same by Spark's contract). A JVM
stopping at C1 reserves 48 MB for compiled code (a tiered one 240 MB): the suite's JVM filled it in
about a minute ("CodeCache is full. Compiler has been disabled"), then spent CPU flushing and compiling
again; with 240 MB, tests/test_spark_membership.py and tests/test_spark_expressions.py ran in 125-128 s
against 147-148 s (two alternating runs each). Spark's own jars come first on the class path
(:func:`_spark_jars_first`): the same two files in 127.7 and 136.8 s against 160.9 and 142.4 s (two
alternating runs each). The benchmarks run Spark's defaults."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n auto --dist loadgroup``, as CI runs the suite), the Spark tests run
    in one worker, so they share one SparkSession (one JVM) as they do in a serial run."""
    for item in items:
        if "spark" in item.nodeid.lower():
            item.add_marker(pytest.mark.xdist_group("spark"))


def general_merges(patch: pytest.MonkeyPatch) -> None:
    """Make every merge take the general path (the batch pipeline): turn off crr.point_merge's
    one-statement merges of rows new to the site, both routes."""
    patch.setattr(site_merge, "received_new_rows", lambda *args: None)
    patch.setattr(site_merge, "received_new_batch", lambda *args: None)


def without_tuples(cs: crr.Changeset) -> crr.Changeset:
    """``cs`` with every relation's tuples left out: its causal-length entries arrive alone, as
    they do when a site hears of rows through the changes of a view over them."""
    return dataclasses.replace(cs, relations=[dataclasses.replace(rc, tuples=rc.tuples.slice(0, 0))
                                              for rc in cs.relations])


def app(site: crr.Site, rel: str) -> list[tuple]:
    """A relation's APP rows, sorted (NULLs first)."""
    return site.execute(f"SELECT * FROM {rel} ORDER BY ALL NULLS FIRST")


def aug(site: crr.Site, rel: str) -> dict:
    """A relation's whole AUG state, in a form that compares equal across sites."""
    r = site.relation(rel)
    if r.is_base:
        tuples = site.execute(f'SELECT * EXCLUDE (seq) FROM _crr."{rel}$t" ORDER BY id')
        monos = None
    else:
        cols = ", ".join(c.name for c in r.aug_columns)
        tuples = site.execute(f'SELECT DISTINCT vid, {cols} FROM _crr."{rel}$m" ORDER BY vid')
        monos = site.execute(f'SELECT vid, mid, ids FROM _crr."{rel}$m" ORDER BY vid, mid')
    lineage = ", ".join(quote_str(x) for x in sorted(site.lineage(rel)))
    # wherever the site keeps them: _crr.cl, or a replica's own table (crr.replica)
    homes = ["SELECT id, rel, cl, kh, stamp, vis FROM _crr.cl"] + [
        f"SELECT id, {quote_str(x)} AS rel, cl, kh, stamp, vis FROM {site.relation(x).aug('e')} WHERE cl > 0"
        for x in site.relations() if site.relation(x).replica]
    cl = site.execute(f"SELECT * FROM ({' UNION ALL '.join(homes)}) WHERE rel IN ({lineage}) ORDER BY id")
    return {"tuples": tuples, "monos": monos, "cl": cl}


def sync(src: crr.Site, dst: crr.Site, *rels: str, since: int = 0) -> int:
    """Ship src's changes of rels (all if none) to dst as bytes; returns the cursor."""
    cs = src.changes(since=since, relations=list(rels) or None)
    dst.merge(cs.to_bytes())
    return cs.cursor


_PLAIN: duckdb.DuckDBPyConnection | None = None  # the DuckDB instance of plain_duckdb's databases
_plain_names = itertools.count()


@contextlib.contextmanager
def plain_duckdb() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to an empty in-memory database of plain DuckDB (as ``duckdb.connect()`` gives),
    detached on exit. The databases are attached to one DuckDB instance kept for the test run: a new
    instance costs about 18 ms (DuckDB loads its built-in extensions), attaching one 0.5 ms."""
    global _PLAIN
    if _PLAIN is None:
        _PLAIN = duckdb.connect()
    con = _PLAIN.cursor()
    name = f"plain_{next(_plain_names)}"
    con.execute(f"ATTACH ':memory:' AS {name}")
    con.execute(f"USE {name}")
    try:
        yield con
    finally:
        con.execute("USE memory")
        con.execute(f"DETACH {name}")
        con.close()


def reference(tables: dict[str, list[tuple]], schemas: dict[str, str], views: list[tuple[str, str]],
              query: str) -> list[tuple]:
    """Plain DuckDB evaluating ``query`` over the given base rows (views defined as plain SQL views)."""
    with plain_duckdb() as con:
        for name, ddl in schemas.items():
            con.execute(f"CREATE TABLE {name} {ddl}")
            if tables[name]:
                con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(tables[name][0]))})", tables[name])
        for name, sql in views:
            con.execute(f"CREATE VIEW {name} AS {sql}")
        return con.execute(f"SELECT DISTINCT * FROM ({query}) ORDER BY ALL NULLS FIRST").fetchall()


META_FLAGS_SINCE = {7: "unchecked_entries", 8: "rival_versions"}
"""The storage version that added each ``_crr.meta`` flag row (crr.catalog.SiteFlag)."""


def as_written_by(path, version: int) -> None:
    """Make the closed site file at ``path`` what storage ``version`` wrote as far as ``_crr.meta``
    goes: the flag rows later versions added removed, ``version`` recorded (for upgrade tests)."""
    con = duckdb.connect(str(path))
    for since, key in META_FLAGS_SINCE.items():
        if since > version:
            con.execute("DELETE FROM _crr.meta WHERE k = ?", [key])
    con.execute("UPDATE _crr.meta SET v = ? WHERE k = 'version'", [str(version)])
    con.close()


@pytest.fixture
def site():
    """A fresh in-memory site."""
    s = crr.Site(site_id="t0")
    yield s
    s.close()
