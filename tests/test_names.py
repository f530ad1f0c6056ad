"""Any identifier DuckDB accepts works as a column or relation name (DESIGN 1.6, guarantee 5).

crr's internal columns (ids, causal lengths, stamps, flags) and the aliases of its own queries live
in their own namespace, so user names such as ``id``, ``seq``, ``keep`` or ``kh`` and quoted names
with spaces, quotes, dots and semicolons change nothing: a replicated table, a remote copy and views
over them hold exactly what plain DuckDB computes from the same statements.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crr
from crr.types import quote_ident
from crr.sql.statements import fold_identifier, is_reserved

# crr's internal column names, names of its query aliases and generated columns, SQL keywords, and
# names with characters that break text pasted into SQL
HOSTILE_COLUMNS = [
    "id", "seq", "vid", "mid", "ids", "cl", "stamp", "rel", "vis", "keep", "kh", "ok", "grew", "old_vis",
    "cur", "top", "_crr_ids", "_crr_old_0", "_crr_set_0", "_crr_src", "c0", "c1", "o0", "g0", "d", "app",
    "merge_action", "count", "select", "my col", "it's", 'say "hi"', "x.y", "a;b", "MiXeD", "ünïcödé", "1st",
    " lead", "-- not a comment", "'); DROP TABLE t; --",
]
HOSTILE_RELATIONS = ["'quote'", "x.y", "a;b", "my table", "id", "cl", "meta", "Mixed Case", "t$m", "select"]


def _q(name: str) -> str:
    return quote_ident(name)


def _run(table: str, cols: list[str], keyed: bool) -> None:
    """Write, view and replicate a table with the given names; compare everything with plain DuckDB."""
    k, v, w = cols
    key = f", PRIMARY KEY ({_q(k)})" if keyed else ""
    ddl = f"({_q(k)} INTEGER, {_q(v)} VARCHAR, {_q(w)} INTEGER{key})"
    views = {
        "pv": f"SELECT {_q(v)}, {_q(w)} FROM {_q(table)} WHERE {_q(w)} > 0",
        "jv": f"SELECT x.{_q(k)}, y.{_q(v)} AS {_q(w)} FROM {_q(table)} x JOIN {_q(table)} y ON x.{_q(w)} = y.{_q(k)}",
        "vv": f"SELECT {_q(v)} FROM pv WHERE {_q(w)} < 3",
    }
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    ref = duckdb.connect()
    try:
        a.execute(f"CREATE REPLICATED TABLE {_q(table)} {ddl}")
        b.execute(f"CREATE REMOTE TABLE {_q(table)} {ddl}")
        ref.execute(f"CREATE TABLE {_q(table)} {ddl}")
        for name, sql in views.items():
            for s in (a, b):
                s.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            ref.execute(f"CREATE VIEW {name} AS {sql}")
        statements = [
            (f"INSERT INTO {_q(table)} VALUES (?, ?, ?)", [1, "one", 2]),
            (f"INSERT INTO {_q(table)} ({_q(w)}, {_q(k)}, {_q(v)}) VALUES (1, 2, 'two'), (0, 3, NULL)", None),
            (f"UPDATE {_q(table)} SET {_q(v)} = {_q(v)} || '!', {_q(w)} = {_q(w)} + 1 WHERE {_q(k)} = ?", [2]),
            (f"DELETE FROM {_q(table)} WHERE {_q(k)} = 3", None),
            (f"INSERT INTO {_q(table)} SELECT {_q(k)} + 10, {_q(v)}, {_q(w)} FROM {_q(table)} WHERE {_q(k)} < 3", None),
        ]
        for sql, params in statements:
            assert a.execute(sql, params) == ref.execute(sql, params).fetchall()
        b.merge(a.changes().to_bytes())
        expected = ref.execute(f"SELECT * FROM {_q(table)} ORDER BY ALL NULLS FIRST").fetchall()
        assert len(expected) == 4
        for s in (a, b):
            got = s.execute(f"SELECT * FROM {_q(table)} ORDER BY ALL NULLS FIRST")
            assert got == expected, f"{s.site_id}: {table} differs from plain DuckDB"
            names = [d[0] for d in s.execute(f"DESCRIBE {_q(table)}")]
            assert names == [fold_identifier(c) for c in cols]
            for name in views:
                want = ref.execute(f"SELECT DISTINCT * FROM {name} ORDER BY ALL NULLS FIRST").fetchall()
                assert s.execute(f"SELECT * FROM {name} ORDER BY ALL NULLS FIRST") == want, f"{s.site_id}: {name}"
        # a changeset of the view travels too: a third site holds it as a remote table
        c = crr.Site(site_id="c")
        c.execute(f"CREATE REMOTE TABLE jv ({_q(k)} INTEGER, {_q(w)} VARCHAR)")
        c.merge(b.changes(relations=["jv"]).to_bytes())
        assert c.execute("SELECT * FROM jv ORDER BY ALL NULLS FIRST") == \
            ref.execute("SELECT DISTINCT * FROM jv ORDER BY ALL NULLS FIRST").fetchall()
        c.close()
    finally:
        a.close()
        b.close()
        ref.close()


TRIPLES = [(HOSTILE_COLUMNS[i:i + 3] + ["pad1", "pad2"])[:3] for i in range(0, len(HOSTILE_COLUMNS), 3)]


@pytest.mark.parametrize("cols", TRIPLES, ids=lambda c: "|".join(c))
@pytest.mark.parametrize("keyed", [False, True])
def test_hostile_column_names(cols: list[str], keyed: bool) -> None:
    _run("t", cols, keyed)


@pytest.mark.parametrize("table", HOSTILE_RELATIONS)
def test_hostile_relation_names(table: str) -> None:
    _run(table, ["k", "v", "w"], keyed=True)


def test_every_internal_name_at_once() -> None:
    """One table whose three columns are all internal names, under a hostile relation name."""
    _run("'quote'", ["id", "keep", "kh"], keyed=True)
    _run("a;b", ["vid", "ids", "ok"], keyed=False)


names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=12)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=names, cols=st.lists(names, min_size=3, max_size=3, unique_by=fold_identifier), keyed=st.booleans())
def test_any_names(table: str, cols: list[str], keyed: bool) -> None:
    """Random identifiers: whatever DuckDB itself accepts, crr accepts and handles the same way."""
    probe = duckdb.connect()
    try:
        probe.execute(f"CREATE TABLE {_q(table)} ({', '.join(_q(c) + ' INTEGER' for c in cols)})")
    except duckdb.Error:
        return  # not a name DuckDB accepts either
    finally:
        probe.close()
    if table.lower() in ("pv", "jv", "vv") or is_reserved(table):
        return
    _run(table, cols, keyed)


@pytest.mark.parametrize("name", ["_crr_bulk", "_CRR_wnew", "_crr_point_arrow", "_crrx"])
def test_names_of_crrs_own_tables_are_refused(name: str) -> None:
    """crr keeps temporary tables and Arrow views named ``_crr...`` on the site's connection, where
    DuckDB finds them before the main schema's tables, even as ``main.name``. A replicated table named
    ``_crr_bulk`` lost its APP rows to crr's temporary table of that name after the site's first batch
    write; now such names are refused when declared, and plain tables and drops of them too."""
    site = crr.Site(site_id="a")
    try:
        site.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
        site.insert_many("r", pa.table({"k": list(range(2000)), "v": ["x"] * 2000}))  # the batch path's tables
        site.execute("UPDATE r SET v = 'y' WHERE k < 1000")
        before = site.execute("SELECT * FROM r ORDER BY k")
        for ddl in [f"CREATE REPLICATED TABLE {_q(name)} (k INTEGER PRIMARY KEY)", f"CREATE REMOTE TABLE {_q(name)} (k INTEGER)",
                    f"CREATE MATERIALIZED VIEW {_q(name)} AS SELECT v FROM r", f"CREATE TABLE {_q(name)} (k INTEGER)",
                    f"CREATE TEMP TABLE {_q(name)} (k INTEGER)", f"DROP TABLE {_q(name)}", f"DROP VIEW {_q(name)}"]:
            with pytest.raises(crr.UnsupportedSqlError, match="_crr"):
                site.execute(ddl)
        assert list(site.relations()) == ["r"] and site.execute("SELECT * FROM r ORDER BY k") == before
        site.execute("UPDATE r SET v = 'z' WHERE k < 10")  # crr's own tables are all there still
        assert site.execute("SELECT v, count(*) FROM r GROUP BY v ORDER BY v") == [("x", 1000), ("y", 990), ("z", 10)]
        # and SHOW TABLES lists the app's tables, not crr's temporary ones
        site.execute("CREATE TABLE notes (n INTEGER)")
        assert site.execute("SHOW TABLES") == [("notes",), ("r",)]
        for show in ("SHOW ALL TABLES", "SHOW ALL TABLES; -- with a comment", "SHOW ALL TABLES /* one */"):
            assert [row[2] for row in site.execute(show) if row[1] == "main"] == ["notes", "r"], show
    finally:
        site.close()


@pytest.mark.parametrize("order", [("étab", "Étab"), ("Étab", "étab")])
def test_names_differing_in_a_non_ascii_letters_case_are_two_relations(order: tuple[str, str]) -> None:
    """DuckDB folds ASCII letters only: ``"étab"`` and ``"Étab"`` are two tables. A changeset holding
    both was refused as naming one relation twice (Python's ``lower``), and a site holding ``"Étab"``
    refused to declare ``"étab"`` (DuckDB's ``lower``) (found by a probe). Columns likewise."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for site in (a, b):
        for name in order:
            site.execute(f'CREATE REPLICATED TABLE "{name}" ("é" INT, "É" INT)')
    for i, name in enumerate(order):
        a.execute(f'INSERT INTO "{name}" VALUES ({i}, {i + 10})')
    b.merge(a.changes().to_bytes())
    for i, name in enumerate(order):
        assert b.execute(f'SELECT "é", "É" FROM "{name}"') == [(i, i + 10)]
    with pytest.raises(crr.CatalogError, match="already exists"):
        b.execute('CREATE REPLICATED TABLE "ÉTAB" (k INT)')  # DuckDB's "Étab"
