"""``crr bench aggregate``: an aggregate view maintained by crr, by counting, and by recomputation.

A replicated table R(k key, g, x) of ``base`` rows (1M by default) in ``groups`` groups (10k) feeds
``SELECT g, COUNT(*), SUM(x), MIN(x), MAX(x) FROM r GROUP BY g``. For each delta size, a base site
first inserts that many new rows, then deletes that many rows chosen to hit group maxima (each
group's largest x first), and the three contenders apply the same change:

* ``crr``: a view site holding R's replica and the aggregate view merges the base site's changeset
  (the merge maintains R's causal lengths, AUG and APP rows, the view's core and its groups);
* ``counting-duckdb``: pg_ivm's scheme on plain DuckDB tables, in one transaction: the base rows are
  written, per-group count/sum/min/max are updated from the delta by one MERGE, MIN/MAX are re-read
  from the base table for the groups whose extreme left, and the view's rows of those groups are
  replaced;
* ``recompute-duckdb``: ``CREATE OR REPLACE TABLE v AS <query>`` after the base rows are written
  (that write is not timed).

Times are medians over repetitions; every repetition ends with all three views compared row by row.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from typing import Callable

import duckdb
import pyarrow as pa

from crr.changeset import Changeset
from crr.site import Site

DDL = "CREATE {kind} r (k BIGINT, g INTEGER, x INTEGER{key})"
QUERY = "SELECT g, count(*) AS n, sum(x) AS s, min(x) AS lo, max(x) AS hi FROM r GROUP BY g"
DOOMED = ("SELECT k FROM (SELECT k, g, row_number() OVER (PARTITION BY g ORDER BY x DESC, k) AS rk FROM r) "
          "ORDER BY rk, g LIMIT {n}")


def rows(n: int, start: int, groups: int, seed: int) -> pa.Table:
    """``n`` rows with keys ``start..start+n-1``, groups uniform on ``0..groups-1``."""
    rnd = random.Random(seed)
    return pa.table({"k": pa.array(range(start, start + n), pa.int64()),
                     "g": pa.array([rnd.randrange(groups) for _ in range(n)], pa.int32()),
                     "x": pa.array([rnd.randrange(1_000_000) for _ in range(n)], pa.int32())})


class Counting:
    """pg_ivm-style counting maintenance of the aggregate on plain DuckDB tables."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        con.execute(DDL.format(kind="TABLE", key=", PRIMARY KEY (k)"))
        con.execute("CREATE TABLE st (g INTEGER, n BIGINT, s HUGEINT, c BIGINT, lo INTEGER, hi INTEGER, stale BOOLEAN)")
        con.execute("CREATE TABLE v (g INTEGER, n BIGINT, s HUGEINT, lo INTEGER, hi INTEGER)")

    def apply(self, delta: pa.Table, sign: int) -> None:
        """Apply inserted (+1) or deleted (-1) rows ``delta`` (k, g, x) in one transaction."""
        con = self.con
        con.register("delta", delta)
        con.begin()
        try:
            if sign > 0:
                con.execute("INSERT INTO r SELECT * FROM delta")
                con.execute("""MERGE INTO st USING (SELECT g, count(*) AS n, sum(x) AS s, count(x) AS c,
                                                            min(x) AS lo, max(x) AS hi FROM delta GROUP BY g) d
                               ON st.g = d.g
                               WHEN MATCHED THEN UPDATE SET n = st.n + d.n, s = st.s + d.s, c = st.c + d.c,
                                    lo = least(st.lo, d.lo), hi = greatest(st.hi, d.hi)
                               WHEN NOT MATCHED THEN INSERT VALUES (d.g, d.n, d.s, d.c, d.lo, d.hi, false)""")
            else:
                con.execute("DELETE FROM r USING delta WHERE r.k = delta.k")
                con.execute("""MERGE INTO st USING (SELECT g, count(*) AS n, sum(x) AS s, count(x) AS c,
                                                            min(x) AS lo, max(x) AS hi FROM delta GROUP BY g) d
                               ON st.g = d.g
                               WHEN MATCHED AND st.n = d.n THEN DELETE
                               WHEN MATCHED THEN UPDATE SET n = st.n - d.n, s = st.s - d.s, c = st.c - d.c,
                                    stale = d.lo <= st.lo OR d.hi >= st.hi""")
                con.execute("""UPDATE st SET lo = m.lo, hi = m.hi, stale = false
                               FROM (SELECT r.g, min(x) AS lo, max(x) AS hi FROM r
                                     SEMI JOIN (SELECT g FROM st WHERE stale) t ON t.g = r.g GROUP BY r.g) m
                               WHERE st.g = m.g""")
            con.execute("DELETE FROM v USING (SELECT DISTINCT g FROM delta) d WHERE v.g = d.g")
            con.execute("""INSERT INTO v SELECT st.g, st.n, st.s, st.lo, st.hi FROM st
                           SEMI JOIN (SELECT DISTINCT g FROM delta) d ON d.g = st.g""")
            con.commit()
        except BaseException:
            con.rollback()
            raise
        finally:
            con.unregister("delta")


def _sorted(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=lambda r: r[0])


def run(base: int, groups: int, deltas: list[int], repeat: int,
        progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Return one record per (phase, delta size, contender)."""
    records = []
    with tempfile.TemporaryDirectory(prefix="crr-bench-") as folder:
        progress(f"loading {base} rows in {groups} groups into the base site, the view site and plain DuckDB")
        src = Site(os.path.join(folder, "src.duckdb"), site_id="src")
        view = Site(os.path.join(folder, "view.duckdb"), site_id="view")
        for site in (src, view):
            site.execute(DDL.format(kind="REPLICATED TABLE", key=", PRIMARY KEY (k)"))
        initial = rows(base, 0, groups, seed=1)
        src.insert_many("r", initial)
        view.merge(src.changes())
        view.execute(f"CREATE MATERIALIZED VIEW v AS {QUERY}")
        counting = Counting(duckdb.connect(os.path.join(folder, "counting.duckdb")))
        counting.apply(initial, +1)
        plain = duckdb.connect(os.path.join(folder, "plain.duckdb"))
        plain.execute(DDL.format(kind="TABLE", key=""))
        plain.register("initial", initial)
        plain.execute("INSERT INTO r SELECT * FROM initial")
        plain.unregister("initial")
        next_key = base
        for d in deltas:
            samples: dict[tuple[str, str], list[float]] = {}
            for rep in range(repeat):
                for phase in ("insert", "delete"):
                    progress(f"{phase} of {d} rows, repetition {rep + 1}/{repeat}")
                    if phase == "insert":
                        delta = rows(d, next_key, groups, seed=next_key)
                        next_key += d
                        before = src.cursor
                        src.insert_many("r", delta)
                    else:
                        keys = [k for (k,) in plain.execute(DOOMED.format(n=d)).fetchall()]
                        plain.register("doomed", pa.table({"k": pa.array(keys, pa.int64())}))
                        delta = plain.sql("SELECT r.* FROM r SEMI JOIN doomed USING (k)").to_arrow_table()
                        plain.unregister("doomed")
                        before = src.cursor
                        src.execute(f"DELETE FROM r WHERE k IN ({DOOMED.format(n=d)})")
                    cs = Changeset.from_bytes(src.changes(since=before, relations=["r"]).to_bytes())
                    t0 = time.perf_counter()
                    view.merge(cs)
                    samples.setdefault(("crr", phase), []).append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    counting.apply(delta, +1 if phase == "insert" else -1)
                    samples.setdefault(("counting-duckdb", phase), []).append(time.perf_counter() - t0)
                    plain.register("delta", delta)
                    if phase == "insert":
                        plain.execute("INSERT INTO r SELECT * FROM delta")
                    else:
                        plain.execute("DELETE FROM r USING delta WHERE r.k = delta.k")
                    plain.unregister("delta")
                    t0 = time.perf_counter()
                    plain.execute(f"CREATE OR REPLACE TABLE v AS {QUERY}")
                    samples.setdefault(("recompute-duckdb", phase), []).append(time.perf_counter() - t0)
                    want = _sorted(plain.execute("SELECT * FROM v").fetchall())
                    for name, got in (("crr", view.execute("SELECT * FROM v")),
                                      ("counting-duckdb", counting.con.execute("SELECT * FROM v").fetchall())):
                        if _sorted(got) != want:
                            raise AssertionError(f"{name}'s view differs from recomputation after a {phase} of {d} rows")
            for (algo, phase), ts in samples.items():
                records.append({"experiment": f"aggregate-{phase}", "algorithm": algo, "n": d, "base_rows": base,
                                "groups": groups, "seconds": statistics.median(ts), "seconds_all": ts})
        for s in (src, view):
            s.close()
        counting.con.close()
        plain.close()
    return records
