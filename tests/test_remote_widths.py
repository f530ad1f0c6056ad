"""Join provenance over remote tables: one id per monomial, or many.

A view joining two inputs whose monomials hold one id each builds each product monomial as an
ordered pair (``sql/compile.py``, ``monomial_product``). A remote table qualifies while it has only
received a replicated table's tuples; once it holds a view's monomials (``derived``) it does not,
and the product must keep every id of them, or a join row outlives the death of a tuple it was
derived from.
"""

from __future__ import annotations

import pytest

import crr
from tests.conftest import app, sync


@pytest.mark.parametrize("dead", ["r", "s"])
def test_a_join_over_a_remote_view_keeps_every_id_of_its_monomials(dead):
    """far = j2 JOIN t at v2, where j2 (a remote copy of a join view) has two-id monomials and t
    (a remote copy of a replicated table) one-id ones. Deleting either base tuple under j2's row
    removes far's row: one of the two deletions fails if far's monomials lost an id of j2's."""
    base, v1, v2 = crr.Site(site_id="base"), crr.Site(site_id="v1"), crr.Site(site_id="v2")
    base.execute("CREATE REPLICATED TABLE r (a INTEGER, b INTEGER)")
    base.execute("CREATE REPLICATED TABLE s (b INTEGER, c INTEGER)")
    base.execute("CREATE REPLICATED TABLE t (c INTEGER, d INTEGER)")
    v1.execute("CREATE REMOTE TABLE r (a INTEGER, b INTEGER)")
    v1.execute("CREATE REMOTE TABLE s (b INTEGER, c INTEGER)")
    v1.execute("CREATE MATERIALIZED VIEW j2 AS SELECT r.a, s.c FROM r JOIN s ON r.b = s.b")
    v2.execute("CREATE REMOTE TABLE j2 (a INTEGER, c INTEGER)")
    v2.execute("CREATE REMOTE TABLE t (c INTEGER, d INTEGER)")
    v2.execute("CREATE MATERIALIZED VIEW far AS SELECT j2.a, t.d FROM j2 JOIN t ON j2.c = t.c")
    base.execute("INSERT INTO r VALUES (1, 10), (2, 20)")
    base.execute("INSERT INTO s VALUES (10, 100), (20, 200)")
    base.execute("INSERT INTO t VALUES (100, 7), (200, 8)")
    sync(base, v1, "r", "s")
    sync(base, v2, "t")
    v1_cursor = sync(v1, v2, "j2")
    assert v2.relation("j2").derived and not v2.relation("t").derived
    assert app(v2, "far") == [(1, 7), (2, 8)]
    assert v2.execute('SELECT DISTINCT len(ids) FROM _crr."far$m"') == [(3,)]

    base_cursor = base.cursor
    base.execute(f"DELETE FROM {dead} WHERE b = 10")
    sync(base, v1, "r", "s", since=base_cursor)
    sync(v1, v2, "j2", since=v1_cursor)
    assert app(v1, "j2") == [(2, 200)]
    assert app(v2, "j2") == [(2, 200)]
    assert app(v2, "far") == [(2, 8)]
    for s in (base, v1, v2):
        s.close()
