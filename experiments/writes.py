"""``crr bench writes``: single-row local INSERT / UPDATE / DELETE latency.

Through ``Site.execute`` on a file-backed site, versus the same statements on a plain DuckDB table
in the same file and connection (each statement its own durable transaction on both sides).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Callable


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(ops: int, progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Time ``ops`` statements of each kind on both sides; return p50/p99 records."""
    from crr.site import Site
    records = []
    with tempfile.TemporaryDirectory(prefix="crr-bench-") as folder:
        site = Site(os.path.join(folder, "writes.duckdb"))
        site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
        site.execute("CREATE REPLICATED TABLE u (k INTEGER, v VARCHAR)")
        plain = site._con  # the same file and connection, outside crr
        plain.execute("CREATE TABLE plain_t (k INTEGER PRIMARY KEY, v VARCHAR)")
        statements = {
            "insert": "INSERT INTO {t} VALUES (?, ?)",
            "update": "UPDATE {t} SET v = ? WHERE k = ?",
            "delete": "DELETE FROM {t} WHERE k = ?",
        }
        for kind, template in statements.items():
            progress(f"{ops} single-row {kind.upper()}s on each side")
            for label, table, run_one in (
                ("crr (keyed)", "t", lambda sql, p: site.execute(sql, p)),
                ("crr (unkeyed)", "u", lambda sql, p: site.execute(sql, p)),
                ("plain-duckdb", "plain_t", lambda sql, p: plain.execute(sql, p).fetchall()),
            ):
                sql = template.format(t=table)
                samples = []
                for i in range(ops):
                    params = {"insert": [i, "x"], "update": [f"y{i}", i], "delete": [i]}[kind]
                    t0 = time.perf_counter()
                    run_one(sql, params)
                    samples.append(time.perf_counter() - t0)
                records.append({"experiment": f"write-{kind}", "algorithm": label, "n": ops,
                                "seconds": statistics.median(samples), "p50": _pct(samples, 50),
                                "p99": _pct(samples, 99)})
        site.close()
    return records
