"""Gupta, Mumick and Subrahmanian's counting algorithm (SIGMOD 1993) on DuckDB: the baseline.

Each view tuple keeps the number of its derivations. For a step of base changes, ``dR1`` with sign
``s1`` and ``dR2`` with sign ``s2`` (+1 insert, -1 delete), the delta of the join view is Gupta's
one term per changed input, where inputs before the changed one are read in their *new* state and
inputs after it in their *old* state:

    delta(R1 join R2) = s1 * (dR1 join R2) + s2 * (R1' join dR2),   R1' = R1 + s1 * dR1

which equals ``s1 * dR1 join R2 + s2 * R1 join dR2 + s1 * s2 * dR1 join dR2``: the ``dR1 x dR2`` term
is inside the second term, so it is not added separately. Counts are added with one MERGE per term,
and a tuple leaves the view when its count reaches 0. The projection ``pi_BC R1`` has only the
first term (changes to R2 do not touch it, and its site keeps no copy of R2). Set-at-a-time, batches
passed in as Arrow, one transaction per step: the same conditions crr runs under, so the measured
difference is the algorithm.

Inputs follow set semantics: an inserted row is not yet present, and a deleted row is present
(deletes find their rows by key: ``a`` in R1, ``k`` in R2).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from crr.bench.data import PLAIN_R1, PLAIN_R2

_JOIN_KEYS = ["a", "b", "c", "d", "e", "k"]


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
            self.keys = list(_JOIN_KEYS)
            self.delta = ("SELECT x.a, x.b, x.c, x.d, x.e, r2.k, count(*) AS n FROM batch x JOIN r2 ON x.c = r2.c "
                          "GROUP BY ALL")
        self.merge_insert, self.merge_delete = self._merges(self.delta)
        # the R2 term: R1 (already updated by this step's dR1) joined with the batch of R2 changes
        self.r2_merges = self._merges("SELECT r1.a, r1.b, r1.c, r1.d, r1.e, x.k, count(*) AS n "
                                      "FROM r1 JOIN batch_r2 x ON r1.c = x.c GROUP BY ALL")

    def _merges(self, delta: str) -> tuple[str, str]:
        """The MERGE adding ``delta``'s counts to the view (inserts) and the one subtracting them (deletes)."""
        on = " AND ".join(f"v.{k} = d.{k}" for k in self.keys)
        cols = ", ".join(f"d.{k}" for k in self.keys)
        return (f"MERGE INTO v USING ({delta}) d ON {on} "
                f"WHEN MATCHED THEN UPDATE SET cnt = v.cnt + d.n "
                f"WHEN NOT MATCHED THEN INSERT VALUES ({cols}, d.n)",
                f"MERGE INTO v USING ({delta}) d ON {on} "
                f"WHEN MATCHED AND v.cnt - d.n <= 0 THEN DELETE "
                f"WHEN MATCHED THEN UPDATE SET cnt = v.cnt - d.n")

    def apply(self, rows: pa.Table, sign: int) -> None:
        """Maintain the view for one batch of inserted (+1) or deleted (-1) R1 rows."""
        self.apply_changes(rows, sign)

    def apply_changes(self, r1_rows: pa.Table | None = None, r1_sign: int = 1,
                      r2_rows: pa.Table | None = None, r2_sign: int = 1) -> None:
        """Maintain the view for one step changing R1 and/or R2 (sign +1 insert, -1 delete), in one
        transaction: first ``s1 * dR1 join R2``, then ``s2 * R1' join dR2`` (see the module docstring)."""
        con = self.con
        registered = []
        try:
            if r1_rows is not None:
                con.register("batch", r1_rows)
                registered.append("batch")
            if r2_rows is not None:
                con.register("batch_r2", r2_rows)
                registered.append("batch_r2")
            con.begin()
            try:
                if r1_rows is not None:
                    con.execute(self.merge_insert if r1_sign > 0 else self.merge_delete)
                    if self.view == "join":
                        if r1_sign > 0:
                            con.execute("INSERT INTO r1 SELECT * FROM batch")
                        else:
                            con.execute("DELETE FROM r1 USING batch WHERE r1.a = batch.a")
                if r2_rows is not None and self.view == "join":
                    insert, delete = self.r2_merges
                    con.execute(insert if r2_sign > 0 else delete)
                    if r2_sign > 0:
                        con.execute("INSERT INTO r2 SELECT * FROM batch_r2")
                    else:
                        con.execute("DELETE FROM r2 USING batch_r2 WHERE r2.k = batch_r2.k")
                con.commit()
            except BaseException:
                con.rollback()
                raise
        finally:
            for name in registered:
                con.unregister(name)

    def rows(self) -> int:
        """Tuples in the view."""
        return self.con.execute("SELECT count(*) FROM v").fetchall()[0][0]

    def contents(self, with_counts: bool = False) -> pa.Table:
        """The view's rows (column order as in the view's query), with the count column ``cnt`` last
        if ``with_counts``."""
        return self.con.sql(f"SELECT {', '.join(self.keys + (['cnt'] if with_counts else []))} FROM v").to_arrow_table()

    def close(self) -> None:
        """Close the connection."""
        self.con.close()
