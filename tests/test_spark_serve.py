"""A Spark site behind the sync service: ``SyncService(SparkSite(...))`` in this process, and ``crr serve
--spark`` as a process of its own, syncing with DuckDB sites; ``SparkSite.interrupt``."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time

import pytest

import crr
from crr.sync.service import SyncService
from tests.test_sync_processes import CRR, crr_cmd, serve, sql
from tests.test_sync_service import SECRET, wait_for

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime (Java 17 is on CI)")
pyspark = pytest.importorskip("pyspark")

from crr.spark import SparkSite  # noqa: E402


@pytest.fixture(scope="module")
def spark():
    from crr.bench.gupta_spark import spark_session
    return spark_session()


def _on(service: SyncService, sql_text: str) -> list[tuple]:
    """``sql_text``'s rows at the service's site, sorted (run where the service runs its site's calls)."""
    return sorted(service.call(lambda: service.site.execute(sql_text)))


def test_a_spark_site_syncs_with_duckdb_sites_through_the_sync_service(spark, tmp_path):
    """Rows written at a DuckDB site reach the Spark site's table and view by the service's pulls
    (inserts, then a keyed update and a delete), and rows the Spark site loads reach the DuckDB site;
    status() and statements run through the Spark site's service."""
    edge = crr.Site(str(tmp_path / "edge.duckdb"), site_id="edge")
    edge.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
    cloud = SparkSite(spark, str(tmp_path / "cloud"), site_id="cloud")
    cloud.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
    cloud.execute("CREATE MATERIALIZED VIEW long_v AS SELECT k, v FROM r WHERE length(v) > 1")
    at_edge = SyncService(edge, SECRET, listen=("127.0.0.1", 0), pull_interval=0.2).start()
    at_cloud = SyncService(cloud, SECRET, listen=("127.0.0.1", 0), peers=[at_edge.address], pull_interval=0.2).start()
    try:
        at_edge.execute("INSERT INTO r VALUES (1, 'a'), (2, 'bb'), (3, 'ccc')")
        assert wait_for(lambda: _on(at_cloud, "SELECT k, v FROM long_v") == [(2, "bb"), (3, "ccc")], timeout=120)
        at_edge.execute("UPDATE r SET v = 'aaaa' WHERE k = 1")
        at_edge.execute("DELETE FROM r WHERE k = 3")
        assert wait_for(lambda: _on(at_cloud, "SELECT k, v FROM long_v") == [(1, "aaaa"), (2, "bb")], timeout=120)
        assert _on(at_cloud, "SELECT k, v FROM r") == [(1, "aaaa"), (2, "bb")]

        at_cloud.call(cloud.insert_many, "r", [(4, "dd")])  # a local write at the Spark site: pulled by the edge
        assert wait_for(lambda: _on(at_edge, "SELECT k, v FROM r") == [(1, "aaaa"), (2, "bb"), (4, "dd")], timeout=120)

        assert at_cloud.execute("SELECT count(*) FROM long_v") == [(3,)]  # Spark SQL through the service
        # the edge's merge of row 4 was a change of its own, which the cloud pulls in turn
        assert wait_for(lambda: [c[:3] for c in at_cloud.status()["cursors"]] == [["edge", "r", str(edge.cursor)]],
                        timeout=60)
        status = at_cloud.status()
        assert status["site"] == "cloud" and [p["site"] for p in status["peers"]] == ["edge"]
        assert cloud.peer_cursors() == [("edge", "r", edge.cursor, None)]
    finally:
        at_cloud.stop()
        at_edge.stop()
        edge.close()
        cloud.close()
    again = SparkSite(spark, str(tmp_path / "cloud"))  # what the service merged was committed
    try:
        assert sorted(again.execute("SELECT k, v FROM long_v")) == [(1, "aaaa"), (2, "bb"), (4, "dd")]
        assert again.peer_cursor("edge", "r") == edge.cursor
    finally:
        again.close()


def test_interrupt_stops_a_spark_sites_running_query_and_the_site_goes_on(spark, tmp_path):
    site = SparkSite(spark, str(tmp_path / "s"), site_id="s")
    site.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.insert_many("r", [(1, "a")])
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["rows"] = site.execute("SELECT count(*) FROM range(100000000000) a, r")
        except crr.CrrError as e:
            outcome["error"] = e
    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.time() + 60
    while worker.is_alive() and time.time() < deadline:
        time.sleep(0.5)
        site.interrupt()  # until it lands: between two jobs there is nothing to cancel
    worker.join(60)
    assert not worker.is_alive()
    assert isinstance(outcome.get("error"), crr.SiteError) and "interrupted" in str(outcome["error"])
    assert site.execute("SELECT k, v FROM r") == [(1, "a")]  # the site goes on; the next operation is not cancelled
    site.insert_many("r", [(2, "b")])
    assert sorted(site.execute("SELECT k, v FROM r")) == [(1, "a"), (2, "b")]
    site.close()


def test_an_interrupted_merge_at_a_spark_site_changes_nothing_and_merges_again(spark, tmp_path):
    edge = crr.Site(str(tmp_path / "edge.duckdb"), site_id="edge")
    edge.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
    edge.insert_many("r", [(i, f"v{i}") for i in range(50)])
    cs = edge.changes().to_bytes()
    site = SparkSite(spark, str(tmp_path / "s"), site_id="s")
    site.execute("CREATE REMOTE TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute("CREATE MATERIALIZED VIEW w AS SELECT v FROM r WHERE k < 10")
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = site.merge(cs, track=True)
        except crr.CrrError as e:
            outcome["error"] = e
    worker = threading.Thread(target=run)
    worker.start()
    while worker.is_alive():
        site.interrupt()
        time.sleep(0.05)
    assert isinstance(outcome.get("error"), crr.SiteError) and "interrupted" in str(outcome["error"]), outcome
    assert site.execute("SELECT count(*) FROM r") == [(0,)] and site.execute("SELECT count(*) FROM w") == [(0,)]
    assert site.peer_cursor("edge", "r") == 0 and site.cursor == 0
    site.merge(cs, track=True)
    assert site.execute("SELECT count(*) FROM r") == [(50,)] and site.execute("SELECT count(*) FROM w") == [(10,)]
    assert site.peer_cursor("edge", "r") == edge.cursor
    site.close()
    edge.close()


def test_crr_serve_spark_serves_a_spark_site_that_syncs_with_a_duckdb_serve(spark, tmp_path):
    """The command line end to end: ``crr serve --spark`` holds a Spark site's folder; crr sql and crr
    status reach it through that serve; it pulls a DuckDB serve's rows into its view; after SIGTERM
    the folder holds them."""
    secret = tmp_path / "secret"
    secret.write_text("p" * 40)
    edge, cloud = str(tmp_path / "edge.duckdb"), str(tmp_path / "cloud")
    crr_cmd("sql", "--db", edge, "CREATE REPLICATED TABLE r (k INT PRIMARY KEY, v VARCHAR)")
    edge_proc, edge_address, edge_id = serve(edge, str(secret))
    cloud_proc = subprocess.Popen([*CRR, "serve", "--db", cloud, "--spark", "local[1]", "--site-id", "cloud",
                                   "--spark-conf", "spark.ui.enabled=false", "--listen", "127.0.0.1:0",
                                   "--secret-file", str(secret), "--peer", edge_address, "--pull-interval", "0.5"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = cloud_proc.stdout.readline()
        assert line.startswith("serving site cloud on "), line
        for ddl in ("CREATE REMOTE TABLE r (k INT PRIMARY KEY, v VARCHAR)",
                    "CREATE MATERIALIZED VIEW big AS SELECT k, v FROM r WHERE k > 1"):
            sql(cloud, ddl, str(secret))
        sql(edge, "INSERT INTO r VALUES (1, 'one'), (2, 'two'), (3, 'three')", str(secret))
        assert wait_for(lambda: sorted(sql(cloud, "SELECT k, v FROM big", str(secret))) == [["2", "two"], ["3", "three"]],
                        timeout=120)
        status = json.loads(crr_cmd("status", "--db", cloud, secret=str(secret)))
        assert status["serving"] and status["site"] == "cloud" and status["relations"] == {"r": "remote", "big": "view"}
        assert [p["site"] for p in status["peers"]] == [edge_id]
        assert [c[0] for c in status["cursors"]] == [edge_id] and status["cursors"][0][3] is None
    finally:
        for proc in (cloud_proc, edge_proc):
            proc.terminate()
        assert cloud_proc.wait(60) == 0 and edge_proc.wait(60) == 0
    site = SparkSite(spark, cloud)
    try:
        assert site.site_id == "cloud" and sorted(site.execute("SELECT k, v FROM big")) == [(2, "two"), (3, "three")]
    finally:
        site.close()


def test_crr_serve_spark_refuses_what_cannot_be_a_spark_site_and_crr_sql_explains_its_folder(spark, tmp_path):
    """Checked before Spark starts: a file given as a Spark site's folder, --spark-conf without --spark;
    and crr sql / crr status on a Spark site's folder with no serve say how to reach it."""
    secret = tmp_path / "secret"
    secret.write_text("p" * 40)
    afile = tmp_path / "a.duckdb"
    afile.write_text("")
    for args, said in ((["--db", str(afile), "--spark", "local[1]"], "is a file"),
                       (["--db", str(tmp_path / "x"), "--spark-conf", "a=b"], "give --spark MASTER too"),
                       (["--db", str(tmp_path / "x"), "--spark", "local[1]", "--spark-conf", "novalue"], "KEY=VALUE")):
        proc = subprocess.run([*CRR, "serve", *args, "--secret-file", str(secret)], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and said in proc.stderr, (args, proc.stderr)
    SparkSite(spark, str(tmp_path / "cloud"), site_id="cloud").close()
    for command in (["sql", "--db", str(tmp_path / "cloud"), "SELECT 1"], ["status", "--db", str(tmp_path / "cloud")]):
        proc = subprocess.run([*CRR, *command], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "Spark site's folder" in proc.stderr and "--spark" in proc.stderr, proc.stderr
