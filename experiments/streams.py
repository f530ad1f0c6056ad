"""Streams of changes as a base site produces them, for crr and for the baselines.

A base site inserts (or deletes) the rows once; its changeset is then cut into batches of ``batch``
rows, each batch holding exactly the tuples and causal-length entries of its rows: the changesets
the base site would have sent had it written each batch separately. The baselines get the same
rows of each batch as Arrow tables. Generation is not timed.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

from crr.changeset import Changeset, RelationChanges
from crr.site import Site
from crr.bench.data import ddl


@dataclass
class Batch:
    """One batch: the crr changeset and the same rows for the baselines (sign +1 insert, -1 delete)."""

    changeset: Changeset
    rows: pa.Table
    sign: int


def cut(cs: Changeset, rows: pa.Table, batch: int, sign: int) -> list[Batch]:
    """Cut a changeset about ``rows`` of R1 (one tuple and one causal-length entry per row, keys
    ascending as in ``rows``) into changesets of ``batch`` rows each."""
    rc = cs.relation("r1")
    assert rc is not None and cs.cl is not None
    con = duckdb.connect()
    con.execute("SET arrow_lossless_conversion = true")
    con.register("t", rc.tuples)
    con.register("cl", cs.cl)
    tuples = con.sql("SELECT * FROM t ORDER BY c0").to_arrow_table()  # c0: column a (AUG names are positional)
    cl = con.sql("SELECT cl.* FROM cl JOIN t ON t.id = cl.id ORDER BY t.c0").to_arrow_table()
    con.close()
    if not (tuples.num_rows == cl.num_rows == rows.num_rows):
        raise ValueError("expected one tuple and one causal-length entry per row")
    out = []
    for start in range(0, rows.num_rows, batch):
        part = RelationChanges(name=rc.name, kind=rc.kind, columns=rc.columns, key=rc.key,
                               fingerprint=rc.fingerprint, lineage=rc.lineage,
                               tuples=tuples.slice(start, batch), monos=None)
        out.append(Batch(Changeset(source=cs.source, since=cs.since, cursor=cs.cursor, relations=[part],
                                   cl=cl.slice(start, batch)), rows.slice(start, batch), sign))
    return out


@dataclass
class PaperStreams:
    """Everything the paper experiments feed to a view site."""

    r2: Changeset  # the initial R2 (setup, not timed)
    r2_rows: pa.Table
    inserts: list[Batch]
    deletes: list[Batch]


def paper_streams(r1: pa.Table, r2: pa.Table, batch: int, delete_n: int) -> PaperStreams:
    """Insert all of ``r1`` at a base site, then delete its first ``delete_n`` rows; cut both into batches
    (``delete_n`` = 0: no deletes, an empty delete stream)."""
    base = Site(site_id="base")
    for stmt in ddl("REPLICATED TABLE"):
        base.execute(stmt)
    base.insert_many("r2", r2)
    r2_cs = base.changes(relations=["r2"])
    before = base.cursor
    base.insert_many("r1", r1)
    ins = base.changes(since=before, relations=["r1"])
    deletes: list[Batch] = []
    if delete_n:
        mid = base.cursor
        doomed = r1.slice(0, delete_n)
        base.execute("DELETE FROM r1 WHERE a < ?", [delete_n])
        deletes = cut(base.changes(since=mid, relations=["r1"]), doomed, batch, -1)
    base.close()
    return PaperStreams(r2=r2_cs, r2_rows=r2, inserts=cut(ins, r1, batch, +1), deletes=deletes)
