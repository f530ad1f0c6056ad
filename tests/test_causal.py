"""The causal-length MERGE's two forms (crr.causal): keyed entries merge by parity when each is its
key's only present candidate, and key-wide (by stamp) otherwise; both leave the state a site that
merged the same entries key-wide would hold."""

from __future__ import annotations

import pytest

import crr
from tests.conftest import app, aug, general_merges
from tests.test_point import _statements

KEY_WIDE = "GROUP BY kh"  # a phrase of the key-wide MERGE only (crr.causal.keyed_delta_sql)


def _merge(dst: crr.Site, src: crr.Site, since: int = 0) -> list[str]:
    """Merge ``src``'s changes after ``since`` into ``dst`` by the batch pipeline (not as
    crr.point_merge's one statement); return the MERGE statements on ``_crr.cl`` and the probe of
    other present versions that the merge ran."""
    cs = src.changes(since=since)
    with pytest.MonkeyPatch.context() as patch:
        general_merges(patch)
        ran = _statements(dst, lambda: dst.merge(cs.to_bytes()))
    return [s for s in ran if "_crr.cl" in s and (s.lstrip().startswith("MERGE") or "cl % 2 = 1" in s)]


def _pair(tmp_path) -> tuple[crr.Site, crr.Site]:
    a, b = crr.Site(tmp_path / "a.db", site_id="a"), crr.Site(tmp_path / "b.db", site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    return a, b


def test_new_keys_and_deletes_merge_by_parity(tmp_path) -> None:
    """Inserts of new keys, an update, and then deletes (of an updated key too) take the parity form
    whenever no batch key has another present version, and end where the sender is."""
    a, b = _pair(tmp_path)
    a.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    ran = _merge(b, a)
    assert ran and not any(KEY_WIDE in s for s in ran)  # new keys: parity form
    assert app(b, "t") == [(1, "a"), (2, "b"), (3, "c")]
    cursor = a.cursor
    a.execute("UPDATE t SET v = 'B' WHERE k = 2")  # two versions of key 2 in one changeset
    ran = _merge(b, a, cursor)
    assert any(KEY_WIDE in s for s in ran)
    assert app(b, "t") == [(1, "a"), (2, "B"), (3, "c")]
    cursor = a.cursor
    a.execute("DELETE FROM t WHERE k IN (2, 3)")  # key 2's other version is absent: parity form
    ran = _merge(b, a, cursor)
    assert ran and not any(KEY_WIDE in s for s in ran)
    assert app(b, "t") == app(a, "t") == [(1, "a")]
    assert aug(b, "t") == aug(a, "t")


def test_a_concurrent_version_of_a_key_is_resolved_key_wide(tmp_path) -> None:
    """Two sites insert the same key with different values. Each merge brings one version of a key
    that has another present version here: the key-wide form runs and keeps only the version with the
    larger stamp visible, at both sites (the parity form would show both)."""
    a, b = _pair(tmp_path)
    a.execute("INSERT INTO t VALUES (1, 'from a'), (2, 'only a')")
    b.execute("INSERT INTO t VALUES (1, 'from b')")
    cursor_b = b.cursor
    ran = _merge(a, b) + _merge(b, a)
    assert app(a, "t") == app(b, "t") == [(1, "from b"), (2, "only a")]  # b wrote later
    assert aug(a, "t") == aug(b, "t")
    assert sum(KEY_WIDE in s for s in ran) == 2
    b.execute("DELETE FROM t WHERE k = 1")  # a key's delete deletes every present version
    _merge(a, b, cursor_b)
    assert app(a, "t") == app(b, "t") == [(2, "only a")]
    assert aug(a, "t") == aug(b, "t")


@pytest.mark.parametrize("order", ["insert first", "insert and delete together"])
def test_a_delete_of_the_winning_version_shows_the_other_one(tmp_path, order: str) -> None:
    """Site b deletes the only version of key 7 it knows; site c also holds a's older version of that
    key. b's changeset then holds one entry for key 7 while another version is present at c. When c
    held b's version too (two present versions: its ``rival_versions`` flag is set), it merges the
    delete key-wide and a's version becomes visible; when b's version reaches c already deleted, a's
    stays c's only present version, visible, and the delete takes the parity form without the count
    (crr.catalog.SiteFlag.RIVAL_VERSIONS). All three sites converge."""
    a, b = _pair(tmp_path)
    c = crr.Site(tmp_path / "c.db", site_id="c")
    c.execute("CREATE REPLICATED TABLE t (k INTEGER PRIMARY KEY, v VARCHAR)")
    a.execute("INSERT INTO t VALUES (7, 'old')")
    b.execute("INSERT INTO t VALUES (7, 'new')")  # later stamp: wins while present
    _merge(c, a)
    if order == "insert first":
        _merge(c, b)
        assert app(c, "t") == [(7, "new")]
        cursor = b.cursor
        b.execute("DELETE FROM t WHERE k = 7")
        ran = _merge(c, b, cursor)
    else:
        b.execute("DELETE FROM t WHERE k = 7")
        ran = _merge(c, b)
    assert app(c, "t") == [(7, "old")]
    assert any(KEY_WIDE in s for s in ran) is (order == "insert first")
    for dst, src in ((a, b), (b, a), (a, c), (b, c)):
        _merge(dst, src)
    assert app(a, "t") == app(b, "t") == app(c, "t") == [(7, "old")]
    assert aug(a, "t") == aug(b, "t") == aug(c, "t")
