"""Wide tables: hundreds to thousands of columns can be written, viewed and merged.

DuckDB has no column limit of its own (70,000 INTEGER columns create and insert, slowly); what it
limits is expression depth (1,000 by default). A chain of binary operators nests one level per
operand, so every per-column construct crr generates must be flat: ``concat(...)`` for the tuple
encoding, AND/OR chains (DuckDB's parser flattens them), plain lists.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from decimal import Decimal
from typing import Any

import duckdb
import pytest

import crr
from crr.types import Column, key_hash, key_hash_sql, tuple_id, tuple_id_sql

TYPES = ["INTEGER", "VARCHAR", "DOUBLE", "TIMESTAMP", "DECIMAL(10,2)", "BOOLEAN", "DATE", "BLOB"]


def col_type(i: int) -> str:
    """Column i's type; c0 is always INTEGER (the key of keyed tables)."""
    return TYPES[i % len(TYPES)]


def sql_value(i: int, row: int) -> str:
    """A literal for column i of row ``row`` (every 7th cell NULL, one special value per type)."""
    t, v = col_type(i), row * 10_000 + i
    if i and (i + row) % 7 == 0:
        return "NULL"
    return {"INTEGER": str(v), "VARCHAR": f"'s|{v}:'", "DOUBLE": f"{v}.5",
            "TIMESTAMP": "'infinity'" if i % 3 == 0 else f"'2024-01-01 00:00:{i % 60:02d}'",
            "DECIMAL(10,2)": f"{v}.25", "BOOLEAN": "true" if v % 2 else "false",
            "DATE": "'-infinity'" if i % 5 == 0 else "'2024-02-29'", "BLOB": f"'\\x{i % 256:02X}'::BLOB"}[t]


def py_value(i: int, row: int) -> Any:
    """The Python value of the same cell."""
    t, v = col_type(i), row * 10_000 + i
    if i and (i + row) % 7 == 0:
        return None
    return {"INTEGER": v, "VARCHAR": f"s|{v}:", "DOUBLE": v + 0.5,
            "TIMESTAMP": dt.datetime(2024, 1, 1, 0, 0, i % 60), "DECIMAL(10,2)": Decimal(f"{v}.25"),
            "BOOLEAN": bool(v % 2), "DATE": dt.date(2024, 2, 29), "BLOB": bytes([i % 256])}[t]


def test_tuple_id_sql_is_flat_for_3000_columns() -> None:
    """The old ``||`` chain exceeded DuckDB's expression depth from about 499 columns."""
    n = 3000
    cols = [Column(f"c{i}", col_type(i)) for i in range(n)]
    con = duckdb.connect()
    con.execute("CREATE TABLE w (" + ", ".join(f"c{i} {col_type(i)}" for i in range(n)) + ")")
    con.execute("INSERT INTO w VALUES (" + ", ".join(sql_value(i, 1) for i in range(n)) + ")")
    got = con.execute(f"SELECT {tuple_id_sql('w', cols)}, {key_hash_sql('w', cols[:1000])} FROM w").fetchone()
    row = con.execute("SELECT * FROM w").fetchone()
    row = ["infinity" if c.type == "TIMESTAMP" and sql_value(i, 1) == "'infinity'" else
           "-infinity" if c.type == "DATE" and sql_value(i, 1) == "'-infinity'" else v
           for i, (c, v) in enumerate(zip(cols, row))]
    assert got == (tuple_id("w", cols, row), key_hash("w", cols[:1000], row[:1000]))


def _rows(n: int, rows: range) -> str:
    return ", ".join("(" + ", ".join(sql_value(i, r) for i in range(n)) + ")" for r in rows)


@pytest.mark.parametrize("n, keyed", [(600, False), (1000, True)])
def test_wide_table_writes_views_and_merge(n: int, keyed: bool) -> None:
    """INSERT, insert_many, UPDATE, DELETE, a projection view, a join view, a remote table of a view
    and a merge into a second site all work, and every view equals its query."""
    defs = ", ".join(f"c{i} {col_type(i)}" for i in range(n)) + (", PRIMARY KEY (c0)" if keyed else "")
    names = ", ".join(f"c{i}" for i in range(n))
    views = {"p": f"SELECT {names} FROM w WHERE c0 >= 0",
             "j": "SELECT x.*, y.c1 AS y1 FROM w x JOIN w y ON x.c0 = y.c0 AND x.c2 IS NOT DISTINCT FROM y.c2"}
    a, b, c = crr.Site(site_id="a"), crr.Site(site_id="b"), crr.Site(site_id="c")
    for s in (a, b):
        s.execute(f"CREATE REPLICATED TABLE w ({defs})")
        for name, query in views.items():
            s.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    a.execute(f"INSERT INTO w VALUES {_rows(n, range(1, 4))}")
    assert a.insert_many("w", [tuple(py_value(i, r) for i in range(n)) for r in (4, 5)]) == 2
    a.execute("UPDATE w SET c1 = 'updated' WHERE c0 = 10000")
    a.execute("DELETE FROM w WHERE c0 = 20000")
    a.execute(f"INSERT INTO w VALUES {_rows(n, range(6, 7))}")
    assert a.execute("SELECT count(*) FROM w") == [(5,)]
    assert a.execute("SELECT c1 FROM w WHERE c0 = 10000") == [("updated",)]
    for name, query in views.items():
        assert a.execute(f"SELECT * FROM {name} ORDER BY ALL") == a.execute(f"{query} ORDER BY ALL"), name
    b.merge(a.changes(relations=["w"]).to_bytes())
    for name in ("w", *views):
        assert b.execute(f"SELECT * FROM {name} ORDER BY ALL") == a.execute(f"SELECT * FROM {name} ORDER BY ALL"), name
    b.execute("DELETE FROM w WHERE c0 = 30000")
    a.merge(b.changes(relations=["w"]).to_bytes())
    assert a.execute("SELECT count(*) FROM w") == b.execute("SELECT count(*) FROM w") == [(4,)]
    if not keyed:  # a third site holds view p as a remote table
        c.execute(f"CREATE REMOTE TABLE p ({', '.join(f'c{i} {col_type(i)}' for i in range(n))})")
        c.merge(a.changes(relations=["p"]).to_bytes())
        assert c.execute("SELECT * FROM p ORDER BY ALL") == a.execute("SELECT * FROM p ORDER BY ALL")


def test_wide_table_with_every_column_not_null_takes_a_write_quickly() -> None:
    """A 700-column table whose columns are all NOT NULL takes a one-row INSERT (about 1 s; the NOT NULL check
    used to grow with the cube of the column count: 40 s here). The timeout is a hang guard, 60x the usual time."""
    script = textwrap.dedent("""
        import crr
        n = 700
        s = crr.Site()
        s.execute("CREATE REPLICATED TABLE w (" + ", ".join(f"c{i} INTEGER NOT NULL" for i in range(n)) + ")")
        s.execute("INSERT INTO w VALUES (" + ", ".join(str(i) for i in range(n)) + ")")
        print(s.execute("SELECT count(*) FROM w")[0][0])
    """)
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail("a one-row INSERT into a 700-column NOT NULL table took more than 60 s")
    assert out.stdout.strip() == "1"
