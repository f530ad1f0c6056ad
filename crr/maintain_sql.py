"""The statements of view maintenance (:mod:`crr.maintain`), each built from typed inputs: the
SQL over replicated tables' ``$t``, derived relations' ``$m`` and APP tables that a batch's
maintenance runs, or reads as part of a larger statement. :class:`crr.maintain.Maintainer` decides
which run and in what order; the causal-length entries' statements are in :mod:`crr.causal`, the
rows a batch reads in :mod:`crr.batch_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence

from crr.batch_rows import Rows, app_cols_sql, app_match, cols_sql, rows_sql
from crr.catalog import Relation
from crr.id_sets import ids_sql
from crr.types import quote_ident


# the longest monomials whose flipped ids are looked up by one semi-join per position of ``ids``
# (longer ones, or unknown lengths, are unnested: see holding_flipped_sql)
MAX_POSITION_PROBES = 4


def mid_sql(ids: str) -> str:
    """SQL of a monomial's id: the XOR of its tuple ids (``ids``: a qualified UHUGEINT[] column).
    Order-free, so a monomial has one id whatever order its ids were listed in."""
    return f"list_reduce({ids}, lambda a, b: xor(a, b))"



def temp_table(name: str) -> str:
    """Qualified name of a connection-local temp table."""
    return f"temp.main.{quote_ident(name)}"


def base_tuples_insert_sql(rel: Relation, rows: Rows, seq: int, fresh: bool, listed: Sequence[int] | None = None) -> str:
    """One INSERT adding a merge's received tuples (``rows``) to a replicated table's ``$t`` and
    returning them: those ``$t`` lacks (an anti-join), or all of them when the caller knows ``$t``
    holds none (``fresh``: see :meth:`Maintainer._entries_new`; the anti-join probes every stored
    tuple, 3-5 ms at 1M). ``listed``: the received ids as ints, when they are few
    (:func:`crr.id_sets.listed_ids`): the anti-join then reads only the stored tuples of those ids
    (a scan filtered by constants, no hash table of ``$t``)."""
    stored = rel.aug("t") if listed is None else f"(SELECT id FROM {rel.aug('t')} WHERE id IN ({ids_sql(listed)}))"
    lacking = "" if fresh else f"ANTI JOIN {stored} t ON t.id = n.id"
    return f"""INSERT INTO {rel.aug('t')}
        SELECT n.id, {cols_sql(rel, 'n')}, {int(seq)} FROM {rows_sql(rel, rows)} n {lacking}
        RETURNING id, {cols_sql(rel)}"""


def members_merge_sql(rel: Relation, changes_sql: str, returning: str) -> str:
    """MERGE of membership changes into the table of a relation's present tuples (its APP table, or
    an aggregate view's core rows). ``changes_sql`` yields the relation's AUG columns plus ``keep``
    (true: the row is now present, false: it is gone); rows match on all columns, NULLs equal (the
    table is a set). ``returning``: the RETURNING list."""
    return f"""MERGE INTO {rel.members} AS app USING ({changes_sql}) AS d
        ON {app_match(rel, 'app', 'd')}
        WHEN MATCHED AND NOT d.keep THEN DELETE
        WHEN NOT MATCHED AND d.keep THEN INSERT ({app_cols_sql(rel)}) VALUES ({cols_sql(rel, 'd')})
        RETURNING {returning}"""


def holding_flipped_sql(rel: Relation, flips: str, columns: list[str], longest: int,
                        listed: str | None = None) -> str:
    """SELECT text of ``columns`` of ``rel``'s monomials that hold an id ``flips`` (FROM text with an
    ``id`` column) lists, maybe repeated. ``longest``: the longest monomial ``rel`` can hold, 0 when
    unknown. One id per monomial: ``mid`` is that id. Up to :data:`MAX_POSITION_PROBES` ids: one
    semi-join per position of ``ids``; DuckDB scans ``$m`` for each, which measured as fast as the
    join with the former ``(id, vid)`` index table, whose rows were twice as many. Otherwise the ids
    are unnested.

    ``listed``: the same ids as SQL (:func:`crr.id_sets.ids_sql` of the ints, or ``?`` parameters), when
    the caller holds them and they are few (up to :data:`crr.id_sets.MAX_LISTED_IDS`); then ``$m`` is scanned once, its ids compared with them as constants
    (``IN`` lists), which saves DuckDB a hash join per position: a small merge's membership MERGE
    on the convergence tests' join views took 6.1-6.9 ms instead of 8.2-9.7 (``flips`` is not read).
    """
    m = rel.aug("m")
    if listed is not None:
        values = listed
        select = f"SELECT {', '.join(f'm.{c}' for c in columns)} FROM {m} m WHERE "
        if longest == 1:
            return f"{select}m.mid IN ({values})"
        if 0 < longest <= MAX_POSITION_PROBES:
            return select + " OR ".join(f"m.ids[{k}] IN ({values})" for k in range(1, longest + 1))
        return f"{select}list_has_any(m.ids, [{values}])"
    if longest == 1:
        return f"SELECT {', '.join(f'm.{c}' for c in columns)} FROM {m} m SEMI JOIN {flips} f ON f.id = m.mid"
    if 0 < longest <= MAX_POSITION_PROBES:
        return " UNION ALL ".join(f"SELECT {', '.join(f'm.{c}' for c in columns)} FROM {m} m "
                                  f"SEMI JOIN {flips} f ON f.id = m.ids[{k}]" for k in range(1, longest + 1))
    return (f"SELECT {', '.join(f'u.{c}' for c in columns)} FROM (SELECT {', '.join(columns)}, unnest(ids) AS id "
            f"FROM {m}) u SEMI JOIN {flips} f ON f.id = u.id")


def listed_probes(longest: int) -> int:
    """How many times :func:`holding_flipped_sql` compares ``ids`` with its listed ids (its
    parameters, when ``listed`` is ``?``s, are the ids that many times)."""
    return longest if 0 < longest <= MAX_POSITION_PROBES else 1


def lost_derivations_sql(view: Relation, flips: str, width: int, listed: str | None = None) -> str:
    """SELECT text of the values ``(c0, c1, ...)`` of the view's monomials that hold an id ``flips``
    lists (:func:`holding_flipped_sql`; ``width``: the plan's number of occurrences): the tuples a
    batch removes from a view whose tuples have one derivation each (see
    :meth:`Maintainer._only_derivations_lost`). Read by the APP table's DELETE
    (:func:`apply_app_changes`); on the paper's join view (100k rows, 1000 deletes) 5.5-6.2 ms, where
    the MERGE re-evaluating membership took 10.9-11.2 ms."""
    return holding_flipped_sql(view, flips, [c.name for c in view.aug_columns], width, listed)


def membership_changes_sql(rel: Relation, held: str, visibility: str) -> str:
    """SELECT text of the membership ``(cols..., keep)`` of the tuples whose monomials ``held`` lists
    (a FROM item naming them ``m``: ``vid, mid, ids, cols...``, :func:`dirty_monomials`): ``keep``
    when one of the tuple's monomials is alive, every id visible in ``visibility`` (``id, vis``).
    ``in?`` of DESIGN 1.3, valued for those tuples only."""
    values = ", ".join(f"any_value({c.name}) AS {c.name}" for c in rel.aug_columns)
    if rel.wide:  # a monomial is alive when all its ids are visible
        alive = f"""SELECT u.vid, bool_and(coalesce(c.vis, false)) AS ok, {values}
                    FROM (SELECT m.vid, m.mid, {cols_sql(rel, 'm')}, unnest(m.ids) AS id FROM {held}) u
                    LEFT JOIN {visibility} c ON c.id = u.id GROUP BY u.vid, u.mid"""
    else:  # one id per monomial: mid is that id
        alive = f"""SELECT m.vid, coalesce(c.vis, false) AS ok, {cols_sql(rel, 'm')} FROM {held}
                    LEFT JOIN {visibility} c ON c.id = m.mid"""
    return f"""
        SELECT {cols_sql(rel)}, keep FROM (SELECT vid, bool_or(ok) AS keep, {values} FROM ({alive}) GROUP BY vid)"""


def lost_tuples_sql(rel: Relation, held: str, visibility: str) -> str:
    """SELECT text of the AUG columns of the tuples whose monomials the CTE ``held`` lists
    (:func:`held_sql`) none of which is alive, every id visible in ``visibility`` (``id, vis``): the
    rows of :func:`membership_changes_sql` that do not ``keep``, for a write that can only remove
    tuples.

    With one id per monomial (not ``wide``), by anti-joins in place of the grouping by tuple (a
    tuple's row repeats once per monomial: a DELETE ... USING removes it once): 0.5-1.1 ms off a
    single-row DELETE with a projection and a join view, 0.6 ms off an UPDATE, at 2k and 200k
    rows (interleaved in one process, stop 64), as DuckDB's hash aggregate runs pipelines of its
    own. With two ids per monomial the same anti-joins (a monomial dead when one of its ids is not
    visible) made an UPDATE at 200k rows 47 ms against 32 ms, so a wide view's tuples are grouped."""
    if rel.wide:
        return f"SELECT {cols_sql(rel)} FROM ({membership_changes_sql(rel, f'{held} m', visibility)}) WHERE NOT keep"
    alive = f"SELECT a.vid FROM {held} a JOIN {visibility} c ON c.id = a.mid WHERE c.vis"  # mid: the one id
    return f"SELECT {cols_sql(rel, 'm')} FROM {held} m ANTI JOIN ({alive}) k ON k.vid = m.vid"


def dirty_monomials(rel: Relation, dirty: str) -> str:
    """FROM item (``m``) of ``rel``'s monomials of the tuples whose vids ``dirty`` selects (maybe
    repeated, read by a semi-join)."""
    return f"{rel.aug('m')} m SEMI JOIN {dirty} d ON d.vid = m.vid"


def held_sql(rel: Relation, dirty: str) -> str:
    """SELECT of the monomials ``(vid, mid, ids, cols...)`` of the tuples whose vids ``dirty`` selects,
    for a statement to compute once (a ``MATERIALIZED`` CTE: DuckDB sizes the joins that read it)."""
    return f"SELECT m.vid, m.mid, m.ids, {cols_sql(rel, 'm')} FROM {dirty_monomials(rel, dirty)}"


def narrowed_visibility(visibility: str, monomials: str, wide: bool = True) -> str:
    """FROM text of the rows of ``visibility`` (``id, vis``) of the ids the monomials ``monomials``
    selects hold (``mid`` alone when not ``wide``): a semi-join, whose hash table DuckDB builds from
    those ids, so the entries are only scanned. For a statement whose monomials come from its own
    CTEs: DuckDB cannot size those, and joined them with every entry, building its hash table from
    the entries (1M entries: 7-11 ms a view, against about 1 ms to scan them)."""
    ids = f"SELECT {'unnest(ids)' if wide else 'mid'} AS id FROM {monomials}"
    return f"(SELECT c.id, c.vis FROM {visibility} c SEMI JOIN ({ids}) need ON need.id = c.id)"


def app_remove_sql(rel: Relation, rows: str) -> str:
    """DELETE from the relation's APP table of the rows ``rows`` selects (AUG columns; matched on
    every column, NULLs equal)."""
    return f"DELETE FROM {rel.app} AS app USING ({rows}) AS d WHERE {app_match(rel, 'app', 'd')}"


def any_rows_sql(tables: list[str]) -> str:
    """Whether some of ``tables`` holds a row (one BOOLEAN)."""
    return "SELECT " + " OR ".join(f"EXISTS (SELECT 1 FROM {t})" for t in tables)


def monomials_insert_sql(rel: Relation, source: str, seq: str, lacking_only: bool) -> str:
    """INSERT of the candidate monomials ``source`` selects (``vid, mid, ids, cols...``) into ``rel``'s
    ``$m``, stamped with sequence number ``seq`` (a number, or ``?``), returning the rows it added;
    ``lacking_only``: only those ``$m`` lacks (an anti-join), else every one (the caller knows
    ``$m`` lacks them all)."""
    lacking = f"ANTI JOIN {rel.aug('m')} m ON m.vid = c.vid AND m.mid = c.mid" if lacking_only else ""
    return f"""INSERT INTO {rel.aug('m')}
            SELECT c.vid, c.mid, c.ids, {cols_sql(rel, 'c')}, {seq} FROM {source} c {lacking}
            RETURNING vid, mid, ids, {cols_sql(rel)}"""


def alive_sql(view: Relation, monomials: str, visibility: str) -> str:
    """SELECT text of the tuples ``(vid, cols...)`` of the monomials ``monomials`` names (``vid, mid,
    ids, cols...``; a table, slot or CTE, as it is read twice) that are alive: every id visible in
    ``visibility`` (``id, vis``); a tuple appears once per alive monomial. A monomial is dead when
    one of its ids has an invisible row there or none: those ids' monomials are anti-joined away, so
    only ``(vid, mid, id)`` goes through the join with the visibility and no aggregate carries the
    values (a GROUP BY of the monomials with ``bool_and`` of their ids' visibility took 2.6 of the
    9 ms of operators of a paper join-insert batch)."""
    return f"""SELECT n.vid, {cols_sql(view, 'n')} FROM {monomials} n
               ANTI JOIN (SELECT u.vid, u.mid FROM (SELECT vid, mid, unnest(ids) AS id FROM {monomials}) u
                          LEFT JOIN {visibility} c ON c.id = u.id
                          WHERE NOT coalesce(c.vis, false)) d ON d.vid = n.vid AND d.mid = n.mid"""


def app_append_sql(view: Relation, rows: str, one_derivation: bool, non_null: frozenset[str]) -> str:
    """INSERT into the view's APP table of the tuples ``rows`` selects (``vid, cols...``, one row per
    tuple) that it does not hold. ``one_derivation``: each is its tuple's one derivation and new, so
    none is there and no anti-join is needed. ``non_null``: AUG columns ``rows`` holds no NULL in
    (:func:`crr.batch_rows.app_match`)."""
    if one_derivation:
        # each new monomial is its tuple's one derivation, and new to $m: before this batch the
        # tuple had none, so it is not in the APP table (the paper's join view site, 1000 new
        # rows into 100k: 4.0-4.6 ms against 5.4-6.4 ms with the anti-join, statement timing)
        return f"INSERT INTO {view.app} ({app_cols_sql(view)}) SELECT {cols_sql(view, 'd')} FROM {rows} d"
    match = app_match(view, 'app', 'd', non_null)
    if not non_null:
        return f"""INSERT INTO {view.app} ({app_cols_sql(view)})
            SELECT {cols_sql(view, 'd')} FROM {rows} d ANTI JOIN {view.app} app ON {match}"""
    # the APP rows that can match, found by a semi-join: DuckDB pushes the new rows' range of each
    # ``=`` column into the scan (zone maps skip row groups), which it does not do for the
    # anti-join's side (620k APP rows: 11.5 -> 1.6 ms for 636 new rows, measured alone)
    return f"""INSERT INTO {view.app} ({app_cols_sql(view)})
        WITH d AS MATERIALIZED (SELECT * FROM {rows})
        SELECT {cols_sql(view, 'd')} FROM d ANTI JOIN (SELECT app.* FROM {view.app} app SEMI JOIN d ON {match}) app
        ON {match}"""
