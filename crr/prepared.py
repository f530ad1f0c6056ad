"""Statements DuckDB binds once per connection: ``PREPARE`` once, then ``EXECUTE`` with the values.

DuckDB's Python API prepares a statement anew on every ``execute``: for a point write, binding and
optimizing the statement cost more than running it. A statement prepared once runs by
``EXECUTE name(value, ...)``. DuckDB 2.0.1 binds and optimizes it again at each EXECUTE all the same
(a statement with parameters is planned when their values are known, and one reading a table is
planned anew even without parameters: stop 62, DuckDB's profiler), so the gain is the parsing's
share: about 0.3 ms of the point path's 2.4 ms new-rows INSERT and 0.6 ms of an UPDATE's write
statement, measured side by side (the rows and lookup SELECTs gained nothing, and are not
prepared). DuckDB takes no parameters in an ``EXECUTE``, so the values are written into it as literals: :func:`literal`
renders the kinds of value the point path passes (integers it computed, booleans, NULL, and
DuckDB's own text of a value, which the prepared statement casts back, or an application's
parameter of those kinds); a statement with any other value runs unprepared.

A prepared statement belongs to its connection and outlives transactions; DuckDB binds it again
by itself when the catalog changed since, and :meth:`Prepared.forget` deallocates every one (the
site calls it after crr DDL, which the statements depend on).
"""

from __future__ import annotations

import duckdb

from crr.types import quote_str

_NAME = "_crr_prepared_{}"


def literal(value: object) -> str:
    """``value`` as a DuckDB literal: NULL, true/false, an integer, or a quoted string."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote_str(value)
    raise TypeError(f"no literal for a {type(value).__name__} in a prepared statement's values")


class Prepared:
    """The statements prepared on one connection, by their SQL (``?`` parameters)."""

    LIMIT = 64  # statements kept prepared before all are deallocated and prepared again as used

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._count = 0

    def run(self, con: duckdb.DuckDBPyConnection, sql: str, values: list) -> list[tuple]:
        """Run ``sql`` with ``values`` for its parameters, preparing it on ``con`` the first time;
        values :func:`literal` does not write (an application's float or date) run it unprepared."""
        if not all(value is None or type(value) in (bool, int, str) for value in values):
            return con.execute(sql, values).fetchall()
        name = self._names.get(sql)
        if name is None:
            if len(self._names) >= self.LIMIT:
                self.forget(con)
            self._count += 1
            name = _NAME.format(self._count)
            con.execute(f"PREPARE {name} AS {sql}")
            self._names[sql] = name
        args = ", ".join(literal(v) for v in values)
        return con.execute(f"EXECUTE {name}({args})" if values else f"EXECUTE {name}").fetchall()

    def forget(self, con: duckdb.DuckDBPyConnection) -> None:
        """Deallocate every statement prepared here."""
        for name in self._names.values():
            con.execute(f"DEALLOCATE {name}")
        self._names.clear()
