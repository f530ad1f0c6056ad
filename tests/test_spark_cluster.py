"""A Spark site on a cluster whose executors are separate JVMs (Spark's ``local-cluster`` master).

It takes about a minute (a second SparkSession, in its own process), so it runs only with
``CRR_SPARK_CLUSTER=1``; CI's Spark tests use the shared ``local[2]`` session (tests/test_spark.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")


@pytest.mark.skipif(os.environ.get("CRR_SPARK_CLUSTER") != "1",
                    reason="needs a second SparkSession (a local-cluster master, its own process, about 45 s); "
                           "the suite shares one local[2] session to keep CI under 15 minutes: set CRR_SPARK_CLUSTER=1")
@pytest.mark.skipif(shutil.which("java") is None, reason="PySpark needs Java")
def test_spark_site_on_separate_executor_jvms():
    """Nothing the Spark site runs depends on sharing the driver's JVM or Python process: ids (floats
    through a Python UDF on the executors), the causal-length merge and the views come out as at a
    DuckDB site, and the Spark site's changeset rebuilds the view at a fresh DuckDB site."""
    child = Path(__file__).with_name("spark_cluster_child.py")
    done = subprocess.run([sys.executable, str(child)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(child.parent.parent)})
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert line == "executors=2 rows=228 view_equal=True rebuilt_equal=True", line
