"""A float zero is one value: ``-0.0`` and ``0.0`` are one tuple (``-0.0 = 0.0`` in SQL and in tuple ids),
so every site stores it as ``+0.0``, whichever sign a write or a changeset gave it. Before, each site
kept the sign it saw first and copies of one tuple differed (``1/x`` told them apart)."""

from __future__ import annotations

import dataclasses
import math

import pyarrow as pa
import pytest

import crr

pytestmark = pytest.mark.xdist_group("negative_zero")


def signs(site: crr.Site, sql: str) -> dict:
    """The sign (+1.0/-1.0) of each row's float value, by key."""
    return {k: math.copysign(1.0, x) for k, x in site.execute(sql)}


def table_site(keyed: bool, typ: str = "DOUBLE") -> crr.Site:
    site = crr.Site()
    site.execute(f"CREATE REPLICATED TABLE t (k INTEGER{' PRIMARY KEY' if keyed else ''}, x {typ})")
    return site


@pytest.mark.parametrize("typ", ["DOUBLE", "FLOAT"])
@pytest.mark.parametrize("keyed", [False, True])
def test_every_local_write_stores_a_zero_as_positive(keyed, typ):
    site = table_site(keyed, typ)
    site.execute(f"INSERT INTO t VALUES (1, CAST(-0.0 AS {typ}))")  # the point path, values read as text
    site.execute("INSERT INTO t VALUES (?, ?)", [2, -0.0])
    site.insert_many("t", pa.table({"k": pa.array([3], pa.int32()), "x": pa.array([-0.0], pa.float64())}))
    site.execute(f"INSERT INTO t SELECT 100 + i, CAST(-0.0 AS {typ}) FROM range(100) r(i)")  # the batch path
    site.execute("INSERT INTO t VALUES (4, 1.0), (5, 2.0)")
    site.execute(f"UPDATE t SET x = CAST(-0.0 AS {typ}) WHERE k = 4")
    site.execute("UPDATE t SET x = x * -0.0 WHERE k = 5 OR k >= 100")
    got = signs(site, "SELECT k, x FROM t")
    assert len(got) == 105
    assert set(got.values()) == {1.0}


@pytest.mark.parametrize("keyed", [False, True])
def test_sites_writing_either_sign_of_one_tuple_converge(keyed):
    a, b = table_site(keyed), table_site(keyed)
    for s in (a, b):
        s.execute("CREATE MATERIALIZED VIEW pos AS SELECT k FROM t WHERE 1 / x > 0")
    a.execute("INSERT INTO t VALUES (?, ?)", [1, -0.0])
    b.execute("INSERT INTO t VALUES (1, 0.0)")
    a.merge(b.changes())
    b.merge(a.changes())
    for s in (a, b):
        assert signs(s, "SELECT k, x FROM t") == {1: 1.0}
        assert s.execute("SELECT k FROM pos") == [(1,)]


@pytest.mark.parametrize("rows", [1, 200])  # the point merge path, the batch path
def test_a_changeset_carrying_negative_zeros_is_stored_positive(rows):
    src = table_site(False)
    src.insert_many("t", pa.table({"k": pa.array(range(rows), pa.int32()), "x": pa.array([0.0] * rows)}))
    cs = src.changes()
    rc = cs.relations[0]
    at = rc.tuples.schema.get_field_index("c1")
    forged = dataclasses.replace(rc, tuples=rc.tuples.set_column(at, rc.tuples.field(at), pa.array([-0.0] * rows)))
    crafted = dataclasses.replace(cs, relations=[forged])
    dst = table_site(False)
    dst.merge(crafted)
    assert set(signs(dst, "SELECT k, x FROM t").values()) == {1.0}
    assert len(dst.execute("SELECT * FROM t")) == rows
    # the changeset given is left as it was
    assert {math.copysign(1.0, x) for x in crafted.relations[0].tuples.column(at).to_pylist()} == {-1.0}
    dst.merge(crafted.to_bytes())
    assert set(signs(dst, "SELECT k, x FROM t").values()) == {1.0}


def test_a_views_own_results_travel_with_their_sign():
    """A view's values are its query's results over the stored (positive) zeros: ``-x`` is ``-0.0`` at
    the view's site, and a remote copy of the view shows the same value."""
    a = table_site(False)
    a.execute("CREATE MATERIALIZED VIEW neg AS SELECT k, -x AS y FROM t")
    a.execute("INSERT INTO t VALUES (1, 0.0)")
    b = crr.Site()
    b.execute("CREATE REMOTE TABLE neg (k INTEGER, y DOUBLE)")
    b.merge(a.changes())
    assert signs(a, "SELECT k, y FROM neg") == {1: -1.0}
    assert signs(b, "SELECT k, y FROM neg") == {1: -1.0}
