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


def _layout(site: crr.Site, name: str) -> str:
    """``replica`` (entries and tuples in ``$e``, ``$m`` a view of it) or ``monomials`` (a ``$m`` table)."""
    kinds = dict(site.execute("SELECT table_name, table_type FROM information_schema.tables "
                              "WHERE table_schema = '_crr' AND table_name IN (?, ?)", [name + "$m", name + "$e"]))
    if kinds == {name + "$m": "VIEW", name + "$e": "BASE TABLE"}:
        return "replica"
    assert kinds == {name + "$m": "BASE TABLE"}, kinds
    return "monomials"


def _entries_in_cl(site: crr.Site, name: str) -> int:
    return site.execute("SELECT count(*) FROM _crr.cl WHERE rel = ?", [name])[0][0]


def test_a_version_3_view_site_gets_replicas_and_keeps_merging(tmp_path: Path) -> None:
    """The remote tables become replicas: their tuples and their entries (out of ``_crr.cl``) move to
    ``$e``, ``$m`` becomes a view of it; changes merged afterwards from a new site holding the same
    rows (same tuple ids) update the view, and a view's monomials arriving for a remote table move it
    back to the standard layout, entries into ``_crr.cl``."""
    site = crr.Site(_v3_site(tmp_path))
    assert _layout(site, "p") == _layout(site, "q") == "replica" and _layout(site, "w") == "monomials"
    assert _entries_in_cl(site, "p") == _entries_in_cl(site, "q") == 0
    assert site.execute('SELECT count(*) FROM _crr."p$e" WHERE cl = 1 AND vis AND tseq IS NOT NULL') == [(3,)]
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
    # a remote table receiving a view's monomials (here: a remote copy named like the view) is released
    viewer = crr.Site(site_id="viewer")
    viewer.execute("CREATE REMOTE TABLE p (k INTEGER PRIMARY KEY, g INTEGER)")
    viewer.execute("CREATE REMOTE TABLE w (k INTEGER, name VARCHAR)")
    viewer.merge(site.changes(relations=["p"]).to_bytes())
    assert _layout(viewer, "w") == "replica"
    viewer.merge(site.changes(relations=["w"]).to_bytes())
    assert _layout(viewer, "w") == "monomials" and viewer.relation("w").derived
    assert viewer.execute("SELECT * FROM w ORDER BY k") == [(21, "one"), (23, "three")]
    # the view's monomials: one per derivation its site holds (k 20 to 23, alive or not), two ids each
    assert viewer.execute('SELECT count(*) FROM _crr."w$m" WHERE len(ids) = 2') == [(4,)]


def test_a_version_3_remote_table_whose_rows_are_not_its_own_monomials_keeps_the_standard_layout(tmp_path: Path) -> None:
    """The upgrade checks every row before it makes a remote table a replica: a row whose ``mid`` is
    not its ``vid`` (here written by hand into the version-3 file) makes it mark the table derived
    and leave the layout as it is, rows and entries included."""
    path = _v3_site(tmp_path)
    con = duckdb.connect(str(path))
    con.execute('UPDATE _crr."q$m" SET mid = mid + 1 WHERE vid = (SELECT min(vid) FROM _crr."q$m")')
    con.close()
    site = crr.Site(path)
    assert _layout(site, "q") == "monomials" and site.relation("q").derived and _entries_in_cl(site, "q") == 2
    assert _layout(site, "p") == "replica" and not site.relation("p").derived
    assert site.execute('SELECT count(*) FROM _crr."q$m" WHERE mid <> vid') == [(1,)]
    assert site.execute("SELECT * FROM w ORDER BY k") == [(20, "one"), (21, "one"), (22, "two")]


FIXTURE_V4 = Path(__file__).parent / "fixtures" / "site_v4.duckdb.gz"
"""Written by crr at 08060ad (storage version 4), site id ``v4-site``: remote tables ``p (k PRIMARY KEY,
g)`` and ``q (g PRIMARY KEY, name)`` and remote source ``u (a, g)`` (unkeyed), the join views
``w = SELECT p.k, q.name FROM p JOIN q ON p.g = q.g`` and ``x = SELECT u.a, q.name FROM u JOIN q ON
u.g = q.g``, all merged from site ``v4-base``, which inserted q (1, 'one'), (2, 'two'), (3, 'three'),
p (20, 1), (21, 1), (22, 2), (23, 3) and u (1, 1), (2, 2), (3, 3), then updated p 21 to g = 2 and
deleted p 23 and u 3 (so p has five entries, three visible)."""

V4_BASE_DDL = ["CREATE REPLICATED TABLE p (k INTEGER PRIMARY KEY, g INTEGER)",
               "CREATE REPLICATED TABLE q (g INTEGER PRIMARY KEY, name VARCHAR)",
               "CREATE REPLICATED TABLE u (a INTEGER, g INTEGER)"]
V4_VIEW_DDL = ["CREATE REMOTE TABLE p (k INTEGER PRIMARY KEY, g INTEGER)",
               "CREATE REMOTE TABLE q (g INTEGER PRIMARY KEY, name VARCHAR)",
               "CREATE REMOTE SOURCE u (a INTEGER, g INTEGER)",
               "CREATE MATERIALIZED VIEW w AS SELECT p.k, q.name FROM p JOIN q ON p.g = q.g",
               "CREATE MATERIALIZED VIEW x AS SELECT u.a, q.name FROM u JOIN q ON u.g = q.g"]


def _v4_base() -> crr.Site:
    """A site with the fixture's base history (the same tuple ids, other stamps)."""
    base = crr.Site(site_id="v4-base")
    for stmt in V4_BASE_DDL:
        base.execute(stmt)
    base.execute("INSERT INTO q VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    base.execute("INSERT INTO p VALUES (20, 1), (21, 1), (22, 2), (23, 3)")
    base.execute("INSERT INTO u VALUES (1, 1), (2, 2), (3, 3)")
    base.execute("UPDATE p SET g = 2 WHERE k = 21")
    base.execute("DELETE FROM p WHERE k = 23")
    base.execute("DELETE FROM u WHERE a = 3")
    return base


def _contents(site: crr.Site) -> dict[str, list[tuple]]:
    return {"p": site.execute("SELECT * FROM p ORDER BY k"), "q": site.execute("SELECT * FROM q ORDER BY g"),
            "w": site.execute("SELECT * FROM w ORDER BY k, name"), "x": site.execute("SELECT * FROM x ORDER BY a, name")}


def test_a_version_4_view_site_gets_replicas_with_their_entries_and_keeps_converging(tmp_path: Path) -> None:
    """Version 4 -> 5: every stored remote relation that is not derived (p, q and the joined source u)
    becomes a replica: its tuples and all its entries (visible, deleted and superseded versions)
    move to ``$e``, none stay in ``_crr.cl``; the views are unchanged, and the upgraded site keeps
    converging with a site that never was of version 4, both ways."""
    path = tmp_path / "v4.duckdb"
    with gzip.open(FIXTURE_V4) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    site = crr.Site(path)
    assert site.execute("SELECT v FROM _crr.meta WHERE k = 'version'") == [(str(STORAGE_VERSION),)]
    assert [_layout(site, n) for n in ("p", "q", "u", "w", "x")] == ["replica"] * 3 + ["monomials"] * 2
    assert site.execute("SELECT count(*) FROM _crr.cl") == [(0,)]
    assert site.execute('SELECT count(*), count(*) FILTER (WHERE vis), count(tseq) FROM _crr."p$e"') == [(5, 3, 5)]
    assert site.execute('SELECT count(*), count(*) FILTER (WHERE vis) FROM _crr."u$e"') == [(3, 2)]
    expected = {"p": [(20, 1), (21, 2), (22, 2)], "q": [(1, "one"), (2, "two"), (3, "three")],
                "w": [(20, "one"), (21, "two"), (22, "two")], "x": [(1, "one"), (2, "two")]}
    assert _contents(site) == expected
    # a fresh view site fed by a base with the same history reaches the same state; then both take
    # more changes: a key updated back (its older version, still in $e, gets a newer stamp) and deletes
    base = _v4_base()
    fresh = crr.Site(site_id="fresh")
    for stmt in V4_VIEW_DDL:
        fresh.execute(stmt)
    fresh.merge(base.changes().to_bytes())
    assert _contents(fresh) == expected
    cursor = base.cursor
    base.execute("UPDATE p SET g = 1 WHERE k = 21")
    base.execute("DELETE FROM q WHERE g = 2")
    base.execute("INSERT INTO u VALUES (3, 3), (4, 1)")
    later = base.changes(since=cursor).to_bytes()
    site.merge(later)
    fresh.merge(later)
    assert _contents(site) == _contents(fresh) == {
        "p": [(20, 1), (21, 1), (22, 2)], "q": [(1, "one"), (3, "three")], "w": [(20, "one"), (21, "one")],
        "x": [(1, "one"), (3, "three"), (4, "one")]}
    site.close()
    site = crr.Site(path, site_id="v4-site")
    # the upgraded site's own changes (entries read from $e) bring another fresh site to the same state
    other = crr.Site(site_id="other")
    for stmt in V4_VIEW_DDL:
        other.execute(stmt)
    other.merge(site.changes(relations=["p", "q"]).to_bytes())
    other.merge(base.changes(relations=["u"]).to_bytes())
    assert _contents(other) == _contents(site)
