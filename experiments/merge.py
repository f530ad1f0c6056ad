"""``crr bench merge``: merge throughput of one changeset of 1k, 10k, 100k inserts.

The receiving site holds the replica of R1 and R2, the projection view pi_BC(R1) and the join view
R1 join R2 (the paper's data); the changeset is decoded from bytes before timing starts.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Callable

from crr.changeset import Changeset
from crr.site import Site
from crr.bench.data import VIEW_NAMES, VIEWS, ddl, r1_rows, r2_rows


def _site(path: str) -> Site:
    site = Site(path, site_id="dst")
    for stmt in ddl("REPLICATED TABLE"):
        site.execute(stmt)
    for view, name in VIEW_NAMES.items():
        site.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[view]}")
    return site


def run(sizes: list[int], repeat: int, progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Return one record per size: median seconds and rows per second."""
    records = []
    with tempfile.TemporaryDirectory(prefix="crr-bench-") as folder:
        src = Site(os.path.join(folder, "src.duckdb"), site_id="src")
        for stmt in ddl("REPLICATED TABLE"):
            src.execute(stmt)
        src.insert_many("r2", r2_rows())
        r2_bytes = src.changes(relations=["r2"]).to_bytes()
        for n in sizes:
            before = src.cursor
            start = src.execute("SELECT coalesce(max(a) + 1, 0) FROM r1")[0][0]
            src.insert_many("r1", r1_rows(n, start=start))
            data = src.changes(since=before, relations=["r1"]).to_bytes()
            times = []
            for rep in range(repeat):
                progress(f"merge of {n} inserts, repetition {rep + 1}/{repeat}")
                dst = _site(os.path.join(folder, f"dst-{n}-{rep}.duckdb"))
                dst.merge(r2_bytes)
                cs = Changeset.from_bytes(data)
                t0 = time.perf_counter()
                dst.merge(cs)
                times.append(time.perf_counter() - t0)
                dst.close()
            med = statistics.median(times)
            records.append({"experiment": "merge", "algorithm": "crr", "n": n, "seconds": med,
                            "seconds_all": times, "rows_per_second": n / med, "changeset_bytes": len(data)})
        src.close()
    return records
