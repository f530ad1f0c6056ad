"""The paper's benchmark data (section 9): R1(A key, B, C, D, E) and R2(K key, C) with |R2| = 1000.

Value distributions (chosen to reproduce the paper's view sizes after 100k inserts into R1):

* ``A`` = 0, 1, 2, ... (the key);
* ``B`` uniform on 0..99 and ``C`` uniform on 0..1429: 100k draws over 143,000 (B, C) cells leave
  about 1 - e^-0.7 = 50% of cells hit, i.e. about 72k distinct (B, C) pairs in pi_BC(R1);
* ``D`` uniform on 0..9, ``E`` a short string;
* ``R2.C`` uniform on 0..1589 over 1000 rows: each R1 row joins on average 1000/1590 = 0.63 rows of
  R2, so R1 join R2 has about 63k tuples after 100k inserts.

Rows are generated from a fixed seed, so every algorithm and repetition sees the same data.
"""

from __future__ import annotations

import random

import pyarrow as pa

R1_DDL = "CREATE {kind} r1 (a INTEGER, b INTEGER, c INTEGER, d INTEGER, e VARCHAR{key})"
R2_DDL = "CREATE {kind} r2 (k INTEGER, c INTEGER{key})"
VIEWS = {
    "project": "SELECT b, c FROM r1",
    "join": "SELECT r1.a, r1.b, r1.c, r1.d, r1.e, r2.k FROM r1 JOIN r2 ON r1.c = r2.c",
}
VIEW_NAMES = {"project": "pi_bc", "join": "r1_join_r2"}  # relation names of the two views
EXPERIMENTS = ("project-insert", "project-delete", "join-insert", "join-delete")  # view-phase, as records name them
PLAIN_R1 = "CREATE TABLE r1 (a INTEGER, b INTEGER, c INTEGER, d INTEGER, e VARCHAR)"
PLAIN_R2 = "CREATE TABLE r2 (k INTEGER, c INTEGER)"


def r1_rows(n: int, start: int = 0, seed: int = 1) -> pa.Table:
    """``n`` rows of R1 with keys ``start .. start+n-1``."""
    rnd = random.Random(seed * 1_000_003 + start)
    return pa.table({
        "a": pa.array(range(start, start + n), pa.int32()),
        "b": pa.array([rnd.randrange(100) for _ in range(n)], pa.int32()),
        "c": pa.array([rnd.randrange(1430) for _ in range(n)], pa.int32()),
        "d": pa.array([rnd.randrange(10) for _ in range(n)], pa.int32()),
        "e": pa.array([f"e{rnd.randrange(1000)}" for _ in range(n)], pa.string()),
    })


def r2_rows(seed: int = 2) -> pa.Table:
    """The 1000 rows of R2."""
    rnd = random.Random(seed)
    return pa.table({"k": pa.array(range(1000), pa.int32()),
                     "c": pa.array([rnd.randrange(1590) for _ in range(1000)], pa.int32())})


def ddl(kind: str, keyed: bool = True) -> list[str]:
    """DDL of R1 and R2 as crr relations of the given kind (``REPLICATED TABLE``, ``REMOTE SOURCE``...)."""
    return [R1_DDL.format(kind=kind, key=", PRIMARY KEY (a)" if keyed else ""),
            R2_DDL.format(kind=kind, key=", PRIMARY KEY (k)" if keyed else "")]
