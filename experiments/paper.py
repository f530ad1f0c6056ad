"""``crr bench paper``: the paper's four experiments (section 9), crr against Gupta counting.

For each view (pi_BC R1, and R1 join R2 with |R2| = 1000) a view site receives the stream of a base
site: first ``max(sizes)`` inserts into R1, then deletes of ``max(sizes)`` of those rows, in batches.
crr's view site declares R1 and R2 as remote sources (no readable copy; their tuples are kept, hidden,
only where a view joins them, as in the paper) and merges the changesets; Gupta's view site
applies the same rows by counting. Every side runs against its own DuckDB file. Only the view
sites' work is timed. The time for N is the time to process the first N inserts (or deletes) of
the stream; state and file sizes are measured (see :mod:`crr.bench.state`) at each N in the first
repetition, outside the timed region (the CHECKPOINT that file sizes need is not timed either).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Callable

import duckdb
import pyarrow as pa

from crr.site import Site
from crr.bench.data import EXPERIMENTS, PLAIN_R1, PLAIN_R2, VIEW_NAMES, VIEWS, ddl, r1_rows, r2_rows
from crr.bench.gupta_duckdb import GuptaDuckDB
from crr.bench.state import CRR_NARROW, GUPTA_NARROW, State, crr_state, gupta_state, spark_state
from crr.bench.streams import paper_streams

Progress = Callable[[str], None]


def _crr_site(path: str, view: str, r2_changeset) -> Site:
    site = Site(path, site_id="view")
    for stmt in ddl("REMOTE SOURCE", keyed=False):
        site.execute(stmt)
    site.execute(f"CREATE MATERIALIZED VIEW {VIEW_NAMES[view]} AS {VIEWS[view]}")
    site.merge(r2_changeset)
    return site


class _Crr:
    """crr view site: remote sources R1 and R2, the view, merging changesets."""

    def __init__(self, path: str, view: str, streams) -> None:
        self.site = _crr_site(path, view, streams.r2)
        self.name = VIEW_NAMES[view]
        self.path = path

    def apply(self, batch) -> None:
        self.site.merge(batch.changeset)

    def state(self) -> dict:
        return crr_state(self.site, self.name, self.path).record(CRR_NARROW)

    def rows(self) -> int:
        return self.site.execute(f"SELECT count(*) FROM {self.name}")[0][0]

    def contents(self) -> pa.Table:
        return self.site._con.sql(f"SELECT * FROM {self.name}").to_arrow_table()  # internal: as crr_state reads

    def close(self) -> None:
        self.site.close()


class _GuptaDuckDB:
    def __init__(self, path: str, view: str, streams) -> None:
        self.g = GuptaDuckDB(path, view, streams.r2_rows)
        self.path = path

    def apply(self, batch) -> None:
        self.g.apply(batch.rows, batch.sign)

    def state(self) -> dict:
        return gupta_state(self.g.con, self.path).record(GUPTA_NARROW)

    def rows(self) -> int:
        return self.g.rows()

    def contents(self) -> pa.Table:
        return self.g.contents()

    def close(self) -> None:
        self.g.close()


class _GuptaSpark:
    """Gupta counting on Spark. Construction (not timed) first runs a discarded warm-up on a throwaway
    instance, the first two insert and delete batches of the stream, so the JVM's warm-up stays out of
    the timed batches even with ``--repeat 1``."""

    def __init__(self, path: str, view: str, streams) -> None:
        from crr.bench.gupta_spark import GuptaSpark, warm_up
        warm_up(view, streams.r2_rows, [(b.rows, b.sign) for b in streams.inserts[:2] + streams.deletes[:2]])
        self.g = GuptaSpark(view, streams.r2_rows)

    def apply(self, batch) -> None:
        self.g.apply(batch.rows, batch.sign)

    def state(self) -> dict:
        state = State()
        for name, (role, nbytes) in self.g.state_parts().items():
            state.add(name, role, nbytes)
        return state.record(GUPTA_NARROW)

    def rows(self) -> int:
        return self.g.rows()

    def contents(self) -> pa.Table:
        return self.g.contents()

    def close(self) -> None:
        pass


class _CrrSpark:
    """crr on Spark: a :class:`~crr.spark.SparkSite` view site declared like crr's (remote sources R1
    and R2, the view), merging the same changesets. Construction (not timed) first runs a discarded
    warm-up site over the first insert and delete batches."""

    def __init__(self, path: str, view: str, streams) -> None:
        from crr.bench.gupta_spark import spark_session
        spark = spark_session()
        warm = _crr_spark_site(spark, path + ".warm", view, streams.r2)
        for b in streams.inserts[:1] + streams.deletes[:1]:
            warm.merge(b.changeset)
        warm.close()
        shutil.rmtree(path + ".warm", ignore_errors=True)
        self.site = _crr_spark_site(spark, path + ".spark", view, streams.r2)
        self.name = VIEW_NAMES[view]

    def apply(self, batch) -> None:
        self.site.merge(batch.changeset)

    def state(self) -> dict:
        return spark_state(self.site, self.name).record(CRR_NARROW)

    def rows(self) -> int:
        return self.site.table(self.name).count()

    def contents(self) -> pa.Table:
        return self.site.table(self.name).toArrow()

    def close(self) -> None:
        self.site.close()


def _crr_spark_site(spark, path: str, view: str, r2_changeset):
    from crr.spark import SparkSite
    site = SparkSite(spark, path, site_id="view")
    for stmt in ddl("REMOTE SOURCE", keyed=False):
        site.execute(stmt)
    site.execute(f"CREATE MATERIALIZED VIEW {VIEW_NAMES[view]} AS {VIEWS[view]}")
    site.merge(r2_changeset)
    return site


def expected_contents(streams, view: str) -> dict[str, pa.Table]:
    """``{phase: rows}``: plain DuckDB's evaluation of the view (as a set) over R1 and R2 at the end of
    the stream's insert phase and of its delete phase (deletes matched on whole rows)."""
    con = duckdb.connect()
    con.execute(PLAIN_R1)
    con.execute(PLAIN_R2)
    con.register("x", streams.r2_rows)
    con.execute("INSERT INTO r2 SELECT * FROM x")
    out = {}
    for phase, batches in (("insert", streams.inserts), ("delete", streams.deletes)):
        for b in batches:
            con.register("x", b.rows)
            con.execute("INSERT INTO r1 SELECT * FROM x" if b.sign > 0 else
                        "DELETE FROM r1 WHERE (a, b, c, d, e) IN (SELECT (a, b, c, d, e) FROM x)")
        out[phase] = con.sql(f"SELECT DISTINCT * FROM ({VIEWS[view]})").to_arrow_table()
    con.close()
    return out


def same_rows(got: pa.Table, want: pa.Table) -> bool:
    """Whether two tables have the same column names and the same multiset of rows."""
    if got.column_names != want.column_names:
        return False
    con = duckdb.connect()
    con.register("got", got)
    con.register("want", want)
    differ = con.execute("SELECT (SELECT count(*) FROM (FROM got EXCEPT ALL FROM want)) + "
                         "(SELECT count(*) FROM (FROM want EXCEPT ALL FROM got))").fetchall()[0][0]
    con.close()
    return differ == 0


ALGORITHMS = {"crr": _Crr, "gupta-duckdb": _GuptaDuckDB, "gupta-spark": _GuptaSpark, "crr-spark": _CrrSpark}


def run(sizes: list[int], batch: int, repeat: int, progress: Progress = lambda s: None,
        views: tuple[str, ...] = ("project", "join"),
        algorithms: tuple[str, ...] = ("crr", "gupta-duckdb"), check: bool = True,
        experiments: tuple[str, ...] = EXPERIMENTS) -> list[dict]:
    """Run the experiments; return one record per (experiment, n, algorithm). With ``check``, every
    algorithm's view must hold exactly the rows of a plain DuckDB evaluation of the view at the end
    of each phase of each repetition (checked outside the timed region; AssertionError otherwise).

    Only the ``experiments`` named (of :data:`EXPERIMENTS`) on the ``views`` given are reported; a
    view's inserts always run (its deletes remove them), its deletes only when asked for."""
    unknown = sorted(set(experiments) - set(EXPERIMENTS))
    if unknown:
        raise ValueError(f"unknown experiments {unknown}; choose from {', '.join(EXPERIMENTS)}")
    views = tuple(v for v in views if any(e.startswith(f"{v}-") for e in experiments))
    deletes = any(e.endswith("-delete") for e in experiments)
    total = max(sizes)
    r1, r2 = r1_rows(total), r2_rows()
    progress(f"generating streams: {total} inserts{f' and {total} deletes' if deletes else ''} in batches of {batch}")
    streams = paper_streams(r1, r2, batch, total if deletes else 0)
    checkpoints = sorted(set(sizes))
    times: dict[tuple, list[float]] = {}
    state: dict[tuple, dict] = {}
    rows: dict[tuple, int] = {}
    want = {view: expected_contents(streams, view) for view in views} if check else {}
    with tempfile.TemporaryDirectory(prefix="crr-bench-") as folder:
        for rep in range(repeat):
            for view in views:
                for algo in algorithms:
                    progress(f"repetition {rep + 1}/{repeat}: {view} view, {algo}")
                    site = ALGORITHMS[algo](os.path.join(folder, f"{algo}-{view}-{rep}.duckdb"), view, streams)
                    for phase, batches in (("insert", streams.inserts), ("delete", streams.deletes)):
                        if phase == "delete" and f"{view}-delete" not in experiments:
                            continue
                        elapsed, done = 0.0, 0
                        for b in batches:
                            t0 = time.perf_counter()
                            site.apply(b)
                            elapsed += time.perf_counter() - t0
                            done += b.rows.num_rows
                            if done in checkpoints:
                                key = (f"{view}-{phase}", done, algo)
                                times.setdefault(key, []).append(elapsed)
                                if rep == 0:
                                    state[key] = site.state()
                                    rows[key] = site.rows()
                        if check and not same_rows(site.contents(), want[view][phase]):
                            raise AssertionError(f"{algo}'s {view} view differs from plain DuckDB's evaluation "
                                                 f"after the {phase} phase (repetition {rep + 1})")
                    site.close()
    records = []
    for (experiment, n, algo), ts in sorted(times.items()):
        if experiment not in experiments:
            continue
        records.append({
            "experiment": experiment, "n": n, "batch": batch, "algorithm": algo,
            "seconds": statistics.median(ts), "seconds_min": min(ts), "seconds_max": max(ts),
            "seconds_all": ts, **state[(experiment, n, algo)], "view_rows": rows[(experiment, n, algo)],
        })
    return records
