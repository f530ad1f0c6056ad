"""crr.arrow_build: arrays laid out from their buffers equal pyarrow's own, and the single-row write
and merge paths never make pyarrow import pandas (200-300 ms on a site's first write)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, strategies as st

from crr.arrow_build import FALSE, binary16, bools, int64_range, int64_scalar, string_scalar, strings


@given(st.lists(st.one_of(st.none(), st.text())))
def test_strings_equal_pyarrows(values: list[str | None]) -> None:
    built = strings(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, pa.string()))


@given(st.lists(st.one_of(st.none(), st.booleans())))
def test_bools_equal_pyarrows(values: list[bool | None]) -> None:
    built = bools(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, pa.bool_()))


@given(st.lists(st.binary(min_size=16, max_size=16)))
def test_binary16_equals_pyarrows(values: list[bytes]) -> None:
    built = binary16(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, pa.binary(16)))


def test_binary16_refuses_other_lengths() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        binary16([b"x" * 15])


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_int64_range_and_scalars(n: int) -> None:
    assert int64_range(n).equals(pa.array(range(n), pa.int64()))
    assert int64_scalar(-(2**63) + 1).equals(pa.scalar(-(2**63) + 1, pa.int64()))
    assert string_scalar("r'1").equals(pa.scalar("r'1", pa.string()))
    assert FALSE.equals(pa.scalar(False)) and pc.fill_null(pa.array([None, True]), FALSE).to_pylist() == [False, True]


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed, so pyarrow cannot import it: nothing to check (the test extras install it)")
def test_writes_and_merges_do_not_import_pandas(tmp_path) -> None:
    """In a fresh process: single-row INSERT, UPDATE and DELETE on a keyed table with a projection
    and a self-join view, and a merge of their changes into another site and into a remote copy,
    and merges of new rows as one statement, leave pandas unimported."""
    script = textwrap.dedent(f"""
        import sys
        import crr
        a = crr.Site({str(tmp_path / 'a.db')!r}, site_id="a")
        a.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR, at TIMESTAMP)")
        a.execute("CREATE MATERIALIZED VIEW pv AS SELECT v FROM t")
        a.execute("CREATE MATERIALIZED VIEW j AS SELECT x.k, y.v FROM t x JOIN t y ON x.k = y.k")
        a.execute("INSERT INTO t VALUES (?, ?, ?)", [1, "x", "2024-01-01 00:00:00"])
        a.execute("INSERT INTO t VALUES (2, 'y', NULL)")
        a.execute("UPDATE t SET v = ? WHERE k = ?", ["z", 1])
        a.execute("DELETE FROM t WHERE k = 2")
        b = crr.Site(site_id="b")
        b.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR, at TIMESTAMP)")
        b.execute("CREATE MATERIALIZED VIEW pv AS SELECT v FROM t")
        b.merge(a.changes().to_bytes())
        assert b.execute("SELECT * FROM pv") == [("z",)], b.execute("SELECT * FROM pv")
        r = crr.Site(site_id="r")  # a replica (crr.replica) and a co-located view (crr.colocated)
        r.execute("CREATE REMOTE TABLE t (k INTEGER PRIMARY KEY, v VARCHAR, at TIMESTAMP)")
        r.execute("CREATE REMOTE SOURCE s (k INTEGER, v VARCHAR)")
        r.execute("CREATE MATERIALIZED VIEW sv AS SELECT v FROM s")
        r.merge(a.changes().to_bytes())
        assert r.execute("SELECT v FROM t") == [("z",)]
        for s in (a, b):  # merges of new rows as one statement (crr.point_merge): both routes
            s.execute("CREATE REPLICATED TABLE w (k INTEGER PRIMARY KEY, v VARCHAR)")
        cursor = a.cursor
        a.execute("INSERT INTO w VALUES (1, 'p')")  # Python checks it: the point route
        a.execute("INSERT INTO t VALUES (3, 'q', NULL)")  # a TIMESTAMP column: the batch route
        for relation in ("w", "t"):
            b.merge(a.changes(since=cursor, relations=[relation]).to_bytes())
        assert b.execute("SELECT * FROM w") == [(1, "p")] and b.execute("SELECT * FROM pv ORDER BY ALL") == [("q",), ("z",)]
        print("pandas" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
