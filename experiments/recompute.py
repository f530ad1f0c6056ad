"""``crr bench recompute``: incremental maintenance versus full recomputation of a join view.

A site holds R1 (``base`` rows, 1M by default) and R2 replicated, and the view R1 join R2. For each
delta size, a changeset of that many new R1 rows is merged (crr), applied by Gupta counting, or the
view is recomputed from scratch by DuckDB (``CREATE OR REPLACE TABLE v AS <query>`` over the base
tables including the delta). Times are medians over repetitions, each with fresh rows.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Callable

import duckdb

from crr.changeset import Changeset
from crr.site import Site
from crr.bench.data import PLAIN_R1, PLAIN_R2, VIEW_NAMES, VIEWS, ddl, r1_rows, r2_rows
from crr.bench.gupta_duckdb import GuptaDuckDB


def run(base: int, deltas: list[int], repeat: int, progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Return records for crr, gupta-duckdb and recompute-duckdb at each delta size."""
    name = VIEW_NAMES["join"]
    records = []
    with tempfile.TemporaryDirectory(prefix="crr-bench-") as folder:
        progress(f"loading {base} rows into the base site, the view site, Gupta and plain DuckDB")
        src = Site(os.path.join(folder, "src.duckdb"), site_id="src")
        view = Site(os.path.join(folder, "view.duckdb"), site_id="view")
        for stmt in ddl("REPLICATED TABLE"):
            src.execute(stmt)
            view.execute(stmt)
        view.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS['join']}")
        r2 = r2_rows()
        initial = r1_rows(base)
        src.insert_many("r2", r2)
        src.insert_many("r1", initial)
        view.merge(src.changes())
        gupta = GuptaDuckDB(os.path.join(folder, "gupta.duckdb"), "join", r2)
        gupta.apply(initial, +1)
        plain = duckdb.connect(os.path.join(folder, "plain.duckdb"))
        plain.execute(PLAIN_R1)
        plain.execute(PLAIN_R2)
        for table, rows in (("r1", initial), ("r2", r2)):
            plain.register("rows_in", rows)
            plain.execute(f"INSERT INTO {table} SELECT * FROM rows_in")
            plain.unregister("rows_in")
        plain.execute(f"CREATE TABLE v AS {VIEWS['join']}")
        next_key = base
        for d in deltas:
            samples: dict[str, list[float]] = {"crr": [], "gupta-duckdb": [], "recompute-duckdb": []}
            for rep in range(repeat):
                progress(f"delta of {d} rows, repetition {rep + 1}/{repeat}")
                rows = r1_rows(d, start=next_key)
                next_key += d
                before = src.cursor
                src.insert_many("r1", rows)
                cs = Changeset.from_bytes(src.changes(since=before, relations=["r1"]).to_bytes())
                t0 = time.perf_counter()
                view.merge(cs)
                samples["crr"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                gupta.apply(rows, +1)
                samples["gupta-duckdb"].append(time.perf_counter() - t0)
                plain.register("rows_in", rows)
                plain.execute("INSERT INTO r1 SELECT * FROM rows_in")  # the base update itself, not timed
                plain.unregister("rows_in")
                t0 = time.perf_counter()
                plain.execute(f"CREATE OR REPLACE TABLE v AS {VIEWS['join']}")
                samples["recompute-duckdb"].append(time.perf_counter() - t0)
            for algo, ts in samples.items():
                records.append({"experiment": "recompute", "algorithm": algo, "n": d, "base_rows": base,
                                "seconds": statistics.median(ts), "seconds_all": ts})
        check = (view.execute(f"SELECT count(*) FROM {name}")[0][0], plain.execute("SELECT count(*) FROM v").fetchall()[0][0])
        if check[0] != check[1]:
            raise AssertionError(f"view sizes differ after the run: crr {check[0]}, recompute {check[1]}")
        for c in (src, view, gupta):
            c.close()
        plain.close()
    return records
