"""A view of a remote source that keeps nothing: the source's causal lengths and the view's
derivations in one table, ``_crr."<view>$w"``.

A site that declares a remote source ``S`` that keeps no tuples and one select/project view ``V``
over it (a device that wants a view of a stream, not the stream: the paper's projection site) holds,
per tuple id ``t`` of ``S`` it has heard of, ``t``'s causal-length entry and at most one derivation
of ``V``: the monomial ``[t]`` of the view tuple ``pi sigma_p(t)`` (none when ``t`` fails the
predicate or its values have not arrived). The standard layout keeps the entry in ``_crr.cl`` and
the derivation in ``_crr."V$m"``, so a batch runs a MERGE into each and ``V``'s membership joins
them. This layout keeps both in one row per id::

    _crr."V$w" (id, cl, kh, stamp, vis, seq, vid, c0, c1, ..., dseq)

``cl, kh, stamp, vis, seq`` are the entry as ``_crr.cl`` would hold it (a row whose values arrived
before any entry has ``cl`` 0: no entry), ``vid, c0, ...`` the derivation's view tuple (NULL when
there is none) and ``dseq`` the sequence number that added it. A batch then runs

1. for keyed entries, the count of other present versions of their keys that picks the MERGE's form
   (:func:`crr.causal.present_key_versions_sql`, read here; a batch of deletes skips it while the
   site's ``rival_versions`` flag is false, :class:`crr.catalog.SiteFlag`);
2. one MERGE (:func:`merge_sql`) that merges the entries (max of ``cl`` and ``stamp``; visibility
   as DESIGN 1.2 defines it), adds the derivations of the tuples that arrived, and returns every row
   it changed with its visibility and view tuple;
3. one statement per kind of change on ``V``'s APP table: tuples of visible returned rows enter it
   unless present (:func:`app_insert_sql`); tuples of invisible returned rows leave it unless another
   row of the same view tuple is visible (:func:`app_delete_sql`).

The delta identity: ``V = pi sigma_p S`` and each derivation is ``[t]``, so ``in?(v) = OR over t with
vid(t) = v of visible(t)``. A batch changes ``visible`` only for the ids whose entries it wrote (and,
for keyed entries, the other versions of their keys, which the MERGE writes too), and adds
derivations only for the tuples whose values it brought; every view tuple whose membership can
change therefore has a row the MERGE returns, and ``in?`` of that tuple is re-read from the table
after the MERGE (step 3). As in the standard layout, provenance only grows and the steps are
idempotent.

When it applies (:func:`eligible`): ``V`` has one branch with one occurrence, of ``S``, is no
aggregate, and is the only view over ``S``, which keeps nothing and has received nothing yet, and no
relation's learned lineage holds ``S`` (a remote table of a view over it). Then
``S``'s entries matter only to ``V`` and ``V``'s derivations to nothing but its APP table and its
changes. A later change that breaks that (:func:`broken`): another view over ``S`` or over ``V``, a
relation whose learned lineage holds ``S``, or ``S`` receiving a view's monomials, converts the site
to the standard layout first (:func:`uncolocate_sql`), in the same transaction, so every other
module only ever sees ``S``'s entries in ``_crr.cl``. Dropping ``V`` converts too, so ``S``'s
entries stay as they would.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot

from crr.batch_rows import Rows, app_cols_sql, app_match, cols_sql, rows_sql
from crr.catalog import SCHEMA, Catalog, Relation, monomials_ddl
from crr.cte import CteWrite
from crr.causal import (FORGED_ENTRIES, FORGED_IN_HOME, EntryHome, ListedIds, ReceivedEntries, empty_entries_sql,
                        entry_delta_sql, later_entries_update_sql, without_stored_sql)
from crr.sql.compile import IDS
from crr.sql.statements import RelationKind
from crr.types import quote_str, tuple_id_sql


@dataclass(frozen=True)
class ColocatedBatch:
    """What one batch brings a co-located view: its source's received tuples and entries (either may
    be absent)."""

    view: str
    source: str
    tuples: Rows | None  # the source's received tuples (RowsKind.RECEIVED)
    entries: ReceivedEntries | None  # the source's received entries (``relations`` is just the source)


def home(view: Relation, source: str) -> EntryHome:
    """Where the co-located source's entries are stored: the view's ``$w`` table."""
    return EntryHome(view.aug("w"), source)


def source_of(view: Relation) -> str:
    """The one input of a co-located view."""
    assert view.plan is not None
    return view.plan.branches[0].occurrences[0].relation


def homes_of(catalog: Catalog) -> dict[str, Relation]:
    """Each source whose entries a co-located view keeps, with that view."""
    return {source_of(rel): rel for rel in catalog.values() if rel.colocated}


def eligible(catalog: Catalog, view: Relation) -> bool:
    """Whether a view being created (not in ``catalog`` yet) keeps its derivations with its source's
    entries (see the module docstring)."""
    plan = view.plan
    if view.aggregate is not None or plan is None or len(plan.branches) != 1 or len(plan.branches[0].occurrences) != 1:
        return False
    source = catalog.get(plan.branches[0].occurrences[0].relation)
    if source is None or source.kind is not RelationKind.SOURCE or source.stored or source.derived or source.lineage:
        return False
    readers = [r.name for r in catalog.values() if r.plan is not None and source.name in r.plan.inputs]
    return not readers and not _holders(catalog, source.name, view.name)


def _holders(catalog: Catalog, source: str, view: str) -> list[str]:
    """The relations but ``source`` and ``view`` whose lineage holds ``source`` (a remote table of a
    view over it, whose lineage a merge taught): they need ``source``'s entries in ``_crr.cl``."""
    return [n for n in catalog if n not in (source, view) and source in catalog.lineage(n)]


def broken(catalog: Catalog) -> list[Relation]:
    """The co-located views of ``catalog`` whose conditions no longer hold (see the module docstring)."""
    out = []
    for view in catalog.values():
        if not view.colocated:
            continue
        source = catalog[source_of(view)]
        readers = [r.name for r in catalog.values() if r.plan is not None
                   and (source.name in r.plan.inputs or view.name in r.plan.inputs) and r.name != view.name]
        if readers or _holders(catalog, source.name, view.name) or source.derived or not source.lineage <= {source.name}:
            out.append(view)
    return out


def uncolocate_sql(view: Relation, source: str) -> list[str]:
    """Move a co-located view to the standard layout: the entries into ``_crr.cl``, the derivations
    into a new ``$m`` table (width 1: ``mid`` is the id, so no ``$i`` index), and drop ``$w``."""
    w = view.aug("w")
    return [
        f"INSERT INTO {SCHEMA}.cl SELECT id, {quote_str(source)}, cl, kh, stamp, vis, seq FROM {w} WHERE cl > 0",
        monomials_ddl(view),
        f"INSERT INTO {view.aug('m')} SELECT vid, id, [id], {cols_sql(view)}, dseq FROM {w} WHERE vid IS NOT NULL",
        f"DROP TABLE {w}",
        f"UPDATE {SCHEMA}.relations SET colocated = false WHERE name = {quote_str(view.name)}",
    ]


def derivations_sql(view: Relation, source: Relation, tuples: Rows) -> str:
    """The derivations of the source's received tuples, ``(id, vid, c0, ...)`` of the view: the
    view's compiled delta plan over them (``d(pi sigma_p S) = pi sigma_p dS``).

    One row per id: a changeset's tuple ids are unique (its validation refuses repeats) and the plan
    has one branch over one occurrence. Its monomial column is then the source's own, passed
    through, so the source gives it as the tuple's id itself rather than a one-id list."""
    assert view.plan is not None
    delta = sqlglot.parse_one(f"SELECT {cols_sql(source)}, vid AS {IDS} FROM {rows_sql(source, tuples)}",
                              read="duckdb").subquery()
    (plan,) = view.plan.delta_queries({source.name}, lambda relation, is_delta: delta.copy())  # a tree per use
    return f"""SELECT p.{IDS} AS id, {tuple_id_sql(view.name, view.aug_columns, 'p')} AS vid, {cols_sql(view, 'p')}
               FROM ({plan.sql('duckdb', copy=False)}) p"""


def _received_rows_sql(view: Relation, batch: ColocatedBatch, derivations: str | None, single_versions: bool) -> str:
    """FROM text of a batch's rows for the view's ``$w``, one per id it brings: ``(id, rel, cl, kh,
    stamp, vis, grew, vid, cols...)``, the source's entry (checked as :func:`crr.causal.cl_merge_sql`
    reads entries; NULL where the batch brings the tuple alone) beside the tuple's derivation (NULL
    where it brings the entry alone, or the tuple derives nothing)."""
    if batch.entries is not None:
        entries = f"({entry_delta_sql(batch.entries, home(view, batch.source), single_versions)})"
    else:
        entries = f"({empty_entries_sql()})"
    derived = f"({derivations})" if derivations is not None else (
        "(SELECT NULL::UHUGEINT AS id, NULL::UHUGEINT AS vid, "
        + ", ".join(f"NULL::{c.type} AS {c.name}" for c in view.aug_columns) + " WHERE false)")
    return f"""(SELECT coalesce(e.id, x.id) AS id, e.rel, e.cl, e.kh, e.stamp, e.vis, coalesce(e.grew, false) AS grew,
                   x.vid, {', '.join(f'x.{c.name}' for c in view.aug_columns)}
            FROM {entries} e FULL JOIN {derived} x ON x.id = e.id)"""


def _row_columns(view: Relation) -> str:
    """``$w``'s columns, in :func:`_new_row_sql`'s order."""
    return f"id, cl, kh, stamp, vis, seq, vid, {', '.join(c.name for c in view.aug_columns)}, dseq"


def _new_row_sql(view: Relation, seq: int) -> str:
    """The ``$w`` row of a received row ``d`` (:func:`_received_rows_sql`) whose id the view holds no
    row of."""
    return f"""d.id, coalesce(d.cl, 0), d.kh, coalesce(d.stamp, 0::UHUGEINT),
                    coalesce(d.vis, coalesce(d.cl, 0) % 2 = 1), CASE WHEN d.cl IS NULL THEN 0 ELSE {int(seq)} END,
                    d.vid, {', '.join(f'd.{c.name}' for c in view.aug_columns)}, CASE WHEN d.vid IS NULL THEN NULL ELSE {int(seq)} END"""


def _returned(view: Relation) -> tuple[str, ...]:
    """What the view's MERGE, first INSERT and UPDATE return of each row they write."""
    return ("id", "vid", "vis", "cl", "seq", "dseq", *(c.name for c in view.aug_columns))


def _returned_sql(view: Relation) -> str:
    return f"RETURNING {', '.join(_returned(view))}"


def merge_sql(view: Relation, batch: ColocatedBatch, derivations: str | None, seq: int, single_versions: bool) -> str:
    """One MERGE writing a batch's entries and derivations into the view's ``$w`` table; it returns
    ``(id, vid, vis, cl, seq, dseq, c0, ...)`` of every row it wrote (see the module docstring).

    Entries are merged as :func:`crr.causal.cl_merge_sql` merges them into ``_crr.cl`` (same checks,
    same forms; ``single_versions`` as there); a derivation is added to a row that has none. ``seq``
    marks the entries that grew and ``dseq`` the derivations added."""
    w = view.aug("w")
    cols = [c.name for c in view.aug_columns]
    cl = "greatest(c.cl, d.cl)"
    grows = "(d.vis IS NOT NULL OR d.cl > c.cl OR d.stamp > c.stamp)"
    new_derivation = "(c.vid IS NULL AND d.vid IS NOT NULL)"
    return f"""MERGE INTO {w} AS c USING {_received_rows_sql(view, batch, derivations, single_versions)} AS d ON c.id = d.id
        WHEN MATCHED AND {FORGED_IN_HOME} THEN UPDATE SET seq = CASE WHEN {FORGED_IN_HOME} THEN {FORGED_ENTRIES} ELSE c.seq END
        WHEN MATCHED AND ({grows} OR {new_derivation}) THEN UPDATE SET
            cl = {cl}, kh = coalesce(c.kh, d.kh), stamp = greatest(c.stamp, d.stamp),
            vis = CASE WHEN d.cl IS NULL THEN c.vis ELSE coalesce(d.vis, {cl} % 2 = 1) END,
            seq = CASE WHEN d.grew AND (d.cl > c.cl OR d.stamp > c.stamp) THEN {int(seq)} ELSE c.seq END,
            vid = coalesce(c.vid, d.vid),
            {', '.join(f'{c} = CASE WHEN c.vid IS NULL THEN d.{c} ELSE c.{c} END' for c in cols)},
            dseq = CASE WHEN {new_derivation} THEN {int(seq)} ELSE c.dseq END
        WHEN NOT MATCHED THEN INSERT ({_row_columns(view)})
            VALUES ({_new_row_sql(view, seq)})
        {_returned_sql(view)}"""


def first_insert_sql(view: Relation, batch: ColocatedBatch, derivations: str | None, seq: int,
                     listed: ListedIds | None = None) -> str:
    """One INSERT adding to the view's ``$w`` the batch's rows whose ids it holds no row of (and whose
    keys have no other present version: :func:`crr.causal.without_rivals_sql`), in place of
    :func:`merge_sql` for a batch of first inserts (:func:`crr.causal.takes_first_insert`); it returns
    what that MERGE returns for them. The rows it finds stored are left to the MERGE, which the caller
    runs after it when some received entry was not written, or some received tuple has no entry in
    the batch (its row may be stored: see :func:`crr.causal.first_entries_insert_sql`).

    ``listed``: the batch's few ids and key hashes as constants (:class:`crr.causal.ListedIds`): the scans of
    ``$w`` for stored rows and for rivals keep only theirs, where each join hashed the whole table
    (a 1-row merge into a view of a 1M-row source: two hash joins of 6.8 and 5.8 ms)."""
    assert batch.entries is not None
    return f"""INSERT INTO {view.aug('w')} ({_row_columns(view)})
        SELECT {_new_row_sql(view, seq)}
        FROM {_received_rows_sql(view, batch, derivations, True)} d
            {without_stored_sql(batch.entries, home(view, batch.source), listed)}
        {_returned_sql(view)}"""


def update_sql(view: Relation, batch: ColocatedBatch, derivations: str | None, seq: int) -> str:
    """:func:`crr.causal.later_entries_update_sql` into the view's ``$w``, reading the rows
    :func:`merge_sql` reads (so received tuples are checked as there) and returning what it returns."""
    assert batch.entries is not None
    return later_entries_update_sql(home(view, batch.source), _received_rows_sql(view, batch, derivations, True), seq,
                                    _returned(view))


def app_insert_sql(view: Relation, returned: str) -> str:
    """Add to the view's APP table the tuples of the visible rows the MERGE returned (in the slot
    ``returned``) that it does not hold yet."""
    return f"""INSERT INTO {view.app} ({app_cols_sql(view)})
        SELECT {cols_sql(view, 'd')} FROM (SELECT DISTINCT ON (vid) * FROM {returned} WHERE vis AND vid IS NOT NULL) d
        ANTI JOIN {view.app} app ON {app_match(view, 'app', 'd')}"""


def app_delete_sql(view: Relation, returned: str) -> str:
    """Remove from the view's APP table the tuples of the invisible rows the MERGE returned (in the
    slot ``returned``) that no visible row of ``$w`` derives."""
    return f"""DELETE FROM {view.app} AS app USING (
            SELECT r.* FROM (SELECT DISTINCT ON (vid) * FROM {returned} WHERE NOT vis AND vid IS NOT NULL) r
            ANTI JOIN (SELECT vid FROM {view.aug('w')}
                       WHERE vis AND vid IN (SELECT vid FROM {returned} WHERE NOT vis)) a ON a.vid = r.vid) d
        WHERE {app_match(view, 'app', 'd')}"""


WRITTEN_ROWS = "_crr_w"  # the CTE of the rows the INSERT or UPDATE of $w returned (app_changes_after)
APP_DELETED = "_crr_app_deleted"
APP_INSERTED = "_crr_app_inserted"


def app_changes_after(view: Relation, entries: ReceivedEntries | None) -> tuple[str, list[CteWrite]]:
    """The APP changes of the rows a batch's INSERT or UPDATE of ``$w`` returns, as writes run in
    that statement (:func:`crr.cte.returning_then_sql`), reading its rows as :data:`WRITTEN_ROWS`:
    :func:`app_delete_sql` (counted as :data:`APP_DELETED`), then :func:`app_insert_sql`
    (:data:`APP_INSERTED`), each only where the batch's ``entries`` let the rows need it. The
    INSERT of first inserts (every length 1) writes visible rows, and rows without entries, which
    change no view tuple's membership: no deletes. Deletes (every length even) write invisible
    rows: no inserts. Each write re-reads ``in?`` of the view tuples of the rows it reads, so
    running them again over rows a MERGE wrote afterwards changes only the tuples of those rows."""
    gone = (APP_DELETED, app_delete_sql(view, WRITTEN_ROWS) + " RETURNING 1", [])
    new = (APP_INSERTED, app_insert_sql(view, WRITTEN_ROWS) + " RETURNING 1", [])
    if entries is not None and entries.first_lengths:
        return WRITTEN_ROWS, [new]
    if entries is not None and entries.deletions_only:
        return WRITTEN_ROWS, [gone]
    return WRITTEN_ROWS, [gone, new]


# -- reading: changes, provenance, counters ---------------------------------------------------------

def monomials_sql(view: Relation, since: int) -> str:
    """The view's monomials ``(vid, ids)`` added after ``since``."""
    return f"SELECT vid, [id] AS ids FROM {view.aug('w')} WHERE dseq > {int(since)}"


def tuples_sql(view: Relation, since: int) -> str:
    """The view tuples ``(vid, c0, ...)`` of those monomials, one row each."""
    return f"SELECT DISTINCT ON (vid) vid, {cols_sql(view)} FROM {view.aug('w')} WHERE dseq > {int(since)}"


def entries_sql(view: Relation, source: str, since: int) -> str:
    """The source's causal-length entries ``(id, rel, cl, kh, stamp)`` changed after ``since``."""
    return f"SELECT id, {quote_str(source)} AS rel, cl, kh, stamp FROM {view.aug('w')} WHERE cl > 0 AND seq > {int(since)}"


def provenance_sql(view: Relation) -> str:
    """Each view tuple's values and its monomials (each one id)."""
    return f"""SELECT {cols_sql(view)}, list_sort(list([id])) FROM {view.aug('w')} WHERE vid IS NOT NULL
               GROUP BY vid, {cols_sql(view)}"""


def max_seq_sql(view: Relation) -> str:
    """The largest sequence number the view's table holds (an entry's or a derivation's), as ``s``."""
    return f"SELECT greatest(max(seq), max(dseq)) AS s FROM {view.aug('w')}"


def max_stamp_sql(view: Relation) -> str:
    """The largest stamp of the source's entries the view's table holds, as ``s``."""
    return f"SELECT max(stamp) AS s FROM {view.aug('w')}"
