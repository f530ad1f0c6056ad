"""Gupta counting on PySpark (local mode): the baseline for large views.

One SparkSession, created once and reused, sized for a small machine: ``local[2]``, 4 shuffle
partitions (:data:`SHUFFLE_PARTITIONS`), Arrow transfers, no UI. Batches reach Spark as Arrow (``createDataFrame`` of a pyarrow
Table, PySpark 4's direct Arrow path: no pandas on the way).

The view is a DataFrame of (columns, cnt); each step unions the signed delta rows onto it,
re-aggregates, drops tuples whose count reached 0, and checkpoints the result locally so that the
view's lineage does not grow from batch to batch. The delta of the join view for a step changing R1
(``dR1``, sign ``s1``) and R2 (``dR2``, sign ``s2``) is Gupta's

    delta(R1 join R2) = s1 * (dR1 join R2) + s2 * (R1' join dR2),   R1' = R1 + s1 * dR1

(the ``s1 * s2 * dR1 join dR2`` term is inside the second term, since it reads R1 after ``dR1``).

The copy of R1 only serves that second term, so it is kept incrementally: a materialised part plus a
log of the batches applied since (inserted rows, and the keys ``a`` of deleted rows), folded into a
new materialised part only when a change to R2 reads R1 (or when the log reaches ``log_limit``
entries, which bounds the plan a later fold builds). A step changing only R1 therefore costs one
view aggregation, and nothing in proportion to R1. R2 is small and re-materialised on each change.
Inputs follow set semantics: inserted rows are new, deleted rows are present (found by key: ``a`` in
R1, ``k`` in R2).
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

_SPARK = None
SHUFFLE_PARTITIONS = 4  # the benchmarks' setting; the test suite sets 2 (tests/conftest.py)
R1_SCHEMA = "a int, b int, c int, d int, e string"
R2_SCHEMA = "k int, c int"


def spark_session():
    """The shared SparkSession (created on first use)."""
    global _SPARK
    if _SPARK is None:
        os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)  # type: ignore[attr-defined]
        from pyspark.sql import SparkSession
        _SPARK = (SparkSession.builder.master("local[2]").appName("crr-bench")
                  .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
                  .config("spark.default.parallelism", str(SHUFFLE_PARTITIONS))
                  .config("spark.driver.memory", "4g")
                  .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                  .config("spark.ui.enabled", "false")
                  .config("spark.ui.showConsoleProgress", "false")
                  .config("spark.sql.adaptive.enabled", "true")
                  .getOrCreate())
        _SPARK.sparkContext.setLogLevel("ERROR")
    return _SPARK


def session_started() -> bool:
    """Whether the shared session is up (:func:`spark_session` was called and not stopped since)."""
    return _SPARK is not None


def stop_spark() -> None:
    """Stop the shared session (at the end of a benchmark run)."""
    global _SPARK
    if _SPARK is not None:
        _SPARK.stop()
        _SPARK = None


class GuptaSpark:
    """A view site maintaining ``project`` (pi_BC R1) or ``join`` (R1 join R2) by counting, on Spark."""

    def __init__(self, view: str, r2: pa.Table, log_limit: int = 256) -> None:
        from pyspark.sql import functions as F
        self.F = F
        self.spark = spark_session()
        self.view = view
        self.log_limit = log_limit
        # the R1 log: (DataFrame, sign, Arrow bytes handed in) per batch since the last fold
        self._log: list[tuple[Any, int, int]] = []
        if view == "project":
            self.keys = ["b", "c"]
            self.v = self.spark.createDataFrame([], "b int, c int, cnt long")
        else:
            self.keys = ["a", "b", "c", "d", "e", "k"]
            self.r2 = self._df(r2).localCheckpoint(eager=True)
            self._r1 = self.spark.createDataFrame([], R1_SCHEMA)
            self.v = self.spark.createDataFrame([], "a int, b int, c int, d int, e string, k int, cnt long")

    def _df(self, rows: pa.Table):
        """A Spark DataFrame of an Arrow table (Arrow all the way)."""
        return self.spark.createDataFrame(rows)

    def apply(self, rows: pa.Table, sign: int) -> None:
        """Maintain the view for one batch of inserted (+1) or deleted (-1) R1 rows."""
        self.apply_changes(rows, sign)

    def apply_changes(self, r1_rows: pa.Table | None = None, r1_sign: int = 1,
                      r2_rows: pa.Table | None = None, r2_sign: int = 1) -> None:
        """Maintain the view for one step changing R1 and/or R2 (sign +1 insert, -1 delete):
        ``s1 * dR1 join R2`` then ``s2 * R1' join dR2`` (see the module docstring)."""
        F = self.F
        terms = []  # (DataFrame of derivations, sign)
        if r1_rows is not None:
            d1 = self._df(r1_rows)
            terms.append((d1 if self.view == "project" else d1.join(self.r2, "c"), r1_sign))
            if self.view == "join":
                self._log.append((d1 if r1_sign > 0 else d1.select("a"), r1_sign,
                                  r1_rows.nbytes if r1_sign > 0 else r1_rows.select(["a"]).nbytes))
        new_r2 = None
        if r2_rows is not None and self.view == "join":
            d2 = self._df(r2_rows)
            # R1' join dR2 (R1 after this step's dR1); the fold is checkpointed by the view's job below
            terms.append((self._r1_now(eager=False).join(d2, "c"), r2_sign))
            new_r2 = self.r2.unionByName(d2) if r2_sign > 0 else self.r2.join(d2.select("k"), "k", "left_anti")
        if terms:
            signed = [src.select(*self.keys, F.lit(sign).cast("long").alias("cnt")) for src, sign in terms]
            merged = self.v
            for part in signed:
                merged = merged.unionByName(part)
            merged = merged.groupBy(*self.keys).agg(F.sum("cnt").alias("cnt")).where(F.col("cnt") != 0)
            self.v = merged.localCheckpoint(eager=True)
        if new_r2 is not None:
            self.r2 = new_r2.localCheckpoint(eager=True)
        if len(self._log) >= self.log_limit:
            self._r1_now(eager=True)

    def _r1_now(self, eager: bool):
        """R1 as of now: fold the log into the materialised part (consecutive inserts become one
        union, consecutive deletes one anti join) and checkpoint it, now if ``eager``, else by the
        first job that reads it (which must come before the next fold, or lineage would chain)."""
        if not self._log:
            return self._r1
        r1 = self._r1
        i = 0
        while i < len(self._log):
            sign = self._log[i][1]
            j = i
            while j < len(self._log) and self._log[j][1] == sign:
                j += 1
            run = self._log[i][0]
            for df, _, _ in self._log[i + 1:j]:
                run = run.unionByName(df)
            r1 = r1.unionByName(run) if sign > 0 else r1.join(run, "a", "left_anti")
            i = j
        self._r1 = r1.localCheckpoint(eager=eager)
        self._log = []
        return self._r1

    def rows(self) -> int:
        """Tuples in the view."""
        return self.v.count()

    def contents(self, with_counts: bool = False) -> pa.Table:
        """The view's rows (column order as in the view's query), with the count column ``cnt`` last
        if ``with_counts``."""
        return self.v.select(*self.keys, *(["cnt"] if with_counts else [])).toArrow()

    def state_parts(self) -> dict[str, tuple[str, int]]:
        """``{name: (role, Arrow bytes)}`` of the counted view and, for the join, the copies of R1
        and R2: ``r1`` is the materialised part, ``r1_log`` the batches held since (as handed in)."""
        parts = {"v": ("view", self.v.toArrow().nbytes)}
        if self.view == "join":
            parts["r1"] = ("input", self._r1.toArrow().nbytes)
            parts["r1_log"] = ("input", sum(nbytes for _, _, nbytes in self._log))
            parts["r2"] = ("input", self.r2.toArrow().nbytes)
        return parts


def warm_up(view: str, r2: pa.Table, steps: list[tuple[pa.Table, int]]) -> None:
    """Run ``steps`` (R1 rows, sign) on a throwaway instance, so that the JVM's warm-up (class
    loading, JIT, code generation) happens before a timed run; the result is discarded."""
    g = GuptaSpark(view, r2)
    for rows, sign in steps:
        g.apply(rows, sign)
    g.rows()
