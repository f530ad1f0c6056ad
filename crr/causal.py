"""The statement that merges causal-length entries into ``_crr.cl``.

``_crr.cl`` holds one entry per tuple id: ``(id, rel, cl, kh, stamp, vis, seq)``. ``cl`` and
``stamp`` only grow (a merge takes maxima); ``vis`` caches whether the tuple is visible (DESIGN 1.2):
an unkeyed tuple when its length is odd, a keyed one when it is present and has its key's largest
stamp among the present versions. A merge runs one :func:`cl_merge_sql`.
"""

from __future__ import annotations

FORGED_ENTRIES = ("error('crr: causal-length entries of ' || n.rel || ' disagree about a tuple''s relation "
                  "or key hash; the changeset is corrupt or forged')")


def cl_delta_sql(entries: str, keyed: bool | None, unkeyed: bool | None) -> str:
    """The entries of ``_crr.cl`` a merge changes: those that grow (max of ``cl`` and of ``stamp``)
    and the other versions of their keys whose visibility flips.

    ``entries`` is a FROM text of ``(id, rel, cl, kh, stamp)`` with at most one row per id, as
    :func:`crr.merge.cl_check_sql` reads them: a changeset's validation refuses repeated ids, and
    its join with key hashes recomputed from values can repeat an entry only for an id that tuples of
    two keyed relations share, whose key hashes differ (a key hash includes its relation's name), so
    the key-hash check fails the merge. Grouping the entries by id here cost about a fifth of the
    statement at 100k entries.
    ``keyed`` / ``unkeyed``: whether some entries carry key hashes / carry none (False skips that
    part; None: unknown). Columns: id, rel, kh, cl, stamp, old_vis, vis, grew. An id's relation and
    key hash never change, so entries disagreeing with what this site stored for the id are
    forged (the check sits in a column every later step reads, so it always runs).
    """
    n = f"""(SELECT n.id, n.rel, CASE WHEN (c.id IS NOT NULL AND (c.rel <> n.rel OR c.kh IS DISTINCT FROM n.kh))
                              THEN {FORGED_ENTRIES} ELSE n.kh END AS kh, n.cl, n.stamp,
                    c.id IS NOT NULL AS known, c.cl AS old_cl, c.stamp AS old_stamp, c.vis AS old_vis
             FROM (SELECT id, rel, kh, cl, coalesce(stamp, 0::UHUGEINT) AS stamp FROM {entries}) n
             LEFT JOIN _crr.cl c ON c.id = n.id)"""
    ctes, parts = [f"n AS {n}"], []
    if unkeyed is not False:
        parts.append("""
            SELECT n.id, n.rel, n.kh, greatest(n.cl, n.old_cl) AS cl, greatest(n.stamp, n.old_stamp) AS stamp,
                   coalesce(n.old_vis, false) AS old_vis, greatest(n.cl, n.old_cl) % 2 = 1 AS vis, true AS grew
            FROM n
            WHERE n.kh IS NULL AND (NOT n.known OR n.cl > n.old_cl OR n.stamp > n.old_stamp)""")
    if keyed is not False:
        # every version of the batch's keys, merged; a version is visible when it is present and
        # has its key's largest stamp among present versions (a GROUP BY: windows are slower here)
        versions = """(SELECT coalesce(n.id, c.id) AS id, coalesce(n.rel, c.rel) AS rel,
                              coalesce(n.kh, c.kh) AS kh, greatest(n.cl, c.cl) AS cl,
                              greatest(n.stamp, c.stamp) AS stamp, coalesce(c.vis, false) AS old_vis,
                              n.id IS NOT NULL AND (NOT n.known OR n.cl > c.cl OR n.stamp > c.stamp) AS grew
                       FROM (SELECT * FROM n WHERE kh IS NOT NULL) n
                       FULL JOIN (SELECT id, rel, kh, cl, stamp, vis FROM _crr.cl
                                  WHERE kh IN (SELECT kh FROM n WHERE kh IS NOT NULL)) c ON c.id = n.id)"""
        ctes.append(f"v AS {versions}")
        parts.append("""
            SELECT * FROM (
                SELECT v.id, v.rel, v.kh, v.cl, v.stamp, v.old_vis,
                       coalesce(v.cl % 2 = 1 AND v.stamp = w.top, false) AS vis, v.grew
                FROM v JOIN (SELECT kh, max(stamp) FILTER (WHERE cl % 2 = 1) AS top FROM v GROUP BY kh) w
                     ON w.kh = v.kh)
            WHERE grew OR vis <> old_vis""")
    return "WITH " + ", ".join(ctes) + " " + " UNION ALL ".join(parts)


def cl_merge_sql(entries: str, seq: int, keyed: bool | None, unkeyed: bool | None) -> str:
    """One MERGE writing :func:`cl_delta_sql` into ``_crr.cl``; it returns ``(id, rel, vis)`` of every
    entry it wrote: the entries that grew and those whose visibility flipped. That is a superset of
    the flips (an entry growing from 1 to 3 stays visible), which only re-evaluates a few tuples more.
    ``seq`` marks the entries that grew (a flip alone changes a cache, not replicated state)."""
    return f"""MERGE INTO _crr.cl AS c USING ({cl_delta_sql(entries, keyed, unkeyed)}) AS d ON c.id = d.id
        WHEN MATCHED THEN UPDATE SET cl = d.cl, stamp = d.stamp, vis = d.vis,
                                     seq = CASE WHEN d.grew THEN {int(seq)} ELSE c.seq END
        WHEN NOT MATCHED THEN INSERT (id, rel, cl, kh, stamp, vis, seq)
                              VALUES (d.id, d.rel, d.cl, d.kh, d.stamp, d.vis, {int(seq)})
        RETURNING id, rel, vis"""
