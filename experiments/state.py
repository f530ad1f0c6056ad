"""How state size is measured, the same way for every algorithm.

Two measures, both taken at each checkpoint N of the first repetition, outside the timed region:

**``state_bytes``: everything a view site keeps for the view**, as the sum of ``state_parts``
(``{table: bytes}``). Each part is the Arrow in-memory size (``pyarrow.Table.nbytes``) of one
table read in full (for a table shared by several relations, only the rows of this view's
lineage). Arrow sizes are uncompressed and layout-independent, so the two sides compare fairly;
128-bit ids count 16 bytes each. The parts, with their role (``state_roles``):

* crr (found in DuckDB's catalog, so storage-layout changes in the engine are picked up):
  - ``view``: every internal table of the view, ``_crr."<view>$<x>"`` (derivations ``$m`` and
    whatever else the engine keeps per view);
  - ``app``: the view's APP table ``main.<view>`` (the user's columns only);
  - ``input``: every internal table of a relation in the view's lineage, ``_crr."<r>$<x>"`` (the
    hidden tuples of remote sources a join keeps, ``$t`` tuples of replicated tables);
  - only tables count, and in them only the stored columns: a view (a replica's ``$m``, a view of
    its ``$e``, see crr.replica) or a generated (virtual) column is computed when read;
  - ``lineage``: the causal-length entries ``_crr.cl`` of the relations in the view's lineage
    (``in?`` needs them), and any other internal table with a ``rel`` column, by the same filter;
    an internal table without one (other than the catalog, meta, cursor and openings bookkeeping) is counted
    in full under ``other``, so nothing new the engine stores goes unseen.
  Temporary tables (scratch of the last batch) and APP tables of inputs (the user's own data)
  are not counted.
* Gupta counting on DuckDB: ``main.v`` (the view with its counts; the view table is not separate,
  role ``view``) and, for the join, its copies of the base relations ``main.r1`` and ``main.r2``
  (role ``input``: a change to either input must be joined with the other).
* Gupta counting on PySpark: the same three DataFrames, converted to Arrow.
* crr on Spark (:func:`spark_state`): the tables of the site's store, read back as Arrow, with the
  same roles: the view's derivations (``view``) and APP table (``app``), the derivations of the
  relations in its lineage (``input``), their causal-length entries (``lineage``); ``file_bytes``
  is the size of the Parquet files of those tables.

``view_state_bytes`` keeps the narrower measure this benchmark reported as ``state_bytes``
before: crr's ``view`` and ``lineage`` parts, Gupta's ``view`` part (inputs and APP left out).

**``file_bytes``: the DuckDB file on disk**: each side runs against its own file; after
``CHECKPOINT`` (so the write-ahead log is folded in) it is the file's size plus any remaining WAL.
DuckDB never shrinks a file, so after deletes this stays at its high-water mark;
``file_used_bytes`` is the part in use (``PRAGMA database_size``: used blocks x block size,
blocks of 256 KiB, so small runs are coarse). Files hold everything the site keeps, including
what the narrower measures leave out (catalog, the R2 entries a projection site receives).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import duckdb

BOOKKEEPING = {"meta", "relations", "cursors", "openings"}  # crr's per-site catalog tables, not per view


@dataclass
class State:
    """One side's state for one view: bytes per part, the role of each part, file sizes."""

    parts: dict[str, int] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    file_bytes: int | None = None
    file_used_bytes: int | None = None

    def add(self, name: str, role: str, nbytes: int) -> None:
        """Record one part."""
        self.parts[name] = nbytes
        self.roles[name] = role

    @property
    def total(self) -> int:
        """``state_bytes``: the sum of all parts."""
        return sum(self.parts.values())

    def view_state(self, roles: tuple[str, ...]) -> int:
        """Sum of the parts with the given roles."""
        return sum(b for n, b in self.parts.items() if self.roles[n] in roles)

    def record(self, narrow_roles: tuple[str, ...]) -> dict:
        """The JSON fields of a benchmark record."""
        return {"state_bytes": self.total, "state_parts": dict(self.parts), "state_roles": dict(self.roles),
                "view_state_bytes": self.view_state(narrow_roles), "file_bytes": self.file_bytes,
                "file_used_bytes": self.file_used_bytes}


CRR_NARROW = ("view", "lineage")  # the old state_bytes of crr
GUPTA_NARROW = ("view",)  # the old state_bytes of Gupta counting


def arrow_bytes(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    """Arrow size of a query's full result."""
    return con.sql(sql).to_arrow_table().nbytes


def stored_columns_sql(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> str:
    """The select list of a table's stored columns: generated (virtual) columns, which DuckDB
    computes when read and does not store, are left out (crr's narrow ``$m``, see crr.catalog)."""
    cols = con.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = ? "
                       "AND table_name = ? AND is_generated = 'NEVER' ORDER BY ordinal_position",
                       [schema, table]).fetchall()
    return ", ".join('"' + c.replace('"', '""') + '"' for (c,) in cols)


def part_name(schema: str, table: str) -> str:
    """How ``state_parts`` names a table: ``schema.table``, the table quoted unless a plain identifier."""
    return f'{schema}."{table}"' if not table.isidentifier() else f"{schema}.{table}"


def _quote(schema: str, table: str) -> str:
    return '"' + schema.replace('"', '""') + '"."' + table.replace('"', '""') + '"'


def file_sizes(con: duckdb.DuckDBPyConnection, path: str) -> tuple[int, int]:
    """CHECKPOINT, then (bytes of the file plus WAL, bytes in used blocks)."""
    con.execute("CHECKPOINT")
    size = os.path.getsize(path)
    if os.path.exists(path + ".wal"):
        size += os.path.getsize(path + ".wal")
    _, _, block_size, _, used_blocks, *_ = con.execute("PRAGMA database_size").fetchone()
    return size, int(block_size) * int(used_blocks)


def _tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(schema, table) of every persistent table of the connection's main database."""
    return con.execute("SELECT schema_name, table_name FROM duckdb_tables() "
                       "WHERE NOT temporary AND database_name = current_database() ORDER BY 1, 2").fetchall()


def crr_state(site, view: str, path: str | None = None) -> State:
    """Everything a crr site keeps for ``view`` (see the module docstring); file sizes if ``path``."""
    con = site._con  # internal: experiments measure storage directly
    lineage = set(site.lineage(view))
    state = State()
    rels = ", ".join("'" + r.replace("'", "''") + "'" for r in sorted(lineage | {view}))
    for schema, table in _tables(con):
        q = f"{stored_columns_sql(con, schema, table)} FROM {_quote(schema, table)}"
        name = part_name(schema, table)
        owner, dollar, _ = table.partition("$")
        if schema == "main":
            if table == view:
                state.add(name, "app", arrow_bytes(con, f"SELECT {q}"))
        elif schema == "_crr":
            if dollar and owner == view:
                state.add(name, "view", arrow_bytes(con, f"SELECT {q}"))
            elif dollar and owner in lineage:
                state.add(name, "input", arrow_bytes(con, f"SELECT {q}"))
            elif dollar or table in BOOKKEEPING:
                continue  # another relation's tables, or the site's catalog
            else:
                cols = {c for (c,) in con.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE schema_name = ? AND table_name = ?",
                    [schema, table]).fetchall()}
                if "rel" in cols:
                    state.add(name, "lineage", arrow_bytes(con, f"SELECT {q} WHERE rel IN ({rels})"))
                else:
                    state.add(name, "other", arrow_bytes(con, f"SELECT {q}"))
    if path is not None:
        state.file_bytes, state.file_used_bytes = file_sizes(con, path)
    return state


def spark_state(site, view: str) -> State:
    """Everything a Spark site keeps for ``view``, by the roles of :func:`crr_state`; ``file_bytes``:
    the Parquet files of those tables."""
    from pyspark.sql import functions as F
    store = site._store  # internal: experiments measure storage directly
    lineage = set(site._catalog.lineage(view))
    state = State()
    files = 0
    for key, entry in store.manifest["tables"].items():
        kind, _, owner = key.partition(":")
        if key == "cl":
            role, frame = "lineage", store.read(key).where(F.col("rel").isin(sorted(lineage)))
        elif owner == view:
            role, frame = ("app" if kind == "app" else "view"), store.read(key)
        elif owner in lineage and kind != "app" and site._catalog[owner].stored:
            role, frame = "input", store.read(key)
        else:
            continue
        state.add(key, role, frame.toArrow().nbytes)
        for part in entry["parts"]:
            folder = os.path.join(store.path, "data", part)
            files += sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    state.file_bytes = state.file_used_bytes = files  # Parquet files hold only live data
    return state


def gupta_state(con: duckdb.DuckDBPyConnection, path: str | None = None) -> State:
    """Everything Gupta counting keeps: the counted view ``v`` and its copies of base relations."""
    state = State()
    for schema, table in _tables(con):
        role = "view" if table == "v" else "input"
        state.add(part_name(schema, table), role, arrow_bytes(con, f"SELECT * FROM {_quote(schema, table)}"))
    if path is not None:
        state.file_bytes, state.file_used_bytes = file_sizes(con, path)
    return state
