"""The statements that merge causal-length entries into ``_crr.cl``, built from typed inputs.

A merge hands this module :class:`ReceivedEntries` (where a changeset's entries are read and what
this site requires of them); a local write hands it :class:`LocalEntries` (its exact growing
entries). Every statement over those entries is built here: the checks a received entry must pass
(:func:`checked_entries_sql`), the count that picks the MERGE's form
(:func:`present_key_versions_sql`) and the MERGEs themselves (:func:`cl_merge_sql`,
:func:`local_cl_merge_sql`).

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
batch into 100k entries, with the paper's experiments: 11-13 ms against 8-10 ms). A batch of
deletes skips the count while the site has never stored two present versions of one key
(:attr:`crr.catalog.SiteFlag.RIVAL_VERSIONS`): a version it deletes is then its key's only present
one, and no other version turns visible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from crr.id_sets import ids_sql, listed_ids
from crr.types import Column, key_hash_sql, quote_str

if TYPE_CHECKING:
    import pyarrow as pa

MAX_CAUSAL_LENGTH = 2**30  # larger received lengths are refused: a stored length keeps room to grow


@dataclass(frozen=True)
class KeyHashSource:
    """The received tuples of one keyed table (replicated, or a remote copy or source of one), read
    to recompute their key hashes."""

    table: str  # where the tuples ``(id, cols...)`` are read (an Arrow slot's name, or a loaded table)
    relation: str
    key_columns: tuple[Column, ...]  # the key's AUG columns
    id_column: str = "id"  # the tuples' id column (``vid``: a relay's rows of its copy of the table)


@dataclass(frozen=True)
class ReceivedEntries:
    """A changeset's causal-length entries ``(id, rel, cl, kh, stamp)`` as a merge reads them, with
    what this site requires of them (checked as they are read: :func:`checked_entries_sql`)."""

    table: str  # where the entries are read (an Arrow slot's name); at most one row per id
    relations: frozenset[str]  # the relations whose entries this site takes (the others are skipped)
    keyed: frozenset[str]  # this site's keyed base relations: their entries need a key hash
    unkeyed: frozenset[str]  # its unkeyed base relations: their entries must carry none
    key_hashes: tuple[KeyHashSource, ...]  # key hashes to recompute from received values
    max_stamp: int  # the largest stamp accepted (this site's clock plus the allowed skew)
    max_clock_skew: float  # that skew in seconds (named by the refusal)
    some_keyed: bool  # whether some entry carries a key hash
    some_unkeyed: bool  # whether some entry carries none
    one_per_key: bool  # whether no two entries share a key hash
    relation: str | None  # the one relation of every entry, when they have one
    ids: pa.ChunkedArray | None = None  # the ids of the entries the home takes (rows of ``table`` of ``relations``)
    first_lengths: bool = False  # whether every one has causal length 1 (its tuple's first insert)
    later_lengths: bool = False  # whether every one has a causal length above 1 (a delete or a re-insert)
    deletions_only: bool = False  # whether every one has an even causal length (a delete)
    # tables (each with an ``id`` column) of the ids this site keeps outside the entries' home, all of
    # other relations' tuples: a received id found there is forged (see :func:`checked_entries_sql`)
    elsewhere: tuple[str, ...] = ()
    # set for the entries of ``_crr.cl`` only (the other homes recompute no key hash): whether every
    # entry is keyed and the batch brings its tuple as one of a keyed replicated table's, so that
    # :func:`checked_entries_sql` compares every key hash with the one its tuple's values give ...
    keys_checked: bool = False
    # ... and the ids of the entries whose tuple the batch does not bring as a replicated table's
    # (their relation and key hash go unchecked); None when every entry has its tuple
    untupled: pa.Array | None = None


@dataclass(frozen=True)
class ListedIds:
    """A small batch's ids as constants (:func:`crr.id_sets.listed_ids`), for the statements that look
    up what a home stores of them: every id of its rows (its entries' and any tuples' it brings the
    home), and every key hash of its entries, or None when some entry has none. A scan filtered by
    them replaces a join that hashed the whole home."""

    ids: tuple[int, ...]
    key_hashes: tuple[int, ...] | None

    def stored_sql(self, table: str, column: str = "id") -> str:
        """FROM text of the rows of ``table`` whose ``column`` is one of the listed ids (``kh``: key hashes)."""
        listed = self.ids if column == "id" else self.key_hashes
        assert listed is not None
        return f"(SELECT {column} FROM {table} WHERE {column} IN ({ids_sql(listed)}))"


class NewEntryProbe(Enum):
    """How :func:`first_entries_insert_sql` finds the received entries it must leave to the MERGE."""

    IDS_AND_RIVALS = "ids and rivals"
    """Two joins with ``_crr.cl``: one by id (the entry is stored), one by key hash (its key has
    another present version, :func:`without_rivals_sql`)."""
    KEYS = "keys"
    """One join by key hash: the entry's key has any stored entry. It leaves out what the two joins
    leave out (and more: keys whose other versions are all deleted) when each stored and received
    key hash is the one its tuple's values give. Then a stored entry of the id has the entry's key
    hash, as an id is a hash of the relation and the values and a key hash of the relation and the
    key's values: the received entries' ``keys_checked``, and the site's stored entries when
    ``_crr.cl`` holds none that came without its tuple (:attr:`crr.catalog.Catalog.unchecked_entries`
    false; a merge storing one records it). One scan of ``_crr.cl`` instead of two: a 1000-row batch
    into 1M entries, 13.1-15.5 ms against 8.4-9.2 ms."""


@dataclass(frozen=True)
class LocalEntries:
    """A local write's causal-length entries: exactly the ones that grow, one per id, each with the
    visibility it had before (``old_vis``), all of one relation."""

    relation: str
    changes: int  # how many entries grow
    table: str | None  # where they are read ``(id, rel, cl, kh, stamp, old_vis)``; None when written already


FORGED = "(c.id IS NOT NULL AND (c.rel <> d.rel OR c.kh IS DISTINCT FROM d.kh))"
"""True for a received entry that disagrees with the stored entry of its id: an id's relation and key
hash never change, so such an entry is forged (or corrupt). ``c.id IS NOT NULL`` because DuckDB may
evaluate a clause's SET expressions over rows that did not match."""

FORGED_IN_HOME = "(c.id IS NOT NULL AND d.cl IS NOT NULL AND c.cl > 0 AND c.kh IS DISTINCT FROM d.kh)"
""":data:`FORGED` for a table of one relation's entries (an :class:`EntryHome` other than ``_crr.cl``, whose
rows may have no entry yet, ``cl`` 0, and so none to compare): true for a received entry whose key hash
differs from the stored entry of its id."""

FORGED_ENTRIES = ("error('crr: causal-length entries of ' || d.rel || ' disagree about a tuple''s relation "
                  "or key hash; the changeset is corrupt or forged')")


def checked_entries_sql(entries: ReceivedEntries) -> str:
    """FROM text of the received entries this site takes, checked as they are read (``error()``
    aborts the merge; each message names the relation): an id, a relation and a length from 1 to
    :data:`MAX_CAUSAL_LENGTH`, a stamp no later than ``max_stamp`` (one on every entry with a key hash), and a key hash exactly for the
    keyed relations, equal to the one recomputed from the received values where there are some, and an
    id that is not another relation's: an id's relation never changes, and an id the site keeps in
    another home than the entries' (``elsewhere``: ``_crr.cl`` and replicas' tables, see
    :mod:`crr.replica`) is another relation's, which the MERGE into this home cannot see."""
    rels = ", ".join(quote_str(r) for r in sorted(entries.relations)) or "NULL"
    joined = f"(SELECT * FROM {entries.table} WHERE rel IN ({rels}))"
    kh = "e.kh"
    if entries.key_hashes:
        computed = " UNION ALL ".join(f"SELECT {k.id_column} AS id, {key_hash_sql(k.relation, list(k.key_columns))} AS kh "
                                      f"FROM {k.table}" for k in entries.key_hashes)
        joined = f"(SELECT e.*, h.kh AS computed FROM {joined} e LEFT JOIN ({computed}) h ON h.id = e.id)"
        kh = ("CASE WHEN e.computed IS NOT NULL AND e.kh IS DISTINCT FROM e.computed THEN "
              "error('crr: the key hash of a tuple of ' || e.rel || ' does not match its key values; the "
              "changeset is corrupt or forged') ELSE e.kh END")
    keyed_sql = ", ".join(quote_str(r) for r in sorted(entries.keyed)) or "NULL"
    unkeyed_sql = ", ".join(quote_str(r) for r in sorted(entries.unkeyed)) or "NULL"
    foreign = ""
    if entries.elsewhere:
        # few entries: the other homes' scans keep only the entries' ids, listed as constants, where
        # ``IN (subquery)`` hashed every id kept there (39 ms for 1M ids, against 1.3-1.7 ms)
        listed = listed_ids(entries.ids) if entries.ids is not None else None
        only = "" if listed is None else f" WHERE id IN ({ids_sql(listed)})"
        ids = " UNION ALL ".join(f"SELECT id FROM {t}{only}" for t in entries.elsewhere)
        foreign = f"""WHEN id IN ({ids}) THEN
                error('crr: an entry of ' || rel || ' has the id of another relation''s tuple; the changeset is '
                      || 'corrupt or forged')"""
    return f"""(SELECT id, rel, CASE
            WHEN id IS NULL OR rel IS NULL OR cl IS NULL OR cl < 1 THEN
                error('crr: causal-length entries need an id, a relation and a length >= 1')
            {foreign}
            WHEN cl > {MAX_CAUSAL_LENGTH} THEN
                error('crr: a causal length of ' || rel || ' exceeds {MAX_CAUSAL_LENGTH}; the changeset is forged')
            WHEN stamp > {int(entries.max_stamp)}::UHUGEINT THEN
                error('crr: a stamp of ' || rel || ' is more than {entries.max_clock_skew:g} s ahead of this site''s '
                      || 'clock; check the clocks (or raise Site(max_clock_skew=...))')
            WHEN kh IS NULL AND rel IN ({keyed_sql}) THEN
                error('crr: an entry of keyed table ' || rel || ' has no key hash; the changeset is forged')
            WHEN kh IS NOT NULL AND stamp IS NULL THEN
                error('crr: an entry of ' || rel || ' has a key hash but no stamp; the changeset is forged')
            WHEN kh IS NOT NULL AND rel IN ({unkeyed_sql}) THEN
                error('crr: an entry of unkeyed table ' || rel || ' has a key hash; the changeset is forged')
            ELSE cl END AS cl, {kh} AS kh, stamp FROM {joined} e)"""


@dataclass(frozen=True)
class EntryHome:
    """The table a base relation's causal-length entries are stored in: ``_crr.cl``, which holds
    every relation's entries with a ``rel`` column (:data:`CL`), or a table of one relation's entries
    (:mod:`crr.colocated`), whose rows may also be tuples known before their entry (``cl`` 0)."""

    table: str  # qualified name
    relation: str | None = None  # the one relation whose entries the table holds; None for ``_crr.cl``

    def stored_sql(self) -> str:
        """FROM text of the stored entries ``(id, rel, kh, cl, stamp, vis)`` (rows with an entry only)."""
        if self.relation is None:
            return f"(SELECT id, rel, kh, cl, stamp, vis FROM {self.table})"
        return f"(SELECT id, {quote_str(self.relation)} AS rel, kh, cl, stamp, vis FROM {self.table} WHERE cl > 0)"


CL = EntryHome("_crr.cl")
"""``_crr.cl``: the home of every base relation's entries but those :mod:`crr.colocated` keeps."""


VISIBLE_ORDER = "{{'stamp': {t}.stamp, 'id': {t}.id}}"
"""The order of a key's present versions (``{t}``: the versions' name): by stamp, then by id. The
largest is the visible one (DESIGN 1.2, made total for equal stamps)."""


def _keyed_delta_sql(entries: str, home: EntryHome) -> str:
    """The keyed entries' part of a merge: every version of the batch's keys, merged, and those whose
    entry grows or whose visibility flips. Columns: id, rel, kh, cl, stamp, vis, grew.

    ``home`` is read once, for the rows of the batch's key hashes (a stored entry of a received id
    has the id's key hash, unless the received entry is forged, which the MERGE refuses). A version
    is visible when it is present and has its key's largest stamp among present versions (a GROUP BY:
    windows are slower here); of present versions with equal stamps, which no honest site writes (a
    site's stamps grow, and end in its site id's hash) but a forged changeset or two sites sharing an
    id can, the one with the larger id (:data:`VISIBLE_ORDER`, which a Spark site applies too), so a
    key never shows twice.
    """
    return f"""
        WITH n AS (SELECT id, rel, kh, cl, coalesce(stamp, 0::UHUGEINT) AS stamp FROM {entries} WHERE kh IS NOT NULL),
        v AS (SELECT coalesce(n.id, c.id) AS id, coalesce(n.rel, c.rel) AS rel, coalesce(n.kh, c.kh) AS kh,
                     greatest(n.cl, c.cl) AS cl, greatest(n.stamp, c.stamp) AS stamp,
                     coalesce(c.vis, false) AS old_vis,
                     n.id IS NOT NULL AND (c.id IS NULL OR n.cl > c.cl OR n.stamp > c.stamp) AS grew
              FROM n FULL JOIN (SELECT * FROM {home.stored_sql()} WHERE kh IN (SELECT kh FROM n)) c ON c.id = n.id)
        SELECT id, rel, kh, cl, stamp, vis, grew FROM (
            SELECT v.*, coalesce(v.cl % 2 = 1 AND {VISIBLE_ORDER.format(t="v")} = w.top, false) AS vis
            FROM v JOIN (SELECT kh, max({VISIBLE_ORDER.format(t="v")}) FILTER (WHERE cl % 2 = 1) AS top
                         FROM v GROUP BY kh) w
                 ON w.kh = v.kh)
        WHERE grew OR vis <> old_vis"""


def present_key_versions_sql(entries: ReceivedEntries, home: EntryHome = CL) -> str:
    """How many present entries stored in ``home`` share a key hash with a received entry without
    being that entry's id: zero when no keyed entry's key has another present version here. Only
    for entries with at most one per key (``one_per_key``: then this one join counts what a
    semi-join on key hashes and an anti-join on ids would, 0.5 ms faster at 100k stored entries,
    except stored ids the batch gives another key hash, which the MERGE refuses either way). Reads
    the entries unchecked (a count decides nothing the MERGE's checks would refuse)."""
    assert entries.one_per_key
    return f"""SELECT count(*) FROM {home.table} c JOIN {entries.table} e ON c.kh = e.kh
               WHERE c.cl % 2 = 1 AND c.id <> e.id"""


def entry_delta_sql(received: ReceivedEntries, home: EntryHome, single_versions: bool) -> str:
    """The received entries as a MERGE into ``home`` reads them: ``(id, rel, kh, cl, stamp, vis,
    grew)``, checked (:func:`checked_entries_sql`). Unkeyed entries come as they are (``vis`` NULL:
    the MERGE takes the maxima and the parity itself); keyed ones merged with the other versions
    of their keys, with their visibility (:func:`_keyed_delta_sql`), unless ``single_versions``: the
    caller checked that no keyed entry's key has another present version (see the module
    docstring), so every entry takes the unkeyed form."""
    entries = checked_entries_sql(received)
    parts = []
    if received.some_unkeyed or single_versions:
        only_unkeyed = "" if single_versions else " WHERE kh IS NULL"
        parts.append(f"""SELECT id, rel, kh, cl, coalesce(stamp, 0::UHUGEINT) AS stamp, NULL::BOOLEAN AS vis,
                                true AS grew FROM {entries}{only_unkeyed}""")
    if received.some_keyed and not single_versions:
        parts.append(_keyed_delta_sql(entries, home))
    return " UNION ALL ".join(f"({p})" for p in parts) if parts else empty_entries_sql()


def empty_entries_sql() -> str:
    """No entries, in the columns of :func:`entry_delta_sql` (a batch that brings a home none)."""
    return ("SELECT NULL::UHUGEINT AS id, NULL::VARCHAR AS rel, NULL::UHUGEINT AS kh, NULL::INTEGER AS cl, "
            "NULL::UHUGEINT AS stamp, NULL::BOOLEAN AS vis, false AS grew WHERE false")


def cl_merge_sql(received: ReceivedEntries, seq: int, single_versions: bool = False) -> str:
    """One MERGE writing a batch's causal-length entries into ``_crr.cl``; it returns ``(id, rel, vis,
    new_entry)`` of every entry it wrote: the entries that grew and the keyed versions whose visibility
    flipped, ``new_entry`` telling the ids that had no entry before (the MERGE inserted them).
    That is a superset of the flips (an entry growing from 1 to 3 stays visible), which only
    re-evaluates a few tuples more.

    The entries are read as :func:`checked_entries_sql` reads them, with at most one row per id: a
    changeset's validation refuses repeated ids, and the join with key hashes recomputed from values
    can repeat an entry only for an id that tuples of two keyed relations share, whose key hashes
    differ (a key hash includes its relation's name), so the key-hash check fails the merge.
    Unkeyed entries reach the MERGE as they are (``vis`` NULL): it takes the
    maxima and the parity itself, and writes only those that grow. Keyed ones arrive merged, with
    their visibility (:func:`_keyed_delta_sql`). Every received entry that reaches the MERGE with a
    stored id is compared with the stored entry (:data:`FORGED`) before anything else, so a forged
    one fails the merge whether or not it grows: in the parity form every received entry reaches it,
    in the key-wide form those that grow or flip (one that does neither changes nothing). ``seq`` marks the entries that grew (a flip alone changes a cache, not
    replicated state). ``single_versions``: the caller checked that no keyed entry's key has another
    present version (see the module docstring), so every entry takes the unkeyed form.
    """
    using = entry_delta_sql(received, CL, single_versions)
    grows = "(d.vis IS NOT NULL OR d.cl > c.cl OR d.stamp > c.stamp)"  # keyed rows arrive filtered already
    cl = "greatest(c.cl, d.cl)"
    return f"""MERGE INTO _crr.cl AS c USING ({using}) AS d ON c.id = d.id
        WHEN MATCHED AND ({FORGED}) THEN UPDATE SET seq = CASE WHEN {FORGED} THEN {FORGED_ENTRIES} ELSE c.seq END
        WHEN MATCHED AND {grows} THEN UPDATE SET
            cl = {cl}, stamp = greatest(c.stamp, d.stamp), vis = coalesce(d.vis, {cl} % 2 = 1),
            seq = CASE WHEN d.grew AND (d.cl > c.cl OR d.stamp > c.stamp) THEN {int(seq)} ELSE c.seq END
        WHEN NOT MATCHED THEN INSERT (id, rel, cl, kh, stamp, vis, seq)
            VALUES (d.id, d.rel, d.cl, d.kh, d.stamp, coalesce(d.vis, d.cl % 2 = 1), {int(seq)})
        RETURNING id, rel, vis, merge_action = 'INSERT' AS new_entry"""


def first_entries_insert_sql(received: ReceivedEntries, seq: int, probe: NewEntryProbe,
                             listed: ListedIds | None = None) -> str:
    """One INSERT adding to ``_crr.cl`` the received entries whose ids it holds no entry of, in place
    of :func:`cl_merge_sql` for a batch of first inserts (:func:`takes_first_insert`); it returns
    what that MERGE returns for them, ``(id, rel, vis, new_entry)``.

    An entry whose id is not stored, and whose key has no other present version stored
    (:func:`without_rivals_sql`), is visible exactly when its length is odd: what the MERGE's
    ``WHEN NOT MATCHED`` clause inserts in its parity form, and the INSERT writes the same row,
    checked the same way (:func:`checked_entries_sql`). The others are left to the MERGE, which the
    caller runs after it (in the form the rival count then picks) when the INSERT did not write
    every entry the home takes: that MERGE sees the rows just inserted as stored with the received
    values, which neither grow nor flip (their keys have no other present version), so it changes
    only the others, and in its parity form it compares every received entry with the stored one,
    as it would without the INSERT. An INSERT costs
    less than the MERGE, whose three ``WHEN`` clauses DuckDB plans and runs whether or not a row
    matches (a 1000-row batch into 100k stored entries, the paper's join view site: 6.1-7.5 ms
    against 10.4-13.8 ms). ``probe`` says how it finds the stored entries (:class:`NewEntryProbe`);
    ``listed``: the batch's few ids and key hashes, which then filter the scans of ``_crr.cl``."""
    using = entry_delta_sql(received, CL, True)
    if probe is NewEntryProbe.KEYS:
        assert received.keys_checked
        keys = CL.table if listed is None or listed.key_hashes is None else listed.stored_sql(CL.table, "kh")
        stored = f"ANTI JOIN {keys} c ON c.kh = d.kh"
    else:
        stored = without_stored_sql(received, CL, listed)
    return f"""INSERT INTO _crr.cl (id, rel, cl, kh, stamp, vis, seq)
        SELECT d.id, d.rel, d.cl, d.kh, d.stamp, d.cl % 2 = 1, {int(seq)}
        FROM ({using}) d {stored}
        RETURNING id, rel, vis, true AS new_entry"""


def without_stored_sql(received: ReceivedEntries, home: EntryHome, listed: ListedIds | None) -> str:
    """The joins that leave out of a received row ``d`` (the first inserts of
    :func:`first_entries_insert_sql`, :func:`crr.replica.first_insert_sql`,
    :func:`crr.colocated.first_insert_sql`) those whose id ``home``'s table holds a row of (an entry,
    or a tuple's values alone) and those whose key has a rival there (:func:`without_rivals_sql`).
    ``listed``: the batch's few ids and key hashes, which then filter both scans of the table."""
    ids = home.table if listed is None else listed.stored_sql(home.table)
    rivals = without_rivals_sql(received, home, None if listed is None else listed.key_hashes)
    return f"ANTI JOIN {ids} c ON c.id = d.id {rivals}"


def without_rivals_sql(received: ReceivedEntries, home: EntryHome, key_hashes: Sequence[int] | None = None) -> str:
    """The join that leaves out of a received row ``d`` the entries whose key has another present
    version stored in ``home`` (a rival: then visibility is not parity, and the MERGE's key-wide form
    must take the entry). Empty when no entry is keyed. This is the count
    :func:`present_key_versions_sql` makes before a MERGE, inside the statement that writes, one
    statement fewer (a 1000-row batch into 100k entries: 8.4-11.6 ms against 11.1-15.3 ms).
    ``key_hashes``: every key hash of the received entries, listed as constants when they are few
    (:func:`crr.id_sets.listed_ids`): the home's scan then keeps only their versions, where the join
    hashed every present version stored."""
    if not received.some_keyed:
        return ""
    only = "" if key_hashes is None else f" AND kh IN ({ids_sql(key_hashes)})"
    return (f"ANTI JOIN (SELECT id, kh FROM {home.stored_sql()} WHERE cl % 2 = 1{only}) rival "
            f"ON rival.kh = d.kh AND rival.id <> d.id")


def takes_first_insert(received: ReceivedEntries) -> bool:
    """Whether a batch's entries are merged by an INSERT of the new ones first
    (:func:`first_entries_insert_sql`, :func:`crr.replica.first_insert_sql`,
    :func:`crr.colocated.first_insert_sql`): every entry has causal length 1, the length of a
    tuple's first insert (a site holds it already only for a tuple it has heard of: its own insert,
    or an earlier merge; then the MERGE runs too), and no two share a key (each entry's rivals are
    then stored ones, which :func:`without_rivals_sql` finds)."""
    return received.first_lengths and (received.one_per_key or not received.some_keyed)


def later_entries_update_sql(home: EntryHome, received: str, seq: int, returned: tuple[str, ...]) -> str:
    """One UPDATE writing into ``home`` a batch of entries that extend stored ones, in place of the
    MERGE (:func:`cl_merge_sql`, :func:`crr.replica.merge_sql`, :func:`crr.colocated.merge_sql`) for a
    batch whose entries all have a causal length above 1 (:func:`takes_later_update`: deletes, or
    re-inserts, of tuples the site has most likely heard of, whose keys the count
    :func:`present_key_versions_sql` found no other present version of). ``received`` is the FROM
    text of the rows that MERGE reads (:func:`entry_delta_sql`'s columns, parity form, and the
    home's others); the UPDATE returns ``returned`` (the home's columns, as the MERGE returns them)
    of every row it wrote.

    It writes what the MERGE's ``WHEN MATCHED`` clause for a growing entry writes, with the same
    check (a received entry that disagrees with the stored one about its relation or key hash fails
    the merge); it never writes a tuple's values. What it leaves is the MERGE's, which the caller
    runs after it when some received entry, or a received tuple, is not among the rows it returned
    with values: an id not stored, an entry that did not grow, a tuple whose row has no values yet.
    Then the rows it wrote no longer grow; the MERGE writes the others, and writes again a row whose
    tuple's values it adds (a replica's or co-located view's row that had none), so the caller
    keeps the MERGE's row of an id. (Leaving out rivals
    inside the UPDATE, as :func:`without_rivals_sql` does for the INSERT, was measured slower than
    the count before it: 12-14 ms against 11.1-11.6 ms.) An UPDATE costs less than
    the MERGE (a 1000-row delete batch into 100k entries, the paper's join view site: 6.6-7.2 ms
    against 12.4-14.3 ms)."""
    forged = FORGED if home.relation is None else FORGED_IN_HOME
    cl = "greatest(c.cl, d.cl)"
    grows = "(d.vis IS NOT NULL OR d.cl > c.cl OR d.stamp > c.stamp)"
    return f"""UPDATE {home.table} AS c SET cl = {cl}, kh = coalesce(c.kh, d.kh), stamp = greatest(c.stamp, d.stamp),
            vis = coalesce(d.vis, {cl} % 2 = 1),
            seq = CASE WHEN {forged} THEN {FORGED_ENTRIES}
                       WHEN d.grew AND (d.cl > c.cl OR d.stamp > c.stamp) THEN {int(seq)} ELSE c.seq END
        FROM {received} AS d WHERE c.id = d.id AND d.cl IS NOT NULL AND ({grows} OR {forged})
        RETURNING {', '.join(returned)}"""


def cl_update_sql(received: ReceivedEntries, seq: int) -> str:
    """:func:`later_entries_update_sql` into ``_crr.cl``, returning what :func:`cl_merge_sql` returns."""
    return later_entries_update_sql(CL, f"({entry_delta_sql(received, CL, True)})", seq,
                                    ("id", "rel", "vis", "false AS new_entry"))


def takes_later_update(received: ReceivedEntries, single_versions: bool) -> bool:
    """Whether a batch's entries are merged by :func:`later_entries_update_sql` first: every one has a
    causal length above 1 and is visible by parity (unkeyed, or ``single_versions``: no other present
    version of its key)."""
    return received.later_lengths and (single_versions or not received.some_keyed)


def tuples_without_entries_sql(tuples: str) -> str:
    """How many rows of ``tuples`` (a table with an ``id`` column: a replicated table's ``$t``, or
    tuples a merge added to it) have no entry in ``_crr.cl``."""
    return f"SELECT count(*) FROM {tuples} t ANTI JOIN _crr.cl c ON c.id = t.id"


def local_cl_merge_sql(local: LocalEntries, seq: int) -> str:
    """One MERGE writing a local write's exact growing entries (:class:`LocalEntries`): each replaces
    or adds its id's entry, visible exactly when its length is odd (a write's own version of a key is
    its key's newest). It returns the ids it wrote."""
    assert local.table is not None
    vis = "(d.cl % 2 = 1)"
    return f"""MERGE INTO _crr.cl AS c USING {local.table} AS d ON c.id = d.id
        WHEN MATCHED THEN UPDATE SET cl = d.cl, stamp = d.stamp, vis = {vis}, seq = {int(seq)}
        WHEN NOT MATCHED THEN INSERT (id, rel, cl, kh, stamp, vis, seq)
            VALUES (d.id, d.rel, d.cl, d.kh, d.stamp, {vis}, {int(seq)})
        RETURNING id"""


def local_flips_sql(local: LocalEntries) -> str:
    """FROM text of ``(id, rel, vis)`` of the local entries whose visibility flipped."""
    assert local.table is not None
    return f"(SELECT d.id, d.rel, (d.cl % 2 = 1) AS vis FROM {local.table} d WHERE (d.cl % 2 = 1) <> d.old_vis)"


def disagreeing_entries_sql(relation: str, written: str) -> str:
    """How many entries of ``_crr.cl`` carry the id of a row a local write adds to ``relation`` but
    another relation or key hash (``written``: the name of the table of those rows ``(id, kh, ...)``).
    Only an entry that arrived without its tuple can (:attr:`crr.catalog.Catalog.unchecked_entries`):
    an id is a hash of the relation and the values."""
    return (f"SELECT count(*) FROM {written} w JOIN _crr.cl c ON c.id = w.id "
            f"WHERE c.rel <> {quote_str(relation)} OR c.kh IS DISTINCT FROM w.kh")


def relation_entries_delete_sql() -> str:
    """Remove a relation's entries from ``_crr.cl`` (parameter: its name): the last relation holding
    its tuples was dropped."""
    return "DELETE FROM _crr.cl WHERE rel = ?"
