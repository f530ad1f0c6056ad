"""Prototype: crr's projection view maintained by Spark Structured Streaming (issue 10 asks for both models).

The per-batch model is what ``crr.spark.SparkSite`` runs (a few Spark jobs per merge over Parquet state).
This script measures the other model the issue names: stateful streaming operators over a RocksDB state
store, on the paper's project experiment (pi_BC(R1), N inserts into R1, then the same N deleted).

Causal-length semantics as two chained stateful operators, both in append mode (every output is an
event, so each stage is monotone and Spark accepts the chain):

1. keyed by tuple id: state (causal length, b, c); a batch's entries take the maximum, and when the
   id's visibility (odd length) flips it emits ``(b, c, +1 | -1)``;
2. keyed by the view tuple ``(b, c)``: state (count of visible ids, version); when the count crosses
   zero it emits ``(b, c, present, version)``.

The sink appends those events to Parquet; the view is each key's latest event with ``present``. Spark
refuses two chained ``applyInPandasWithState`` operators ("Multiple applyInPandasWithStates are not
supported"), so the chain uses ``transformWithStateInPandas`` (Spark 4), whose state lives in the JVM's
RocksDB store and is read and written per key over a local socket. Each ``run()`` batch is one
``availableNow`` trigger, the streaming analogue of one ``SparkSite.merge``.

Run: ``python -m crr.bench.streaming_prototype --n 300000 --batch 100000`` (needs ``protobuf``, which
PySpark's state API imports). It prints seconds per batch and checks the view row by row against
DuckDB. Measured figures are in the README ("Large views on Spark").
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from typing import Iterator

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .data import r1_rows
from .gupta_spark import spark_session

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
ENTRY_SCHEMA = "id binary, cl long, b int, c int"
FLIP_SCHEMA = "b int, c int, d int"
EVENT_SCHEMA = "b int, c int, present boolean, version long"


def _processors():
    """The two stateful processors (defined here so importing this module does not need pyspark)."""
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class TupleVisibility(StatefulProcessor):
        """Per tuple id: the causal length (max of all entries) and the values; emits visibility flips."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.state = handle.getValueState("tuple", "cl long, b int, c int")

        def handleInputRows(self, key, rows: Iterator[pd.DataFrame], timerValues) -> Iterator[pd.DataFrame]:
            cl, b, c = self.state.get() if self.state.exists() else (0, None, None)
            new = cl
            for pdf in rows:
                new = max(new, int(pdf["cl"].max()))
                if b is None:
                    b, c = int(pdf["b"].iloc[0]), int(pdf["c"].iloc[0])
            if new > cl:
                self.state.update((new, b, c))
                if cl % 2 != new % 2:
                    yield pd.DataFrame({"b": [b], "c": [c], "d": [1 if new % 2 else -1]})

        def close(self) -> None:
            pass

    class ViewMembership(StatefulProcessor):
        """Per view tuple: how many visible ids derive it; emits an event when that crosses zero."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.state = handle.getValueState("alive", "n long, version long")

        def handleInputRows(self, key, rows: Iterator[pd.DataFrame], timerValues) -> Iterator[pd.DataFrame]:
            n, version = self.state.get() if self.state.exists() else (0, 0)
            d = sum(int(pdf["d"].sum()) for pdf in rows)
            if d:
                flipped = (n > 0) != (n + d > 0)
                self.state.update((n + d, version + flipped))
                if flipped:
                    yield pd.DataFrame({"b": [key[0]], "c": [key[1]], "present": [n + d > 0],
                                        "version": [version + 1]})

        def close(self) -> None:
            pass

    return TupleVisibility, ViewMembership


class StreamingProjection:
    """pi_BC(R1) under causal lengths, maintained by a Structured Streaming query over folder ``root``."""

    def __init__(self, spark, root: str) -> None:
        self.spark, self.root = spark, root
        self._batches = 0
        for sub in ("in", "out", "checkpoint"):
            os.makedirs(os.path.join(root, sub), exist_ok=True)
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        tuple_visibility, view_membership = _processors()
        entries = spark.readStream.schema(ENTRY_SCHEMA).option("maxFilesPerTrigger", 1).parquet(self._path("in"))
        flips = entries.groupBy("id").transformWithStateInPandas(tuple_visibility(), FLIP_SCHEMA, "Append", "None")
        self._events = flips.groupBy("b", "c").transformWithStateInPandas(view_membership(), EVENT_SCHEMA,
                                                                          "Append", "None")

    def _path(self, sub: str) -> str:
        return os.path.join(self.root, sub)

    def run(self, rows: pa.Table, cl: int) -> float:
        """Write one batch of causal-length entries of R1 rows (``cl`` 1 inserts, 2 deletes), run one
        trigger over it, and return the trigger's seconds."""
        ids = [hashlib.md5(str(a).encode()).digest() for a in rows.column("a").to_pylist()]
        pq.write_table(pa.table({"id": pa.array(ids, pa.binary()), "cl": pa.array([cl] * rows.num_rows, pa.int64()),
                                 "b": rows.column("b"), "c": rows.column("c")}),
                       os.path.join(self._path("in"), f"{self._batches:08d}.parquet"))
        self._batches += 1
        start = time.perf_counter()
        query = (self._events.writeStream.format("parquet").option("path", self._path("out"))
                 .option("checkpointLocation", self._path("checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()
        return time.perf_counter() - start

    def view(self) -> set[tuple[int, int]]:
        """The view's rows: each (b, c) whose latest event says present."""
        events = self.spark.read.parquet(self._path("out")).toArrow()
        con = duckdb.connect()
        con.register("events", events)
        return set(con.sql("SELECT b, c FROM events GROUP BY b, c HAVING arg_max(present, version)").fetchall())


def measure(n: int, batch: int) -> dict[str, list[float]]:
    """Run the project experiment at ``n`` rows in batches of ``batch``; check the view after inserts
    (against DuckDB's SELECT DISTINCT b, c) and after deletes (empty); return seconds per batch."""
    spark = spark_session()
    with tempfile.TemporaryDirectory(prefix="crr-streaming-") as tmp:
        warm = StreamingProjection(spark, os.path.join(tmp, "warm-up"))  # JVM and Python workers, discarded
        warm.run(r1_rows(1000, start=0), 1)
        shutil.rmtree(os.path.join(tmp, "warm-up"))
        sut = StreamingProjection(spark, os.path.join(tmp, "site"))
        batches = [r1_rows(min(batch, n - s), start=s) for s in range(0, n, batch)]
        seconds = {"insert": [sut.run(rows, 1) for rows in batches]}
        if sut.view() != _distinct_bc(batches):
            raise AssertionError("the streaming view after inserts differs from DuckDB's SELECT DISTINCT b, c")
        seconds["delete"] = [sut.run(rows, 2) for rows in batches]
        if sut.view():
            raise AssertionError("the streaming view is not empty after every row was deleted")
    return seconds


def _distinct_bc(batches: list[pa.Table]) -> set[tuple[int, int]]:
    """pi_BC of the batches' rows, by plain DuckDB."""
    con = duckdb.connect()
    con.register("r1", pa.concat_tables(batches))
    return set(con.sql("SELECT DISTINCT b, c FROM r1").fetchall())


def main(argv: list[str] | None = None) -> None:
    """Command line: ``--n`` rows, ``--batch`` rows per trigger; prints seconds per batch and totals."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=100_000)
    args = parser.parse_args(argv)
    seconds = measure(args.n, args.batch)
    for phase, times in seconds.items():
        print(f"project-{phase} N={args.n:,} batch={args.batch:,}: total {sum(times):.1f} s, median batch "
              f"{statistics.median(times):.1f} s, batches {', '.join(f'{t:.1f}' for t in times)}; view checked")


if __name__ == "__main__":
    main()
