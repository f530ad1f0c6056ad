"""crr.sql_memo: a view's generated delta SQL is shared by the process's sites, under a key of
everything it is generated from, so sites whose catalogs differ never get each other's text."""

from __future__ import annotations

import crr
from crr import sql_memo
from crr.sql.compile import ViewPlan


def _generations(monkeypatch) -> list[str]:
    """The views whose delta queries were generated (each call of ViewPlan.delta_queries)."""
    calls: list[str] = []
    original = ViewPlan.delta_queries

    def counting(self, *args, **kwargs):
        calls.append(self.name)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(ViewPlan, "delta_queries", counting)
    return calls


def _site(name: str, column_type: str, view: str) -> crr.Site:
    site = crr.Site(site_id=name)
    site.execute(f"CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, a {column_type})")
    site.execute(f"CREATE MATERIALIZED VIEW v AS {view}")
    return site


def test_sites_declaring_the_same_view_generate_its_delta_sql_once(monkeypatch):
    sql_memo.clear()
    calls = _generations(monkeypatch)
    sites = [_site(f"s{i}", "INTEGER", "SELECT a FROM r WHERE a > 1") for i in range(3)]
    for i, site in enumerate(sites):
        site.execute("INSERT INTO r VALUES (?, ?)", [i, 5 + i])
        assert site.execute("SELECT a FROM v") == [(5 + i,)]
    assert calls == ["v"]  # the first site generated it; the others took its text


def test_another_column_type_or_definition_gets_its_own_text(monkeypatch):
    """A key missing the columns' types would hand the VARCHAR site the INTEGER site's casts (an
    error, or 'x' lost); one missing the definition would hand the filtered view the plain one's text
    (checked by hand: without the definition in the key, 11 and 7 both show)."""
    sql_memo.clear()
    calls = _generations(monkeypatch)
    ints = _site("ints", "INTEGER", "SELECT a FROM r")
    texts = _site("texts", "VARCHAR", "SELECT a FROM r")
    filtered = _site("filtered", "INTEGER", "SELECT a FROM r WHERE a > 10")
    ints.execute("INSERT INTO r VALUES (1, 7)")
    texts.execute("INSERT INTO r VALUES (1, 'x')")
    filtered.execute("INSERT INTO r VALUES (1, 7), (2, 11)")
    assert ints.execute("SELECT a FROM v") == [(7,)]
    assert texts.execute("SELECT a FROM v") == [("x",)]
    assert filtered.execute("SELECT a FROM v") == [(11,)]
    assert calls == ["v", "v", "v"]
    for site in (ints, texts, filtered):
        site.close()


def test_a_view_over_a_remote_table_and_one_over_a_replicated_table_keep_their_own_text(monkeypatch):
    """The same view text over a relation of the same name and columns, replicated at one site and
    a remote copy at the other: the deltas come from other tables."""
    sql_memo.clear()
    source = crr.Site(site_id="source")
    source.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, a INTEGER)")
    local = _site("local", "INTEGER", "SELECT a FROM r")
    remote = crr.Site(site_id="remote")
    remote.execute("CREATE REMOTE TABLE r (k INTEGER, a INTEGER)")
    remote.execute("CREATE MATERIALIZED VIEW v AS SELECT a FROM r")
    calls = _generations(monkeypatch)
    local.execute("INSERT INTO r VALUES (1, 3)")
    source.execute("INSERT INTO r VALUES (1, 4), (2, 6)")
    remote.merge(source.changes())
    assert local.execute("SELECT a FROM v") == [(3,)]
    assert sorted(remote.execute("SELECT a FROM v")) == [(4,), (6,)]
    assert calls == ["v", "v"]
