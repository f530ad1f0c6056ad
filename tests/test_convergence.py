"""Property-based convergence (DESIGN 1.6, guarantees 1 and 2).

Three sites hold replicated tables r and s (unkeyed and keyed variants); a view site V1 holds r and
s as remote tables with views of every SPJR+UNION shape; a second view site V2 holds V1's view
``j2`` and the table s as remote tables (s forwarded through V1 or straight from a base site) with
a view over them. A third view site V3 declares r and s as remote sources: r feeds only
select/project/union views (so V3 keeps no tuples of it), s feeds a self join (so they are kept);
it receives from the base sites and from V1. V4 declares r as a remote source with one selection
over it, the co-located layout (crr/colocated.py); V4s is its standard-layout twin (a second view
over r) and merges every changeset V4 does. Random local writes and random deliveries of changesets
(stale cursors, full snapshots, replays of old changesets, duplicates, any order) run first; then
every edge catches up from its cursor, the program's writes run once more over that state (so each
edge's next batch mixes new rows with deletes and updates of rows its destination holds), every edge
catches up again, and every edge delivers until quiescence. After every delivery into V1 or V2 their
views must equal plain DuckDB's evaluation over the site's own inputs at that moment; at the end, base
replicas must have equal APP and AUG state and every view equal plain DuckDB evaluating its SQL over
the converged base tables. (The catch-up rounds and the per-delivery check were added when a test
that forced crr's append-only path on every batch still passed here.)
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import crr
from tests.conftest import app, aug, plain_duckdb, reference

VIEWS = [
    ("sel", "SELECT a, b FROM r WHERE a >= 1 AND b IS NOT NULL"),
    ("proj", "SELECT b FROM r"),
    ("j2", "SELECT r.a, r.b, s.c FROM r JOIN s ON r.b = s.b"),
    ("j3", "SELECT x.a, z.b AS zb, y.c FROM r x JOIN s y ON x.b = y.b JOIN r z ON z.a = y.c"),
    ("selfj", "SELECT x.a, y.b FROM r x JOIN r y ON x.b = y.a"),
    ("theta", "SELECT r.a, s.c FROM r, s WHERE r.a < s.c"),
    ("uni", "SELECT a AS x FROM r UNION SELECT c FROM s UNION SELECT b + 10 FROM r WHERE a = 0"),
    ("vov", "SELECT a, c FROM j2 WHERE c >= 1"),
]
V2_VIEW = ("far", "SELECT j2.a, s.c FROM j2 JOIN s ON j2.c = s.b")
V3_VIEWS = [
    ("sel", "SELECT a, b FROM r WHERE a >= 1 AND b IS NOT NULL"),
    ("proj", "SELECT b FROM r"),
    ("uni", "SELECT a AS x FROM r UNION SELECT b FROM r WHERE a = 0"),
    ("ss", "SELECT x.b, y.c FROM s x JOIN s y ON x.c = y.b"),
]
V4_VIEW = ("sel", "SELECT a, b FROM r WHERE a >= 1 AND b IS NOT NULL")  # co-located (crr/colocated.py)
BASES = ["A", "B", "C"]
EDGES = ([(x, y, t) for x in BASES for y in BASES if x != y for t in ("r", "s")]
         + [(x, "V1", t) for x in BASES for t in ("r", "s")]
         + [("V1", "V2", "j2"), ("V1", "V2", "s"), ("A", "V2", "s")]
         + [(x, "V3", t) for x in BASES + ["V1"] for t in ("r", "s")]
         + [(x, "V4", "r") for x in BASES])

vals = st.one_of(st.none(), st.integers(0, 3))
ops = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.sampled_from(BASES), st.sampled_from(["r", "s"]), vals, vals),
    st.tuples(st.just("delete"), st.sampled_from(BASES), st.sampled_from(["r", "s"]), st.integers(0, 3), vals),
    st.tuples(st.just("update"), st.sampled_from(BASES), st.sampled_from(["r", "s"]), st.integers(0, 3),
              st.integers(0, 3)),
    st.tuples(st.just("sync"), st.sampled_from(range(len(EDGES))), st.sampled_from(["cursor", "zero", "stale"]),
              st.none(), st.none()),
    st.tuples(st.just("replay"), st.integers(0, 1000), st.none(), st.none(), st.none()),
), min_size=1, max_size=30)


def build(keyed: bool) -> dict[str, crr.Site]:
    sites = {n: crr.Site(site_id=n) for n in BASES + ["V1", "V2", "V3", "V4", "V4s"]}
    key = ", PRIMARY KEY (a)" if keyed else ""
    for n in BASES:
        sites[n].execute(f"CREATE REPLICATED TABLE r (a INT, b INT{key})")
        sites[n].execute("CREATE REPLICATED TABLE s (b INT, c INT)")
    sites["V1"].execute("CREATE REMOTE TABLE r (a INT, b INT)")
    sites["V1"].execute("CREATE REMOTE TABLE s (b INT, c INT)")
    for name, sql in VIEWS:
        sites["V1"].execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    sites["V2"].execute("CREATE REMOTE TABLE j2 (a INT, b INT, c INT)")
    sites["V2"].execute("CREATE REMOTE TABLE s (b INT, c INT)")
    sites["V2"].execute(f"CREATE MATERIALIZED VIEW {V2_VIEW[0]} AS {V2_VIEW[1]}")
    sites["V3"].execute("CREATE REMOTE SOURCE r (a INT, b INT)")
    sites["V3"].execute("CREATE REMOTE SOURCE s (b INT, c INT)")
    for name, sql in V3_VIEWS:
        sites["V3"].execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    assert not sites["V3"].relation("r").stored and sites["V3"].relation("s").stored
    for name in ("V4", "V4s"):
        sites[name].execute("CREATE REMOTE SOURCE r (a INT, b INT)")
        sites[name].execute(f"CREATE MATERIALIZED VIEW {V4_VIEW[0]} AS {V4_VIEW[1]}")
    sites["V4s"].execute("CREATE MATERIALIZED VIEW other AS SELECT b FROM r")
    assert sites["V4"].relation("sel").colocated and not sites["V4s"].relation("sel").colocated
    return sites


def deliver(sites: dict[str, crr.Site], dst: str, data: bytes) -> None:
    """Merge changeset bytes into ``dst`` (and into V4's twin when ``dst`` is V4, then compare them)."""
    sites[dst].merge(data)
    if dst == "V4":
        sites["V4s"].merge(data)
        assert app(sites["V4"], "sel") == app(sites["V4s"], "sel"), "V4's co-located view differs from its twin's"


def run(keyed: bool, program) -> None:
    sites = build(keyed)
    cursors: dict[tuple, list[int]] = {}
    history: list[tuple[str, bytes]] = []  # (destination, changeset bytes)

    def write(op: str, site: crr.Site, table: str, a3, a4) -> None:
        first = "a" if table == "r" else "b"
        second = "b" if table == "r" else "c"
        try:
            if op == "insert":
                site.execute(f"INSERT INTO {table} VALUES (?, ?)", [a3, a4])
            elif op == "delete":
                site.execute(f"DELETE FROM {table} WHERE {first} = ?", [a3])
            else:
                site.execute(f"UPDATE {table} SET {second} = ? WHERE {first} = ?", [a4, a3])
        except crr.ConstraintError:
            pass  # keyed: inserting a visible key with other values, or a NULL key

    def catch_up() -> None:
        """Every edge resumes from its cursor: all that is pending arrives in one batch."""
        for src, dst, rel in EDGES:
            seen = cursors.setdefault((src, dst, rel), [0])
            cs = sites[src].changes(since=seen[-1], relations=[rel])
            deliver(sites, dst, cs.to_bytes())
            seen.append(cs.cursor)
            check_views_over_inputs(sites, dst)

    try:
        for op, a1, a2, a3, a4 in program:
            if op in ("insert", "delete", "update"):
                write(op, sites[a1], a2, a3, a4)
            elif op == "sync":
                src, dst, rel = EDGES[a1]
                seen = cursors.setdefault((src, dst, rel), [0])
                since = {"cursor": seen[-1], "zero": 0, "stale": seen[len(seen) // 2]}[a2]
                cs = sites[src].changes(since=since, relations=[rel])
                data = cs.to_bytes()
                history.append((dst, data))
                deliver(sites, dst, data)
                seen.append(cs.cursor)
                check_views_over_inputs(sites, dst)
            elif op == "replay" and history:
                dst, data = history[a1 % len(history)]
                deliver(sites, dst, data)  # an old changeset arrives again, late
                check_views_over_inputs(sites, dst)
        catch_up()
        # the program's writes once more, over state every site has: each edge's next batch mixes new
        # rows with deletes and updates of rows its destination holds
        for op, a1, a2, a3, a4 in program:
            if op in ("insert", "delete", "update"):
                write(op, sites[a1], a2, a3 if a3 is None else (a3 + 1) % 4, a4)
        catch_up()
        for _ in range(2):  # quiescence: every edge delivers everything, in dependency order
            for src, dst, rel in EDGES:
                deliver(sites, dst, sites[src].changes(relations=[rel]).to_bytes())
        check(sites)
    finally:
        for s in sites.values():
            s.close()


def check_views_over_inputs(sites: dict[str, crr.Site], name: str) -> None:
    """Between deliveries, every view of V1 and V2 equals plain DuckDB's evaluation of its query over
    the site's own current inputs (its remote tables), whatever the site has received so far."""
    if name == "V1":
        inputs, views, checked = {"r": "(a INT, b INT)", "s": "(b INT, c INT)"}, VIEWS, [n for n, _ in VIEWS]
    elif name == "V2":
        inputs, views, checked = {"j2": "(a INT, b INT, c INT)", "s": "(b INT, c INT)"}, [V2_VIEW], [V2_VIEW[0]]
    else:
        return
    site = sites[name]
    with plain_duckdb() as con:  # one database for all of the site's views (this runs after every delivery)
        for table, ddl in inputs.items():
            con.execute(f"CREATE TABLE {table} {ddl}")
            rows = app(site, table)
            if rows:
                con.executemany(f"INSERT INTO {table} VALUES (?, ?{', ?' * (len(rows[0]) - 2)})", rows)
        for view, sql in views:
            con.execute(f"CREATE VIEW {view} AS {sql}")
        for view in checked:
            expected = con.execute(f"SELECT DISTINCT * FROM {view} ORDER BY ALL NULLS FIRST").fetchall()
            assert app(site, view) == expected, f"{name}'s view {view} differs from its query over {name}'s inputs"


def check(sites: dict[str, crr.Site]) -> None:
    a = sites["A"]
    for other in ("B", "C"):
        for t in ("r", "s"):
            assert app(sites[other], t) == app(a, t), f"APP {t} differs between A and {other}"
            assert aug(sites[other], t) == aug(a, t), f"AUG {t} differs between A and {other}"
    base = {"r": app(a, "r"), "s": app(a, "s")}
    schemas = {"r": "(a INT, b INT)", "s": "(b INT, c INT)"}
    assert app(sites["V1"], "r") == base["r"]
    assert app(sites["V1"], "s") == base["s"]
    for name, sql in VIEWS:
        expected = reference(base, schemas, VIEWS[:VIEWS.index((name, sql))], sql)
        assert app(sites["V1"], name) == expected, f"view {name} differs from DuckDB"
    assert app(sites["V2"], "j2") == app(sites["V1"], "j2")
    assert aug(sites["V2"], "j2") == aug(sites["V1"], "j2")
    expected = reference(base, schemas, VIEWS, V2_VIEW[1])
    assert app(sites["V2"], "far") == expected
    for name, sql in V3_VIEWS:
        assert app(sites["V3"], name) == reference(base, schemas, [], sql), f"V3 view {name} differs from DuckDB"
    assert sites["V4"].relation("sel").colocated
    assert app(sites["V4"], "sel") == reference(base, schemas, [], V4_VIEW[1]), "V4's co-located view differs"


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Joined rows reach V1, then rows under them are deleted: ids held by the join views' monomials flip,
# at either position of the monomials' id lists (the random programs rarely get there: a mutation that
# looked up only the first position passed 25 of them; see tests/test_flipped_monomials.py).
A_TO_V1 = {t: EDGES.index(("A", "V1", t)) for t in ("r", "s")}
JOINED_THEN_DELETED = [("insert", "A", "r", a, b) for a, b in ((0, 1), (1, 1), (2, 2), (3, 2))] + [
    ("insert", "A", "s", 1, 2), ("insert", "A", "s", 2, 3),
    ("sync", A_TO_V1["r"], "cursor", None, None), ("sync", A_TO_V1["s"], "cursor", None, None),
    ("delete", "A", "s", 1, None), ("delete", "A", "r", 2, None), ("delete", "A", "r", 1, None),
    ("sync", A_TO_V1["s"], "cursor", None, None), ("sync", A_TO_V1["r"], "cursor", None, None)]


@SETTINGS
@given(ops)
@example(JOINED_THEN_DELETED)
def test_unkeyed_convergence(program):
    run(False, program)


@SETTINGS
@given(ops)
@example(JOINED_THEN_DELETED)
def test_keyed_convergence(program):
    run(True, program)
