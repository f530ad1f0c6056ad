"""A replica: a stored remote table or source that has only received a replicated table's tuples,
keeping each tuple's causal-length entry in the tuple's own row, ``_crr."<r>$e"``.

Such a relation ``R`` (:attr:`crr.catalog.Relation.replica`: remote, stored, not ``derived``) holds
each tuple ``t`` as its own one monomial ``[t]``, so the tuple, its monomial and its causal-length
entry all have the id ``t``. The standard layout keeps the entry in ``_crr.cl`` and the tuple in
``$m``, so every batch runs a MERGE into the one and an INSERT into the other, each scanning its
table, and both repeat the id (and ``_crr.cl`` the relation's name). This layout keeps one row per
id ``R`` has heard of::

    _crr."<r>$e" (id, cl, kh, stamp, vis, seq, c0, c1, ..., tseq)

``cl, kh, stamp, vis, seq`` are the entry as ``_crr.cl`` would hold it (``cl`` 0: no entry yet, the
values came first) and ``c0, ...`` the tuple's values, ``tseq`` the sequence number that brought
them (NULL: the entry came first). Readers are unchanged: ``_crr."<r>$m"`` is a view of the rows
with values, ``(vid, mid, ids, cols..., seq)`` with ``mid`` = ``vid`` = the id and ``ids`` =
``[id]`` (:func:`crr.catalog.replica_ddl`); ``in?`` reads the visibility of ``_crr.cl`` and of the
replicas (:func:`visibility_sql`), ``changes()`` a replica's entries from its table
(:func:`changed_entries_sql`). A batch runs, per replica, one MERGE (:func:`merge_sql`) that merges
the received entries (the checks and forms of :func:`crr.causal.cl_merge_sql`) and adds the
received tuples, and returns every row it wrote: the entries written (the batch's flips) and the
ids of the tuples added, whose received rows are the relation's delta for the views over it
(:func:`added_tuples_sql`). Deriving from a replica is unchanged: ``d(R) = dR``, one monomial per
new tuple.

An id's relation never changes; ``_crr.cl``'s MERGE refuses an entry that disagrees with the stored
one, but a MERGE into one home cannot see another's ids, so received entries are also checked
against the ids kept in the other homes (:func:`elsewhere`, read by
:func:`crr.causal.checked_entries_sql`). A replica's entries live in its ``$e`` alone.

The first view's monomials that a replica receives (it becomes ``derived``: an id may then sit in
several tuples) move it to the standard layout first, in the same transaction (:func:`release_sql`);
a source that starts keeping tuples when a view joins it takes in the entries ``_crr.cl`` held for
it (:func:`adopt_sql`).
"""

from __future__ import annotations

from dataclasses import dataclass

from crr.batch_rows import Rows, cols_sql, rows_sql
from crr.catalog import SCHEMA, Relation, monomials_ddl
from crr.causal import (FORGED_ENTRIES, FORGED_IN_HOME, EntryHome, ListedIds, ReceivedEntries, entry_delta_sql,
                        empty_entries_sql, later_entries_update_sql, without_stored_sql)
from crr.types import quote_str


@dataclass(frozen=True)
class ReplicaBatch:
    """What one batch brings a replica: its received tuples and entries (either may be absent)."""

    relation: str
    tuples: Rows | None  # received tuples (RowsKind.RECEIVED)
    entries: ReceivedEntries | None  # received entries (``relations`` is just the replica)


def home(rel: Relation) -> EntryHome:
    """Where a replica's entries are stored: its ``$e`` table."""
    return EntryHome(rel.aug("e"), rel.name)


def _received_rows_sql(rel: Relation, batch: ReplicaBatch, single_versions: bool) -> str:
    """FROM text of a batch's rows for the replica's ``$e``, one per id it brings: ``(id, rel, cl, kh,
    stamp, vis, grew, has_tuple, cols...)``, the entry (checked as :func:`crr.causal.cl_merge_sql`
    reads entries; NULL where the batch brings the tuple alone) beside the tuple's values (NULL where
    it brings the entry alone)."""
    cols = [c.name for c in rel.aug_columns]
    if batch.entries is not None:
        entries = f"({entry_delta_sql(batch.entries, home(rel), single_versions)})"
    else:
        entries = f"({empty_entries_sql()})"
    if batch.tuples is not None:
        tuples = f"(SELECT vid AS id, {cols_sql(rel)} FROM {rows_sql(rel, batch.tuples)})"
    else:
        tuples = "(SELECT NULL::UHUGEINT AS id, " + ", ".join(f"NULL::{c.type} AS {c.name}"
                                                             for c in rel.aug_columns) + " WHERE false)"
    return f"""(SELECT coalesce(e.id, x.id) AS id, e.rel, e.cl, e.kh, e.stamp, e.vis, coalesce(e.grew, false) AS grew,
                   x.id IS NOT NULL AS has_tuple, {', '.join(f'x.{c}' for c in cols)}
            FROM {entries} e FULL JOIN {tuples} x ON x.id = e.id)"""


def _new_row_sql(rel: Relation, seq: int) -> str:
    """The ``$e`` row of a received row ``d`` (:func:`_received_rows_sql`) whose id the replica holds no
    row of: ``(id, cl, kh, stamp, vis, seq, cols..., tseq)``."""
    return f"""d.id, coalesce(d.cl, 0), d.kh, coalesce(d.stamp, 0::UHUGEINT),
                    coalesce(d.vis, coalesce(d.cl, 0) % 2 = 1), CASE WHEN d.cl IS NULL THEN 0 ELSE {int(seq)} END,
                    {', '.join(f'd.{c.name}' for c in rel.aug_columns)}, CASE WHEN d.has_tuple THEN {int(seq)} END"""


def _row_columns(rel: Relation) -> str:
    """``$e``'s columns, in :func:`_new_row_sql`'s order."""
    return f"id, cl, kh, stamp, vis, seq, {', '.join(c.name for c in rel.aug_columns)}, tseq"


def _returned(rel: Relation) -> tuple[str, ...]:
    """What the replica's MERGE, first INSERT and UPDATE return of each row they write (the columns
    :func:`returned_columns` names; ``rel`` is the replica's name)."""
    return tuple(f"{quote_str(rel.name)} AS rel" if c == "rel" else c for c in returned_columns())


def _returned_sql(rel: Relation) -> str:
    return f"RETURNING {', '.join(_returned(rel))}"


def merge_sql(rel: Relation, batch: ReplicaBatch, seq: int, single_versions: bool) -> str:
    """One MERGE writing a batch's entries and tuples into the replica's ``$e``; it returns every row it
    wrote as ``(id, rel, vis, cl, seq, tseq)``: the tuples it added are the rows with ``tseq`` =
    ``seq`` (their values are the received ones: :func:`added_tuples_sql`), and every row with an entry is a candidate flip
    (a superset). It never reads the stored values: DuckDB would read them for every row it scans,
    not only for the rows the join keeps (measured on a delete batch at 100k rows: a 9.6 ms scan
    against 1.9 ms for the entries' columns alone).

    Entries are merged as :func:`crr.causal.cl_merge_sql` merges them into ``_crr.cl`` (same checks,
    same forms; ``single_versions`` as there); a row's values are set once, when its tuple arrives.
    ``seq`` marks the entries that grew and ``tseq`` the tuples added. A row written for its tuple
    alone keeps its entry's visibility (a keyed version's ``vis`` is not its parity)."""
    e = rel.aug("e")
    cols = [c.name for c in rel.aug_columns]
    cl = "greatest(c.cl, d.cl)"
    grows = "(d.vis IS NOT NULL OR d.cl > c.cl OR d.stamp > c.stamp)"
    new_tuple = "(c.tseq IS NULL AND d.has_tuple)"
    # the entry as it is after the batch (unchanged when the batch has none for the row); the tuple's
    # columns are set in their own branch, so the MERGE never reads the stored values
    entry = f"""cl = {cl}, kh = coalesce(c.kh, d.kh), stamp = greatest(c.stamp, d.stamp),
            vis = CASE WHEN d.cl IS NULL THEN c.vis ELSE coalesce(d.vis, {cl} % 2 = 1) END,
            seq = CASE WHEN d.grew AND (d.cl > c.cl OR d.stamp > c.stamp) THEN {int(seq)} ELSE c.seq END"""
    return f"""MERGE INTO {e} AS c USING {_received_rows_sql(rel, batch, single_versions)} AS d ON c.id = d.id
        WHEN MATCHED AND {FORGED_IN_HOME} THEN UPDATE SET seq = CASE WHEN {FORGED_IN_HOME} THEN {FORGED_ENTRIES} ELSE c.seq END
        WHEN MATCHED AND {new_tuple} THEN UPDATE SET {entry},
            {', '.join(f'{c} = d.{c}' for c in cols)}, tseq = {int(seq)}
        WHEN MATCHED AND {grows} THEN UPDATE SET {entry}
        WHEN NOT MATCHED THEN INSERT ({_row_columns(rel)})
            VALUES ({_new_row_sql(rel, seq)})
        {_returned_sql(rel)}"""


def first_insert_sql(rel: Relation, batch: ReplicaBatch, seq: int, values: bool = False,
                     listed: ListedIds | None = None) -> str:
    """One INSERT adding to the replica's ``$e`` the batch's rows whose ids it holds no row of (and whose
    keys have no other present version: :func:`crr.causal.without_rivals_sql`), in place
    of :func:`merge_sql` for a batch of first inserts (:func:`crr.causal.takes_first_insert`); it
    returns what that MERGE returns for them. The rows it finds stored are left to the MERGE, which
    the caller runs after it when the INSERT did not write every received entry and tuple (see
    :func:`crr.causal.first_entries_insert_sql`: the same reasoning, the same checks). With
    ``values`` it returns each row's values too (``cols...`` after :func:`returned_columns`), for
    statements that derive from the tuples it added inside the same statement. ``listed``: the
    batch's few ids and key hashes (:class:`crr.causal.ListedIds`), which then filter the scans of
    ``$e`` for stored rows and rivals, where each join hashed the whole table (a 1-row merge into the
    paper's join view site holding 1M rows of R1: two hash joins of 6.4 and 6.3 ms)."""
    returned = _returned_sql(rel) + ("".join(f", {c.name}" for c in rel.aug_columns) if values else "")
    assert batch.entries is not None
    return f"""INSERT INTO {rel.aug('e')} ({_row_columns(rel)})
        SELECT {_new_row_sql(rel, seq)}
        FROM {_received_rows_sql(rel, batch, True)} d
            {without_stored_sql(batch.entries, home(rel), listed)}
        {returned}"""


def returned_columns() -> tuple[str, ...]:
    """The names of the columns the replica's MERGE, first INSERT and UPDATE return (see :func:`merge_sql`)."""
    return ("id", "rel", "vis", "cl", "seq", "tseq")


def new_tuples_sql(rel: Relation, written: str, seq: int) -> str:
    """SELECT text of the replica's new monomials ``(vid, mid, ids, cols...)`` from the rows a first
    INSERT with ``values`` returned (``written``, a CTE of the same statement): the rows it added a
    tuple to (``tseq``), each tuple its own monomial, as :func:`added_tuples_sql` reads them."""
    return f"SELECT id AS vid, id AS mid, [id] AS ids, {cols_sql(rel)} FROM {written} WHERE tseq = {int(seq)}"


def update_sql(rel: Relation, batch: ReplicaBatch, seq: int) -> str:
    """:func:`crr.causal.later_entries_update_sql` into the replica's ``$e``, reading the rows
    :func:`merge_sql` reads (so received tuples are checked as there) and returning what it returns."""
    assert batch.entries is not None
    return later_entries_update_sql(home(rel), _received_rows_sql(rel, batch, True), seq, _returned(rel))


def added_tuples_sql(rel: Relation, added: Rows) -> str:
    """FROM text of the replica's new monomials ``(vid, mid, ids, cols...)``, from the received tuples
    that :func:`merge_sql` added (``added``: those rows of the received table, checked by the MERGE
    in the same transaction, so read as they are)."""
    i = added.id_column
    return f"(SELECT {i} AS vid, {i} AS mid, [{i}] AS ids, {cols_sql(rel)} FROM {added.table})"


def elsewhere(replicas: list[Relation], home: str | None) -> tuple[str, ...]:
    """The tables holding the ids a site with the given replicas keeps outside one home (a replica's
    name, or None for ``_crr.cl``): ``_crr.cl`` and the other replicas' ``$e``, each id there
    another relation's (a replica's entries and tuples live in its ``$e`` alone: :func:`adopt_sql`).
    None are needed for ``_crr.cl`` at a site without replicas."""
    others = tuple(r.aug("e") for r in sorted(replicas, key=lambda r: r.name) if r.name != home)
    return others if home is None else (f"{SCHEMA}.cl",) + others


def visibility_sql(replicas: list[Relation], lineage: set[str] | None = None) -> str:
    """FROM text of ``(id, vis)`` of every id ``_crr.cl`` or one of the site's ``replicas`` has a row
    for: what ``in?`` reads. A replica's row without an entry yet (``cl`` 0) is invisible, as an id
    without an entry is, so its rows are read unfiltered.

    ``lineage``: the base relations whose ids the reader's monomials hold, when known. Only their
    entries are read then: the replicas among them, and their rows of ``_crr.cl`` (an id's entry is
    stored under its own relation), which lets DuckDB skip the row groups of other relations by their
    ``rel`` zone maps: a table loaded or merged in bulk fills row groups of its own (measured on 4M
    entries of four relations, the join of three ids 11.6 -> 3.9 ms; no change when relations
    interleave row by row)."""
    cl = f"{SCHEMA}.cl"
    if lineage is not None:
        names = ", ".join(quote_str(n) for n in sorted(lineage)) or "NULL"
        cl = f"(SELECT id, vis FROM {SCHEMA}.cl WHERE rel IN ({names}))"
        replicas = [r for r in replicas if r.name in lineage]
    if not replicas:
        return cl
    parts = [f"SELECT id, vis FROM {cl}"] + [f"SELECT id, vis FROM {r.aug('e')}"
                                             for r in sorted(replicas, key=lambda r: r.name)]
    return "(" + " UNION ALL ".join(parts) + ")"


def changed_entries_sql(rel: Relation, since: int) -> str:
    """The replica's causal-length entries ``(id, rel, cl, kh, stamp)`` changed after ``since``."""
    return (f"SELECT id, {quote_str(rel.name)} AS rel, cl, kh, stamp FROM {rel.aug('e')} "
            f"WHERE cl > 0 AND seq > {int(since)}")


def max_seq_sql(rel: Relation) -> str:
    """The largest sequence number the replica's table holds (an entry's or a tuple's), as ``s``."""
    return f"SELECT greatest(max(seq), max(tseq)) AS s FROM {rel.aug('e')}"


def max_stamp_sql(rel: Relation) -> str:
    """The largest stamp of the replica's entries, as ``s``."""
    return f"SELECT max(stamp) AS s FROM {rel.aug('e')}"


def adopt_sql(rel: Relation) -> list[str]:
    """Move the entries ``_crr.cl`` holds for a relation that becomes a replica (a source a view now
    joins, whose ``$e`` was just created empty) into its ``$e``."""
    name = quote_str(rel.name)
    return [f"""INSERT INTO {rel.aug('e')} (id, cl, kh, stamp, vis, seq)
                SELECT id, cl, kh, stamp, vis, seq FROM {SCHEMA}.cl WHERE rel = {name}""",
            f"DELETE FROM {SCHEMA}.cl WHERE rel = {name}"]


def convert_sql(rel: Relation, monomials: str) -> list[str]:
    """Move a relation's tuples from a ``$m`` table (``monomials``: a table of storage version 4 or
    earlier, each row the tuple's own one monomial) and its entries from ``_crr.cl`` into its new,
    empty ``$e`` (a storage-version-4 file being upgraded), then drop that table."""
    name = quote_str(rel.name)
    cols = ", ".join(f"t.{c.name}" for c in rel.aug_columns)
    return [f"""INSERT INTO {rel.aug('e')}
                SELECT coalesce(c.id, t.vid), coalesce(c.cl, 0), c.kh, coalesce(c.stamp, 0::UHUGEINT),
                       coalesce(c.vis, false), coalesce(c.seq, 0), {cols}, t.seq
                FROM (SELECT * FROM {SCHEMA}.cl WHERE rel = {name}) c FULL JOIN {monomials} t ON t.vid = c.id""",
            f"DELETE FROM {SCHEMA}.cl WHERE rel = {name}",
            f"DROP TABLE {monomials}"]


def keep_entries_sql(rel: Relation) -> str:
    """Copy a replica's entries into ``_crr.cl`` (before its ``$e`` goes: the replica is released,
    or dropped while other relations hold tuples of its lineage)."""
    return f"""INSERT INTO {SCHEMA}.cl (id, rel, cl, kh, stamp, vis, seq)
               SELECT id, {quote_str(rel.name)}, cl, kh, stamp, vis, seq FROM {rel.aug('e')} WHERE cl > 0"""


def release_sql(rel: Relation, full: Relation) -> list[str]:
    """Move a replica to the standard layout (``full``: the relation as it is now, ``derived``): its
    entries into ``_crr.cl``, its tuples into a ``$m`` table of one monomial each, and drop ``$e``."""
    assert rel.replica and not full.replica and rel.name == full.name
    e = rel.aug("e")
    return [keep_entries_sql(rel),
            f"DROP VIEW {rel.aug('m')}",
            monomials_ddl(full),
            f"INSERT INTO {full.aug('m')} SELECT id, id, [id], {cols_sql(rel)}, tseq FROM {e} WHERE tseq IS NOT NULL",
            f"DROP TABLE {e}"]

