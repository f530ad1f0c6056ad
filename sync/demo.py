"""``crr demo --network``: the Figure 1 topology as six ``crr serve`` processes on loopback.

Every link goes through a :class:`crr.sync.faults.FaultProxy`, so the demo can cut links (partition) and
restore them. Statements reach each process through its control channel, as ``crr sql`` does.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable

from crr.demo import R0, SHOW, prepare_folder
from crr.errors import CrrError
from crr.site import Site
from crr.sync.commands import check_socket_path
from crr.sync.control import request
from crr.sync.faults import FaultProxy

# (downstream site, upstream site): the downstream site dials the upstream one and pulls from it
LINKS = [("s1", "s0"), ("s2", "s0"), ("s3", "s1"), ("s4", "s0"), ("s4", "s1"), ("s5", "s2"), ("s5", "s3"), ("s5", "s4")]
DDL = {
    "s0": [R0.format("REPLICATED")], "s1": [R0.format("REPLICATED")],
    "s2": [R0.format("REMOTE"), "CREATE MATERIALIZED VIEW r_ab AS SELECT a, b FROM r0"],
    "s3": [R0.format("REMOTE"), "CREATE MATERIALIZED VIEW r_ab AS SELECT a, b FROM r0"],
    "s4": [R0.format("REMOTE"), "CREATE MATERIALIZED VIEW r_bc AS SELECT b, c FROM r0"],
    "s5": ["CREATE REMOTE TABLE r_ab (a VARCHAR, b VARCHAR)", "CREATE REMOTE TABLE r_bc (b VARCHAR, c VARCHAR)",
           "CREATE MATERIALIZED VIEW r5 AS SELECT ab.a, ab.b, bc.c FROM r_ab ab JOIN r_bc bc ON ab.b = bc.b"],
}


class Cluster:
    """Six serving processes and the proxies between them."""

    def __init__(self, folder: str, say: Callable[[str], None]) -> None:
        self.folder, self.say = folder, say
        self.secret_file = os.path.join(folder, "secret")
        with open(self.secret_file, "w") as f:
            f.write(secrets.token_hex(32))
        self.secret = open(self.secret_file, "rb").read().strip()
        self.procs: dict[str, subprocess.Popen] = {}
        self.address: dict[str, str] = {}
        self.proxies: dict[tuple[str, str], FaultProxy] = {}

    def db(self, site: str) -> str:
        return os.path.join(self.folder, f"{site}.duckdb")

    def start(self) -> None:
        for site, stmts in DDL.items():
            with Site(self.db(site), site_id=site) as s:
                for stmt in stmts:
                    s.execute(stmt)
        for site in ["s0", "s1", "s2", "s3", "s4", "s5"]:  # upstream sites first
            peers = []
            for down, up in LINKS:
                if down == site:
                    host, port = self.address[up].rsplit(":", 1)
                    proxy = FaultProxy((host, int(port))).start()
                    self.proxies[(down, up)] = proxy
                    peers += ["--peer", f"{proxy.address[0]}:{proxy.address[1]}"]
            proc = subprocess.Popen([sys.executable, "-m", "crr.cli", "serve", "--db", self.db(site), "--listen",
                                     "127.0.0.1:0", "--secret-file", self.secret_file, "--pull-interval", "1",
                                     "--log-level", "WARNING", *peers], stdout=subprocess.PIPE, text=True)
            line = proc.stdout.readline()
            if not line.startswith("serving"):
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                raise CrrError(f"crr serve for {site} did not start (exit code {proc.returncode}; its error is above)")
            self.procs[site] = proc
            self.address[site] = line.split()[-1]
            self.say(f"  {site} serving on {self.address[site]} (pid {proc.pid})")

    def sql(self, site: str, statement: str) -> list:
        return request(self.db(site), self.secret, {"t": "sql", "sql": statement})["rows"]

    def show(self) -> dict[str, list]:
        out = {}
        for site, rels in SHOW.items():
            for rel in rels:
                rows = self.sql(site, f"SELECT * FROM {rel} ORDER BY ALL")
                out[f"{site}.{rel}"] = rows
                text = ", ".join("<" + ", ".join(map(str, r)) + ">" for r in rows) or "(empty)"
                self.say(f"  {site}.{rel:5} {text}")
        return out

    def settle(self, expected: dict[str, list], timeout: float = 30) -> bool:
        end = time.time() + timeout
        while time.time() < end:
            if all(self.sql(k.split(".")[0], f"SELECT * FROM {k.split('.')[1]} ORDER BY ALL") == v
                   for k, v in expected.items()):
                return True
            time.sleep(0.2)
        return False

    def cut(self, a: str, b: str) -> None:
        for key in ((a, b), (b, a)):
            if key in self.proxies:
                self.proxies[key].partition()

    def restore(self, a: str, b: str) -> None:
        for key in ((a, b), (b, a)):
            if key in self.proxies:
                self.proxies[key].heal()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for proxy in self.proxies.values():
            proxy.stop()


def expected(rows: list[tuple[str, str, str]]) -> dict[str, list]:
    """What every site shows once it has all updates of a base state ``rows``."""
    ab = sorted({(a, b) for a, b, _ in rows})
    bc = sorted({(b, c) for _, b, c in rows})
    r5 = sorted({(a, b, c) for a, b in ab for b2, c in bc if b == b2})
    return {"s0.r0": sorted(rows), "s1.r0": sorted(rows), "s2.r_ab": ab, "s3.r_ab": ab, "s4.r_bc": bc,
            "s5.r5": r5}  # rows are tuples, as crr sql through a serve gives them


def run(folder: str | None = None, say: Callable[[str], None] = print) -> bool:
    """Run the networked demo; returns whether every step converged."""
    with tempfile.TemporaryDirectory(prefix="crr-netdemo-") as tmp:
        folder = folder or tmp
        check_socket_path(os.path.join(folder, "s0.duckdb"), fix="give a --dir with a shorter path")
        prepare_folder(folder, [f"s{i}.duckdb" for i in range(6)] + ["secret"])
        cluster = Cluster(folder, say)
        ok = True
        try:
            say("Starting six crr serve processes (Figure 1), every link through a proxy:")
            cluster.start()
            say("\nStep 1: s0 inserts <a1, b1, c1> and <a2, b1, c1>; peers are notified and pull")
            t0 = time.time()
            cluster.sql("s0", "INSERT INTO r0 VALUES ('a1', 'b1', 'c1'), ('a2', 'b1', 'c1')")
            state = [("a1", "b1", "c1"), ("a2", "b1", "c1")]
            ok &= cluster.settle(expected(state))
            say(f"  converged everywhere in {time.time() - t0:.2f} s")
            cluster.show()
            say("\nStep 2: the links s0-s1 and s0-s2 are cut. Concurrently:")
            say("  s0 inserts <a3, b2, c2>; s1 inserts <a3, b2, c2>, deletes it, and deletes <a2, b1, c1>")
            cluster.cut("s0", "s1")
            cluster.cut("s2", "s0")
            cluster.sql("s0", "INSERT INTO r0 VALUES ('a3', 'b2', 'c2')")
            cluster.sql("s1", "INSERT INTO r0 VALUES ('a3', 'b2', 'c2')")
            cluster.sql("s1", "DELETE FROM r0 WHERE a IN ('a3', 'a2')")
            time.sleep(3)
            cluster.show()
            say("\nStep 3: the links are restored; every site converges (s1's delete of <a3, ...> wins: cl 2 > 1)")
            t0 = time.time()
            cluster.restore("s0", "s1")
            cluster.restore("s2", "s0")
            final = [("a1", "b1", "c1")]
            ok &= cluster.settle(expected(final))
            say(f"  converged everywhere in {time.time() - t0:.2f} s")
            cluster.show()
        finally:
            cluster.stop()
        say("\nAll sites converged." if ok else "\nSome site did NOT converge in time.")
        return ok
