"""Counted APP tables on a Spark site (crr.spark.membership): batches patch them from the flips and new
derivations instead of recomputing membership, the counts are the alive monomials, a batch whose flips
cannot be read off its entries (a keyed UPDATE) recomputes, and a version-1 site is upgraded on open."""

from __future__ import annotations

import json
import math
import os

import pytest

import crr

pytest.importorskip("pyspark")

from crr.spark import SparkSite  # noqa: E402
from crr.spark import maintain as spark_maintain  # noqa: E402
from crr.spark.tables import app_key  # noqa: E402


@pytest.fixture(scope="module")
def spark():
    from crr.bench.gupta_spark import spark_session
    return spark_session()  # the one session every Spark test shares


DDL = ["CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, g INTEGER)",
       "CREATE REPLICATED TABLE s (g INTEGER PRIMARY KEY, name VARCHAR)"]
VIEWS = ["CREATE MATERIALIZED VIEW p AS SELECT g FROM r",
         "CREATE MATERIALIZED VIEW j AS SELECT r.k, s.name FROM r JOIN s ON r.g = s.g"]


def _rows(site, name: str) -> list[tuple]:
    if isinstance(site, SparkSite):
        return sorted(tuple(r) for r in site.table(name).collect())
    return sorted(site.execute(f"SELECT * FROM {name}"))


def _counts(site: SparkSite, name: str) -> dict:
    """The stored count of alive monomials of each present tuple of view ``name``."""
    app = site._store.read(app_key(site.relation(name)))  # internal: the counts are not user-visible
    return {tuple(r)[1:-1]: r["n"] for r in app.collect()}


@pytest.fixture
def recomputes(monkeypatch):
    """How many times a batch recomputed membership from the whole state."""
    calls = []
    original = spark_maintain.SparkMaintainer._recompute_app

    def counting(self, todo):
        calls.append([r.name for r in todo])
        return original(self, todo)
    monkeypatch.setattr(spark_maintain.SparkMaintainer, "_recompute_app", counting)
    return calls


def test_batches_patch_counted_app_tables_and_a_keyed_update_recomputes(spark, tmp_path, recomputes):
    edge, duck = crr.Site(site_id="edge"), crr.Site(site_id="duck")
    site = SparkSite(spark, str(tmp_path / "site"), site_id="cloud")
    for s in (edge, duck, site):
        for stmt in DDL:
            s.execute(stmt)
    for s in (duck, site):
        for stmt in VIEWS:
            s.execute(stmt)

    def sync(*statements: str) -> None:
        cursor = edge.cursor
        for stmt in statements:
            edge.execute(stmt)
        cs = edge.changes(since=cursor).to_bytes()
        duck.merge(cs)
        site.merge(cs)
        for name in ("r", "s", "p", "j"):
            assert _rows(site, name) == _rows(duck, name), name
        # p's count of a value g is the number of visible r rows with it (one monomial each)
        assert _counts(site, "p") == {(g,): n for g, n in edge.execute("SELECT g, count(*) FROM r GROUP BY g")}
        assert set(_counts(site, "j").values()) <= {1}

    sync("INSERT INTO s VALUES (1, 'one'), (2, 'two'), (3, 'three')",
         "INSERT INTO r VALUES (1, 1), (2, 1), (3, 2), (4, 2), (5, 2), (6, 9)")
    sync("INSERT INTO r VALUES (7, 3), (8, 1)")
    sync("DELETE FROM r WHERE k IN (1, 3)")  # p's counts of 1 and 2 go down, neither reaches 0
    sync("DELETE FROM r WHERE k IN (2, 8)", "DELETE FROM s WHERE g = 2")  # g = 1 leaves p; j loses k 4, 5
    sync("INSERT INTO r VALUES (1, 1)")  # a deleted row back (the same id)
    assert recomputes == []  # every batch so far was patched
    assert site._store.meta["shape"]["versions"] is False
    sync("INSERT INTO s VALUES (2, 'deux')")  # a deleted key back with other values: a second id, absent
    assert recomputes == []
    assert site._store.meta["shape"]["versions"] is True
    sync("UPDATE r SET g = 3 WHERE k = 4")  # two versions of key 4: flips are not parities
    assert len(recomputes) == 1 and {"p", "j", "r"} <= set(recomputes[0])  # (parities would do here too)
    sync("INSERT INTO r VALUES (9, 3)", "DELETE FROM r WHERE k = 7")  # every entry checked now, and patched
    assert len(recomputes) == 1
    # concurrent versions of key 10 from two sites: both present, only the newer visible
    other = crr.Site(site_id="other")
    for stmt in DDL:
        other.execute(stmt)
    other.execute("INSERT INTO r VALUES (10, 1)")
    sync("INSERT INTO r VALUES (10, 3)")
    late = other.changes(relations=["r"]).to_bytes()
    duck.merge(late)
    site.merge(late)
    for name in ("r", "p", "j"):
        assert _rows(site, name) == _rows(duck, name), name
    assert _counts(site, "p") == {(g,): n for g, n in duck.execute("SELECT g, count(*) FROM r GROUP BY g")}
    assert len(recomputes) == 2
    site.close()


def test_a_version_1_site_is_upgraded_when_opened(spark, tmp_path):
    """Storage version 1 kept a view's APP rows without counts: opening such a site computes them, and
    it keeps maintaining the view."""
    edge = crr.Site(site_id="edge")
    path = str(tmp_path / "site")
    site = SparkSite(spark, path, site_id="cloud")
    for s in (edge, site):
        for stmt in DDL:
            s.execute(stmt)
    site.execute(VIEWS[0])
    edge.execute("INSERT INTO r VALUES (1, 1), (2, 1), (3, 2)")
    site.merge(edge.changes().to_bytes())
    # write the view's APP table as version 1 did: (key, cols) only, in a manifest of version 1
    key = app_key(site.relation("p"))
    store = site._store
    entry = store.manifest["tables"][key]
    part = entry["parts"][0].rsplit("/", 1)[0] + "/v1-0001"
    store.read(key).select("key", "c0").write.parquet(os.path.join(path, "data", part))
    site.close()
    current = os.path.join(path, "manifests", open(os.path.join(path, "CURRENT")).read().strip())
    manifest = json.load(open(current))
    manifest["version"] = 1
    manifest["tables"][key] = {"schema": "key BINARY, c0 INT", "parts": [part]}
    json.dump(manifest, open(current, "w"))

    reopened = SparkSite(spark, path)
    assert reopened._store.version == 2
    assert _rows(reopened, "p") == [(1,), (2,)]
    assert _counts(reopened, "p") == {(1,): 2, (2,): 1}
    cursor = edge.cursor
    edge.execute("DELETE FROM r WHERE k IN (1, 3)")
    reopened.merge(edge.changes(since=cursor).to_bytes())
    assert _rows(reopened, "p") == [(1,)]
    assert _counts(reopened, "p") == {(1,): 1}
    reopened.close()


def test_counted_app_tables_keep_float_values_bit_for_bit(spark, tmp_path):
    """Counting groups a view's rows by tuple; Spark's grouping turns -0.0 into 0.0, so float values are
    carried through the grouping, not grouped on: -0.0 stays -0.0, as at a DuckDB site. (Stored base
    values are +0.0, tests/test_negative_zero.py; the views' negations give -0.0.)"""
    edge, duck = crr.Site(site_id="edge"), crr.Site(site_id="duck")
    site = SparkSite(spark, str(tmp_path / "site"), site_id="cloud")
    for s in (edge, duck, site):
        s.execute("CREATE REPLICATED TABLE f (k INTEGER, x DOUBLE, y REAL)")
    for s in (duck, site):
        s.execute("CREATE MATERIALIZED VIEW v AS SELECT -x AS x, -y AS y FROM f")
        s.execute("CREATE MATERIALIZED VIEW w AS SELECT -f.x AS x, g.k FROM f JOIN f AS g ON f.k = g.k")
    for row in ((1, -0.0, -0.0), (2, 1.5, 2.5), (3, -0.0, -0.0)):
        edge.execute("INSERT INTO f VALUES (?, ?, ?)", list(row))
    cs = edge.changes().to_bytes()
    duck.merge(cs)
    site.merge(cs)

    def signs(rows):
        return sorted(tuple(math.copysign(1.0, v) if isinstance(v, float) else v for v in r) for r in rows)
    for name in ("v", "w"):
        assert signs(_rows(site, name)) == signs(_rows(duck, name)), name
    assert (-1.0, -1.0) in signs(_rows(site, "v"))
    site.close()


SMALL_MERGE_JOBS = 51
"""At most how many Spark jobs a small merge runs at a warm site holding ``r``, ``s``, a projection
and a join view (the README's "Large views on Spark" quotes it): each job has a fixed cost, and a
small merge costs its number of jobs. 60 until stop 57, whose merges filter the stored entries and
tuples by the batch's listed ids (``crr.spark.tables.of_ids``) instead of broadcasting the batch;
57 until stop 66, whose replicated tables' APP patches join the dirty ids once
(``crr.spark.membership.patched_base_app``: 3 jobs each where they ran 5)."""


def test_a_small_merge_runs_the_documented_spark_jobs_all_in_the_callers_job_group(spark, tmp_path):
    edge = crr.Site(site_id="edge")
    site = SparkSite(spark, str(tmp_path / "site"), site_id="cloud")
    for stmt in DDL:
        edge.execute(stmt)
        site.execute(stmt)
    for stmt in VIEWS:
        site.execute(stmt)
    sc = spark.sparkContext
    tracker = sc.statusTracker()

    def last_job(group: str) -> int:
        sc.setJobGroup(group, group)
        sc.parallelize([1], 1).count()
        return max(tracker.getJobIdsForGroup(group))

    counts = []
    for step in range(3):  # the first merge warms the plans up; the others are counted
        cursor = edge.cursor
        edge.execute(f"INSERT INTO s VALUES ({step}, 'n{step}')")
        edge.execute("INSERT INTO r VALUES " + ", ".join(f"({20 * step + i}, {i % 5})" for i in range(20)))
        if step:
            edge.execute(f"DELETE FROM r WHERE k < {20 * step} AND k % 3 = 0")
        cs = edge.changes(since=cursor).to_bytes()
        before = last_job(f"crr-before-{step}")
        sc.setJobGroup(f"crr-merge-{step}", "a small merge")
        site.merge(cs)
        ran = len(tracker.getJobIdsForGroup(f"crr-merge-{step}"))
        after = last_job(f"crr-after-{step}")
        assert ran == after - before - 1  # every job the merge ran, in any of its threads, was in the group
        counts.append(ran)
    sc.setJobGroup(None, None)  # type: ignore[arg-type]
    assert max(counts[1:]) <= SMALL_MERGE_JOBS, counts
    assert sorted(tuple(r) for r in site.table("j").collect()) == sorted(
        edge.execute("SELECT r.k, s.name FROM r JOIN s ON r.g = s.g"))
    site.close()
