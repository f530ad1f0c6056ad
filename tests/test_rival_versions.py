"""The site flag ``rival_versions`` (crr.catalog.SiteFlag.RIVAL_VERSIONS): whether some home of entries
may hold two present versions of one key. While it is false a batch of deletes is written without
the count of other present versions (crr.maintain.Maintainer._single_versions); a merge that may store
a second present version sets it for good, and then a delete that leaves a key's other version
present makes that version visible."""

from __future__ import annotations

import time

import crr
from crr.catalog import STORAGE_VERSION
from tests.conftest import app, as_written_by, sync
from tests.test_point import _statements

JOIN = "SELECT t.k, t.v, d.w FROM t JOIN d ON t.k = d.k"


def _site(path=None, site_id: str | None = None) -> crr.Site:
    site = crr.Site(path, site_id=site_id) if path is not None else crr.Site(site_id=site_id)
    site.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    site.execute("CREATE REPLICATED TABLE d (k INTEGER PRIMARY KEY, w VARCHAR)")
    site.execute(f"CREATE MATERIALIZED VIEW j AS {JOIN}")
    return site


def _flag(site: crr.Site) -> str:
    return site.execute("SELECT v FROM _crr.meta WHERE k = 'rival_versions'")[0][0]


def _counts(site: crr.Site, action) -> int:
    """How many counts of other present versions of keys ``action`` runs."""
    return sum(1 for s in _statements(site, action) if s.split()[:2] == ["SELECT", "count(*)"] and "c.kh = e.kh" in s)


def _concurrent(early: crr.Site, late: crr.Site) -> None:
    """Key 1 of t inserted at both sites, ``late``'s version later (it wins the key)."""
    for s in (early, late):
        s.execute("INSERT INTO d VALUES (1, 'w')")
    early.execute("INSERT INTO t VALUES (1, 'early')")
    time.sleep(0.01)  # stamps are milliseconds
    late.execute("INSERT INTO t VALUES (1, 'late')")


def test_a_single_writers_deletes_skip_the_count_and_the_flag_stays_false(tmp_path) -> None:
    src, dst = _site(site_id="src"), _site(tmp_path / "dst.db", site_id="dst")
    src.execute("INSERT INTO d VALUES (1, 'w'), (2, 'x')")
    src.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    cursor = sync(src, dst)
    assert _flag(dst) == "false"
    src.execute("DELETE FROM t WHERE k < 3")
    assert _counts(dst, lambda: sync(src, dst, since=cursor)) == 0
    assert app(dst, "t") == app(src, "t") == [(3, "c")]
    assert app(dst, "j") == app(src, "j") == []
    dst.close()
    assert _flag(crr.Site(tmp_path / "dst.db")) == "false"


def test_a_merge_storing_a_rival_version_sets_the_flag_and_the_delete_shows_the_rival(tmp_path) -> None:
    """``dst`` merges two concurrent versions of key 1 (the later visible), is reopened, then merges
    the later one's delete: the count runs, and the earlier version turns visible in ``t`` and ``j``."""
    early, late = _site(site_id="early"), _site(site_id="late")
    dst = _site(tmp_path / "dst.db", site_id="dst")
    _concurrent(early, late)
    sync(early, dst)
    assert _flag(dst) == "false"
    cursor = sync(late, dst)
    assert _flag(dst) == "true" and app(dst, "t") == [(1, "late")]
    dst.close()
    dst = crr.Site(tmp_path / "dst.db")
    late.execute("DELETE FROM t WHERE k = 1")
    assert _counts(dst, lambda: sync(late, dst, since=cursor)) == 1
    assert app(dst, "t") == [(1, "early")]
    assert app(dst, "j") == [(1, "early", "w")]


def test_two_present_versions_of_a_key_in_one_changeset_set_the_flag() -> None:
    """A relay holding both versions passes them on in one changeset (two entries of one key): the
    MERGE stores both present, so the flag is set, and the later version's delete shows the earlier."""
    early, late, relay, dst = (_site(site_id=n) for n in ("early", "late", "relay", "dst"))
    _concurrent(early, late)
    sync(early, relay)
    cursor = sync(late, relay)
    sync(relay, dst)
    assert _flag(dst) == "true" and app(dst, "t") == [(1, "late")]
    late.execute("DELETE FROM t WHERE k = 1")
    sync(late, dst, since=cursor)
    assert app(dst, "t") == [(1, "early")]
    assert app(dst, "j") == [(1, "early", "w")]


def test_a_version_7_file_is_upgraded_with_the_flag_set(tmp_path) -> None:
    """A file written before the flag existed may hold two present versions of a key: the upgrade
    sets it, and deletes are counted."""
    path = tmp_path / "v7.db"
    src, dst = _site(site_id="src"), _site(path, site_id="dst")
    src.execute("INSERT INTO d VALUES (1, 'w')")
    src.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    cursor = sync(src, dst)
    dst.close()
    as_written_by(path, 7)  # no flag
    dst = crr.Site(path)
    assert _flag(dst) == "true"
    assert dst.execute("SELECT v FROM _crr.meta WHERE k = 'version'") == [(str(STORAGE_VERSION),)]
    src.execute("DELETE FROM t WHERE k = 1")
    assert _counts(dst, lambda: sync(src, dst, since=cursor)) == 1
    assert app(dst, "t") == [(2, "b")]
