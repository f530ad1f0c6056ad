"""Named places on a DuckDB connection where statements read Arrow tables, registered once each.

Registering an Arrow table (``con.register``) creates a temp view, catalog work that costs about as
much as a small statement (0.7 ms here with the matching ``unregister``), and a merge or a write to a
table with views registers several. A slot is registered under its name once per connection, as an
object DuckDB reads through the Arrow C stream interface each time a statement scans it; putting a
table into it afterwards is a Python assignment. A statement reads whatever table the slot holds
when it runs.

A registration made inside a transaction that rolls back is undone by DuckDB; the site tells the
slots (:meth:`ArrowSlots.rolled_back`), which then register those names again on their next use.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa


class _Slot:
    """What DuckDB sees under a slot's name: the table put there last."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __arrow_c_schema__(self) -> object:
        return self.table.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self.table.__arrow_c_stream__(requested_schema)


class ArrowSlots:
    """The slots of one connection, by name (names are the caller's: identifiers it quotes itself)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._slots: dict[str, _Slot] = {}
        self._uncommitted: set[str] = set()  # registered in the open transaction

    def put(self, name: str, table: pa.Table) -> str:
        """Make statements reading ``name`` read ``table``; return ``name``."""
        slot = self._slots.get(name)
        if slot is None:
            slot = _Slot(table)
            self._con.register(name, slot)  # may fail (a type DuckDB cannot read): then no slot is kept
            self._slots[name] = slot
            self._uncommitted.add(name)
        else:
            slot.table = table
        return name

    def table(self, name: str) -> pa.Table:
        """The table a slot holds (KeyError for a name never put)."""
        return self._slots[name].table

    def release(self, name: str) -> None:
        """Let go of the table in a slot (its rows are freed; the name stays registered, empty)."""
        slot = self._slots.get(name)
        if slot is not None:
            slot.table = pa.Table.from_batches([], slot.table.schema)

    def committed(self) -> None:
        """The open transaction committed: its registrations last."""
        self._uncommitted.clear()

    def rolled_back(self) -> None:
        """The open transaction rolled back, and DuckDB with it the registrations made in it."""
        for name in self._uncommitted:
            self._slots.pop(name, None)
        self._uncommitted.clear()
