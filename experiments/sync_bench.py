"""``crr bench sync``: how fast changes travel between two ``SyncService``s over loopback TCP.

* latency: a single-row INSERT at A until the row is visible at B (B polls its APP table every
  millisecond on its own service thread), median and p99 over ``writes`` writes;
* reconvergence: A and B are partitioned (through a :class:`crr.sync.faults.FaultProxy`), A writes
  ``partition_rows`` rows, the partition heals; time until B has them all;
* wire bytes per changed tuple: bytes through the proxy during that catch-up, per row.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Callable

from crr.site import Site
from crr.bench.data import r1_rows
from crr.sync.faults import FaultProxy
from crr.sync.service import SyncService

SECRET = b"bench-secret-0123456789abcdef"


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def _wait(service: SyncService, sql: str, expected, timeout: float = 120.0) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if service.call(lambda: service.site.execute(sql)) == expected:
            return time.perf_counter() - t0
        time.sleep(0.001)
    raise TimeoutError(f"{sql} did not reach {expected} in {timeout} s")


def run(writes: int, partition_rows: int, progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Return latency, reconvergence and wire-size records."""
    ddl = "CREATE REPLICATED TABLE r1 (a INTEGER, b INTEGER, c INTEGER, d INTEGER, e VARCHAR, PRIMARY KEY (a))"
    with tempfile.TemporaryDirectory(prefix="crr-bench-") as folder:
        a = Site(os.path.join(folder, "a.duckdb"), site_id="a")
        b = Site(os.path.join(folder, "b.duckdb"), site_id="b")
        for s in (a, b):
            s.execute(ddl)
        sa = SyncService(a, SECRET, listen=("127.0.0.1", 0), pull_interval=5).start()
        proxy = FaultProxy(sa.address).start()
        sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[proxy.address], pull_interval=5).start()
        try:
            _wait(sb, "SELECT count(*) FROM r1", [(0,)])
            lat = []
            for i in range(writes):
                progress(f"write {i + 1}/{writes} -> visible at the peer")
                t0 = time.perf_counter()
                sa.execute("INSERT INTO r1 VALUES (?, 1, 1, 1, 'x')", [i])
                _wait(sb, f"SELECT count(*) FROM r1 WHERE a = {i}", [(1,)])
                lat.append(time.perf_counter() - t0)
            progress(f"partition, {partition_rows} writes at A, heal")
            proxy.partition()
            rows = r1_rows(partition_rows, start=writes)
            sa.call(lambda: a.insert_many("r1", rows))
            before = proxy.bytes
            t0 = time.perf_counter()
            proxy.heal()
            _wait(sb, "SELECT count(*) FROM r1", [(writes + partition_rows,)], timeout=300)
            heal = time.perf_counter() - t0
            wire = proxy.bytes - before
        finally:
            sb.stop()
            sa.stop()
            proxy.stop()
            a.close()
            b.close()
    return [
        {"experiment": "sync-latency", "algorithm": "crr", "n": writes, "seconds": statistics.median(lat),
         "p50": _pct(lat, 50), "p99": _pct(lat, 99)},
        {"experiment": "sync-reconverge", "algorithm": "crr", "n": partition_rows, "seconds": heal,
         "wire_bytes": wire, "bytes_per_tuple": wire / partition_rows},
    ]
