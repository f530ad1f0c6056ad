"""Which site files this process has open: a file is one :class:`crr.site.Site`'s at a time.

Two ``Site`` objects on one file would share DuckDB's database (DuckDB hands a second connection
to an open file the same instance) but not the site's in-memory state: each would count its own
sequence numbers, so two writes would carry the same one and a peer's cursor would skip one of
them, and DDL through one would stay unseen by the other's catalog. So opening a file that another
live, unclosed ``Site`` of this process holds is refused (:func:`claim`); another process is kept
out by DuckDB's own file lock. Opening runs under one lock (:func:`opening`), from the check to the
claim, so two threads opening one file at once cannot both pass the check.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import weakref
from typing import Iterator, Protocol


class _Holder(Protocol):
    closed: bool


_holders: dict[str, weakref.ref] = {}
_opening = threading.Lock()


@contextlib.contextmanager
def opening() -> Iterator[None]:
    """Hold while opening a site file: from :func:`holder`'s check to :func:`claim` (a file's key is
    its inode once it exists, so a reservation by name could not stop a second open of a file the
    first one just created; opening is rare and short, so the whole open takes turns)."""
    with _opening:
        yield


def file_key(path: str) -> str | None:
    """The key of a site file: its device and inode, so a hard link to it, a symbolic link, or its new
    name after a rename while open is the same file (a file not there yet: its real path); a named
    in-memory database (``:memory:name``, which DuckDB shares within the process) by its name; None for
    an unnamed one (``:memory:`` or an empty path: each connection gets its own)."""
    if not path or path == ":memory:":
        return None
    if path.startswith(":memory:"):
        return path
    try:
        st = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return f"inode:{st.st_dev}:{st.st_ino}"


def _live(key: str) -> _Holder | None:
    ref = _holders.get(key)
    held = ref() if ref is not None else None
    return held if held is not None and not held.closed else None


def holder(path: str) -> _Holder | None:
    """The live, unclosed state that holds ``path`` in this process, if any: a site dropped without
    ``close()`` but kept alive only by reference cycles is collected first, so it does not count."""
    key = file_key(path)
    if key is None or _live(key) is None:
        return None
    gc.collect()
    return _live(key)


def claim(path: str, state: _Holder) -> None:
    """Record that ``state`` holds ``path`` (the caller has checked :func:`holder` first); the claim
    ends when ``state`` is closed or garbage-collected."""
    key = file_key(path)
    if key is not None:
        _holders[key] = weakref.ref(state)
