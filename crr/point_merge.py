"""A merge of rows new to the site, run as one statement built like a local INSERT of new rows.

What a peer sends after an INSERT is a changeset of tuples of one replicated table, each with its
causal-length entry of length 1: the sync service merges one such changeset per write, and a site
catching up merges larger ones. The general path (:func:`crr.merge.plan_merge`, then
:meth:`crr.maintain.Maintainer.apply`) runs one statement per step in a transaction: five for a
table with a join view, plus BEGIN and COMMIT. Such a merge writes exactly what a local INSERT of
the same rows new to the site writes (entries of length 1, tuples, APP rows, and the views'
derivations and rows), except that each entry keeps the stamp it came with. So it runs one
statement of data-modifying CTEs (:func:`crr.point.new_rows_writes_sql`) with the views inside it
(:meth:`crr.maintain.Maintainer.appends`) and the tracked cursor
(:mod:`crr.tracked_cursors`), which writes nothing when the site has an entry of one of
the keys (unkeyed: ids). Two routes:

* :func:`received_new_rows`: at most :data:`~crr.point.POINT_ROWS` rows of types whose text Python
  writes. Python makes every check the general path makes in SQL on such rows (ids and key hashes
  recomputed from the values, lengths, stamps at most the allowed skew ahead, NOT NULL, one row per
  id and key), and the statement is the local INSERT's own (:func:`crr.point.new_rows_insert_sql`,
  prepared, the rows as parameters);
* :func:`received_new_batch`: up to :data:`BATCH_ROWS` rows of any type. Python checks the shape
  (one relation, lengths 1, one entry per tuple, one row per id and key) with pyarrow, and the
  statement (:func:`received_rows_insert_sql`) reads the changeset's Arrow tables through the
  general path's own SQL checks, which fail it with the general path's messages.

Anything else returns None and the general path runs, which checks the changeset and names what is
wrong. The site takes the general path as well when the statement wrote nothing, or when a view
cannot be maintained inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from crr.arrow_build import int64_scalar
from crr.batch_rows import Rows, RowsKind, cols_sql, rows_sql
from crr.catalog import SCHEMA, Relation
from crr.causal import ReceivedEntries, checked_entries_sql
from crr.changeset import ChangeKind, Changeset, RelationChanges
from crr.id_sets import all_in, distinct_ids, id_storage
from crr.merge import max_stamp
from crr.cte import CteWrite
from crr.point import POINT_ROWS, key_positions, new_rows_writes_sql, value_texts
from crr.types import key_hash_of_texts, quote_str, tuple_id_of_texts


@dataclass(frozen=True)
class ReceivedRows:
    """The rows of a merge that :func:`received_new_rows` vouched for."""

    relation: Relation  # the replicated table they belong to
    texts: list[tuple[str | None, ...]]  # DuckDB's text of each value, per row
    ids: list[int]  # each row's tuple id, recomputed from its texts (equal to the changeset's)
    key_hashes: list[int | None]  # each row's key hash, likewise (None for an unkeyed table)
    stamps: list[int]  # the stamp of each row's entry (0 where the changeset has none)


def _one_table(held: list[tuple[Relation, RelationChanges]], cs: Changeset, most: int) -> tuple[Relation, RelationChanges] | None:
    """The replicated table ``cs`` brings tuples of (``held``: the relations of ``cs`` this site
    merges), when it brings one, at most ``most`` tuples, as many entries and nothing else (other
    replicated tables with no rows); None otherwise. The changeset's validation fixed its tables'
    column names and Arrow types (:meth:`crr.changeset.Changeset.validate`)."""
    if cs.cl is None or not all(rel.is_base and rc.kind is ChangeKind.BASE for rel, rc in held):
        return None
    changed = [(rel, rc) for rel, rc in held if not rc.empty]  # the others bring nothing but their columns
    if len(changed) != 1:
        return None
    rel, rc = changed[0]
    if rel.orphans or not 0 < rc.tuples.num_rows <= most or cs.cl.num_rows != rc.tuples.num_rows:
        return None  # more entries: some without their tuple (another relation's, a deletion)
    return rel, rc


def received_new_rows(held: list[tuple[Relation, RelationChanges]], cs: Changeset, max_clock_skew: float) -> ReceivedRows | None:
    """The rows of ``cs`` when it brings one replicated table (``held``: the relations of ``cs`` this
    site merges) at most :data:`~crr.point.POINT_ROWS` tuples, each with its entry of length 1, and
    nothing else (other replicated tables with no rows), every one passing the general path's checks
    (stamps at most ``max_clock_skew`` seconds ahead); None otherwise."""
    found = _one_table(held, cs, POINT_ROWS)
    if found is None:
        return None
    rel, rc = found
    assert cs.cl is not None
    entries = {_u128(i): (r, c, k, s) for i, r, c, k, s in zip(
        id_storage(cs.cl.column("id")).to_pylist(), cs.cl.column("rel").to_pylist(), cs.cl.column("cl").to_pylist(),
        id_storage(cs.cl.column("kh")).to_pylist(), id_storage(cs.cl.column("stamp")).to_pylist())}
    if len(entries) != cs.cl.num_rows:
        return None  # an id twice: the general path refuses it
    try:  # every type's values, as Python's (crr.point.value_texts writes their texts)
        values = [_python_values(rc.tuples.column(a.name), c.type) for a, c in zip(rel.aug_columns, rel.columns)]
    except (OverflowError, KeyError):
        return None  # a date or timestamp Python cannot hold (a year past 9999, infinity), a time zone it does not know
    # (a TIME of 24:00:00 arrives as midnight, whose text gives another tuple id: the id check below
    # sends the merge to another route)
    not_null = [i for i, c in enumerate(rel.columns) if c.name in rel.not_null]
    key_at = key_positions(rel)
    latest = max_stamp(max_clock_skew)
    out = ReceivedRows(rel, [], [], [], [])
    for at, raw in enumerate(id_storage(rc.tuples.column("id")).to_pylist()):
        row = value_texts(rel.columns, [column[at] for column in values])
        tuple_id = _u128(raw)
        entry = entries.pop(tuple_id, None)
        if row is None or entry is None or any(row[i] is None for i in not_null):
            return None  # a value Python does not write, an id twice or without its entry, a NULL refused
        name, length, kh, stamp = entry
        if kh is not None and stamp is None:
            return None  # a keyed entry without a stamp: the general path refuses it
        stamp = _u128(stamp) if stamp is not None else 0
        if name != rel.name or length != 1 or stamp > latest or tuple_id != tuple_id_of_texts(rel.name, rel.columns, row):
            return None  # another relation's entry, a later length, a stamp too far ahead, a forged id
        key_hash = key_hash_of_texts(rel.name, rel.key_columns, [row[i] for i in key_at]) if rel.key else None
        if (_u128(kh) if kh is not None else None) != key_hash or (key_hash is not None and key_hash in out.key_hashes):
            return None  # a forged key hash, or two versions of one key (rival versions: the general path)
        out.texts.append(row)
        out.ids.append(tuple_id)
        out.key_hashes.append(key_hash)
        out.stamps.append(stamp)
    return out


def _python_values(column: pa.ChunkedArray, duckdb_type: str) -> list:
    """A received column's values as Python's (:func:`crr.point.value_texts` reads them): a HUGEINT or UHUGEINT
    arrives as 16 little-endian bytes (:data:`crr.changeset.UHUGEINT`), read as an ``int``."""
    values = column.to_pylist()
    if duckdb_type in ("HUGEINT", "UHUGEINT"):
        signed = duckdb_type == "HUGEINT"
        return [None if v is None else int.from_bytes(v, "little", signed=signed) for v in values]
    return values


def _u128(raw: bytes) -> int:
    """A 128-bit id, key hash or stamp from DuckDB's Arrow UHUGEINT (16 bytes, little-endian)."""
    return int.from_bytes(raw, "little")


_ONE = int64_scalar(1)  # built without pyarrow's pandas probe (crr.arrow_build)

BATCH_ROWS = 1_000_000
"""The most rows a merge writes as :func:`received_rows_insert_sql` (more take the general path).
Measured up to it (stop 38): 100k rows into a table with two views, 0.42 against 0.46 s by the
general path (``crr bench merge``); 1M rows into a table with a join view, 3.7 against 4.0 s."""


def received_new_batch(held: list[tuple[Relation, RelationChanges]], cs: Changeset) -> tuple[Relation, RelationChanges] | None:
    """The replicated table and its changes, when ``cs`` brings one table (``held`` as for
    :func:`received_new_rows`) at most :data:`BATCH_ROWS` tuples, each with its entry of length 1,
    one per id and (keyed) one per key hash, and nothing else; None otherwise. Unlike
    :func:`received_new_rows` it does not check the values, ids, key hashes and stamps:
    :func:`received_rows_insert_sql` reads them through the general path's checks."""
    found = _one_table(held, cs, BATCH_ROWS)
    if found is None:
        return None
    rel, rc = found
    assert cs.cl is not None
    cl = cs.cl
    ids, kh = id_storage(cl.column("id")), id_storage(cl.column("kh"))
    # (another relation's entry would only cost a statement writing nothing: its SQL reads this
    # relation's entries alone; the entries' ids are present and distinct, as Changeset.validate
    # checked, so they are not counted again: 25 ms for 100k)
    if (cl.column("rel").unique().to_pylist() != [rel.name] or not pc.all(pc.equal(cl.column("cl"), _ONE)).as_py()
            or not all_in(ids, rc.tuples.column("id"))):
        return None  # another relation's entry, a later length, or an id without its tuple
    if rel.key and (kh.null_count or not distinct_ids(kh)):
        return None  # two versions of a key (or a key hash missing, which the general path refuses; or,
        # rarely, two key hashes sharing their low words, which distinct_ids does not tell apart)
    return rel, rc


def received_rows_insert_sql(rel: Relation, entries: ReceivedEntries, tuples: str, unchecked_entries: bool,
                             then: Sequence[CteWrite] = ()) -> str:
    """A merge's rows new to the site (:func:`received_new_batch`) as one statement
    (:func:`crr.point.new_rows_writes_sql`), written whole or not at all: their entries (``entries``,
    read through :func:`crr.causal.checked_entries_sql`, each kept with its stamp), written only if
    the site has no entry of any of their key hashes (keyed) or ids (unkeyed; with
    ``unchecked_entries``, of their ids under any relation either), then their tuples (the Arrow
    slot ``tuples``, read through :func:`crr.batch_rows.tuple_check_sql`: ids are their values'
    hashes, NOT NULL holds), their APP rows and ``then``. A check failing aborts the statement with
    the general path's message. Parameters: the sequence number twice, then those of ``then``."""
    probe = "kh" if rel.key else "id"
    stored = f"rel = {quote_str(rel.name)} AND {probe} IN (SELECT {probe} FROM {entries.table})"
    if unchecked_entries:
        stored = f"({stored}) OR id IN (SELECT id FROM {entries.table})"
    written = (f"SELECT e.id, e.rel, e.cl, e.kh, coalesce(e.stamp, 0::UHUGEINT), true, ? FROM {checked_entries_sql(entries)} e "
               f"WHERE NOT EXISTS (SELECT 1 FROM {SCHEMA}.cl WHERE {stored})")
    added = (f"SELECT n.id, {cols_sql(rel, 'n')}, ? FROM {rows_sql(rel, Rows(tuples, RowsKind.RECEIVED))} n "
             f"WHERE EXISTS (SELECT 1 FROM entries)")
    return new_rows_writes_sql(rel, written, added, then)
