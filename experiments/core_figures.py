"""Figures the core engine issue asks for, measured in one run (medians of several repetitions).

    python -m experiments.core_figures [--repeat N] [--rows N]

1. Single-row INSERT through ``Site.execute`` on a file-backed site versus the same INSERT on a plain
   DuckDB table in a file (both autocommit, durable).
2. Merging one changeset of N inserted tuples into a site holding the replica, a projection view and
   a join view (the paper's R1(A, B, C, D, E) with pi_BC and R1 join R2 on C, |R2| = 1000).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import duckdb
import pyarrow as pa

import crr


def single_row_insert(folder: str, n: int) -> tuple[float, float]:
    """Median seconds of one single-row INSERT: (crr, plain DuckDB)."""
    site = crr.Site(os.path.join(folder, "w.duckdb"))
    site.execute("CREATE REPLICATED TABLE t (a INT, b VARCHAR)")
    plain = duckdb.connect(os.path.join(folder, "plain.duckdb"))
    plain.execute("CREATE TABLE t (a INT, b VARCHAR)")
    crr_t, plain_t = [], []
    for i in range(n):
        t0 = time.perf_counter()
        site.execute("INSERT INTO t VALUES (?, ?)", [i, "x"])
        crr_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        plain.execute("INSERT INTO t VALUES (?, ?)", [i, "x"])
        plain_t.append(time.perf_counter() - t0)
    site.close()
    plain.close()
    return statistics.median(crr_t), statistics.median(plain_t)


def paper_tables(rows: int) -> tuple[pa.Table, pa.Table]:
    """R1 rows (A key; B, C chosen so pi_BC and the join have the paper's sizes) and R2 (1000 rows)."""
    import random
    rnd = random.Random(7)
    r1 = pa.table({"a": list(range(rows)), "b": [rnd.randrange(100) for _ in range(rows)],
                   "c": [rnd.randrange(1590) for _ in range(rows)], "d": [rnd.randrange(10) for _ in range(rows)],
                   "e": ["e%d" % (i % 97) for i in range(rows)]})
    r2 = pa.table({"k": list(range(1000)), "c": [rnd.randrange(1590) for _ in range(1000)]})
    return r1, r2


def merge_big(folder: str, rows: int, repeat: int) -> list[float]:
    """Seconds to merge one changeset of ``rows`` inserts into replica + projection + join view."""
    r1, r2 = paper_tables(rows)
    src = crr.Site(os.path.join(folder, "src.duckdb"), site_id="src")
    src.execute("CREATE REPLICATED TABLE r1 (a INT PRIMARY KEY, b INT, c INT, d INT, e VARCHAR)")
    src.execute("CREATE REPLICATED TABLE r2 (k INT PRIMARY KEY, c INT)")
    src.insert_many("r2", r2)
    base = src.cursor
    src.insert_many("r1", r1)
    cs2 = src.changes(relations=["r2"]).to_bytes()
    cs1 = src.changes(since=base, relations=["r1"]).to_bytes()
    src.close()
    times = []
    for i in range(repeat):
        dst = crr.Site(os.path.join(folder, f"dst{i}.duckdb"), site_id="dst")
        dst.execute("CREATE REPLICATED TABLE r1 (a INT PRIMARY KEY, b INT, c INT, d INT, e VARCHAR)")
        dst.execute("CREATE REPLICATED TABLE r2 (k INT PRIMARY KEY, c INT)")
        dst.execute("CREATE MATERIALIZED VIEW p_bc AS SELECT b, c FROM r1")
        dst.execute("CREATE MATERIALIZED VIEW j AS SELECT r1.a, r1.b, r1.c, r2.k FROM r1 JOIN r2 ON r1.c = r2.c")
        dst.merge(cs2)
        t0 = time.perf_counter()
        dst.merge(cs1)
        times.append(time.perf_counter() - t0)
        if i == 0:
            sizes = [dst.execute(f"SELECT count(*) FROM {v}")[0][0] for v in ("r1", "p_bc", "j")]
            print(f"  sizes after merge: r1={sizes[0]}, p_bc={sizes[1]}, j={sizes[2]}; "
                  f"changeset {len(cs1) / 1e6:.1f} MB")
        dst.close()
    return times


def main() -> None:
    """Print both figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--writes", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        c, p = single_row_insert(folder, args.writes)
        print(f"single-row INSERT, file-backed: crr {c * 1e3:.2f} ms, plain DuckDB {p * 1e3:.2f} ms, "
              f"ratio {c / p:.2f} (median of {args.writes})")
        times = merge_big(folder, args.rows, args.repeat)
        print(f"merge of {args.rows} inserts into replica + projection + join view: median "
              f"{statistics.median(times):.3f} s (runs: {', '.join(f'{t:.3f}' for t in times)})")


if __name__ == "__main__":
    main()
