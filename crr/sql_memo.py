"""Generated SQL text shared by every site of the process, keyed by everything it is generated from.

Generating a view's delta SQL (sqlglot: the plan's delta queries rendered to text) costs 10-20 ms,
and a site keeps what it generated only until its next DDL (``SiteState.delta_sql``). A process that
opens several sites declaring the same views (a service, a demo, a test suite building fresh sites
for every example) generated the same text again at each. This memo keeps the text under a key of
plain values that determine it (relation names, column names and types, kinds, the names the
batch reads deltas from), never under an object's identity, so a site whose catalog differs in any
of them cannot get another site's text. Its values are immutable strings; entries beyond
:data:`LIMIT` are dropped least recently used first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

LIMIT = 4096  # texts kept (each a few KB)

_memo: OrderedDict[Hashable, object] = OrderedDict()
_lock = threading.Lock()


def memo(key: Hashable, build: Callable[[], T]) -> T:
    """The value generated for ``key``: ``build()`` the first time (or after it was dropped), kept."""
    with _lock:
        if key in _memo:
            _memo.move_to_end(key)
            return _memo[key]  # type: ignore[return-value]
    value = build()  # outside the lock: two threads may build one key at once, and keep equal values
    with _lock:
        _memo[key] = value
        if len(_memo) > LIMIT:
            _memo.popitem(last=False)
    return value


def clear() -> None:
    """Forget every value (for tests)."""
    with _lock:
        _memo.clear()
