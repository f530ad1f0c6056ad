"""The parameters an application passes with a statement (``Site.execute(sql, params)``), checked for
what DuckDB's Python client cannot bind: it fails on those with a raw Python error, not its own."""

from __future__ import annotations

import datetime
from typing import Any

from crr.errors import TypeMismatchError


def check_bindable(params: list | dict | None) -> None:
    """Refuse a parameter holding a ``datetime`` or ``time`` whose time zone gives it no UTC offset
    (a ``time`` under a ``ZoneInfo``, whose offset depends on a date, or a ``tzinfo`` answering None):
    DuckDB's client reads such a value's offset as if it had one and fails with an AttributeError.
    Values inside lists, tuples and dicts (LIST and STRUCT parameters) are checked too."""
    if params is None:
        return
    for where, value in (params.items() if isinstance(params, dict) else enumerate(params, start=1)):
        bad = _offsetless(value)
        if bad is not None:
            raise TypeMismatchError(
                f"parameter {where}: {bad!r} has a time zone ({bad.tzinfo}) that gives it no UTC offset (under a zone "
                "with daylight saving, a time of day has none without a date); pass a naive value, or one with a "
                "fixed offset such as datetime.timezone.utc; nothing was run")


def _offsetless(value: Any) -> datetime.time | datetime.datetime | None:
    """The first ``datetime`` or ``time`` in ``value`` (itself, or inside lists, tuples and dicts)
    that has a time zone but no UTC offset, or None."""
    if isinstance(value, (datetime.time, datetime.datetime)):
        if value.tzinfo is None:
            return None
        try:
            return value if value.utcoffset() is None else None
        except Exception:  # a tzinfo of the application's that fails: DuckDB would fail on it too
            return value
    if isinstance(value, (list, tuple)):
        values: Any = value
    elif isinstance(value, dict):
        values = value.values()
    else:
        return None
    for item in values:
        found = _offsetless(item)
        if found is not None:
            return found
    return None
