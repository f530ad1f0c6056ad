"""The site's sequence number and hybrid clock as the file holds them.

``_crr.meta`` stores both counters, but writes and merges do not update it (one statement less per
transaction): each of them stores its sequence number in the AUG rows it writes and its stamps in
the causal-length entries, so the largest of those is the counter. DDL, which can drop such rows,
and closing a site store both in ``_crr.meta`` (:func:`counters_update_sql`); opening one takes the
larger of the stored counters and what the rows show (:func:`largest_seq_sql`,
:func:`largest_stamp_sql`). The first change after an opening takes at least the wall clock's
number, :func:`crr.clock.seq_floor` (see there why), and records the opening first
(:data:`OPENING_INSERT_SQL`, read by :func:`crr.changeset.cursor_in_history`); a site that changed
nothing since it opened keeps the number its rows show.
"""

from __future__ import annotations

from crr import colocated, replica
from crr.catalog import SCHEMA, Catalog


def largest_seq_sql(catalog: Catalog) -> str:
    """The largest sequence number any AUG row of the site holds (one row, one value; NULL if none)."""
    rels = catalog.values()
    tables = [f"{SCHEMA}.cl"] + [rel.aug("t" if rel.is_base else "m") for rel in rels
                                 if rel.stored and not rel.colocated and not rel.replica]
    parts = ([f"SELECT max(seq) AS s FROM {t}" for t in tables] + [colocated.max_seq_sql(r) for r in rels if r.colocated]
             + [replica.max_seq_sql(r) for r in rels if r.replica])
    return f"SELECT max(s) FROM ({' UNION ALL '.join(parts)})"


def largest_stamp_sql(catalog: Catalog) -> str:
    """The largest stamp any causal-length entry of the site holds (one row, one value; NULL if none)."""
    rels = catalog.values()
    parts = ([f"SELECT max(stamp) AS s FROM {SCHEMA}.cl"] + [colocated.max_stamp_sql(r) for r in rels if r.colocated]
             + [replica.max_stamp_sql(r) for r in rels if r.replica])
    return f"SELECT max(s) FROM ({' UNION ALL '.join(parts)})"


OPENING_INSERT_SQL = f"INSERT INTO {SCHEMA}.openings VALUES (?, ?) ON CONFLICT DO NOTHING"
"""Record an opening of the site, before its first change: parameters (its first sequence number, the
site's last one before it). See :func:`crr.changeset.cursor_in_history`."""

OPENINGS_SQL = f"SELECT floor, previous FROM {SCHEMA}.openings ORDER BY floor"
"""Every recorded opening ``(floor, previous)``, in the order of their numbers."""


def counters_update_sql() -> str:
    """Store both counters in ``_crr.meta`` (parameters: the sequence number and the clock, as text)."""
    return f"UPDATE {SCHEMA}.meta SET v = CASE k WHEN 'seq' THEN ? ELSE ? END WHERE k IN ('seq', 'hlc')"
