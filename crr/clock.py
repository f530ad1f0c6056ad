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
