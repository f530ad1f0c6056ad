"""How state size is measured, the same way for every algorithm.

``state_bytes`` is the size of the view-maintenance state a view site keeps for one view, measured as
the Arrow in-memory size (``pyarrow.Table.nbytes``) of the tables holding it, read in full:

* crr: the view's AUG tables (``$m`` derivations with their values, ``$i`` id index if kept) plus the
  causal-length entries of the base relations in its lineage (``_crr.cl``), which ``in?`` needs;
* Gupta counting: the view table with its counts.

Both sides also keep their input relations for the join view (crr: the hidden tuples of the R1 and R2
sources; Gupta: copies of
R1 and R2); those are comparable and not counted. The APP table of a crr view (the user's columns
only) equals Gupta's view minus the count column and is not counted either.
"""

from __future__ import annotations

import duckdb


def arrow_bytes(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    """Arrow size of a query's full result."""
    return con.sql(sql).to_arrow_table().nbytes


def crr_view_bytes(site, view: str) -> int:
    """State a crr site keeps for one view (see module docstring)."""
    con = site._con  # internal: experiments measure storage directly
    rel = site.relation(view)
    total = arrow_bytes(con, f"SELECT * FROM {rel.aug('m')}")
    if rel.indexed:
        total += arrow_bytes(con, f"SELECT * FROM {rel.aug('i')}")
    lineage = ", ".join(f"'{r}'" for r in sorted(site.lineage(view)))
    return total + arrow_bytes(con, f"SELECT * FROM _crr.cl WHERE rel IN ({lineage})")


def gupta_view_bytes(con: duckdb.DuckDBPyConnection) -> int:
    """State of Gupta counting for its view: the counted view table."""
    return arrow_bytes(con, "SELECT * FROM v")
