"""Statements of data-modifying CTEs: one write, then the writes that read what it wrote.

DuckDB runs the CTEs of a statement in order, each seeing the tables as the writes before it left
them, and runs a data-modifying CTE even when the statement's result reads none of its rows. So a
write and the maintenance that follows it can be one statement: one parse, one plan, one round trip
from Python, and no Arrow result read back between them. A further write is a :data:`CteWrite`,
``(name, sql, parameters)``; the point path's one-statement writes (:mod:`crr.point`) and the
merges of :mod:`crr.maintain` build theirs from it.
"""

from __future__ import annotations

from collections.abc import Sequence

CteWrite = tuple[str, str, list]


def ctes(then: Sequence[CteWrite]) -> list[str]:
    """The ``name AS (sql)`` of each of a statement's further CTEs (``then``); a SELECT among them is
    computed once, where it stands (``MATERIALIZED``): it sees the writes before it, not those
    after, and DuckDB sizes the joins that read it by its rows."""
    return [f"{name} AS {'MATERIALIZED ' if sql.lstrip().startswith('SELECT') else ''}({sql})" for name, sql, _ in then]


def cte_values(then: Sequence[CteWrite]) -> list:
    """The parameters of a statement's further CTEs, in order."""
    return [value for _, _, values in then for value in values]


def returning_then_sql(name: str, write: str, then: Sequence[CteWrite], columns: Sequence[str] = ()) -> str:
    """``write`` (a DML statement with RETURNING) as the CTE ``name``, then the writes ``then``, which
    read it by that name: one statement returning the rows ``write`` returned (their ``columns``, or
    all), each with one more column per write of ``then``, named like it, holding the count of rows
    that write returned (every write of ``then`` ends in RETURNING; a SELECT among them counts its
    rows). Where ``write`` returns no rows the counts are lost, so each write of ``then`` must write
    nothing then: it reads only the rows of ``name``. Parameters: those of ``then``, in order."""
    counts = ", ".join(f"(SELECT count(*) FROM {n}) AS {n}" for n, _, _ in then)
    returned = ", ".join(f"{name}.{c}" for c in columns) if columns else f"{name}.*"
    return f"WITH {name} AS ({write}), {', '.join(ctes(then))} SELECT {returned}, {counts} FROM {name}"
