"""Remote sources (``CREATE REMOTE SOURCE``): inputs of a site's views that it keeps no readable copy of.

A source has no APP table. Its augmented tuples are kept (hidden) only when a view joins it; a
select/project view needs only each batch's new tuples, so then nothing but causal lengths is kept.
"""

from __future__ import annotations

import pytest

import crr
from tests.conftest import app, sync


@pytest.fixture()
def base():
    s = crr.Site(site_id="base")
    s.execute("CREATE REPLICATED TABLE r (a INTEGER PRIMARY KEY, b INTEGER, c INTEGER)")
    s.execute("CREATE REPLICATED TABLE q (k INTEGER PRIMARY KEY, c INTEGER)")
    yield s
    s.close()


def table_names(site: crr.Site) -> set[str]:
    return {r[0] for r in site.execute("SELECT schema_name || '.' || table_name FROM duckdb_tables() "
                                       "WHERE NOT temporary")}


def test_projection_over_a_source_keeps_no_tuples_and_follows_deletes_and_updates(base, tmp_path):
    v = crr.Site(tmp_path / "v.duckdb", site_id="v")
    v.execute("CREATE REMOTE SOURCE r (a INTEGER, b INTEGER, c INTEGER)")
    v.execute("CREATE MATERIALIZED VIEW p AS SELECT b, c FROM r WHERE c > 0")
    assert v.relations() == {"r": "source", "p": "view"}
    assert not v.relation("r").stored
    assert "main.r" not in table_names(v) and '_crr.r$t' not in table_names(v)

    base.execute("INSERT INTO r VALUES (1, 10, 100), (2, 10, 100), (3, 20, 200), (4, 30, -1)")
    sync(base, v)
    assert app(v, "p") == [(10, 100), (20, 200)]
    cursor = base.cursor
    base.execute("DELETE FROM r WHERE a = 1")
    base.execute("UPDATE r SET b = 99 WHERE a = 3")
    sync(base, v, since=cursor)
    assert app(v, "p") == [(10, 100), (99, 200)]  # (10, 100) still has a derivation: a = 2
    sync(base, v)  # a full snapshot again changes nothing
    assert app(v, "p") == [(10, 100), (99, 200)]
    v.close()

    v = crr.Site(tmp_path / "v.duckdb")  # the kind and the storage choice survive reopening
    assert v.relations() == {"r": "source", "p": "view"} and not v.relation("r").stored
    base.execute("DELETE FROM r WHERE a = 2")
    sync(base, v)
    assert app(v, "p") == [(99, 200)]
    v.close()


def test_a_joined_source_keeps_its_tuples_hidden(base):
    v = crr.Site(site_id="v")
    v.execute("CREATE REMOTE SOURCE r (a INTEGER, b INTEGER, c INTEGER)")
    v.execute("CREATE REMOTE SOURCE q (k INTEGER, c INTEGER)")
    v.execute("CREATE MATERIALIZED VIEW j AS SELECT r.a, q.k FROM r JOIN q ON r.c = q.c")
    assert v.relation("r").stored and v.relation("q").stored
    assert "main.r" not in table_names(v) and "main.q" not in table_names(v)
    base.execute("INSERT INTO r VALUES (1, 10, 100), (2, 10, 200)")
    sync(base, v, "r")
    base.execute("INSERT INTO q VALUES (7, 100)")  # arrives later: joins with r's kept tuples
    sync(base, v, "q")
    assert app(v, "j") == [(1, 7)]
    # kept tuples also let a later view over them be filled
    v.execute("CREATE MATERIALIZED VIEW p AS SELECT a FROM r")
    assert app(v, "p") == [(1,), (2,)]
    v.close()


def test_what_a_source_refuses(base):
    v = crr.Site(site_id="v")
    v.execute("CREATE REMOTE SOURCE r (a INTEGER, b INTEGER, c INTEGER)")
    v.execute("CREATE MATERIALIZED VIEW p AS SELECT b FROM r")
    base.execute("INSERT INTO r VALUES (1, 10, 100)")
    sync(base, v)
    with pytest.raises(crr.ReadOnlyRelationError, match="only feeds"):
        v.execute("INSERT INTO r VALUES (2, 2, 2)")
    with pytest.raises(crr.CatalogError, match="remote source"):
        v.execute("SELECT * FROM r")
    for plain in ("CREATE TABLE r (a INTEGER)", "CREATE VIEW r AS SELECT 1 AS a"):  # a probe's case: it was
        with pytest.raises(crr.UnsupportedSqlError, match="would change r outside crr"):  # refused as a read of r
            v.execute(plain)
    with pytest.raises(crr.CatalogError, match="keeps no copy"):
        v.changes(relations=["r"])
    assert [rc.name for rc in v.changes().relations] == ["p"]  # a full snapshot leaves the source out
    with pytest.raises(crr.CatalogError, match="keeps no tuples"):
        v.provenance("r")
    # it has data but kept no tuples: a new view over it could not be filled
    before = v.relations()
    with pytest.raises(crr.CatalogError, match="cannot be filled"):
        v.execute("CREATE MATERIALIZED VIEW j AS SELECT x.a FROM r x JOIN r y ON x.b = y.a")
    with pytest.raises(crr.CatalogError, match="cannot be filled"):
        v.execute("CREATE MATERIALIZED VIEW p2 AS SELECT a FROM r")
    assert v.relations() == before
    with pytest.raises(crr.CatalogError, match="read it"):
        v.execute("DROP REMOTE SOURCE r")
    v.execute("DROP MATERIALIZED VIEW p")
    v.execute("DROP REMOTE SOURCE r")
    assert v.relations() == {}
    assert v.execute("SELECT count(*) FROM _crr.cl")[0][0] == 0
    v.close()


@pytest.mark.parametrize("joined", [False, True])
def test_forged_ids_into_a_source_are_refused_and_change_nothing(base, joined):
    import pyarrow as pa

    v = crr.Site(site_id="v")
    v.execute("CREATE REMOTE SOURCE r (a INTEGER, b INTEGER, c INTEGER)")
    view = "SELECT x.a FROM r x JOIN r y ON x.b = y.a" if joined else "SELECT b, c FROM r"
    v.execute(f"CREATE MATERIALIZED VIEW p AS {view}")
    base.execute("INSERT INTO r VALUES (1, 1, 100), (2, 10, 100)")
    cs = base.changes(relations=["r"])
    rc = cs.relations[0]
    rc.tuples = rc.tuples.set_column(3, "c2", pa.array([7] * rc.tuples.num_rows, pa.int32()))
    with pytest.raises(crr.ChangesetError, match="do not match"):
        v.merge(crr.Changeset.from_bytes(cs.to_bytes()))
    assert app(v, "p") == [] and v.execute("SELECT count(*) FROM _crr.cl") == [(0,)]
    sync(base, v)  # the genuine changeset still merges afterwards
    assert app(v, "p") == ([(1,)] if joined else [(1, 100), (10, 100)])
    v.close()
