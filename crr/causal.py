"""The statement that merges causal-length entries into ``_crr.cl``.

``_crr.cl`` holds one entry per tuple id: ``(id, rel, cl, kh, stamp, vis, seq)``. ``cl`` and
``stamp`` only grow (a merge takes maxima); ``vis`` caches whether the tuple is visible (DESIGN 1.2):
an unkeyed tuple when its length is odd, a keyed one when it is present and has its key's largest
stamp among the present versions. A merge runs one :func:`cl_merge_sql`.

How many times it reads ``_crr.cl`` is what it costs (DuckDB answers each join of a batch with the
table by scanning the table): once for the MERGE's own match on ``id``, and once more, by key
hash, when some entries are keyed (a keyed version's visibility depends on the other versions of
its key). Unkeyed entries are merged by the MERGE alone: their visibility is the parity of the
merged length, computed in its SET clause.

Keyed entries take the unkeyed form too when each is its key's only present candidate: no two of
them share a key hash, and no stored entry of another id with one of their key hashes is present
(odd). Other versions that are absent stay absent (the batch holds no entry of theirs) and so stay
invisible, and the entry's version, when present, is its key's only present one. Then a version is
visible exactly when its merged length is odd. That is the common case: inserts of new keys, deletes
of keys, even of keys updated before. :func:`present_key_versions_sql` counts those other present
versions; that small query and the plain MERGE cost less than the key-wide MERGE (per 1000-row
batch into 100k entries, with the paper's experiments: 11-13 ms against 8-10 ms).
"""

from __future__ import annotations

FORGED = "(c.id IS NOT NULL AND (c.rel <> d.rel OR c.kh IS DISTINCT FROM d.kh))"
"""True for a received entry that disagrees with the stored entry of its id: an id's relation and key
hash never change, so such an entry is forged (or corrupt). ``c.id IS NOT NULL`` because DuckDB may
evaluate a clause's SET expressions over rows that did not match."""

FORGED_ENTRIES = ("error('crr: causal-length entries of ' || d.rel || ' disagree about a tuple''s relation "
                  "or key hash; the changeset is corrupt or forged')")


def keyed_delta_sql(entries: str) -> str:
    """The keyed entries' part of a merge: every version of the batch's keys, merged, and those whose
    entry grows or whose visibility flips. Columns: id, rel, kh, cl, stamp, vis, grew.

    ``_crr.cl`` is read once, for the rows of the batch's key hashes (a stored entry of a received id
    has the id's key hash, unless the received entry is forged, which the MERGE refuses). A version
    is visible when it is present and has its key's largest stamp among present versions (a GROUP BY:
    windows are slower here).
    """
    return f"""
        WITH n AS (SELECT id, rel, kh, cl, coalesce(stamp, 0::UHUGEINT) AS stamp FROM {entries} WHERE kh IS NOT NULL),
        v AS (SELECT coalesce(n.id, c.id) AS id, coalesce(n.rel, c.rel) AS rel, coalesce(n.kh, c.kh) AS kh,
                     greatest(n.cl, c.cl) AS cl, greatest(n.stamp, c.stamp) AS stamp,
                     coalesce(c.vis, false) AS old_vis,
                     n.id IS NOT NULL AND (c.id IS NULL OR n.cl > c.cl OR n.stamp > c.stamp) AS grew
              FROM n FULL JOIN (SELECT id, rel, kh, cl, stamp, vis FROM _crr.cl
                                WHERE kh IN (SELECT kh FROM n)) c ON c.id = n.id)
        SELECT id, rel, kh, cl, stamp, vis, grew FROM (
            SELECT v.*, coalesce(v.cl % 2 = 1 AND v.stamp = w.top, false) AS vis
            FROM v JOIN (SELECT kh, max(stamp) FILTER (WHERE cl % 2 = 1) AS top FROM v GROUP BY kh) w
                 ON w.kh = v.kh)
        WHERE grew OR vis <> old_vis"""


def present_key_versions_sql(entries_table: str) -> str:
    """How many present stored entries share a key hash with an entry of ``entries_table`` (a table
    or registered Arrow name with ``id`` and ``kh`` columns) without being one of its ids: zero when
    no keyed entry's key has another present version here."""
    return f"""SELECT count(*) FROM (SELECT id FROM _crr.cl WHERE cl % 2 = 1
                                        AND kh IN (SELECT kh FROM {entries_table} WHERE kh IS NOT NULL)) c
               ANTI JOIN {entries_table} e ON e.id = c.id"""


def cl_merge_sql(entries: str, seq: int, keyed: bool | None, unkeyed: bool | None, single_versions: bool = False) -> str:
    """One MERGE writing a batch's causal-length entries into ``_crr.cl``; it returns ``(id, rel, vis)``
    of every entry it wrote: the entries that grew and the keyed versions whose visibility flipped.
    That is a superset of the flips (an entry growing from 1 to 3 stays visible), which only
    re-evaluates a few tuples more.

    ``entries`` is a FROM text of ``(id, rel, cl, kh, stamp)`` with at most one row per id, as
    :func:`crr.merge.cl_check_sql` reads them: a changeset's validation refuses repeated ids, and
    its join with key hashes recomputed from values can repeat an entry only for an id that tuples of
    two keyed relations share, whose key hashes differ (a key hash includes its relation's name), so
    the key-hash check fails the merge.
    ``keyed`` / ``unkeyed``: whether some entries carry key hashes / carry none (False leaves that
    part out; None: unknown). Unkeyed entries reach the MERGE as they are (``vis`` NULL): it takes the
    maxima and the parity itself, and writes only those that grow. Keyed ones arrive merged, with
    their visibility (:func:`keyed_delta_sql`). Every received entry whose id is stored is compared
    with the stored entry (:data:`FORGED`) before anything else, so a forged one fails the merge
    whether or not it grows. ``seq`` marks the entries that grew (a flip alone changes a cache, not
    replicated state). ``single_versions``: the caller checked that no keyed entry's key has another
    present version (see the module docstring), so every entry takes the unkeyed form.
    """
    parts = []
    if unkeyed is not False or single_versions:
        only_unkeyed = "" if single_versions else " WHERE kh IS NULL"
        parts.append(f"""SELECT id, rel, kh, cl, coalesce(stamp, 0::UHUGEINT) AS stamp, NULL::BOOLEAN AS vis,
                                true AS grew FROM {entries}{only_unkeyed}""")
    if keyed is not False and not single_versions:
        parts.append(keyed_delta_sql(entries))
    using = " UNION ALL ".join(f"({p})" for p in parts) if parts else (
        "SELECT NULL::UHUGEINT AS id, NULL AS rel, NULL::UHUGEINT AS kh, NULL::INTEGER AS cl, "
        "NULL::UHUGEINT AS stamp, NULL::BOOLEAN AS vis, false AS grew WHERE false")
    grows = "(d.vis IS NOT NULL OR d.cl > c.cl OR d.stamp > c.stamp)"  # keyed rows arrive filtered already
    cl = "greatest(c.cl, d.cl)"
    return f"""MERGE INTO _crr.cl AS c USING ({using}) AS d ON c.id = d.id
        WHEN MATCHED AND ({FORGED}) THEN UPDATE SET seq = CASE WHEN {FORGED} THEN {FORGED_ENTRIES} ELSE c.seq END
        WHEN MATCHED AND {grows} THEN UPDATE SET
            cl = {cl}, stamp = greatest(c.stamp, d.stamp), vis = coalesce(d.vis, {cl} % 2 = 1),
            seq = CASE WHEN d.grew AND (d.cl > c.cl OR d.stamp > c.stamp) THEN {int(seq)} ELSE c.seq END
        WHEN NOT MATCHED THEN INSERT (id, rel, cl, kh, stamp, vis, seq)
            VALUES (d.id, d.rel, d.cl, d.kh, d.stamp, coalesce(d.vis, d.cl % 2 = 1), {int(seq)})
        RETURNING id, rel, vis"""
