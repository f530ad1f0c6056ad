"""The paper's worked examples: Table 1, the three questions of section 2, and Table 2."""

from __future__ import annotations

import crr
from crr.demo import build
from tests.conftest import sync


def test_table1_insert_then_delete_propagates(tmp_path):
    sites = build(str(tmp_path))
    try:
        s0 = sites["s0"]
        s0.execute("INSERT INTO r0 VALUES ('a1', 'b1', 'c1')")

        def flow():
            for src, dst, rel in [("s0", "s1", "r0"), ("s0", "s2", "r0"), ("s1", "s3", "r0"), ("s0", "s4", "r0"),
                                  ("s2", "s5", "r_ab"), ("s3", "s5", "r_ab"), ("s4", "s5", "r_bc")]:
                sync(sites[src], sites[dst], rel)

        flow()
        s0.execute("INSERT INTO r0 VALUES ('a2', 'b1', 'c1')")
        flow()
        assert sites["s2"].execute("SELECT * FROM r_ab ORDER BY ALL") == [("a1", "b1"), ("a2", "b1")]
        assert sites["s3"].execute("SELECT * FROM r_ab ORDER BY ALL") == [("a1", "b1"), ("a2", "b1")]
        assert sites["s4"].execute("SELECT * FROM r_bc") == [("b1", "c1")]
        assert sites["s5"].execute("SELECT * FROM r5 ORDER BY ALL") == [("a1", "b1", "c1"), ("a2", "b1", "c1")]
        s0.execute("DELETE FROM r0 WHERE a = 'a2'")
        flow()
        assert sites["s1"].execute("SELECT * FROM r0") == [("a1", "b1", "c1")]
        assert sites["s2"].execute("SELECT * FROM r_ab") == [("a1", "b1")]
        assert sites["s3"].execute("SELECT * FROM r_ab") == [("a1", "b1")]
        # <b1, c1> stays: it is still derived from <a1, b1, c1>
        assert sites["s4"].execute("SELECT * FROM r_bc") == [("b1", "c1")]
        assert sites["s5"].execute("SELECT * FROM r5") == [("a1", "b1", "c1")]
    finally:
        for s in sites.values():
            s.close()


def _r0_site(name: str, kind: str = "REPLICATED") -> crr.Site:
    s = crr.Site(site_id=name)
    s.execute(f"CREATE {kind} TABLE r0 (a VARCHAR, b VARCHAR, c VARCHAR)")
    return s


def test_question1_duplicate_delivery_through_two_replicas():
    s0, s1 = _r0_site("s0"), _r0_site("s1")
    s4 = _r0_site("s4", "REMOTE")
    s4.execute("CREATE MATERIALIZED VIEW r_bc AS SELECT b, c FROM r0")
    s0.execute("INSERT INTO r0 VALUES ('a1', 'b1', 'c1'), ('a2', 'b1', 'c1')")
    sync(s0, s1)
    sync(s0, s4)
    s0.execute("DELETE FROM r0 WHERE a = 'a2'")
    sync(s0, s1)
    sync(s0, s4)  # the deletion arrives from s0 ...
    sync(s1, s4)  # ... and again from s1: no double decrement
    sync(s0, s4)
    assert s4.execute("SELECT * FROM r_bc") == [("b1", "c1")]
    s0.execute("DELETE FROM r0 WHERE a = 'a1'")
    sync(s0, s1)
    sync(s1, s4)
    assert s4.execute("SELECT * FROM r_bc") == []


def test_question2_concurrent_insert_and_insert_delete():
    for order in (("s0", "s1"), ("s1", "s0")):
        s0, s1 = _r0_site("s0"), _r0_site("s1")
        s4 = _r0_site("s4", "REMOTE")
        s4.execute("CREATE MATERIALIZED VIEW r_bc AS SELECT b, c FROM r0")
        s0.execute("INSERT INTO r0 VALUES ('a2', 'b1', 'c1')")
        s1.execute("INSERT INTO r0 VALUES ('a2', 'b1', 'c1')")
        s1.execute("DELETE FROM r0 WHERE a = 'a2'")
        sites = {"s0": s0, "s1": s1}
        for name in order:
            sync(sites[name], s4)
        assert s4.execute("SELECT * FROM r0") == []
        assert s4.execute("SELECT * FROM r_bc") == []
        sync(s1, s0)
        assert s0.execute("SELECT * FROM r0") == []  # cl 2 beats cl 1


def test_question3_view_site_hears_two_upstream_views():
    s0, s1 = _r0_site("s0"), _r0_site("s1")
    s2, s3 = _r0_site("s2", "REMOTE"), _r0_site("s3", "REMOTE")
    for s in (s2, s3):
        s.execute("CREATE MATERIALIZED VIEW r_ab AS SELECT a, b FROM r0")
    s4 = _r0_site("s4", "REMOTE")
    s4.execute("CREATE MATERIALIZED VIEW r_bc AS SELECT b, c FROM r0")
    s5 = crr.Site(site_id="s5")
    s5.execute("CREATE REMOTE TABLE r_ab (a VARCHAR, b VARCHAR)")
    s5.execute("CREATE REMOTE TABLE r_bc (b VARCHAR, c VARCHAR)")
    s5.execute("CREATE MATERIALIZED VIEW r5 AS SELECT x.a, x.b, y.c FROM r_ab x JOIN r_bc y ON x.b = y.b")
    s0.execute("INSERT INTO r0 VALUES ('a1', 'b1', 'c1'), ('a2', 'b1', 'c1')")
    sync(s0, s1)
    sync(s0, s2)
    sync(s0, s4)
    sync(s2, s5)  # s5 hears the insertion of <a2, b1> from s2
    sync(s4, s5)
    assert s5.execute("SELECT * FROM r5 ORDER BY ALL") == [("a1", "b1", "c1"), ("a2", "b1", "c1")]
    s1.execute("DELETE FROM r0 WHERE a = 'a2'")
    sync(s1, s3)
    sync(s3, s5)  # ... and the deletion from s3 only: the causal length says it is deleted
    assert s5.execute("SELECT * FROM r5") == [("a1", "b1", "c1")]
    sync(s2, s5)  # the stale insertion from s2 again changes nothing
    assert s5.execute("SELECT * FROM r5") == [("a1", "b1", "c1")]


def test_table2_provenance_and_valuation():
    s = crr.Site(site_id="p")
    s.execute("CREATE REPLICATED TABLE r (a VARCHAR, b VARCHAR, c VARCHAR)")
    s.execute("CREATE MATERIALIZED VIEW r1 AS SELECT a, b FROM r")
    s.execute("CREATE MATERIALIZED VIEW r2 AS SELECT b, c FROM r")
    s.execute("CREATE MATERIALIZED VIEW r3 AS SELECT r1.a, r2.c FROM r1 JOIN r2 ON r1.b = r2.b")
    s.execute("INSERT INTO r VALUES ('a1', 'b', 'c1'), ('a1', 'b', 'c2'), ('a2', 'b', 'c2')")
    ids = {v: p[0][0] for v, p in s.provenance("r").items()}
    t1, t2, t3 = ids[("a1", "b", "c1")], ids[("a1", "b", "c2")], ids[("a2", "b", "c2")]
    canon = lambda p: sorted(sorted(m) for m in p)  # noqa: E731
    assert canon(s.provenance("r1")[("a1", "b")]) == canon([[t1], [t2]])
    assert canon(s.provenance("r2")[("b", "c2")]) == canon([[t2], [t3]])
    r3 = {k: canon(v) for k, v in s.provenance("r3").items()}
    # the reduced provenance of Table 2's rightmost column
    assert r3[("a1", "c1")] == canon([[t1]])
    assert r3[("a1", "c2")] == canon([[t1, t3], [t2]])
    assert r3[("a2", "c1")] == canon([[t1, t3]])
    assert r3[("a2", "c2")] == canon([[t3]])
    # cl = {t1: 1, t2: 2, t3: 3}
    s.execute("DELETE FROM r WHERE c = 'c2'")
    s.execute("INSERT INTO r VALUES ('a2', 'b', 'c2')")
    cl = dict(s.execute("SELECT id, cl FROM _crr.cl WHERE rel = 'r'"))
    assert (cl[t1], cl[t2], cl[t3]) == (1, 2, 3)
    # in?(t1 t3 + t2) = True: <a1, c2> is present
    assert s.execute("SELECT * FROM r3 ORDER BY ALL") == [("a1", "c1"), ("a1", "c2"), ("a2", "c1"), ("a2", "c2")]
    s.execute("DELETE FROM r WHERE c = 'c1'")  # t1 -> 2: only t3 remains
    assert s.execute("SELECT * FROM r3 ORDER BY ALL") == [("a2", "c2")]
