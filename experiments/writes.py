"""``crr bench writes``: single-row local INSERT / UPDATE / DELETE latency.

Through ``Site.execute`` on a file-backed site, versus the same statements on a plain DuckDB table
in the same file and connection (each statement its own durable transaction on both sides).

Sides (the ``algorithm`` of a record), all tables ``(k INTEGER, v VARCHAR)``:

* ``crr (keyed)``, ``crr (unkeyed)``: replicated tables with and without ``PRIMARY KEY (k)``, no views;
* ``crr+views (keyed)``, ``crr+views (unkeyed)``: the same, each with a projection view
  ``SELECT v FROM t`` and a join view ``SELECT t.k, t.v, d.w FROM t JOIN d ON t.k = d.k`` over it,
  maintained in the write's transaction (``d``: a replicated table of ``ops`` rows, so every written
  row joins one row of ``d``; loaded before timing);
* ``plain-duckdb``: a plain DuckDB table with ``PRIMARY KEY (k)``.

Each kind runs ``ops`` statements on rows ``k = 0 .. ops-1``: INSERT ``(k, 'x')``, then UPDATE
``v = 'y<k>'``, then DELETE, so every statement hits one present row. The sides take turns of
:data:`TURN` statements each (rows ``k`` .. ``k + TURN - 1`` on every side, the first side of a
round moving one on per round), so each side still runs its statement back to back, as an
application writing rows does, while the machine's drift over a run weighs on every side alike:
run one side after another, plain DuckDB's own p50 moved by up to 70% between runs here (stop
64), and the ratios with it. Statements one at a time in turn made plain DuckDB's p50 20-60%
slower (each came after other tables' writes), so the turns are that long. With ``rows`` > 0 every table
(each side's, not ``d``) first holds that many other rows (keys from ``ops`` on, joining nothing), so a
write's cost at a realistic table size shows: crr keeps every table's causal-length entries in one
table, ``_crr.cl``, that a point write probes without an index, as DuckDB does a plain table's rows
when no index serves the filter.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Callable

import pyarrow as pa

STATEMENTS = {
    "insert": ("INSERT INTO {t} VALUES (?, ?)", lambda i: [i, "x"]),
    "update": ("UPDATE {t} SET v = ? WHERE k = ?", lambda i: [f"y{i}", i]),
    "delete": ("DELETE FROM {t} WHERE k = ?", lambda i: [i]),
}
TURN = 10  # statements a side runs before the next side's turn

SIDES = {  # algorithm label -> (table, crr side?)
    "crr (keyed)": ("t", True),
    "crr (unkeyed)": ("u", True),
    "crr+views (keyed)": ("tv", True),
    "crr+views (unkeyed)": ("uv", True),
    "plain-duckdb": ("plain_t", False),
}


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def _setup(site, ops: int, rows: int = 0) -> None:
    """The tables of every side (each holding ``rows`` rows), the views, and the join partner ``d``."""
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute("CREATE REPLICATED TABLE u (k INTEGER, v VARCHAR)")
    site.execute("CREATE REPLICATED TABLE tv (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute("CREATE REPLICATED TABLE uv (k INTEGER, v VARCHAR)")
    site.execute("CREATE REPLICATED TABLE d (k INTEGER PRIMARY KEY, w VARCHAR)")
    site.insert_many("d", [(i, f"w{i}") for i in range(ops)])
    if rows:
        held = pa.table({"k": pa.array(range(ops, ops + rows), pa.int32()), "v": pa.array(["h"] * rows)})
        for table in ("t", "u", "tv", "uv"):
            site.insert_many(table, held)
    for view, sql in VIEWS.items():
        site.execute(f"CREATE MATERIALIZED VIEW {view} AS {sql}")
    site._con.execute("CREATE TABLE plain_t (k INTEGER PRIMARY KEY, v VARCHAR)")  # outside crr
    if rows:
        site._con.execute("INSERT INTO plain_t SELECT range::INTEGER, 'h' FROM range(?, ?)", [ops, ops + rows])


def run(ops: int, progress: Callable[[str], None] = lambda s: None, rows: int = 0) -> list[dict]:
    """Time ``ops`` statements of each kind on every side, each table holding ``rows`` other rows;
    return p50/p99 records."""
    from crr.site import Site
    records = []
    with tempfile.TemporaryDirectory(prefix="crr-bench-") as folder:
        site = Site(os.path.join(folder, "writes.duckdb"))
        if rows:
            progress(f"loading {rows} rows into each table")
        _setup(site, ops, rows)
        plain = site._con  # the same file and connection, outside crr
        labels = list(SIDES)
        for kind, (template, params_of) in STATEMENTS.items():
            progress(f"{ops} single-row {kind.upper()}s on each side, in turns of {TURN}")
            samples: dict[str, list[float]] = {label: [] for label in labels}
            for n, start in enumerate(range(0, ops, TURN)):
                for label in labels[n % len(labels):] + labels[:n % len(labels)]:
                    table, via_crr = SIDES[label]
                    sql = template.format(t=table)
                    for i in range(start, min(ops, start + TURN)):
                        params = params_of(i)
                        t0 = time.perf_counter()
                        if via_crr:
                            site.execute(sql, params)
                        else:
                            plain.execute(sql, params).fetchall()
                        samples[label].append(time.perf_counter() - t0)
            for label in labels:
                records.append({"experiment": f"write-{kind}", "algorithm": label, "n": ops, "rows": rows,
                                "views": 2 if "views" in label else 0, "seconds": statistics.median(samples[label]),
                                "p50": _pct(samples[label], 50), "p99": _pct(samples[label], 99)})
            _check(site, kind)
        site.close()
    return records


VIEWS = {f"{t}_{kind}": sql.format(t=t) for t in ("tv", "uv") for kind, sql in (
    ("proj", "SELECT v FROM {t}"), ("join", "SELECT {t}.k, {t}.v, d.w FROM {t} JOIN d ON {t}.k = d.k"))}


def _check(site, kind: str) -> None:
    """Every view equals its query over the current tables (a benchmark of wrong answers is worthless)."""
    for view, sql in VIEWS.items():
        diff = site._con.execute(f"SELECT count(*) FROM (({sql}) EXCEPT (SELECT * FROM {view})) "
                                 f"UNION ALL SELECT count(*) FROM ((SELECT * FROM {view}) EXCEPT ({sql}))").fetchall()
        if any(n for (n,) in diff):
            raise AssertionError(f"view {view} differs from its query after the {kind}s")
