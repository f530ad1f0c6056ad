"""Run by tests/test_spark_cluster.py in its own process: a SparkSite on a SparkSession whose
executors are separate JVMs (``local-cluster[2,1,1024]``), checked against a DuckDB site."""

import os
import sys
import tempfile

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

import crr  # noqa: E402
from crr.spark import SparkSite  # noqa: E402


def main() -> None:
    """Merge a DuckDB site's changeset (keyed updates, deletes, doubles) into a Spark site on a
    two-executor cluster; its join view and its own changeset must equal the DuckDB site's."""
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").config("spark.sql.shuffle.partitions", "4")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    edge = crr.Site(site_id="edge")
    edge.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, x DOUBLE, s VARCHAR)")
    edge.execute("CREATE REPLICATED TABLE d (k INTEGER, w VARCHAR)")
    edge.execute("CREATE MATERIALIZED VIEW j AS SELECT r.k, r.x, d.w FROM r JOIN d ON r.k = d.k")
    edge.insert_many("r", [(i, i / 3, f"s{i}") for i in range(2000)])
    edge.insert_many("d", [(i, f"w{i}") for i in range(0, 2000, 7)])
    edge.execute("DELETE FROM r WHERE k % 5 = 0")
    edge.execute("UPDATE r SET x = -x WHERE k % 3 = 0")
    want = sorted(edge.execute("SELECT * FROM j"))
    with tempfile.TemporaryDirectory() as tmp:
        cloud = SparkSite(spark, os.path.join(tmp, "cloud"), site_id="cloud")
        cloud.execute("CREATE REMOTE SOURCE r (k INTEGER, x DOUBLE, s VARCHAR, PRIMARY KEY (k))")
        cloud.execute("CREATE REMOTE SOURCE d (k INTEGER, w VARCHAR)")
        cloud.execute("CREATE MATERIALIZED VIEW j AS SELECT r.k, r.x, d.w FROM r JOIN d ON r.k = d.k")
        cloud.merge(edge.changes().to_bytes())
        got = sorted(tuple(row) for row in cloud.table("j").collect())
        fresh = crr.Site(site_id="fresh")
        fresh.execute("CREATE REMOTE TABLE j (k INTEGER, x DOUBLE, w VARCHAR)")
        fresh.merge(cloud.changes(relations=["j"]).to_bytes())
        rebuilt = sorted(fresh.execute("SELECT * FROM j"))
    executors = len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1  # less the driver
    spark.stop()
    print(f"executors={executors} rows={len(want)} view_equal={got == want} rebuilt_equal={rebuilt == want}")


if __name__ == "__main__":
    main()
