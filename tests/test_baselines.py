"""The Gupta counting baselines (DuckDB and Spark) against plain DuckDB evaluation.

After every step of inserts and deletes into R1 and R2 (set semantics, R1 keyed by ``a``, R2 by
``k``), a baseline's view must hold exactly the rows of the view's query evaluated by DuckDB, each
with a count equal to its number of derivations. Steps that change R1 and R2 together exercise the
``dR1 x dR2`` part of the delta, which a baseline can drop or count twice.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter

import duckdb
import pyarrow as pa
import pytest

from crr.bench.data import PLAIN_R1, PLAIN_R2, VIEWS
from crr.bench.gupta_duckdb import GuptaDuckDB

needs_spark = pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime (Java 17 is on CI)")

R1Row = tuple[int, int, int, int, str]  # a, b, c, d, e
R2Row = tuple[int, int]  # k, c
Step = tuple[list[R1Row], int, list[R2Row], int]  # R1 rows, R1 sign, R2 rows, R2 sign


def r1_table(rows: list[R1Row]) -> pa.Table:
    """R1 rows as the benchmark hands them to the baselines."""
    cols = list(zip(*rows)) if rows else [[]] * 5
    return pa.table({name: pa.array(list(col), pa.string() if name == "e" else pa.int32())
                     for name, col in zip("abcde", cols)})


def r2_table(rows: list[R2Row]) -> pa.Table:
    """R2 rows as the benchmark hands them to the baselines."""
    cols = list(zip(*rows)) if rows else [[]] * 2
    return pa.table({name: pa.array(list(col), pa.int32()) for name, col in zip("kc", cols)})


def oracle(view: str, r1: list[R1Row], r2: list[R2Row]) -> Counter:
    """Plain DuckDB: each row of the view's query (bag semantics) with its number of derivations."""
    con = duckdb.connect()
    con.execute(PLAIN_R1)
    con.execute(PLAIN_R2)
    for name, table in (("r1", r1_table(r1)), ("r2", r2_table(r2))):
        con.register("x", table)
        con.execute(f"INSERT INTO {name} SELECT * FROM x")
        con.unregister("x")
    rows = con.execute(f"SELECT *, count(*) FROM ({VIEWS[view]}) GROUP BY ALL").fetchall()
    con.close()
    return Counter({tuple(r[:-1]): r[-1] for r in rows})


def assert_matches(g, view: str, r1: dict[int, R1Row], r2: dict[int, R2Row], where: str) -> None:
    """The baseline's view rows are exactly the oracle's rows (as a multiset), with its counts."""
    want = oracle(view, list(r1.values()), list(r2.values()))
    got = Counter(tuple(r.values()) for r in g.contents().to_pylist())
    assert got == Counter(dict.fromkeys(want, 1)), f"{where}: view rows differ from plain DuckDB"
    counted = {tuple(r.values())[:-1]: tuple(r.values())[-1] for r in g.contents(with_counts=True).to_pylist()}
    assert counted == dict(want), f"{where}: derivation counts differ from plain DuckDB"


def drive(g, view: str, r2_start: list[R2Row], steps: list[Step]) -> None:
    """Apply ``steps`` to baseline ``g`` (built over ``r2_start``), checking it after every step."""
    r1: dict[int, R1Row] = {}
    r2 = {row[0]: row for row in r2_start}
    for i, (d1, s1, d2, s2) in enumerate(steps):
        if d1 and d2:
            g.apply_changes(r1_table(d1), s1, r2_table(d2), s2)
        elif d1:
            g.apply(r1_table(d1), s1)  # the benchmark's entry point
        else:
            g.apply_changes(r2_rows=r2_table(d2), r2_sign=s2)
        for rows, sign, state in ((d1, s1, r1), (d2, s2, r2)):
            for row in rows:
                if sign > 0:
                    assert row[0] not in state
                    state[row[0]] = row
                else:
                    assert state.pop(row[0]) == row
        assert_matches(g, view, r1, r2, f"after step {i} ({view})")


def random_steps(seed: int, n: int) -> tuple[list[R2Row], list[Step]]:
    """A start for R2 and ``n`` random steps: inserts of new rows (some reusing deleted keys with new
    values) and deletes of present rows, of R1, of R2, or of both in one step. Few values of ``c`` and
    ``b``, so joins fan out and projected rows have several derivations."""
    rnd = random.Random(seed)
    r1: dict[int, R1Row] = {}
    r2: dict[int, R2Row] = {k: (k, rnd.randrange(4)) for k in range(3)}
    start = list(r2.values())
    next_key = {1: 0, 2: 3}
    freed: dict[int, list[int]] = {1: [], 2: []}

    def change(rel: int, state: dict) -> tuple[list, int]:
        if state and rnd.random() < 0.4:
            doomed = rnd.sample(sorted(state), rnd.randint(1, min(3, len(state))))
            freed[rel].extend(doomed)
            return [state.pop(k) for k in doomed], -1
        rows = []
        for _ in range(rnd.randint(1, 4)):
            if freed[rel] and rnd.random() < 0.5:
                key = freed[rel].pop(rnd.randrange(len(freed[rel])))
            else:
                key, next_key[rel] = next_key[rel], next_key[rel] + 1
            row = ((key, rnd.randrange(3), rnd.randrange(4), rnd.randrange(2), f"e{rnd.randrange(2)}") if rel == 1
                   else (key, rnd.randrange(4)))
            state[key] = row
            rows.append(row)
        return rows, +1

    steps: list[Step] = []
    for _ in range(n):
        what = rnd.choice(("r1", "r1", "r2", "both"))
        d1, s1 = change(1, r1) if what in ("r1", "both") else ([], 1)
        d2, s2 = change(2, r2) if what in ("r2", "both") else ([], 1)
        steps.append((d1, s1, d2, s2))
    return start, steps


# A join on c = 7 where R1 and R2 change in the same step, with every pair of signs. Dropping the
# dR1 x dR2 part of the delta loses (10, k2) in step 0 and keeps (11, k1) in step 1; counting it twice
# gives (10, k2) two derivations in step 0, and the count check (and step 2, which must empty the view) fail.
SAME_STEP_R2 = [(1, 7)]
SAME_STEP: list[Step] = [
    ([(10, 0, 7, 0, "x")], +1, [(2, 7)], +1),  # both insert: (10, 1) and (10, 2)
    ([(11, 1, 7, 1, "y")], +1, [(1, 7)], -1),  # R1 insert, R2 delete: (10, 2) and (11, 2)
    ([(10, 0, 7, 0, "x")], -1, [(2, 7)], -1),  # both delete: empty
    ([(12, 2, 7, 0, "z")], +1, [(3, 7), (4, 7)], +1),  # (11, 3), (11, 4), (12, 3), (12, 4)
    ([(11, 1, 7, 1, "y")], -1, [(5, 7)], +1),  # R1 delete, R2 insert: (12, 3), (12, 4), (12, 5)
]


def _duckdb(view: str, r2: list[R2Row]) -> GuptaDuckDB:
    return GuptaDuckDB(":memory:", view, r2_table(r2))


def test_duckdb_same_step_changes_to_both_inputs():
    """dR1 x dR2 counted exactly once, for every pair of signs."""
    g = _duckdb("join", SAME_STEP_R2)
    drive(g, "join", SAME_STEP_R2, SAME_STEP)
    assert g.rows() == 3
    g.close()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("view", ["join", "project"])
def test_duckdb_random_steps_match_plain_duckdb(view, seed):
    start, steps = random_steps(seed, 40)
    g = _duckdb(view, start)
    drive(g, view, start, steps)
    g.close()


def test_random_steps_cover_what_they_should():
    """The random sequences the tests use contain steps changing both inputs (with each sign pair),
    R1 keys deleted and later reinserted with other values, and joins with several matches."""
    pairs, reused = set(), 0
    for seed in (1, 2, 3, 4):
        start, steps = random_steps(seed, 40)
        seen: dict[int, R1Row] = {}
        for d1, s1, d2, s2 in steps:
            if d1 and d2:
                pairs.add((s1, s2))
            for row in d1 if s1 > 0 else []:
                reused += row[0] in seen and seen[row[0]] != row
                seen[row[0]] = row
    assert pairs == {(1, 1), (1, -1), (-1, 1), (-1, -1)}
    assert reused >= 5


# R1's log in GuptaSpark, folded with a limit of 3 entries: step 2 folds by the limit (insert, delete,
# reinsert of key 0 with other values, in that order), step 4 folds because R2 changes (a delete and
# a reinsert of key 1 in one step). Folding the log out of order loses a reinserted row, which the
# R2 terms of steps 4 and 5 would then miss (every row has c = 0, so every pair joins).
LOG_R2 = [(1, 0), (2, 0)]
LOG_STEPS: list[Step] = [
    ([(0, 0, 0, 0, "p"), (1, 1, 0, 0, "q")], +1, [], 1),
    ([(0, 0, 0, 0, "p")], -1, [], 1),
    ([(0, 2, 0, 1, "r")], +1, [], 1),
    ([(1, 1, 0, 0, "q")], -1, [], 1),
    ([(1, 3, 0, 1, "s")], +1, [(3, 0)], +1),
    ([(0, 2, 0, 1, "r")], -1, [(1, 0)], -1),
]


@needs_spark
def test_spark_matches_plain_duckdb():
    """GuptaSpark: dR1 x dR2 in the same step (three sign pairs), R1's log folded by its limit and by
    R2 changes, and a short random sequence of the projection view with a partly deleted group.
    Few, tiny steps: Spark's per-job latency, not the data, sets this test's time."""
    pytest.importorskip("pyspark")
    from crr.bench.gupta_spark import GuptaSpark
    drive(GuptaSpark("join", r2_table(SAME_STEP_R2)), "join", SAME_STEP_R2, SAME_STEP[:3])
    drive(GuptaSpark("join", r2_table(LOG_R2), log_limit=3), "join", LOG_R2, LOG_STEPS)
    start, steps = random_steps(22, 3)  # (b, c) = (2, 0) gets two derivations, then loses one
    drive(GuptaSpark("project", r2_table(start)), "project", start, steps)


def test_log_steps_on_duckdb():
    """The Spark log sequence is a valid history (and the DuckDB baseline agrees with the oracle on it)."""
    drive(_duckdb("join", LOG_R2), "join", LOG_R2, LOG_STEPS)


def test_paper_run_checks_view_contents(monkeypatch):
    """crr.bench.paper.run compares every algorithm's view rows with plain DuckDB's, not only their
    number: a baseline whose view has the right row count but one wrong row makes the run fail."""
    from crr.bench import paper
    paper.run([200], 100, 1, views=("join",), algorithms=("crr", "gupta-duckdb"))  # agrees: no error

    def off_by_one(self) -> pa.Table:
        t = self.g.contents()
        if t.num_rows == 0:
            return t
        return t.set_column(0, "a", pa.array([t.column("a")[0].as_py() + 1_000_000]
                                             + t.column("a").to_pylist()[1:], pa.int32()))
    monkeypatch.setattr(paper._GuptaDuckDB, "contents", off_by_one)
    with pytest.raises(AssertionError, match="gupta-duckdb's join view differs"):
        paper.run([200], 100, 1, views=("join",), algorithms=("crr", "gupta-duckdb"))


def test_paper_run_runs_only_the_experiments_named(monkeypatch):
    """``--experiments``: records of the named experiments only, and no delete batch applied when no
    delete experiment is named (a 10M-row insert run need not generate or replay 10M deletes)."""
    from crr.bench import paper
    applied = []
    original = paper._Crr.apply

    def counting(self, batch) -> None:
        applied.append(batch.sign)
        original(self, batch)
    monkeypatch.setattr(paper._Crr, "apply", counting)
    records = paper.run([100, 200], 100, 1, algorithms=("crr", "gupta-duckdb"), experiments=("project-insert",))
    assert {(r["experiment"], r["n"], r["algorithm"]) for r in records} == {
        ("project-insert", n, a) for n in (100, 200) for a in ("crr", "gupta-duckdb")}
    assert applied == [1, 1]  # two insert batches into the projection site, no deletes, no join site
    applied.clear()
    records = paper.run([200], 100, 1, algorithms=("crr",), experiments=("join-delete",))
    assert [r["experiment"] for r in records] == ["join-delete"]
    assert applied == [1, 1, -1, -1]  # the inserts the deletes remove, then the deletes
    with pytest.raises(ValueError, match="unknown experiments"):
        paper.run([200], 100, 1, experiments=("project-upsert",))
