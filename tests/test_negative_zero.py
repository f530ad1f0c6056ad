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


NEGATIVE_NAN = "(CAST('inf' AS DOUBLE) - CAST('inf' AS DOUBLE))"  # -nan on x86 (its sign bit set)
_NEG_NAN = -math.nan if math.copysign(1.0, -math.nan) < 0 else float.fromhex("-nan")


@pytest.mark.parametrize("typ", ["DOUBLE", "FLOAT"])
@pytest.mark.parametrize("keyed", [False, True])
def test_every_local_write_and_merge_stores_a_nan_as_positive(keyed, typ):
    """NaNs of either sign are one tuple (one id), but each site kept the sign it saw first: a site that
    wrote 'inf' - 'inf' showed -nan, a peer that wrote Python's nan showed nan, and a view of
    CAST(x AS VARCHAR) differed between them for good."""
    site = table_site(keyed, typ)
    assert math.copysign(1.0, site.execute(f"SELECT {NEGATIVE_NAN}")[0][0]) == -1.0  # what is tested is there
    site.execute(f"INSERT INTO t VALUES (1, {NEGATIVE_NAN})")
    site.execute("INSERT INTO t VALUES (?, ?)", [2, _NEG_NAN])
    site.insert_many("t", pa.table({"k": pa.array([3], pa.int32()), "x": pa.array([_NEG_NAN], pa.float64())}))
    site.execute(f"INSERT INTO t SELECT 100 + i, {NEGATIVE_NAN} FROM range(100) r(i)")  # the batch path
    site.execute("INSERT INTO t VALUES (4, 1.0)")
    site.execute(f"UPDATE t SET x = {NEGATIVE_NAN} WHERE k = 4")
    got = signs(site, "SELECT k, x FROM t")
    assert len(got) == 104 and set(got.values()) == {1.0}
    # a peer that wrote the positive NaN, both ways, and a changeset carrying -nan as it is
    peer = table_site(keyed, typ)
    peer.execute("INSERT INTO t VALUES (?, ?)", [1, math.nan])
    for s in (site, peer):
        s.execute("CREATE MATERIALIZED VIEW shown AS SELECT k, CAST(x AS VARCHAR) AS x FROM t")
    peer.merge(site.changes())
    site.merge(peer.changes())
    assert set(signs(peer, "SELECT k, x FROM t").values()) == {1.0}
    assert peer.execute("SELECT * FROM shown ORDER BY k") == site.execute("SELECT * FROM shown ORDER BY k")
    src = table_site(False)  # a changeset carrying -nan (one id with nan), as a site of an older crr sent it
    src.insert_many("t", pa.table({"k": pa.array([7], pa.int32()), "x": [math.nan]}))
    cs = src.changes()
    rc = cs.relations[0]
    at = rc.tuples.schema.get_field_index("c1")
    forged = dataclasses.replace(rc, tuples=rc.tuples.set_column(at, rc.tuples.field(at), pa.array([_NEG_NAN])))
    dst = table_site(False)
    dst.merge(dataclasses.replace(cs, relations=[forged]).to_bytes())
    assert set(signs(dst, "SELECT k, x FROM t").values()) == {1.0}
