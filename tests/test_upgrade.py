"""A site file of an older storage version that crr can upgrade opens upgraded, in place."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import duckdb
import pytest

import crr
from crr.catalog import STORAGE_VERSION

FIXTURE = Path(__file__).parent / "fixtures" / "site_v3.duckdb.gz"
"""Written by crr at aab5b10 (storage version 3), site id ``v3-site``: replicated tables
``r (k PRIMARY KEY, g)`` and ``s (g PRIMARY KEY, name)``, a join view
``v = SELECT r.k, s.name FROM r JOIN s ON r.g = s.g`` with its ``$i`` index, rows r (10, 1), (11, 1),
(12, 2) and s (1, 'one'), (2, 'two'); remote tables ``p`` and ``q`` of the same shapes (another site's
replicated tables, merged from it: rows p (20, 1), (21, 1), (22, 2) and q as s) and the join view
``w = SELECT p.k, q.name FROM p JOIN q ON p.g = q.g``, also with a ``$i`` index."""


def _v3_site(tmp_path: Path) -> Path:
    path = tmp_path / "v3.duckdb"
    with gzip.open(FIXTURE) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def _tables(site: crr.Site) -> set[str]:
    return {t for (t,) in site.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = '_crr'")}


def test_a_version_3_file_is_upgraded_and_its_join_view_stays_maintained(tmp_path: Path) -> None:
    path = _v3_site(tmp_path)
    site = crr.Site(path)
    assert site.site_id == "v3-site"
    assert site.execute("SELECT v FROM _crr.meta WHERE k = 'version'") == [(str(STORAGE_VERSION),)]
    assert not {"v$i", "w$i"} & _tables(site) and {"v$m", "w$m"} <= _tables(site)
    assert site.relation("v").wide and not site.relation("r").wide
    assert site.execute("SELECT * FROM v ORDER BY k") == [(10, "one"), (11, "one"), (12, "two")]
    # flips of either input's ids reach the view (found from v's monomials, not the dropped index)
    site.execute("DELETE FROM r WHERE k = 10")
    site.execute("DELETE FROM s WHERE g = 2")
    site.execute("INSERT INTO r VALUES (13, 1)")
    site.execute("INSERT INTO s VALUES (2, 'deux')")
    expected = [(11, "one"), (12, "deux"), (13, "one")]
    assert site.execute("SELECT * FROM v ORDER BY k") == expected
    site.close()
    again = crr.Site(path, site_id="v3-site")  # opens as a current file: nothing left to upgrade
    assert again.execute("SELECT * FROM v ORDER BY k") == expected
    assert "v$i" not in _tables(again)
    # its changes bring a fresh site to the same view
    fresh = crr.Site()
    for name in ("r", "s"):
        fresh.execute(f"CREATE REPLICATED TABLE {name} " + ("(k INTEGER PRIMARY KEY, g INTEGER)" if name == "r"
                                                             else "(g INTEGER PRIMARY KEY, name VARCHAR)"))
    fresh.execute("CREATE MATERIALIZED VIEW v AS SELECT r.k, s.name FROM r JOIN s ON r.g = s.g")
    fresh.merge(again.changes(relations=["r", "s"]).to_bytes())
    assert fresh.execute("SELECT * FROM v ORDER BY k") == expected


def test_a_file_opened_under_another_site_id_is_refused_and_not_upgraded(tmp_path: Path) -> None:
    path = _v3_site(tmp_path)
    with pytest.raises(crr.SiteError, match="v3-site"):
        crr.Site(path, site_id="someone-else")
    con = duckdb.connect(str(path))
    assert con.execute("SELECT v FROM _crr.meta WHERE k = 'version'").fetchall() == [("3",)]
    assert con.execute("SELECT count(*) FROM _crr.\"v$i\"").fetchall() == [(6,)]  # three monomials of two ids
    con.close()
    site = crr.Site(path)  # its own id: upgraded now
    assert "v$i" not in _tables(site)


def _generated(site: crr.Site, table: str) -> list[str]:
    return [c for (c,) in site.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = '_crr' "
                                       "AND table_name = ? AND is_generated = 'ALWAYS' ORDER BY 1", [table])]


def test_a_version_3_view_site_gets_narrow_remote_tables_and_keeps_merging(tmp_path: Path) -> None:
    """The remote tables' ``$m`` take the narrow layout (``mid`` and ``ids`` generated from ``vid``)
    with their rows; changes merged afterwards from a new site holding the same rows (same tuple
    ids) update the view, and a view's monomials arriving for a remote table move it back to the
    full layout."""
    site = crr.Site(_v3_site(tmp_path))
    assert _generated(site, "p$m") == _generated(site, "q$m") == ["ids", "mid"]
    assert _generated(site, "w$m") == []
    assert site.execute('SELECT count(*) FROM _crr."p$m" WHERE mid = vid AND ids = [vid]') == [(3,)]
    assert site.execute("SELECT * FROM w ORDER BY k") == [(20, "one"), (21, "one"), (22, "two")]
    base = crr.Site(site_id="new-base")
    base.execute("CREATE REPLICATED TABLE p (k INTEGER PRIMARY KEY, g INTEGER)")
    base.execute("CREATE REPLICATED TABLE q (g INTEGER PRIMARY KEY, name VARCHAR)")
    base.execute("INSERT INTO q VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    base.execute("INSERT INTO p VALUES (20, 1), (21, 1), (22, 2), (23, 3)")
    base.execute("DELETE FROM p WHERE k = 20")
    base.execute("DELETE FROM q WHERE g = 2")
    site.merge(base.changes().to_bytes())
    assert site.execute("SELECT * FROM w ORDER BY k") == [(21, "one"), (23, "three")]
    assert site.execute("SELECT count(*) FROM p") == [(3,)]  # 21, 22 (its q row is gone, not it), 23
    # a remote table receiving a view's monomials (here: a remote copy named like the view) widens
    viewer = crr.Site(site_id="viewer")
    viewer.execute("CREATE REMOTE TABLE p (k INTEGER PRIMARY KEY, g INTEGER)")
    viewer.execute("CREATE REMOTE TABLE w (k INTEGER, name VARCHAR)")
    viewer.merge(site.changes(relations=["p"]).to_bytes())
    assert _generated(viewer, "w$m") == ["ids", "mid"]
    viewer.merge(site.changes(relations=["w"]).to_bytes())
    assert _generated(viewer, "w$m") == [] and viewer.relation("w").derived
    assert viewer.execute("SELECT * FROM w ORDER BY k") == [(21, "one"), (23, "three")]


def test_a_version_3_remote_table_whose_rows_are_not_its_own_monomials_keeps_the_full_layout(tmp_path: Path) -> None:
    """The upgrade checks every row before it narrows a remote table's ``$m``: a row whose ``mid`` is
    not its ``vid`` (here written by hand into the version-3 file) makes it mark the table derived
    and leave the layout as it is, rows included."""
    path = _v3_site(tmp_path)
    con = duckdb.connect(str(path))
    con.execute('UPDATE _crr."q$m" SET mid = mid + 1 WHERE vid = (SELECT min(vid) FROM _crr."q$m")')
    con.close()
    site = crr.Site(path)
    assert _generated(site, "q$m") == [] and site.relation("q").derived
    assert _generated(site, "p$m") == ["ids", "mid"] and not site.relation("p").derived
    assert site.execute('SELECT count(*) FROM _crr."q$m" WHERE mid <> vid') == [(1,)]
    assert site.execute("SELECT * FROM w ORDER BY k") == [(20, "one"), (21, "one"), (22, "two")]
