"""Smoke tests of ``crr bench``: each subcommand's --quick run writes well-formed results.

These check shape and consistency only; speed is measured by the benchmark CLI, never asserted.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from crr.cli import main

ALGOS = {"crr", "crr-spark", "gupta-duckdb", "gupta-spark", "recompute-duckdb", "counting-duckdb", "crr (keyed)", "crr (unkeyed)",
         "crr+views (keyed)", "crr+views (unkeyed)", "plain-duckdb"}
ROLES = {"view", "app", "input", "lineage", "other"}


def _run(tmp_path, *args: str) -> dict:
    out = tmp_path / "out.json"
    plot = [] if args[0] in ("writes", "sync") else ["--plot", str(tmp_path / "plots")]  # they draw none
    assert main(["bench", *args, "--quick", "--json", str(out), *plot]) == 0
    doc = json.loads(out.read_text())
    assert doc["command"].startswith("bench ") and doc["machine"]["cpus"] >= 1
    for r in doc["results"]:
        assert r["algorithm"] in ALGOS
        assert isinstance(r["n"], int) and r["n"] > 0
        assert isinstance(r["seconds"], float)  # a measured median is present (its value is not judged)
    return doc


PAPER_EXPERIMENTS = {"project-insert", "project-delete", "join-insert", "join-delete"}


def _paper_checks(doc: dict, algos: set[str], experiments: set[str] = PAPER_EXPERIMENTS) -> None:
    results = doc["results"]
    assert {r["experiment"] for r in results} == experiments
    assert {r["algorithm"] for r in results} == algos
    for r in results:
        assert len(r["seconds_all"]) == doc["params"]["repeat"]
        _state_checks(r)
    top = max(r["n"] for r in results)
    for r in results:
        parts = set(r["state_parts"])
        if r["algorithm"] == "crr":
            # the view's own tables, its APP copy and the lineage's causal lengths are always counted
            assert {"view", "app", "lineage"} <= set(r["state_roles"].values())
            inputs = {name for name, role in r["state_roles"].items() if role == "input"}
            if r["experiment"].startswith("join"):  # R1's and R2's hidden tuples, kept for the join
                assert any('"r1$' in x for x in inputs) and any('"r2$' in x for x in inputs)
                assert all('"r1$' in x or '"r2$' in x for x in inputs)
            else:  # a projection over a remote source keeps no input tuples
                assert not inputs
            assert r["state_bytes"] > 0 and r["view_state_bytes"] > 0  # crr keeps causal lengths after deletes
        elif r["algorithm"] == "crr-spark":  # the same roles, from the Spark site's store
            assert {"view", "app", "lineage"} <= set(r["state_roles"].values())
            inputs = {name for name, role in r["state_roles"].items() if role == "input"}
            assert inputs == ({"m:r1", "m:r2"} if r["experiment"].startswith("join") else set())
        elif r["algorithm"] == "gupta-duckdb":
            assert parts == ({"main.v", "main.r1", "main.r2"} if r["experiment"].startswith("join") else {"main.v"})
        if r["experiment"].endswith("insert") and r["n"] == top and r["algorithm"] != "gupta-spark":
            assert r["file_bytes"] > 0 and 0 < r["file_used_bytes"]
    # every algorithm ends with the same view contents
    sizes = {}
    for r in results:
        sizes.setdefault((r["experiment"], r["n"]), set()).add(r["view_rows"])
    assert all(len(v) == 1 for v in sizes.values())
    assert all(r["view_rows"] == 0 for r in results if r["experiment"].endswith("delete")
               and r["n"] == max(x["n"] for x in results))


def _state_checks(r: dict) -> None:
    """The state fields of one paper record: types, parts summing to the total, roles named."""
    assert isinstance(r["state_bytes"], int) and r["state_bytes"] >= 0
    assert isinstance(r["state_parts"], dict) and r["state_parts"]
    assert all(isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in r["state_parts"].items())
    assert sum(r["state_parts"].values()) == r["state_bytes"]
    assert set(r["state_roles"]) == set(r["state_parts"]) and set(r["state_roles"].values()) <= ROLES
    assert isinstance(r["view_state_bytes"], int) and 0 <= r["view_state_bytes"] <= r["state_bytes"]
    if r["algorithm"] == "gupta-spark":
        assert r["file_bytes"] is None and r["file_used_bytes"] is None
    else:
        assert isinstance(r["file_bytes"], int) and isinstance(r["file_used_bytes"], int)
        assert 0 < r["file_used_bytes"] <= r["file_bytes"]
    assert isinstance(r["view_rows"], int)


def test_bench_paper(tmp_path):
    doc = _run(tmp_path, "paper")
    _paper_checks(doc, {"crr", "gupta-duckdb"})
    plots = sorted((tmp_path / "plots").iterdir())
    assert [p.name for p in plots] == [
        "join-delete.png", "join-insert.png", "paper-grid.png", "project-delete.png", "project-insert.png"]
    for p in plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def _tables(con) -> set[str]:
    """Persistent tables of a connection, named as state parts name them."""
    from crr.bench.state import part_name
    return {part_name(s, t) for s, t in con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()}


def test_state_accounting(tmp_path):
    """Every part names a table of the site; every table a join view site keeps for the view is counted;
    a table the engine might add later is counted too; Gupta's parts are exactly its tables."""
    from crr.site import Site
    from crr.bench.data import VIEWS, ddl, r1_rows, r2_rows
    from crr.bench.gupta_duckdb import GuptaDuckDB
    from crr.bench.state import crr_state, gupta_state

    path = str(tmp_path / "view.duckdb")
    src = Site(site_id="src")
    for stmt in ddl("REPLICATED TABLE", keyed=False):
        src.execute(stmt)
    src.insert_many("r2", r2_rows())
    src.insert_many("r1", r1_rows(300))
    site = Site(path, site_id="view")
    for stmt in ddl("REMOTE SOURCE", keyed=False):
        site.execute(stmt)
    site.execute(f"CREATE MATERIALIZED VIEW j AS {VIEWS['join']}")
    site.merge(src.changes())
    st = crr_state(site, "j", path)
    tables = _tables(site._con)
    assert set(st.parts) <= tables and st.total == sum(st.parts.values())
    counted = {t for t in tables if t.startswith(("_crr.\"j$", '_crr."r1$', '_crr."r2$'))} | {"main.j", "_crr.cl"}
    assert set(st.parts) == counted
    assert st.roles["main.j"] == "app" and st.roles["_crr.cl"] == "lineage"
    assert {st.roles[t] for t in counted if t.startswith('_crr."r')} == {"input"}
    assert st.parts["_crr.cl"] == site._con.sql("SELECT * FROM _crr.cl").to_arrow_table().nbytes
    assert 0 < st.file_used_bytes <= st.file_bytes
    # the joined sources are replicas (crr.replica): each one table of entries and tuples, counted in
    # full; their $m is a view of it, not counted again
    assert '_crr."r2$m"' not in st.parts and '_crr."r1$m"' not in st.parts
    for name, rows in (("r1", 300), ("r2", 1000)):
        e = site._con.sql(f'SELECT * FROM _crr."{name}$e"').to_arrow_table()
        assert e.num_rows == rows and st.parts[f'_crr."{name}$e"'] == e.nbytes
    site._con.execute("CREATE TABLE _crr.future_cache (x BIGINT)")
    site._con.execute("INSERT INTO _crr.future_cache VALUES (1), (2)")
    site._con.execute("CREATE TABLE _crr.future_rows (rel VARCHAR, x BIGINT)")
    site._con.execute("INSERT INTO _crr.future_rows VALUES ('r1', 1), ('elsewhere', 2)")
    st2 = crr_state(site, "j")
    assert st2.roles["_crr.future_cache"] == "other" and st2.roles["_crr.future_rows"] == "lineage"
    assert st2.parts["_crr.future_rows"] == site._con.sql(
        "SELECT * FROM _crr.future_rows WHERE rel = 'r1'").to_arrow_table().nbytes
    site.close()
    src.close()

    g = GuptaDuckDB(str(tmp_path / "gupta.duckdb"), "join", r2_rows())
    g.apply(r1_rows(300), +1)
    gs = gupta_state(g.con, str(tmp_path / "gupta.duckdb"))
    assert set(gs.parts) == _tables(g.con) == {"main.v", "main.r1", "main.r2"}
    assert gs.roles == {"main.v": "view", "main.r1": "input", "main.r2": "input"}
    g.close()


def test_bench_writes(tmp_path):
    doc = _run(tmp_path, "writes")
    kinds = {(r["experiment"], r["algorithm"]) for r in doc["results"]}
    sides = {"crr (keyed)", "crr (unkeyed)", "crr+views (keyed)", "crr+views (unkeyed)", "plain-duckdb"}
    assert kinds == {(f"write-{k}", a) for k in ("insert", "update", "delete") for a in sides}
    assert len(doc["results"]) == 15
    for r in doc["results"]:
        assert isinstance(r["p50"], float) and isinstance(r["p99"], float) and r["p99"] >= r["p50"] > 0
        assert r["views"] == (2 if r["algorithm"].startswith("crr+views") else 0)


def test_bench_writes_sides_take_turns(monkeypatch):
    """Each side runs its statements in turns of ``TURN`` rows, every side once per round, the first
    side moving on by one each round, so the machine's drift reaches every side alike."""
    from crr.bench import writes
    from crr.site import Site
    ran: list[tuple[str, str, int]] = []
    execute = Site.execute

    def recording(self, sql, params=None):
        if sql.split()[0] in ("INSERT", "UPDATE", "DELETE") and params is not None:
            kind, words = sql.split()[0], sql.split()
            ran.append((kind, words[1 if kind == "UPDATE" else 2], params[0] if kind == "INSERT" else params[-1]))
        return execute(self, sql, params)

    monkeypatch.setattr(Site, "execute", recording)
    monkeypatch.setattr(writes, "TURN", 3)
    writes.run(7)
    crr_tables = ["t", "u", "tv", "uv"]
    for kind in ("INSERT", "UPDATE", "DELETE"):
        order = [(table, row) for k, table, row in ran if k == kind and table in crr_tables]
        # rounds of rows 0-2, 3-5, 6; in round n the sides start at the n-th (plain DuckDB, the fifth side, not recorded)
        rounds = [[0, 1, 2], [3, 4, 5], [6]]
        sides = list(writes.SIDES)
        expected = [(writes.SIDES[label][0], row) for n, rows in enumerate(rounds)
                    for label in sides[n % 5:] + sides[:n % 5] if writes.SIDES[label][1] for row in rows]
        assert order == expected, kind


def test_bench_writes_on_tables_holding_rows(tmp_path):
    """``--rows`` loads every side's table first (the views then hold them too: the bench's own check
    compares each view with its query after every kind, and raises if one differs)."""
    doc = _run(tmp_path, "writes", "--rows", "500")
    assert len(doc["results"]) == 15 and {r["rows"] for r in doc["results"]} == {500}
    with pytest.raises(SystemExit):
        main(["bench", "writes", "--rows", "-1"])


def test_bench_merge(tmp_path):
    doc = _run(tmp_path, "merge")
    assert [r["n"] for r in doc["results"]] == [1000, 10000]
    assert all(r["changeset_bytes"] > 0 and r["rows_per_second"] > 0 for r in doc["results"])


def test_bench_recompute(tmp_path):
    doc = _run(tmp_path, "recompute")
    assert {(r["n"], r["algorithm"]) for r in doc["results"]} == {
        (n, a) for n in (1, 100, 1000) for a in ("crr", "gupta-duckdb", "recompute-duckdb")}
    assert all(isinstance(r["base_rows"], int) and len(r["seconds_all"]) == doc["params"]["repeat"]
               for r in doc["results"])
    assert (tmp_path / "plots" / "recompute.png").stat().st_size > 0


def test_bench_aggregate(tmp_path):
    """Every contender, phase and delta size is timed (the run itself checks the three views agree)."""
    doc = _run(tmp_path, "aggregate")
    assert {(r["experiment"], r["n"], r["algorithm"]) for r in doc["results"]} == {
        (f"aggregate-{p}", n, a) for p in ("insert", "delete") for n in (1, 100)
        for a in ("crr", "counting-duckdb", "recompute-duckdb")}
    assert all(r["base_rows"] == 20000 and r["groups"] == 200 and len(r["seconds_all"]) == 2
               for r in doc["results"])
    assert (tmp_path / "plots" / "aggregate.png").stat().st_size > 0


def test_aggregate_counting_baseline_matches_recomputation(tmp_path):
    """The pg_ivm-style baseline is a correct aggregate: inserts and extreme-hitting deletes."""
    import duckdb
    from crr.bench.aggregate import DOOMED, QUERY, Counting, rows
    c = Counting(duckdb.connect(str(tmp_path / "c.duckdb")))
    c.apply(rows(3000, 0, 50, seed=1), +1)
    c.apply(rows(500, 3000, 50, seed=2), +1)
    keys = [k for (k,) in c.con.execute(DOOMED.format(n=120)).fetchall()]
    doomed = c.con.sql(f"SELECT * FROM r WHERE k IN ({', '.join(map(str, keys))})").to_arrow_table()
    c.apply(doomed, -1)
    assert sorted(c.con.execute("SELECT * FROM v").fetchall()) == sorted(c.con.execute(QUERY).fetchall())
    assert c.con.execute("SELECT count(*) FROM v").fetchall()[0][0] == 50


def test_recompute_table_prints_ratio(capsys):
    """The printed table carries recompute / crr for each delta, and the lines for issue 9's targets."""
    from crr.bench import report
    recs = [{"n": n, "algorithm": a, "seconds": s} for n in (1, 1000)
            for a, s in (("crr", 0.01), ("gupta-duckdb", 0.002), ("recompute-duckdb", 0.04))]
    with report.get_console().capture() as cap:
        report.recompute_table(recs, 50000)
    out = cap.get()
    assert "recompute / crr" in out and "4.00x" in out
    assert "delta 1: crr is 4.00x as fast as recomputing (issue 9 target: at least 10x)" in out
    assert "delta 1000: crr is 4.00x" in out


def test_bench_sync(tmp_path):
    doc = _run(tmp_path, "sync")
    lat, heal = doc["results"]
    assert lat["experiment"] == "sync-latency" and lat["p99"] >= lat["p50"] > 0
    assert heal["experiment"] == "sync-reconverge" and heal["wire_bytes"] > 0 and heal["bytes_per_tuple"] > 0


@pytest.mark.skipif(shutil.which("java") is None, reason="PySpark needs a Java runtime (Java 17 is on CI)")
def test_bench_spark(tmp_path):
    pytest.importorskip("pyspark")
    # the join's inserts and deletes (the projection's run in test_bench_paper, and on Spark in
    # tests/test_spark.py): each Spark batch costs seconds, and CI runs the Spark tests on one worker
    from crr.bench import gupta_spark
    spark = gupta_spark.spark_session()  # as the Spark tests run in this process: the run leaves it up
    doc = _run(tmp_path, "spark", "--experiments", "join-insert,join-delete")
    _paper_checks(doc, {"crr", "gupta-duckdb", "gupta-spark", "crr-spark"}, {"join-insert", "join-delete"})
    assert gupta_spark.session_started() and spark.range(3).count() == 3


CRR = [sys.executable, "-m", "crr.cli"]


def _no_runs(monkeypatch) -> None:
    """Make every benchmark fail if it starts: the refusals below must come before any work."""
    from crr.bench import aggregate, merge, paper, recompute, sync_bench, writes

    def ran(*args, **kwargs):
        raise AssertionError("the benchmark ran")
    for module in (aggregate, merge, paper, recompute, sync_bench, writes):
        monkeypatch.setattr(module, "run", ran)


@pytest.mark.parametrize("args, limit", [
    (["paper", "--batch", "99999999999999999999"], "100000000"),
    (["paper", "--sizes", "1000,99999999999999999999"], "100000000"),
    (["merge", "--sizes", "99999999999999999999"], "100000000"),
    (["recompute", "--base", "99999999999999999999"], "100000000"),
    (["aggregate", "--groups", "3000000000"], "100000000"),
    (["writes", "--rows", "99999999999999999999"], "100000000"),
    (["sync", "--partition-rows", "99999999999999999999"], "100000000"),
    (["paper", "--repeat", "1001"], "1000"),
    (["paper", "--sizes", "9" * 5000], "100000000"),  # longer than int() converts
])
def test_bench_refuses_too_large_numbers(args, limit, monkeypatch, capsys):
    """A number beyond what the generated data holds is a usage error naming the limit, not a traceback."""
    _no_runs(monkeypatch)
    with pytest.raises(SystemExit) as e:
        main(["bench", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "too large" in err and f"at most {limit}" in err


def test_bench_refuses_keys_beyond_integer(monkeypatch, capsys):
    """recompute's keys run to --base + --repeat x sum(--deltas), merge's to sum(--sizes): beyond INTEGER,
    refused before any work."""
    _no_runs(monkeypatch)
    assert main(["bench", "recompute", "--base", "100000000", "--deltas", "100000000", "--repeat", "1000"]) == 2
    assert "2147483647" in capsys.readouterr().err
    assert main(["bench", "merge", "--sizes", ",".join(["100000000"] * 22)]) == 2
    assert "2147483647" in capsys.readouterr().err


def test_bench_sizes_must_be_multiples_of_batch(monkeypatch, capsys):
    """paper and spark report after whole batches: a size that is not a multiple of --batch is refused
    before any work (paper.run, which would drop it silently, is never called)."""
    _no_runs(monkeypatch)
    for sub in ("paper", "spark"):
        assert main(["bench", sub, "--sizes", "1500,2000", "--batch", "1000", "--repeat", "1"]) == 2
        err = capsys.readouterr().err
        assert "1500 is not a multiple of --batch 1000" in err and "2000," not in err
        # --quick's sizes (2000,4000 / 10000) against an explicit --batch that divides none of them
        assert main(["bench", sub, "--quick", "--batch", "3000"]) == 2
        assert "of --batch 3000" in capsys.readouterr().err


def test_bench_explicit_options_win_over_quick(monkeypatch, tmp_path):
    """--quick fills in only the options not given: --ops 3 stays 3, --quick's value stands for the rest,
    and with neither the default does."""
    from crr.bench import merge, writes
    calls = []
    monkeypatch.setattr(writes, "run", lambda ops, say, rows: calls.append(("writes", ops, rows)) or [])
    monkeypatch.setattr(merge, "run", lambda sizes, repeat, say: calls.append(("merge", sizes, repeat)) or [])
    out = tmp_path / "w.json"
    assert main(["bench", "writes", "--quick", "--ops", "3", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["params"] == {"ops": 3, "rows": 0, "quick": True}
    assert main(["bench", "merge", "--quick", "--sizes", "1000"]) == 0
    assert main(["bench", "merge", "--repeat", "1"]) == 0
    assert main(["bench", "writes", "--quick"]) == 0
    assert calls == [("writes", 3, 0), ("merge", [1000], 2), ("merge", [1000, 10000, 100000], 1), ("writes", 30, 0)]


@pytest.mark.parametrize("sub", ["writes", "sync"])
def test_bench_without_plots_refuses_plot(sub, monkeypatch, tmp_path, capsys):
    """writes and sync draw no plots: --plot is refused (exit 2, saying so), not accepted and ignored;
    their --help does not offer it."""
    _no_runs(monkeypatch)
    assert main(["bench", sub, "--quick", "--plot", str(tmp_path / "plots")]) == 2
    assert "draws no plots" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", sub, "--help"])
    assert "--plot DIR" not in capsys.readouterr().out


def test_bench_survives_a_closed_pipe(tmp_path):
    """A reader that leaves early (``crr bench ... | head``) is no error: the JSON is written, exit 0.
    stdout is a pipe whose reading end is closed before crr starts, so every write to it fails."""
    out = tmp_path / "bp.json"
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([*CRR, "bench", "paper", "--sizes", "1000", "--repeat", "1", "--experiments",
                               "project-insert", "--json", str(out)], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(out.read_text())["results"]


def test_crr_runs_with_stdout_closed():
    """Importing the bench's report module touches no sys.stdout, which is None when stdout is closed."""
    for args in (["--help"], ["demo", "--help"]):
        proc = subprocess.run(f"{shlex.join([*CRR, *args])} >&-", shell=True, stderr=subprocess.PIPE, text=True,
                              timeout=120)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
