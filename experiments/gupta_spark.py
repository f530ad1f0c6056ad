"""Gupta counting on PySpark (local mode): the baseline for large views.

One SparkSession, created once and reused, sized for a small machine: ``local[2]``, 4 shuffle
partitions, Arrow transfers, no UI. The view is a DataFrame of (columns, cnt); each batch adds the
counted delta, re-aggregates, drops tuples whose count reached 0, and is checkpointed locally so
that lineage does not grow from batch to batch.
"""

from __future__ import annotations

import os

import pyarrow as pa

_SPARK = None


def spark_session():
    """The shared SparkSession (created on first use)."""
    global _SPARK
    if _SPARK is None:
        os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)  # type: ignore[attr-defined]
        from pyspark.sql import SparkSession
        _SPARK = (SparkSession.builder.master("local[2]").appName("crr-bench")
                  .config("spark.sql.shuffle.partitions", "4")
                  .config("spark.default.parallelism", "4")
                  .config("spark.driver.memory", "4g")
                  .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                  .config("spark.ui.enabled", "false")
                  .config("spark.ui.showConsoleProgress", "false")
                  .config("spark.sql.adaptive.enabled", "true")
                  .getOrCreate())
        _SPARK.sparkContext.setLogLevel("ERROR")
    return _SPARK


def stop_spark() -> None:
    """Stop the shared session (at the end of a benchmark run)."""
    global _SPARK
    if _SPARK is not None:
        _SPARK.stop()
        _SPARK = None


class GuptaSpark:
    """A view site maintaining ``project`` or ``join`` by counting, on Spark DataFrames."""

    def __init__(self, view: str, r2: pa.Table) -> None:
        from pyspark.sql import functions as F
        self.F = F
        self.spark = spark_session()
        self.view = view
        if view == "project":
            self.keys = ["b", "c"]
            self.v = self.spark.createDataFrame([], "b int, c int, cnt long")
        else:
            self.keys = ["a", "b", "c", "d", "e", "k"]
            self.r2 = self._df(r2).cache()
            self.r1 = self.spark.createDataFrame([], "a int, b int, c int, d int, e string")
            self.v = self.spark.createDataFrame([], "a int, b int, c int, d int, e string, k int, cnt long")

    def _df(self, rows: pa.Table):
        return self.spark.createDataFrame(rows.to_pandas())

    def apply(self, rows: pa.Table, sign: int) -> None:
        """Maintain the view for one batch of inserted (+1) or deleted (-1) R1 rows."""
        F = self.F
        batch = self._df(rows)
        source = batch if self.view == "project" else batch.join(self.r2, "c")
        delta = source.groupBy(*self.keys).agg((F.count("*") * sign).alias("cnt"))
        merged = (self.v.unionByName(delta).groupBy(*self.keys).agg(F.sum("cnt").alias("cnt"))
                  .where(F.col("cnt") != 0))
        self.v = merged.localCheckpoint(eager=True)
        if self.view == "join":
            r1 = self.r1.unionByName(batch) if sign > 0 else self.r1.join(batch.select("a"), "a", "left_anti")
            self.r1 = r1.localCheckpoint(eager=True)

    def rows(self) -> int:
        """Tuples in the view."""
        return self.v.count()

    def state_parts(self) -> dict[str, tuple[str, int]]:
        """``{name: (role, Arrow bytes)}`` of the counted view and the copies of R1 and R2 (join only)."""
        frames = {"v": ("view", self.v)}
        if self.view == "join":
            frames.update({"r1": ("input", self.r1), "r2": ("input", self.r2)})
        return {name: (role, pa.Table.from_pandas(df.toPandas(), preserve_index=False).nbytes)
                for name, (role, df) in frames.items()}
