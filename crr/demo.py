"""The paper's Figure 1 / Table 1 scenario with six sites, run as DuckDB files.

Topology (edges carry changesets in the direction of the arrows)::

    s0 <-> s1          base relation r0(a, b, c), replicated at s0 and s1
    s0 -> s2           r_ab = SELECT a, b FROM r0            (view at s2)
    s1 -> s3           r_ab = SELECT a, b FROM r0            (the same view at s3)
    s0, s1 -> s4       r_bc = SELECT b, c FROM r0            (view at s4)
    s2, s3 -> s5       r5 = r_ab JOIN r_bc ON b              (view at s5, over remote r_ab and r_bc)
    s4 -> s5
    s5: per_b = b, count(*), count(DISTINCT a), min(c) over r_ab JOIN r_bc, GROUP BY b (aggregate)
"""

from __future__ import annotations

import os
import tempfile
from typing import Callable

from crr.site import Site

R0 = "CREATE {} TABLE r0 (a VARCHAR, b VARCHAR, c VARCHAR)"
EDGES = [("s0", "s1", "r0"), ("s1", "s0", "r0"), ("s0", "s2", "r0"), ("s1", "s3", "r0"), ("s0", "s4", "r0"),
         ("s1", "s4", "r0"), ("s2", "s5", "r_ab"), ("s3", "s5", "r_ab"), ("s4", "s5", "r_bc")]
SHOW = {"s0": ["r0"], "s1": ["r0"], "s2": ["r_ab"], "s3": ["r_ab"], "s4": ["r_bc"], "s5": ["r5"]}


def prepare_folder(folder: str, names: list[str]) -> None:
    """Create ``folder`` if missing; refuse (UsageError) a path that cannot be a folder or that holds ``names``."""
    from crr.cli import UsageError
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"--dir {folder} is a file, not a folder; give a new or empty folder")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create --dir {folder}: {e.strerror or e}; give a folder that can be created") from None
    left = [n for n in names if os.path.exists(os.path.join(folder, n))]
    if left:
        raise UsageError(f"--dir {folder} already holds {', '.join(left)} (from an earlier run?); "
                         "give a new or empty folder, or remove them")


def build(folder: str) -> dict[str, Site]:
    """Create the six sites of Figure 1 as DuckDB files in ``folder``."""
    sites = {f"s{i}": Site(os.path.join(folder, f"s{i}.duckdb"), site_id=f"s{i}") for i in range(6)}
    for s in ("s0", "s1"):
        sites[s].execute(R0.format("REPLICATED"))
    for s in ("s2", "s3"):
        sites[s].execute(R0.format("REMOTE"))
        sites[s].execute("CREATE MATERIALIZED VIEW r_ab AS SELECT a, b FROM r0")
    sites["s4"].execute(R0.format("REMOTE"))
    sites["s4"].execute("CREATE MATERIALIZED VIEW r_bc AS SELECT b, c FROM r0")
    sites["s5"].execute("CREATE REMOTE TABLE r_ab (a VARCHAR, b VARCHAR)")
    sites["s5"].execute("CREATE REMOTE TABLE r_bc (b VARCHAR, c VARCHAR)")
    sites["s5"].execute("CREATE MATERIALIZED VIEW r5 AS SELECT ab.a, ab.b, bc.c FROM r_ab ab JOIN r_bc bc ON ab.b = bc.b")
    return sites


class Network:
    """Delivers changesets along edges, remembering a cursor per edge (as the sync layer does)."""

    def __init__(self, sites: dict[str, Site], say: Callable[[str], None]) -> None:
        self.sites = sites
        self.cursors: dict[tuple[str, str, str], int] = {}
        self.say = say

    def send(self, src: str, dst: str, rel: str) -> None:
        """Ship what ``src`` changed in ``rel`` since the last delivery on this edge, as bytes."""
        key = (src, dst, rel)
        cs = self.sites[src].changes(since=self.cursors.get(key, 0), relations=[rel])
        data = cs.to_bytes()
        result = self.sites[dst].merge(data)
        self.cursors[key] = cs.cursor
        self.say(f"  {src} -> {dst} ({rel}): {len(data)} bytes, {len(cs)} rows, "
                 f"{'changed' if result.changed else 'nothing new'}")

    def flood(self, edges=EDGES) -> None:
        """Deliver along every edge, twice (so that forwarded changes reach the end of every path)."""
        for _ in range(2):
            for e in edges:
                self.send(*e)


def show(sites: dict[str, Site], say: Callable[[str], None]) -> None:
    """Print every site's relation, as the paper's Table 1 does."""
    for name, rels in SHOW.items():
        for rel in rels:
            rows = sites[name].execute(f"SELECT * FROM {rel} ORDER BY ALL")
            text = ", ".join("<" + ", ".join(map(str, r)) + ">" for r in rows) or "(empty)"
            say(f"  {name}.{rel:5} {text}")


PER_B = ("SELECT ab.b, count(*) AS pairs, count(DISTINCT ab.a) AS a_values, min(bc.c) AS first_c "
         "FROM r_ab ab JOIN r_bc bc ON ab.b = bc.b GROUP BY ab.b")


def show_aggregate(site: Site, say: Callable[[str], None]) -> None:
    """Print the cloud site's aggregate view next to DuckDB's evaluation of its query."""
    rows = site.execute("SELECT * FROM per_b ORDER BY ALL")
    say("  s5.per_b (b, pairs, a_values, first_c): "
        + (", ".join("<" + ", ".join(map(str, r)) + ">" for r in rows) or "(empty)"))
    same = rows == site.execute(f"SELECT * FROM ({PER_B}) ORDER BY ALL")
    say(f"  equal to the query run over s5's inputs: {'yes' if same else 'NO'}")


def run(folder: str | None = None, say: Callable[[str], None] = print) -> dict[str, list[tuple]]:
    """Replay the scenario; returns the final contents of each site's shown relation."""
    with tempfile.TemporaryDirectory(prefix="crr-demo-") as tmp:
        folder = folder or tmp
        prepare_folder(folder, [f"s{i}.duckdb" for i in range(6)])
        sites = build(folder)
        net = Network(sites, say)
        try:
            say(f"Six sites as DuckDB files in {folder}\n")
            say("Step 1: s0 inserts <a1, b1, c1>; changes flow along every edge")
            sites["s0"].execute("INSERT INTO r0 VALUES ('a1', 'b1', 'c1')")
            net.flood()
            show(sites, say)
            say("\nStep 2 (Table 1): s0 inserts <a2, b1, c1>; r_bc keeps <b1, c1> once")
            sites["s0"].execute("INSERT INTO r0 VALUES (?, ?, ?)", ["a2", "b1", "c1"])
            net.flood()
            show(sites, say)
            say("\nStep 3 (Table 1): s0 deletes <a2, b1, c1>; <b1, c1> stays in r_bc, derived from <a1, b1, c1>")
            sites["s0"].execute("DELETE FROM r0 WHERE a = 'a2'")
            net.flood()
            show(sites, say)
            say("\nStep 4 (section 2, question 2): s0 and s1 are cut off from each other.")
            say("  s0 inserts <a3, b2, c2>; concurrently s1 inserts <a3, b2, c2> and then deletes it.")
            sites["s0"].execute("INSERT INTO r0 VALUES ('a3', 'b2', 'c2')")
            sites["s1"].execute("INSERT INTO r0 VALUES ('a3', 'b2', 'c2')")
            sites["s1"].execute("DELETE FROM r0 WHERE a = 'a3'")
            say("  s4 hears s0 first, then s1; s2 hears s0 and tells s5 before s3 does:")
            net.send("s0", "s4", "r0")
            net.send("s0", "s2", "r0")
            net.send("s2", "s5", "r_ab")
            net.send("s4", "s5", "r_bc")
            show(sites, say)
            say("  now s1's insert+delete reaches s4 and s3, and s3 reaches s5 (question 3):")
            net.send("s1", "s4", "r0")
            net.send("s1", "s3", "r0")
            net.send("s3", "s5", "r_ab")
            net.send("s4", "s5", "r_bc")
            show(sites, say)
            say("\nStep 5: the link s0 <-> s1 heals; every site converges (the deletion wins: cl 2 > 1)")
            net.flood()
            show(sites, say)
            say("\nStep 6: the cloud site s5 declares an aggregate view over the inputs it holds;")
            say("  every site declaring it over the same inputs shows the same groups")
            sites["s5"].execute(f"CREATE MATERIALIZED VIEW per_b AS {PER_B}")
            show_aggregate(sites["s5"], say)
            say("  s1 inserts <a4, b1, c3> and <a5, b3, c4>, then s0 deletes <a1, b1, c1>; changes flow:")
            sites["s1"].execute("INSERT INTO r0 VALUES ('a4', 'b1', 'c3'), ('a5', 'b3', 'c4')")
            net.flood()
            sites["s0"].execute("DELETE FROM r0 WHERE a = 'a1'")
            net.flood()
            show_aggregate(sites["s5"], say)
            final = {f"{n}.{r}": sites[n].execute(f"SELECT * FROM {r} ORDER BY ALL")
                     for n, rels in SHOW.items() for r in rels}
            final["s5.per_b"] = sites["s5"].execute("SELECT * FROM per_b ORDER BY ALL")
        finally:
            for s in sites.values():
                s.close()
    return final
