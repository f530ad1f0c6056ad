"""Sync through a fault-injecting proxy: every replica and view ends equal to the no-fault result."""

from __future__ import annotations

import random
import time

import crr
from crr.sync.faults import Faults, FaultProxy
from crr.sync.service import SyncService
from tests.test_sync_service import SECRET, rows, wait_for

DDL = ("CREATE REPLICATED TABLE r (a INT, b INT, PRIMARY KEY (a))",)


def _ops(seed: int):
    """Writes at a (keys 0-9) and b (keys 10-19): disjoint keys, so the outcome is timing-free."""
    rnd = random.Random(seed)
    ops = []
    for i in range(60):
        site = rnd.choice("ab")
        k = rnd.randrange(10) + (0 if site == "a" else 10)
        ops.append((site, rnd.choice(["ins", "ins", "upd", "del"]), k, rnd.randrange(100)))
    return ops


def _model(ops) -> list[tuple[int, int]]:
    """The no-fault result: the same writes applied to a plain dict, as SQL would."""
    table: dict[int, int] = {}
    for _, kind, k, v in ops:
        if kind == "ins":
            table.setdefault(k, v)
        elif kind == "upd" and k in table:
            table[k] = v
        elif kind == "del":
            table.pop(k, None)
    return sorted(table.items())


def _apply(service, kind, k, v):
    try:
        if kind == "ins":
            service.execute("INSERT INTO r VALUES (?, ?)", [k, v])
        elif kind == "upd":
            service.execute("UPDATE r SET b = ? WHERE a = ?", [v, k])
        else:
            service.execute("DELETE FROM r WHERE a = ?", [k])
    except crr.ConstraintError:
        pass


def _run(tmp_path, faults: Faults | None, seed: int):
    sites = {n: crr.Site(str(tmp_path / f"{n}.duckdb"), site_id=n) for n in ("a", "b", "v")}
    for n in ("a", "b"):
        sites[n].execute(DDL[0])
    sites["v"].execute("CREATE REMOTE TABLE r (a INT, b INT)")
    sites["v"].execute("CREATE MATERIALIZED VIEW big AS SELECT a FROM r WHERE b >= 50")
    sa = SyncService(sites["a"], SECRET, listen=("127.0.0.1", 0), pull_interval=0.3).start()
    proxy_ab = FaultProxy(sa.address, faults, seed).start()
    sb = SyncService(sites["b"], SECRET, listen=("127.0.0.1", 0), peers=[proxy_ab.address], pull_interval=0.3).start()
    proxy_bv = FaultProxy(sb.address, faults, seed + 1).start()
    sv = SyncService(sites["v"], SECRET, listen=("127.0.0.1", 0), peers=[proxy_bv.address], pull_interval=0.3).start()
    services = {"a": sa, "b": sb}
    try:
        for n, (site, kind, k, v) in enumerate(_ops(seed)):
            _apply(services[site], kind, k, v)
            if n == 20:
                proxy_ab.partition()
            if n == 40:
                proxy_ab.heal(clear_faults=False)
        proxy_ab.heal()
        proxy_bv.heal()
        def settled():
            ra, rb = rows(sa, "SELECT * FROM r ORDER BY a"), rows(sb, "SELECT * FROM r ORDER BY a")
            return ra == rb and rows(sv, "SELECT * FROM r ORDER BY a") == ra
        assert wait_for(settled, 60), "replicas did not converge after the faults healed"
        time.sleep(1.0)
        assert settled()
        base = rows(sa, "SELECT * FROM r ORDER BY a")
        view = rows(sv, "SELECT * FROM big ORDER BY a")
        assert view == [(a,) for a, b in base if b >= 50]
        return base, len(sa.refused) + len(sb.refused) + len(sv.refused)
    finally:
        for s in (sv, sb, sa):
            s.stop()
        proxy_ab.stop()
        proxy_bv.stop()
        for s in sites.values():
            s.close()


def test_faults_converge_to_the_fault_free_result(tmp_path):
    faulty = Faults(drop=0.05, duplicate=0.05, reorder=0.05, delay=0.2, truncate=0.02, max_delay=0.05)
    (tmp_path / "faulty").mkdir()
    result, refused = _run(tmp_path / "faulty", faulty, seed=3)
    assert result == _model(_ops(3))
    assert refused > 0  # the faults were noticed (frames failed authentication) and survived


def test_partition_only(tmp_path):
    assert _run(tmp_path, None, seed=5)[0] == _model(_ops(5))
