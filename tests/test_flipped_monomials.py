"""A deleted (or re-inserted) base row reaches every view tuple whose monomials hold its id, whatever
position the id has in the monomials and whether the site knows their lengths (in session: one probe
per position; reopened: the ids unnested; see ``crr.maintain_sql.holding_flipped_sql``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import crr

VIEWS = {
    "j2": "SELECT r.k, s.name FROM r JOIN s ON r.g = s.g",
    "j3": "SELECT r.k, s.name, t.w FROM r JOIN s ON r.g = s.g JOIN t ON t.g = s.g",
    "mixed": "SELECT r.k AS x FROM r JOIN s ON r.g = s.g UNION SELECT t.w FROM t",
    "sel": "SELECT k, g FROM r WHERE g > 1",  # one id per monomial: looked up by mid
    "proj": "SELECT name FROM s",
}


def _site(path: Path) -> crr.Site:
    site = crr.Site(path)
    site.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, g INTEGER)")
    site.execute("CREATE REPLICATED TABLE s (g INTEGER PRIMARY KEY, name VARCHAR)")
    site.execute("CREATE REPLICATED TABLE t (w INTEGER PRIMARY KEY, g INTEGER)")
    for name, sql in VIEWS.items():
        site.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    site.execute("INSERT INTO s VALUES (1, 'one'), (2, 'two'), (3, 'three')")
    site.execute("INSERT INTO t VALUES (100, 1), (101, 2), (102, 3), (3, 9)")
    site.execute("INSERT INTO r " + " UNION ALL ".join(f"SELECT {k}, {1 + k % 3}" for k in range(12)))
    return site


def _check(site: crr.Site) -> None:
    for name, sql in VIEWS.items():
        expected = site.execute(f"SELECT DISTINCT * FROM ({sql}) ORDER BY ALL")
        assert site.execute(f"SELECT * FROM {name} ORDER BY ALL") == expected, name


@pytest.mark.parametrize("reopen", [False, True])
def test_deletes_and_reinserts_of_any_input_row_reach_the_views(tmp_path: Path, reopen: bool) -> None:
    path = tmp_path / "s.db"
    site = _site(path)
    _check(site)
    if reopen:  # the reopened site does not know its views' monomial lengths
        site.close()
        site = crr.Site(path)
    writes = ["DELETE FROM s WHERE g = 2", "DELETE FROM t WHERE w = 100", "DELETE FROM r WHERE k IN (3, 4)",
              "DELETE FROM t WHERE w = 3", "INSERT INTO s VALUES (2, 'deux')", "INSERT INTO t VALUES (100, 1)",
              "UPDATE s SET name = 'uno' WHERE g = 1", "DELETE FROM r WHERE g = 3", "INSERT INTO t VALUES (3, 9)"]
    for sql in writes:
        site.execute(sql)
        _check(site)
    # the same history merged as one changeset into a second site
    other = _site(tmp_path / "o.db")
    other.merge(site.changes().to_bytes())
    for name in VIEWS:
        assert other.execute(f"SELECT * FROM {name} ORDER BY ALL") == site.execute(f"SELECT * FROM {name} ORDER BY ALL")
    _check(other)


@pytest.mark.parametrize("reopen", [False, True])
def test_small_merges_of_deletes_and_reinserts_reach_the_views(tmp_path: Path, reopen: bool) -> None:
    """The same writes merged one changeset at a time into a view site: each merge writes a few
    entries, whose ids the lookup of the monomials holding them lists as constants
    (``holding_flipped_sql``'s ``listed``), by position in session and over the unnested ids once
    the site is reopened."""
    writer = _site(tmp_path / "w.db")
    views = _site(tmp_path / "v.db")
    views.merge(writer.changes().to_bytes())
    _check(views)
    if reopen:  # the reopened site does not know its views' monomial lengths
        views.close()
        views = crr.Site(tmp_path / "v.db")
    writes = ["DELETE FROM s WHERE g = 2", "DELETE FROM t WHERE w = 100", "DELETE FROM r WHERE k IN (3, 4)",
              "DELETE FROM t WHERE w = 3", "INSERT INTO s VALUES (2, 'deux')", "INSERT INTO t VALUES (100, 1)",
              "UPDATE s SET name = 'uno' WHERE g = 1", "DELETE FROM r WHERE g = 3", "INSERT INTO t VALUES (3, 9)"]
    for sql in writes:
        cursor = writer.cursor
        writer.execute(sql)
        views.merge(writer.changes(since=cursor).to_bytes())
        _check(views)
        for name in VIEWS:
            assert views.execute(f"SELECT * FROM {name} ORDER BY ALL") == writer.execute(f"SELECT * FROM {name} ORDER BY ALL")
