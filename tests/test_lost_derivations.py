"""Views whose tuples have one derivation each: the compiler's analysis (``ViewPlan.one_derivation``)
and the maintainer's removal path (``Maintainer._only_derivations_lost``): a batch that only deletes
removes the view tuples of the monomials holding a deleted id with one DELETE, and every other batch
takes the MERGE that re-evaluates membership."""

from __future__ import annotations

import time

import pytest

import crr
from tests.conftest import app, sync
from tests.test_point import _expanded, _statements, app_writes

R1 = "(a INTEGER, b INTEGER, c INTEGER, d INTEGER, e VARCHAR)"
R2 = "(k INTEGER, c INTEGER)"
JOIN = "SELECT r1.a, r1.b, r1.c, r1.d, r1.e, r2.k FROM r1 JOIN r2 ON r1.c = r2.c"


def _site(keyed: bool = True, view: str = JOIN, site_id: str | None = None) -> crr.Site:
    site = crr.Site(site_id=site_id)
    key = "a INTEGER PRIMARY KEY" if keyed else "a INTEGER"
    site.execute(f"CREATE REPLICATED TABLE r1 ({key}, b INTEGER, c INTEGER, d INTEGER, e VARCHAR)")
    site.execute("CREATE REPLICATED TABLE r2 (k INTEGER PRIMARY KEY, c INTEGER)")
    site.execute("CREATE REPLICATED TABLE r3 (k BIGINT, c BIGINT)")
    site.execute(f"CREATE MATERIALIZED VIEW j AS {view}")
    return site


@pytest.mark.parametrize("query, one", [
    (JOIN, True),  # r2.c is fixed by r1.c = r2.c
    ("SELECT * FROM r1 JOIN r2 USING (c)", True),  # USING equates the hidden r2.c too
    ("SELECT * FROM r1 WHERE b > 3", True),
    ("SELECT x.a, x.b, x.c, x.d, x.e, y.a AS a2, y.b AS b2, y.c AS c2, y.d AS d2, y.e AS e2 "
     "FROM r1 x JOIN r1 y ON x.a = y.b", True),  # a self join, every column of both occurrences
    ("SELECT r1.a, r1.b, r1.c, r1.d, r1.e, r2.k FROM r1 JOIN r2 ON (r1.c = r2.c AND r1.b > 0)", True),
    ("SELECT a, b, d, e FROM r1 WHERE c = 5", True),  # c is fixed by the literal
    ("SELECT a, b, c, d FROM r1 WHERE e = 'x' AND -3 = c", True),
    ("SELECT a, b, d, e FROM r1 WHERE c = 5.0", False),  # a DOUBLE literal: left out
    ("SELECT a, b, d, e FROM r1 WHERE c > 5", False),
    ("SELECT a, b, c, d FROM r1 WHERE e = 5", False),  # a VARCHAR column against a number: '5', '05'
    ("SELECT b, c FROM r1", False),  # a projection: many rows of r1 give one (b, c)
    ("SELECT r1.a, r2.k FROM r1 JOIN r2 ON r1.c = r2.c", False),
    ("SELECT r1.a, r1.b, r1.c, r1.d, r1.e, r2.k FROM r1 JOIN r2 ON r1.c = r2.c OR r1.b = r2.c", False),
    ("SELECT r1.a, r1.b, r1.c, r1.d, r1.e, r3.k FROM r1 JOIN r3 ON r1.c = r3.c", False),  # INTEGER = BIGINT
    ("SELECT a + 1 AS a1, b, c, d, e FROM r1", False),  # an expression, not the column
    ("SELECT a, b, c, d, e FROM r1 UNION SELECT k, c, c, c, 'x' FROM r2", False),  # two branches
])
def test_the_compiler_finds_views_whose_rows_fix_their_inputs_rows(query: str, one: bool) -> None:
    assert _site(view=query).relation("j").plan.one_derivation is one


def _app_statements(site: crr.Site, action) -> list[str]:
    """The first words of the statements ``action`` runs on the view's APP table."""
    return app_writes(site, action, ["j"])["j"]


def test_deletes_remove_the_view_rows_with_one_delete_locally_and_by_merge() -> None:
    """A local DELETE (the point path) and a merge of deletes (the causal-length UPDATE) each change
    the join view with one DELETE, and leave it equal to the query over what is left."""
    src, dst = _site(site_id="src"), _site(site_id="dst")
    src.execute("INSERT INTO r2 VALUES (1, 10), (2, 20), (3, 10)")
    src.execute("INSERT INTO r1 VALUES " + ", ".join(f"({i}, {i % 3}, {10 * (1 + i % 2)}, 0, 'x{i}')"
                                                     for i in range(8)))
    cursor = sync(src, dst)
    assert _app_statements(src, lambda: src.execute("DELETE FROM r1 WHERE a < 3")) == ["DELETE FROM"]
    assert _app_statements(dst, lambda: sync(src, dst, since=cursor)) == ["DELETE FROM"]
    want = src.execute(f"SELECT DISTINCT * FROM ({JOIN}) ORDER BY ALL")
    assert len(want) == 7 and all(row[0] >= 3 for row in want)
    assert app(src, "j") == app(dst, "j") == want


def test_a_view_whose_tuples_have_several_derivations_keeps_a_tuple_another_derives() -> None:
    """``SELECT r1.a, r2.k ...`` leaves r1's other columns out, so two rows of r1 derive one tuple:
    deleting one keeps it (membership is re-evaluated: a local DELETE's one statement deletes the
    view rows none of whose derivations is alive, crr.maintain.Maintainer.removals; a merge runs
    the MERGE); a DELETE by monomial would remove it."""
    site = _site(keyed=False, view="SELECT r1.a, r2.k FROM r1 JOIN r2 ON r1.c = r2.c")
    site.execute("INSERT INTO r2 VALUES (7, 5)")
    site.execute("INSERT INTO r1 VALUES (1, 1, 5, 0, 'x'), (2, 1, 5, 0, 'z')")
    site.execute("INSERT INTO r1 VALUES (1, 2, 5, 0, 'y')")  # a second derivation of (1, 7), present already
    assert app(site, "j") == [(1, 7), (2, 7)]
    other = _site(keyed=False, view="SELECT r1.a, r2.k FROM r1 JOIN r2 ON r1.c = r2.c")
    sync(site, other)
    cursor = site.cursor  # where site's changes to other resume
    assert _app_statements(site, lambda: site.execute("DELETE FROM r1 WHERE b = 1")) == ["DELETE FROM"]
    assert app(site, "j") == [(1, 7)]
    assert _app_statements(other, lambda: sync(site, other, since=cursor)) == ["MERGE INTO"]
    assert app(other, "j") == [(1, 7)]


def test_a_literal_of_another_kind_does_not_fix_a_column() -> None:
    """``e = 5`` over a VARCHAR ``e`` matches '5' and '05' alike, so a tuple of ``SELECT a, b, c, d``
    has two derivations here: deleting one keeps it. ``c = 7`` over an INTEGER ``c`` fixes ``c``:
    that view loses its tuple by the DELETE."""
    site = _site(keyed=False, view="SELECT a, b, c, d FROM r1 WHERE e = 5")
    site.execute("CREATE MATERIALIZED VIEW k AS SELECT a, b, d, e FROM r1 WHERE c = 7")
    site.execute("INSERT INTO r1 VALUES (1, 1, 7, 1, '5'), (1, 1, 7, 1, '05')")
    assert app(site, "j") == [(1, 1, 7, 1)] and app(site, "k") == [(1, 1, 1, "05"), (1, 1, 1, "5")]
    other = _site(keyed=False, view="SELECT a, b, c, d FROM r1 WHERE e = 5")
    other.execute("CREATE MATERIALIZED VIEW k AS SELECT a, b, d, e FROM r1 WHERE c = 7")
    sync(site, other)
    cursor = site.cursor  # where site's changes to other resume
    site.execute("DELETE FROM r1 WHERE e = '05'")
    assert app(site, "j") == [(1, 1, 7, 1)] and app(site, "k") == [(1, 1, 1, "5")]
    ran = [" ".join(s.split()[:3]) for s in _statements(other, lambda: sync(site, other, since=cursor))]
    assert 'MERGE INTO main."j"' in ran and 'DELETE FROM main."k"' in ran
    assert app(other, "j") == [(1, 1, 7, 1)] and app(other, "k") == [(1, 1, 1, "5")]


def test_new_rows_of_a_one_derivation_view_are_appended_without_reading_its_app_table() -> None:
    """A new monomial of such a view is its tuple's one derivation, so the tuple cannot be in the APP
    table yet: the INSERT reads the new rows only (the view with several derivations per tuple above
    shows the anti-join is needed otherwise)."""
    src, dst = _site(site_id="src"), _site(site_id="dst")
    src.execute("INSERT INTO r2 VALUES (1, 10), (2, 20), (3, 10)")
    for s in (src, dst):  # a local INSERT's one statement holds the view's INSERT (crr.maintain.Maintainer.appends)
        ran = _expanded(s, _statements(s, lambda: s.execute("INSERT INTO r1 VALUES (1, 0, 10, 0, 'x')")
                                       if s is src else sync(src, dst)))
        inserts = [x for x in ran if 'INSERT INTO main."j"' in " ".join(x.split()) and not x.startswith("PREPARE ")]
        assert len(inserts) == 1 and inserts[0].count('main."j"') == 1
    src.execute("INSERT INTO r1 VALUES " + ", ".join(f"({i}, 0, {10 * (1 + i % 2)}, 0, 'y')" for i in range(2, 9)))
    sync(src, dst)
    want = src.execute(f"SELECT DISTINCT * FROM ({JOIN}) ORDER BY ALL")
    assert len(want) == 13 and app(src, "j") == app(dst, "j") == want


def test_a_merge_that_deletes_and_reinserts_takes_the_merge() -> None:
    """One changeset deleting X and re-inserting Y: Y's entry is written visible, so the view tuple of
    Y's monomial enters the view (the DELETE by monomial would leave it out)."""
    src, dst = _site(site_id="src"), _site(site_id="dst")
    src.execute("INSERT INTO r2 VALUES (1, 10)")
    src.execute("INSERT INTO r1 VALUES (1, 0, 10, 0, 'x'), (2, 0, 10, 0, 'y')")
    src.execute("DELETE FROM r1 WHERE a = 2")
    cursor = sync(src, dst)
    assert app(dst, "j") == [(1, 0, 10, 0, "x", 1)]
    src.execute("DELETE FROM r1 WHERE a = 1")
    src.execute("INSERT INTO r1 VALUES (2, 0, 10, 0, 'y')")
    assert "MERGE INTO" in _app_statements(dst, lambda: sync(src, dst, since=cursor))
    assert app(dst, "j") == app(src, "j") == [(2, 0, 10, 0, "y", 1)]


def test_deleting_a_keys_winning_version_shows_the_rival_version() -> None:
    """Two sites insert key 1 concurrently; a third holds both, the later one visible. Deleting the
    later one where it was written makes the earlier one visible at the third site: an entry the
    merge writes visible, so the view gains its row (the DELETE by monomial would miss it)."""
    early, late, dst = _site(site_id="early"), _site(site_id="late"), _site(site_id="dst")
    for s in (early, late):
        s.execute("INSERT INTO r2 VALUES (1, 10)")
    early.execute("INSERT INTO r1 VALUES (1, 0, 10, 0, 'early')")
    time.sleep(0.01)  # stamps are milliseconds: the later insert wins the key
    late.execute("INSERT INTO r1 VALUES (1, 0, 10, 0, 'late')")
    sync(early, dst)
    cursor = sync(late, dst)
    assert app(dst, "j") == [(1, 0, 10, 0, "late", 1)]
    late.execute("DELETE FROM r1 WHERE a = 1")
    assert "MERGE INTO" in _app_statements(dst, lambda: sync(late, dst, since=cursor))
    assert app(dst, "r1") == [(1, 0, 10, 0, "early")]
    assert app(dst, "j") == [(1, 0, 10, 0, "early", 1)]
