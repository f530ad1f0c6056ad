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
"""Written by crr at aab5b10 (storage version 3): replicated tables ``r (k PRIMARY KEY, g)`` and
``s (g PRIMARY KEY, name)``, a join view ``v = SELECT r.k, s.name FROM r JOIN s ON r.g = s.g`` with
its ``$i`` index, rows r (10, 1), (11, 1), (12, 2) and s (1, 'one'), (2, 'two'); site id ``v3-site``."""


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
    assert "v$i" not in _tables(site) and "v$m" in _tables(site)
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
