"""Hybrid logical clock stamps for last-writer-wins between versions of a keyed row.

A stamp is one 128-bit unsigned integer (DuckDB ``UHUGEINT``) so that ``max`` merges it and plain
comparison orders it totally::

    stamp = (physical_ms << 16 | logical) << 64 | site_hash

``physical_ms`` is wall-clock milliseconds, ``logical`` a 16-bit counter for writes within the same
millisecond (or while the wall clock lags a stamp already seen), and ``site_hash`` 64 bits of the
md5 of the site id, which breaks ties between sites deterministically.
"""

from __future__ import annotations

import hashlib
import time


def seq_floor() -> int:
    """The smallest sequence number a site opened now gives its first transaction: the wall clock in
    microseconds since 1970. A site's sequence numbers go up by one a transaction and jump to this
    floor at the first one after it opens, so a site restored from an older copy of its file (or a
    copy of a file written on elsewhere) never hands out again a number it handed out before: its
    earlier life's numbers stayed below its last opening's floor plus one a transaction, far below
    the floor of any later opening while the wall clock does not run backwards. A peer's stored
    cursor is therefore a number the site will never reuse for other rows."""
    return time.time_ns() // 1000


def site_hash(site_id: str) -> int:
    """64-bit hash of a site id, the low half of every stamp the site issues."""
    return int.from_bytes(hashlib.md5(site_id.encode()).digest()[:8], "big")


class HybridClock:
    """A hybrid logical clock: ``tick`` issues a fresh stamp, ``observe`` folds in stamps received."""

    def __init__(self, site_id: str, last: int = 0) -> None:
        self._site = site_hash(site_id)
        self.last = last  # the high 64 bits of the largest stamp issued or seen

    def tick(self) -> int:
        """Return a stamp larger than every stamp issued or observed so far."""
        now = int(time.time() * 1000) << 16
        self.last = max(now, self.last + 1)
        return (self.last << 64) | self._site

    def observe(self, stamp: int | None) -> None:
        """Advance past a stamp received from another site."""
        if stamp:
            self.last = max(self.last, stamp >> 64)
