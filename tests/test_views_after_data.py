"""A view created after its inputs hold data is filled from them (crr.maintain.Maintainer.populate).

Found by a probe: the fill's first monomials of several ids marked the new view wide in the
maintainer's catalog, but ``in?`` then ran with the relation as it was before, valuing each
monomial by its first id alone: every row needing two different input tuples stayed missing, for
good, while the view's provenance held it (a site copying the view computed it right).
"""

from __future__ import annotations

import pytest

import crr

QUERIES = {
    "join": "SELECT r.a, s.c FROM r JOIN s ON r.b = s.b",
    "theta": "SELECT r.a, s.c FROM r, s WHERE r.a < s.c",
    "self_join": "SELECT x.a, y.a AS a2 FROM r x JOIN r y ON x.b <= y.b",
    "aggregate": "SELECT count(*) AS n, sum(s.c) AS t FROM r JOIN s ON r.b = s.b",
}


def _writer() -> crr.Site:
    a = crr.Site(site_id="a")
    a.execute("CREATE REPLICATED TABLE r (a INT, b INT)")
    a.execute("CREATE REPLICATED TABLE s (b INT, c INT)")
    a.execute("INSERT INTO r VALUES (1, 1), (2, 2), (3, 2)")
    a.execute("INSERT INTO s VALUES (1, 10), (2, 20)")
    return a


@pytest.mark.parametrize("kind", ["REPLICATED TABLE", "REMOTE TABLE"])
@pytest.mark.parametrize("name", list(QUERIES))
def test_a_view_declared_after_the_data_holds_every_row(kind: str, name: str):
    a = _writer()
    site = crr.Site(site_id="late")
    site.execute(f"CREATE {kind} r (a INT, b INT)")
    site.execute(f"CREATE {kind} s (b INT, c INT)")
    site.merge(a.changes())
    site.execute(f"CREATE MATERIALIZED VIEW v AS {QUERIES[name]}")
    want = sorted(site.execute(QUERIES[name]))
    assert want and want != [(0, None)]
    assert sorted(site.execute("SELECT * FROM v")) == want
    a.execute("DELETE FROM r WHERE a = 2")          # and it keeps following its inputs
    site.merge(a.changes())
    assert sorted(site.execute("SELECT * FROM v")) == sorted(site.execute(QUERIES[name]))


def test_a_view_over_a_join_view_declared_later_holds_every_row():
    site = _writer()
    site.execute(f"CREATE MATERIALIZED VIEW j AS {QUERIES['join']}")
    site.execute("CREATE MATERIALIZED VIEW over AS SELECT c FROM j")
    assert sorted(site.execute("SELECT * FROM over")) == [(10,), (20,)]
    site.execute("DROP MATERIALIZED VIEW over")      # dropped and declared again: the same
    site.execute("CREATE MATERIALIZED VIEW over AS SELECT a, c FROM j WHERE c > 10")
    assert sorted(site.execute("SELECT * FROM over")) == [(2, 20), (3, 20)]


@pytest.mark.parametrize("held", [False, True])
def test_a_view_over_empty_inputs_is_filled_by_one_query(held: bool) -> None:
    """Declaring a view over inputs that hold nothing runs one query of them, and no temp table or
    delta statement; once an input holds a row, the view is filled from it."""
    from tests.test_point import _statements

    site = crr.Site(site_id="v")
    site.execute("CREATE REMOTE TABLE r (a INT, b INT)")
    site.execute("CREATE REMOTE TABLE s (b INT, c INT)")
    if held:
        writer = _writer()
        for rel in ("r", "s"):
            site.merge(writer.changes(relations=[rel]))
    ran = _statements(site, lambda: site.execute(f"CREATE MATERIALIZED VIEW j AS {QUERIES['join']}"))
    temps = [s for s in ran if "TEMP TABLE" in s]
    assert bool(temps) == held
    assert any(s.startswith("SELECT EXISTS (SELECT 1 FROM") for s in ran)
    assert site.execute("SELECT count(*) FROM j")[0][0] == (3 if held else 0)


def test_views_declared_over_empty_inputs_take_the_one_statement_merge_of_new_rows() -> None:
    """A site that declared a projection and a join view over its tables holding nothing merges a
    peer's new rows in one statement (crr.point_merge), as one whose views were filled does: declaring them
    recorded the projection's monomial length, which that path reads."""
    from tests.test_point import _statements

    writer = _writer()
    site = crr.Site(site_id="v")  # a peer of the writer's, as in `crr bench merge`
    site.execute("CREATE REPLICATED TABLE r (a INT, b INT)")
    site.execute("CREATE REPLICATED TABLE s (b INT, c INT)")
    site.execute("CREATE MATERIALIZED VIEW p AS SELECT b FROM r")
    site.execute(f"CREATE MATERIALIZED VIEW j AS {QUERIES['join']}")
    site.merge(writer.changes(relations=["s"]))
    ran = _statements(site, lambda: site.merge(writer.changes(relations=["r"]).to_bytes()))
    assert len([s for s in ran if not s.startswith(("DESCRIBE", "PREPARE"))]) == 1, ran
    assert site.execute("SELECT * FROM p ORDER BY b") == [(1,), (2,)]
    assert site.execute("SELECT count(*) FROM j")[0][0] == 3
