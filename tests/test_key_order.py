"""A key whose ``PRIMARY KEY (...)`` lists its columns in another order than the table declares
them: every path hashes it in declared column order (crr.types.key_hash_sql), so a point write's
entries agree with the batch path's and with the merge's check, and a file whose point writes hashed
it in the listed order (storage version 8) gets its key hashes again on upgrade."""

from __future__ import annotations

import duckdb
import pytest

import crr
from crr.catalog import STORAGE_VERSION
from crr.types import key_hash_of_texts
from tests.conftest import app, as_written_by

SCHEMA = "(a INTEGER, b VARCHAR, v VARCHAR, PRIMARY KEY (b, a))"


def _kh(site: crr.Site, a: int) -> list:
    return site.execute('SELECT kh FROM _crr.cl c JOIN _crr."t$t" t USING (id) WHERE t.c0 = ? ORDER BY kh', [a])


@pytest.mark.parametrize("write", [
    ("INSERT INTO t VALUES (?, ?, ?)", [5, "x", "one"]),
    ("INSERT INTO t VALUES (5, 'x', 'one')", []),  # the rows statement reads the texts
])
def test_a_point_write_hashes_the_key_as_the_batch_path_does(write) -> None:
    point, batch = crr.Site(site_id="p"), crr.Site(site_id="b")
    for site in (point, batch):
        site.execute(f"CREATE REPLICATED TABLE t {SCHEMA}")
    point.execute(*write)
    batch.execute("INSERT INTO t SELECT i, 'x', 'one' FROM range(100) r(i)")  # more rows than a point write
    assert _kh(point, 5) == _kh(batch, 5) != []


def test_point_writes_of_such_a_key_merge_elsewhere() -> None:
    """The merge checks each entry's key hash against its tuple: a point-written one passes, and the
    sites agree on the key's versions (an UPDATE replaces the version the other site holds)."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for site in (a, b):
        site.execute(f"CREATE REPLICATED TABLE t {SCHEMA}")
    a.execute("INSERT INTO t VALUES (?, ?, ?)", [5, "x", "one"])
    b.merge(a.changes())
    b.execute("UPDATE t SET v = ? WHERE a = ?", ["two", 5])
    a.merge(b.changes())
    a.execute("DELETE FROM t WHERE b = ?", ["x"])
    b.merge(a.changes())
    assert app(a, "t") == app(b, "t") == []
    a.execute("INSERT INTO t VALUES (?, ?, ?)", [6, "y", "three"])
    b.merge(a.changes())
    assert app(b, "t") == [(6, "y", "three")]


def test_the_upgrade_from_version_8_hashes_such_keys_again(tmp_path) -> None:
    path = tmp_path / "old.db"
    old = crr.Site(path, site_id="old")
    old.execute(f"CREATE REPLICATED TABLE t {SCHEMA}")
    old.execute("CREATE REPLICATED TABLE u (k INTEGER PRIMARY KEY, v VARCHAR)")
    old.execute("INSERT INTO t VALUES (?, ?, ?)", [5, "x", "one"])
    old.execute("INSERT INTO u VALUES (?, ?)", [1, "u"])
    right = _kh(old, 5)
    rel = old.relation("t")
    listed = [rel.columns[rel.column_names.index(k)] for k in rel.key]  # what version 8 hashed
    old.close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE _crr.cl SET kh = ? WHERE rel = 't'", [key_hash_of_texts("t", listed, ["x", "5"])])
    con.execute("UPDATE _crr.meta SET v = 'false' WHERE k = 'rival_versions'")
    u_before = con.execute("SELECT id, kh FROM _crr.cl WHERE rel = 'u'").fetchall()
    con.close()
    as_written_by(path, 8)
    site = crr.Site(path)
    assert site.execute("SELECT v FROM _crr.meta WHERE k = 'version'") == [(str(STORAGE_VERSION),)]
    assert _kh(site, 5) == right
    assert site.execute("SELECT id, kh FROM _crr.cl WHERE rel = 'u'") == u_before
    assert site.execute("SELECT v FROM _crr.meta WHERE k = 'rival_versions'") == [("true",)]
    other = crr.Site(site_id="other")
    other.execute(f"CREATE REPLICATED TABLE t {SCHEMA}")
    other.merge(site.changes(relations=["t"]))
    assert app(other, "t") == [(5, "x", "one")]


def test_the_upgrade_leaves_keys_in_column_order_alone(tmp_path) -> None:
    path = tmp_path / "old.db"
    old = crr.Site(path, site_id="old")
    old.execute("CREATE REPLICATED TABLE u (k INTEGER, w INTEGER, v VARCHAR, PRIMARY KEY (k, w))")
    old.execute("INSERT INTO u VALUES (?, ?, ?)", [1, 2, "u"])
    old.close()
    as_written_by(path, 8)
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO _crr.meta VALUES ('rival_versions', 'false') ON CONFLICT DO UPDATE SET v = 'false'")
    con.close()
    site = crr.Site(path)
    assert site.execute("SELECT v FROM _crr.meta WHERE k = 'rival_versions'") == [("false",)]
