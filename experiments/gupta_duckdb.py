"""Gupta, Mumick and Subrahmanian's counting algorithm (SIGMOD 1993) on DuckDB: the baseline.

Each view tuple keeps the number of its derivations. For a batch of base changes with sign +1
(insert) or -1 (delete), the view's delta is one term per changed input (here only R1 changes, so
``delta(R1) join R2``); counts are added with one MERGE, and a tuple leaves the view when its count
reaches 0. Set-at-a-time, batches passed in as Arrow, one transaction per batch: the same
conditions crr runs under, so the measured difference is the algorithm.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from crr.bench.data import PLAIN_R1, PLAIN_R2


class GuptaDuckDB:
    """A view site maintaining ``project`` (pi_BC R1) or ``join`` (R1 join R2) by counting."""

    def __init__(self, path: str, view: str, r2: pa.Table) -> None:
        self.con = duckdb.connect(path)
        self.view = view
        if view == "project":
            self.con.execute("CREATE TABLE v (b INTEGER, c INTEGER, cnt BIGINT)")
            self.keys = ["b", "c"]
            self.delta = "SELECT b, c, count(*) AS n FROM batch GROUP BY b, c"
        else:
            # the join needs the base state of both inputs (a change to R2 joins with all of R1)
            self.con.execute(PLAIN_R1)
            self.con.execute(PLAIN_R2)
            self.con.register("r2_in", r2)
            self.con.execute("INSERT INTO r2 SELECT * FROM r2_in")
            self.con.unregister("r2_in")
            self.con.execute("CREATE TABLE v (a INTEGER, b INTEGER, c INTEGER, d INTEGER, e VARCHAR, k INTEGER, cnt BIGINT)")
            self.keys = ["a", "b", "c", "d", "e", "k"]
            self.delta = ("SELECT x.a, x.b, x.c, x.d, x.e, r2.k, count(*) AS n FROM batch x JOIN r2 ON x.c = r2.c "
                          "GROUP BY ALL")
        on = " AND ".join(f"v.{k} = d.{k}" for k in self.keys)
        cols = ", ".join(f"d.{k}" for k in self.keys)
        self.merge_insert = (f"MERGE INTO v USING ({self.delta}) d ON {on} "
                             f"WHEN MATCHED THEN UPDATE SET cnt = v.cnt + d.n "
                             f"WHEN NOT MATCHED THEN INSERT VALUES ({cols}, d.n)")
        self.merge_delete = (f"MERGE INTO v USING ({self.delta}) d ON {on} "
                             f"WHEN MATCHED AND v.cnt - d.n <= 0 THEN DELETE "
                             f"WHEN MATCHED THEN UPDATE SET cnt = v.cnt - d.n")

    def apply(self, rows: pa.Table, sign: int) -> None:
        """Maintain the view for one batch of inserted (+1) or deleted (-1) R1 rows."""
        con = self.con
        con.register("batch", rows)
        con.begin()
        try:
            con.execute(self.merge_insert if sign > 0 else self.merge_delete)
            if self.view == "join":
                if sign > 0:
                    con.execute("INSERT INTO r1 SELECT * FROM batch")
                else:
                    con.execute("DELETE FROM r1 USING batch WHERE r1.a = batch.a")
            con.commit()
        except BaseException:
            con.rollback()
            raise
        finally:
            con.unregister("batch")

    def rows(self) -> int:
        """Tuples in the view."""
        return self.con.execute("SELECT count(*) FROM v").fetchall()[0][0]

    def close(self) -> None:
        """Close the connection."""
        self.con.close()
