"""Changesets: the unit of replication, and their versioned, checksummed byte encoding.

A changeset carries, for each relation it covers, the augmented tuples (values plus id or view-tuple
id) and monomials changed after a cursor at the source site, plus the causal-length entries changed
after the cursor for every base relation in those relations' lineage. It is self-contained: every
monomial comes with its tuple's values, and every causal-length change of a held base tuple comes
with the tuple. Merging a changeset is a lattice join, so any changeset can be merged any number
of times, in any order, at any site.

Byte layout (``to_bytes``), format version 3::

    b"CRRCS" | version (1 byte) | blake2b-128 digest of body (16 bytes) | body

``body`` is a msgpack map with exactly these keys:

* ``source`` (str), ``since`` and ``cursor`` (ints in ``[0, 2**63)``);
* ``relations``: a list of maps with exactly the keys ``name`` (str, unique in the changeset, also
  ignoring case), ``kind`` (``base`` or ``derived``), ``columns`` ([[name, type], ...]: the user's
  column names, any identifier DuckDB accepts, and their canonical DuckDB types), ``key`` and
  ``not_null`` (lists of column names: the PRIMARY KEY, and the columns the source declares NOT
  NULL), ``fingerprint`` (str), ``lineage`` (list of base relation names; a base relation's is
  ``[name]``), ``tuples`` (Arrow), ``monos`` (Arrow for ``derived``, nil for ``base``) and
  ``definition`` (for ``derived``: which definition the rows follow, a str of at most 64
  characters: a view's id (:meth:`crr.catalog.Catalog.definition_id`, a hash of its query and its
  inputs' definitions), ``"table"`` for a relay's copy of a replicated table, a relay's learned one,
  or nil when unknown; nil for ``base``, whose rows follow their table). A remote copy refuses rows
  of another definition than the rows it holds: the view, or one it reads, was declared again with
  another query at its source (:func:`crr.merge.check_schema`);
* ``cl``: Arrow or nil.

Tables are Arrow IPC streams (bytes), so whole batches move without per-row Python work:

* ``tuples``: ``id`` (base) or ``vid`` (derived), then one column per user column, named
  *positionally* ``c0, c1, ..., c{n-1}`` in declaration order, never by the user's names (which
  travel in ``columns``), so a user column named ``id`` can never collide with crr's own.
* ``monos``: ``vid, ids`` (a list of tuple ids).
* ``cl``: ``id, rel, cl, kh, stamp``, one causal-length entry per base tuple; ``rel`` is in the
  lineage of a relation of the changeset.

Only the Arrow types crr itself produces (DuckDB with ``arrow_lossless_conversion``) are read:
tuple ids, key hashes and stamps are DuckDB ``UHUGEINT`` (``arrow.opaque`` over
``fixed_size_binary[16]``, vendor ``DuckDB``), ``ids`` a list of them, ``cl`` int32, ``rel``
string; user columns have the Arrow type of their declared DuckDB type (see :data:`_PLAIN`). No
dictionaries, no other extension types, no other nesting, no field metadata, no IPC buffer
compression (crr never compresses; a compressed buffer is refused before anything is inflated, so
decoded tables never exceed the bytes received), and no changeset larger than ``max_bytes``
(default :data:`MAX_BYTES`). Every table is validated in full (offsets, UTF-8, lengths, decimal
precision, and values DuckDB cannot hold: timestamps before its range, times outside
00:00:00..24:00:00) before anything reads it. Whatever does not match is a :class:`ChangesetError` naming what is wrong and,
where there is one, the relation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import numbers
import re
import struct
from dataclasses import dataclass, field
from enum import Enum
from collections.abc import Sequence
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from crr.arrow_build import int64_scalar
from crr.errors import CatalogError, ChangesetError, CrrError
from crr.id_sets import distinct_ids
from crr.sql.parse import fold_identifier
from crr.types import quote_ident

MAGIC = b"CRRCS"
FORMAT_VERSION = 3  # 2: positional tuple columns, ``not_null``, strict validation; 3: ``definition``
_HEADER = len(MAGIC) + 1 + 16
MAX_BYTES = 1 << 30  # default largest changeset from_bytes accepts (decoded tables are no larger)
_MAX_INT = (1 << 63) - 1

_BODY_KEYS = ("source", "since", "cursor", "relations", "cl")
_RELATION_KEYS = ("name", "kind", "columns", "key", "not_null", "fingerprint", "lineage", "tuples", "monos",
                  "definition")
MAX_DEFINITION = 64  # characters of a relation's ``definition`` id

UHUGEINT = pa.opaque(pa.binary(16), "uhugeint", "DuckDB")  # how DuckDB exports UHUGEINT
_HUGEINT = pa.opaque(pa.binary(16), "hugeint", "DuckDB")
_PLAIN: dict[str, tuple[pa.DataType, ...]] = {
    "TINYINT": (pa.int8(),), "SMALLINT": (pa.int16(),), "INTEGER": (pa.int32(),), "BIGINT": (pa.int64(),),
    "HUGEINT": (_HUGEINT,), "UTINYINT": (pa.uint8(),), "USMALLINT": (pa.uint16(),),
    "UINTEGER": (pa.uint32(),), "UBIGINT": (pa.uint64(),), "UHUGEINT": (UHUGEINT,),
    "FLOAT": (pa.float32(),), "DOUBLE": (pa.float64(),), "VARCHAR": (pa.string(),),
    "BOOLEAN": (pa.bool8(), pa.bool_()), "DATE": (pa.date32(),), "TIMESTAMP": (pa.timestamp("us"),),
    "TIME": (pa.time64("us"),), "BLOB": (pa.binary(),), "UUID": (pa.uuid(),),
}
_DECIMAL = re.compile(r"DECIMAL\((\d{1,2}),\s*(\d{1,2})\)")
_CL_FIELDS = (("id", UHUGEINT), ("rel", pa.string()), ("cl", pa.int32()), ("kh", UHUGEINT), ("stamp", UHUGEINT))


class ChangeKind(str, Enum):
    """How the source holds a relation: as a replicated table (tuples are their own provenance) or derived."""

    BASE = "base"  # a replicated table at the source: tuples (id, values), no monomials
    DERIVED = "derived"  # a view, remote table or source at the source: tuples (vid, values) and monomials


@dataclass
class RelationChanges:
    """The changes of one relation inside a changeset."""

    name: str
    kind: ChangeKind
    columns: list[tuple[str, str]]
    key: list[str]
    fingerprint: str
    lineage: list[str]
    tuples: pa.Table  # base: (id, c0, c1, ...); derived: (vid, c0, c1, ...), user columns by position
    monos: pa.Table | None = None  # derived: (vid, ids)
    not_null: list[str] = field(default_factory=list)  # the columns the source declares NOT NULL
    # derived: which definition the rows follow (crr.catalog.Catalog.definition_id), None if unknown
    definition: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.kind, str) and self.kind in ("base", "derived"):
            self.kind = ChangeKind(self.kind)  # anything else is refused by validate()

    @property
    def empty(self) -> bool:
        """Whether the relation brings no tuple and no monomial (``changes()`` names every relation it
        covers, changed or not): a merge then has nothing to add or derive from it."""
        return not self.tuples.num_rows and (self.monos is None or not self.monos.num_rows)

    @property
    def schema_text(self) -> str:
        """Human-readable schema, for error messages."""
        cols = ", ".join(f"{n} {t}" for n, t in self.columns)
        key = f", PRIMARY KEY ({', '.join(self.key)})" if self.key else ""
        return f"({cols}{key})"


@dataclass
class Changeset:
    """Everything a site changed after a cursor, for some of its relations. See the module docstring."""

    source: str
    since: int
    cursor: int
    relations: list[RelationChanges] = field(default_factory=list)
    cl: pa.Table | None = None
    version: int = FORMAT_VERSION

    def __len__(self) -> int:
        """Number of rows carried (tuples, monomials and causal-length entries)."""
        n = self.cl.num_rows if self.cl is not None else 0
        for r in self.relations:
            n += r.tuples.num_rows + (r.monos.num_rows if r.monos is not None else 0)
        return n

    def relation(self, name: str) -> RelationChanges | None:
        """The changes of one relation, if the changeset covers it."""
        return next((r for r in self.relations if r.name == name), None)

    def to_bytes(self) -> bytes:
        """Encode as versioned, checksummed bytes (see module docstring); tables are not compressed.
        A changeset whose fields were set to what no changeset holds is a ChangesetError."""
        try:
            return self._encoded()
        except (TypeError, ValueError, AttributeError, OverflowError, pa.ArrowException) as e:
            raise ChangesetError(f"this changeset cannot be encoded ({type(e).__name__}: {e}); a changeset's "
                                 "fields are those Site.changes() gives them") from None

    def _encoded(self) -> bytes:
        body = msgpack.packb({
            "source": self.source,
            "since": self.since,
            "cursor": self.cursor,
            "relations": [{
                "name": r.name, "kind": getattr(r.kind, "value", r.kind), "columns": [list(c) for c in r.columns], "key": list(r.key),
                "not_null": list(r.not_null), "fingerprint": r.fingerprint, "lineage": list(r.lineage),
                "tuples": _ipc(r.tuples), "monos": _ipc(r.monos) if r.monos is not None else None,
                "definition": r.definition,
            } for r in self.relations],
            "cl": _ipc(self.cl) if self.cl is not None else None,
        }, use_bin_type=True)
        return MAGIC + bytes([self.version]) + hashlib.blake2b(body, digest_size=16).digest() + body

    @classmethod
    def from_bytes(cls, data: bytes, *, max_bytes: int | None = None) -> "Changeset":
        """Decode and fully validate bytes made by :meth:`to_bytes`; raise ChangesetError for anything else.

        ``max_bytes`` (default :data:`MAX_BYTES`) bounds the size of ``data``; the decoded tables
        are never larger, since compressed Arrow buffers are refused before they are inflated.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ChangesetError(f"a changeset is bytes, not {type(data).__name__}")
        if max_bytes is not None and (not isinstance(max_bytes, int) or isinstance(max_bytes, bool)):
            raise ChangesetError(f"max_bytes is a number of bytes, not {max_bytes!r}")
        limit = MAX_BYTES if max_bytes is None else max_bytes
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        if size > limit:
            raise ChangesetError(f"changeset of {size} bytes is larger than the limit of {limit} bytes "
                                 "(raise max_bytes to accept it)")
        data = bytes(data)
        if len(data) < _HEADER or not data.startswith(MAGIC):
            raise ChangesetError("not a crr changeset (bad magic bytes or too short); "
                                 "pass bytes made by Changeset.to_bytes()")
        version = data[len(MAGIC)]
        if version < FORMAT_VERSION:
            raise ChangesetError(f"changeset format version {version} comes from an older crr (this crr reads "
                                 f"version {FORMAT_VERSION}); upgrade the older site that sent it")
        if version > FORMAT_VERSION:
            raise ChangesetError(f"changeset format version {version} comes from a newer crr (this crr reads "
                                 f"version {FORMAT_VERSION}); upgrade this site")
        digest, body = data[len(MAGIC) + 1:_HEADER], data[_HEADER:]
        if hashlib.blake2b(body, digest_size=16).digest() != digest:
            raise ChangesetError("changeset checksum mismatch: the bytes were truncated or corrupted in "
                                 "transit; fetch the changeset again")
        try:
            doc = msgpack.unpackb(body, raw=False, strict_map_key=True)
        except Exception as e:
            raise ChangesetError(f"malformed changeset: the body is not valid msgpack ({type(e).__name__}: {e})") from None
        try:
            cs = _decode(doc, version)
            return cs.validate()
        except CrrError:
            raise
        except Exception as e:  # anything else on hostile bytes is still a refused changeset
            raise ChangesetError(f"malformed changeset body ({type(e).__name__}: {e})") from None

    def validate(self) -> "Changeset":
        """Check every field and every Arrow table against the format; return self or raise ChangesetError.

        :meth:`from_bytes` calls it; call it on a changeset built in Python before merging it.
        """
        try:
            self._validate()
        except CrrError:
            raise
        except Exception as e:
            raise ChangesetError(f"malformed changeset ({type(e).__name__}: {e})") from None
        return self

    def _validate(self) -> None:
        if self.version != FORMAT_VERSION:
            raise ChangesetError(f"changeset format version {self.version} is not {FORMAT_VERSION}")
        _typed(self.source, str, "source")
        for what in ("since", "cursor"):
            _count(getattr(self, what), what)
        if not isinstance(self.relations, list):
            raise ChangesetError(f"malformed changeset: relations should be a list, got {_tname(self.relations)}")
        seen: set[str] = set()
        lineage: set[str] = set()
        for rc in self.relations:
            if not isinstance(rc, RelationChanges):
                raise ChangesetError(f"malformed changeset: a relation is a {_tname(rc)}")
            name = _name(rc.name, "relation name")
            if fold_identifier(name) in seen:  # as DuckDB compares names: ASCII letters folded
                raise ChangesetError(f"malformed changeset: relation {quote_ident(name)} appears twice")
            seen.add(fold_identifier(name))
            _validate_relation(rc)
            lineage |= set(rc.lineage)
        if self.cl is not None:
            _check_table(self.cl, "causal lengths", list(_CL_FIELDS), non_null=("id", "rel", "cl"),
                         unique="id")
            unknown = set(self.cl.column("rel").unique().to_pylist()) - lineage
            if unknown:
                raise ChangesetError(
                    f"malformed changeset: causal lengths of {', '.join(sorted(map(quote_ident, unknown)))}, "
                    "which is in the lineage of no relation of the changeset")


def changes_request(since: object, relations: object) -> tuple[int, list[str] | None]:
    """The arguments of a site's ``changes(since, relations)`` checked (both backends): ``since`` as an
    int cursor (None: 0) and the relation names as given, or None for the default; ChangesetError for
    what is no cursor, CatalogError for what is no list of names (a string is not read letter by letter)."""
    since = 0 if since is None else since
    if isinstance(since, bool) or not isinstance(since, numbers.Integral) or not 0 <= since <= _MAX_INT:
        raise ChangesetError(f"changes(since=...) takes a cursor, an int from 0 (the full state) to 2**63 - 1 "
                             f"(site.cursor, or a changeset's .cursor), not {shown(since)}")
    if relations is None:
        return int(since), None
    given = list(relations) if hasattr(relations, "__iter__") and not isinstance(relations, (str, bytes)) else None
    if given is None or not all(isinstance(r, str) for r in given):
        raise CatalogError(f"changes(relations=...) takes a list of relation names, not {shown(relations)}")
    return int(since), given


def cursor_in_history(since: int, cursor: int, openings: Sequence[tuple[int, int]]) -> bool:
    """Whether ``since`` is a cursor this copy of a site handed out: 0, or a number one of its openings
    gave a change, up to its last change ``cursor`` (both backends).

    A site's first change after it opens jumps to the wall clock (:func:`crr.clock.seq_floor`) and
    records the opening as ``(floor, previous)``, its first number and the last number before it
    (sorted by ``floor``). So this copy handed out the numbers up to the first opening's
    ``previous``, and from each opening's ``floor`` up to the next one's ``previous`` (the last one's
    up to ``cursor``). A number between those ranges is another copy's: a copy of the file restored
    (or restored again) after the opening that handed it out, whose rows up to that number a peer
    holding it may lack, so it gets the full state."""
    if since == 0:
        return True
    if since > cursor:
        return False
    bounds = [previous for _, previous in openings[1:]] + [cursor]
    ranges = [(1, openings[0][1] if openings else cursor)] + [(floor, last) for (floor, _), last in zip(openings, bounds)]
    return any(lo <= since <= hi for lo, hi in ranges)


def check_since_known(since: int, cursor: int, openings: Sequence[tuple[int, int]]) -> None:
    """Refuse ``changes(since)`` for a cursor this copy of the site did not hand out (both backends;
    :func:`cursor_in_history`): past its last change ``cursor``, or one another copy of its file handed
    out after this one was copied. The rows a peer holding it lacks would be skipped for good."""
    if since > cursor:
        raise ChangesetError(f"changes(since={since}): this site's last change is {cursor}, so that cursor is another "
                             "site's, or this site's from before its file was restored from an older copy (the rows "
                             "written since then would be skipped); ask for changes(since=None), the full state, "
                             "which merges as safely")
    if not cursor_in_history(since, cursor, openings):
        raise ChangesetError(f"changes(since={since}): this copy of the site never handed out that cursor, so it is "
                             "another site's, or comes from another copy of this site's file (one restored from a "
                             "backup since: the rows written after the copy was taken would be skipped); ask for "
                             "changes(since=None), the full state, which merges as safely")


def received(changeset: "Changeset | bytes") -> Changeset:
    """A changeset to merge, from its bytes (:meth:`Changeset.from_bytes`) or a :class:`Changeset`
    built in Python (:meth:`Changeset.validate`), with each float zero of a replicated table's tuples
    as ``+0.0`` and each NaN as the positive NaN, as every local write stores them
    (:func:`crr.types.stored_value_sql`; ``-0.0`` is the same tuple, and so is ``-nan``). A derived relation's values are the source's query results and stay as they are.
    The changeset given is not changed."""
    cs = changeset.validate() if isinstance(changeset, Changeset) else Changeset.from_bytes(changeset)
    relations = [dataclasses.replace(rc, tuples=_positive_zeros(rc.tuples)) if rc.kind is ChangeKind.BASE else rc
                 for rc in cs.relations]
    if all(new is old for new, old in zip(relations, cs.relations)):
        return cs
    return dataclasses.replace(cs, relations=relations)


def _positive_zeros(table: pa.Table) -> pa.Table:
    """``table`` with each float column's zeros as ``+0.0`` and NaNs as the positive NaN (NULL kept);
    ``table`` itself when it has no float column."""
    floats = [i for i, f in enumerate(table.schema) if pa.types.is_floating(f.type)]
    for i in floats:
        col = table.column(i)
        col = pc.if_else(pc.equal(col, 0), pa.scalar(0, col.type), col)
        col = pc.if_else(pc.is_nan(col), pa.scalar(float("nan"), col.type), col)
        table = table.set_column(i, table.field(i), col)
    return table


def _validate_relation(rc: RelationChanges) -> None:
    """Check one relation's fields and tables (its name is checked by the caller)."""
    where = f"relation {quote_ident(rc.name)}"
    kind = _kind(rc.kind, where)
    if not isinstance(rc.columns, list):
        raise ChangesetError(f"malformed changeset: {where}: columns should be a list, got {_tname(rc.columns)}")
    names: list[str] = []
    types: list[str] = []
    for i, col in enumerate(rc.columns):
        if not isinstance(col, (list, tuple)) or len(col) != 2:
            raise ChangesetError(f"malformed changeset: {where}: column {i} should be a [name, type] pair")
        names.append(_name(col[0], f"{where}: column {i} name"))
        types.append(_typed(col[1], str, f"{where}: column {i} type"))
    _unique(names, f"{where}: column")
    _subset(rc.key, names, f"{where}: key")
    _subset(rc.not_null, names, f"{where}: not_null")
    _typed(rc.fingerprint, str, f"{where}: fingerprint")
    if not isinstance(rc.lineage, list):
        raise ChangesetError(f"malformed changeset: {where}: lineage should be a list, got {_tname(rc.lineage)}")
    for x in rc.lineage:
        _name(x, f"{where}: lineage")
    _unique(rc.lineage, f"{where}: lineage")
    if kind is ChangeKind.BASE and list(rc.lineage) != [rc.name]:
        raise ChangesetError(f"malformed changeset: {where} is a base relation, its lineage must be itself")
    idcol = "id" if kind is ChangeKind.BASE else "vid"
    expected: list[tuple[str | None, Any]] = [(idcol, UHUGEINT)]
    for i, t in enumerate(types):
        expected.append((f"c{i}", _column_types(t, f"{where}: column {i} ({quote_ident(names[i])})")))
    _check_table(rc.tuples, f"{where}: tuples", expected, non_null=(idcol,), unique=idcol)
    if rc.definition is not None:
        _typed(rc.definition, str, f"{where}: definition")
        if not 0 < len(rc.definition) <= MAX_DEFINITION:
            raise ChangesetError(f"malformed changeset: {where}: definition should be 1 to {MAX_DEFINITION} "
                                 f"characters, got {len(rc.definition)}")
    if kind is ChangeKind.BASE:
        if rc.definition is not None:
            raise ChangesetError(f"malformed changeset: {where} is a base relation but states a view definition")
        if rc.monos is not None:
            raise ChangesetError(f"malformed changeset: {where} is a base relation but carries monomials")
    else:
        if rc.monos is None:
            raise ChangesetError(f"malformed changeset: {where} is a derived relation without monomials")
        _check_table(rc.monos, f"{where}: monomials", [("vid", UHUGEINT), ("ids", pa.list_(UHUGEINT))],
                     non_null=("vid", "ids"))
        ids = rc.monos.column("ids")
        if rc.monos.num_rows and (pc.list_flatten(ids).null_count or pc.min(pc.list_value_length(ids)).as_py() < 1):
            raise ChangesetError(f"malformed changeset: {where}: a monomial without ids or with a NULL id")


def _decode(doc: object, version: int) -> Changeset:
    """Build a Changeset from a decoded msgpack body, checking its shape (not yet its tables' types)."""
    _keys(doc, _BODY_KEYS, "the changeset body")
    assert isinstance(doc, dict)
    relations = doc["relations"]
    if not isinstance(relations, list):
        raise ChangesetError(f"malformed changeset: relations should be a list, got {_tname(relations)}")
    out: list[RelationChanges] = []
    for i, r in enumerate(relations):
        _keys(r, _RELATION_KEYS, f"relation {i}")
        name = _name(r["name"], f"relation {i} name")
        where = f"relation {quote_ident(name)}"
        out.append(RelationChanges(
            name=name, kind=_kind(r["kind"], where), columns=_columns(r["columns"], where),
            key=_strings(r["key"], f"{where}: key"), fingerprint=_typed(r["fingerprint"], str, f"{where}: fingerprint"),
            lineage=_strings(r["lineage"], f"{where}: lineage"), tuples=_read_table(r["tuples"], f"{where}: tuples"),
            monos=_read_table(r["monos"], f"{where}: monomials") if r["monos"] is not None else None,
            not_null=_strings(r["not_null"], f"{where}: not_null"), definition=r["definition"]))
    return Changeset(source=_typed(doc["source"], str, "source"), since=_count(doc["since"], "since"),
                     cursor=_count(doc["cursor"], "cursor"), relations=out,
                     cl=_read_table(doc["cl"], "causal lengths") if doc["cl"] is not None else None,
                     version=version)


# -- Arrow ---------------------------------------------------------------------------------------

def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _read_table(data: object, what: str) -> pa.Table:
    """Read an Arrow IPC stream after checking its framing (see :func:`_scan_ipc`); not yet validated."""
    if not isinstance(data, bytes):
        raise ChangesetError(f"malformed changeset: {what} is not Arrow IPC bytes but {_tname(data)}")
    _scan_ipc(data, what)
    try:
        return ipc.open_stream(pa.py_buffer(data)).read_all()
    except Exception as e:
        raise ChangesetError(f"malformed changeset: {what}: bad Arrow data ({type(e).__name__}: {e})") from None


def _check_table(table: object, what: str, expected: list[tuple[str | None, Any]],
                 non_null: tuple[str, ...] = (), unique: str | None = None) -> None:
    """Check a table's fields (name, or any name when None; type or tuple of types), then validate it fully
    (Arrow's full validation, and DuckDB's ranges of timestamps and times).

    A field is accepted only with one of the expected types, no field metadata, and (for a list)
    an element field without metadata; non-nullable fields must hold no NULL. Names are unique
    ignoring case. ``non_null`` columns hold no NULL; the ``unique`` column holds no duplicate.
    """
    if not isinstance(table, pa.Table):
        raise ChangesetError(f"malformed changeset: {what} is a {_tname(table)}, not an Arrow table")
    schema = table.schema
    if len(schema) != len(expected):
        raise ChangesetError(f"malformed changeset: {what} has {len(schema)} columns, expected {len(expected)}")
    _unique([f.name for f in schema], f"{what}: Arrow column", fold=True)
    for i, (f, (name, types)) in enumerate(zip(schema, expected)):
        types = types if isinstance(types, tuple) else (types,)
        label = f"column {i} ({f.name!r})"
        if name is not None and f.name != name:
            raise ChangesetError(f"malformed changeset: {what}: column {i} is named {f.name!r}, expected {name!r}")
        if f.metadata or not _type_in(f.type, types):
            want = " or ".join(str(t) for t in types)
            raise ChangesetError(f"malformed changeset: {what}: {label} has Arrow type {f.type}"
                                 f"{' with field metadata' if f.metadata else ''}, expected {want}")
        if pa.types.is_list(f.type) and f.type.value_field.metadata:
            raise ChangesetError(f"malformed changeset: {what}: {label} has metadata on its list elements")
    for i, f in enumerate(schema):
        col = table.column(i)
        try:
            # pyarrow's full check of time64 refuses 24:00:00, a valid DuckDB TIME: checked below
            col.validate(full=not pa.types.is_time64(f.type))
        except pa.ArrowException as e:
            raise ChangesetError(f"malformed changeset: {what}: column {i} ({f.name!r}) holds invalid "
                                 f"Arrow data ({e})") from None
        check_duckdb_values(col, f"{what}: column {i} ({f.name!r})")
        if (not f.nullable or f.name in non_null) and col.null_count:
            raise ChangesetError(f"malformed changeset: {what}: column {f.name!r} holds NULL")
        if pa.types.is_list(f.type) and not f.type.value_field.nullable and pc.list_flatten(col).null_count:
            raise ChangesetError(f"malformed changeset: {what}: column {f.name!r} holds NULL list elements")
    if unique is not None and table.num_rows:
        col = table.column(unique)
        if distinct_ids(col):  # ids are hashes: distinct low words prove them distinct, at 17 ms for 100k
            return  # where counting the whole values costs 25 ms; they are counted only when some repeat
        storage = pa.chunked_array([c.storage for c in col.chunks], type=col.type.storage_type)
        if pc.count_distinct(storage).as_py() != table.num_rows:
            raise ChangesetError(f"malformed changeset: {what}: column {unique!r} holds duplicates")


# DuckDB's TIMESTAMP range: 290309-12-22 (BC) 00:00:00 up to the largest int64 below infinity, plus
# -infinity and infinity; values below it make DuckDB's casts fail with an internal error that
# invalidates the whole database. TIME runs from 00:00:00 to 24:00:00 inclusive.
_TIMESTAMP_MIN, _TIMESTAMP_NEG_INF = -9223372022400000000, -(2**63 - 1)
_TIME_MAX = 86_400_000_000


_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}  # microseconds per Arrow unit (ns: see below)
_TIMESTAMP_MAX = 2**63 - 2  # DuckDB's largest finite TIMESTAMP (2**63 - 1 is infinity)


def check_duckdb_values(col: pa.ChunkedArray, what: str) -> None:
    """Refuse values that are valid Arrow but not valid DuckDB values (timestamps and times), in
    whatever unit the column has: DuckDB keeps microseconds."""
    t = col.type
    if not (pa.types.is_timestamp(t) or pa.types.is_time(t)) or col.null_count == len(col):
        return
    ints = col.cast(pa.int32() if pa.types.is_time32(t) else pa.int64())
    if pa.types.is_time(t):
        low, high = (v.as_py() for v in pc.min_max(ints).values())
        limit = _TIME_MAX * 1000 if t.unit == "ns" else _TIME_MAX // _MICROS[t.unit]  # 24:00:00 in the unit
        if low < 0 or high > limit:
            raise ChangesetError(f"malformed changeset: {what} holds a TIME outside 00:00:00..24:00:00")
    elif t.unit == "us":
        if pc.any(pc.and_(pc.less(ints, int64_scalar(_TIMESTAMP_MIN)),
                          pc.not_equal(ints, int64_scalar(_TIMESTAMP_NEG_INF)))).as_py():
            raise ChangesetError(f"malformed changeset: {what} holds a timestamp before DuckDB's range")
    elif t.unit != "ns":  # every int64 of nanoseconds is inside DuckDB's range
        per = _MICROS[t.unit]
        low, high = (v.as_py() for v in pc.min_max(ints).values())
        if low * per < _TIMESTAMP_MIN or high * per > _TIMESTAMP_MAX:
            raise ChangesetError(f"malformed changeset: {what} holds a timestamp outside DuckDB's range")


def _type_in(t: pa.DataType, allowed: tuple[Any, ...]) -> bool:
    """Whether Arrow type ``t`` is one of ``allowed`` (types, or ``"timestamptz"`` for any zoned us timestamp)."""
    for a in allowed:
        if a == "timestamptz":
            if pa.types.is_timestamp(t) and t.unit == "us" and t.tz:
                return True
        elif isinstance(a, pa.DataType) and t == a and type(t) is type(a):
            return True
    return False


def _column_types(duckdb_type: str, what: str) -> tuple[Any, ...]:
    """The Arrow types a user column of a (canonical) DuckDB type may arrive as."""
    t = duckdb_type.upper().strip()
    if t in _PLAIN:
        return _PLAIN[t]
    if t == "TIMESTAMP WITH TIME ZONE":
        return ("timestamptz",)
    m = _DECIMAL.fullmatch(t)
    if m and 1 <= int(m.group(1)) <= 38 and int(m.group(2)) <= int(m.group(1)):
        return (pa.decimal128(int(m.group(1)), int(m.group(2))),)
    raise ChangesetError(f"malformed changeset: {what} has type {duckdb_type!r}, which crr does not replicate")


_CONTINUATION = 0xFFFFFFFF
_SCHEMA_MESSAGE, _DICTIONARY_MESSAGE, _BATCH_MESSAGE = 1, 2, 3


def _scan_ipc(data: bytes, what: str) -> None:
    """Walk an Arrow IPC stream's framing before pyarrow reads it, so nothing is inflated or allocated.

    The stream must be one schema message, then record batches, then the end-of-stream marker and
    nothing after it. Dictionary batches, tensors and any record batch with buffer compression are
    refused here: with uncompressed buffers, the tables read are slices of ``data`` itself.
    """
    pos, end, count = 0, len(data), 0
    try:
        while True:
            if pos + 8 > end:
                raise ChangesetError(f"malformed changeset: {what}: Arrow stream is truncated (no end marker)")
            marker, size = struct.unpack_from("<Ii", data, pos)
            if marker != _CONTINUATION:
                raise ChangesetError(f"malformed changeset: {what}: bad Arrow message framing")
            pos += 8
            if size == 0:
                break
            if size < 0 or size > end - pos:
                raise ChangesetError(f"malformed changeset: {what}: Arrow message metadata out of bounds")
            kind, body, compressed = _message_header(memoryview(data)[pos:pos + size])
            pos += size
            expected = _SCHEMA_MESSAGE if count == 0 else _BATCH_MESSAGE
            if kind == _DICTIONARY_MESSAGE:
                raise ChangesetError(f"malformed changeset: {what}: dictionary-encoded Arrow is not accepted")
            if kind != expected:
                raise ChangesetError(f"malformed changeset: {what}: unexpected Arrow message (type {kind})")
            if compressed:
                raise ChangesetError(f"malformed changeset: {what}: compressed Arrow buffers are not accepted "
                                     "(crr never compresses them)")
            if body < 0 or body > end - pos or (kind == _SCHEMA_MESSAGE and body):
                raise ChangesetError(f"malformed changeset: {what}: Arrow message body out of bounds")
            pos += body
            count += 1
    except (struct.error, IndexError, ValueError) as e:
        raise ChangesetError(f"malformed changeset: {what}: bad Arrow message ({e})") from None
    if count == 0:
        raise ChangesetError(f"malformed changeset: {what}: Arrow stream has no schema")
    if pos != end:
        raise ChangesetError(f"malformed changeset: {what}: {end - pos} bytes after the end of the Arrow stream")


def _message_header(meta: memoryview) -> tuple[int, int, bool]:
    """(header type, body length, compressed) of one IPC ``Message`` flatbuffer.

    Message: slot 1 header type (ubyte), slot 2 header (table), slot 3 bodyLength (long);
    RecordBatch: slot 3 compression (table; present means the buffers are compressed).
    """
    message = _fb_table(meta, _fb_u32(meta, 0))
    kind_at = _fb_field(meta, message, 1)
    kind = meta[kind_at] if kind_at is not None else 0
    body_at = _fb_field(meta, message, 3)
    body = _fb_read(meta, "<q", body_at) if body_at is not None else 0
    compressed = False
    if kind in (_BATCH_MESSAGE, _DICTIONARY_MESSAGE):
        header_at = _fb_field(meta, message, 2)
        if header_at is None:
            raise ValueError("message without its header")
        header = _fb_table(meta, header_at + _fb_u32(meta, header_at))
        if kind == _DICTIONARY_MESSAGE:  # DictionaryBatch: slot 1 is its RecordBatch
            return kind, body, False
        compressed = _fb_field(meta, header, 3) is not None
    return kind, body, compressed


def _fb_read(buf: memoryview, fmt: str, pos: int) -> int:
    if pos < 0 or pos + struct.calcsize(fmt) > len(buf):
        raise ValueError("flatbuffer offset out of bounds")
    return struct.unpack_from(fmt, buf, pos)[0]


def _fb_u32(buf: memoryview, pos: int) -> int:
    return _fb_read(buf, "<I", pos)


def _fb_table(buf: memoryview, pos: int) -> tuple[int, int, int]:
    """(table position, vtable position, vtable size) of the flatbuffer table at ``pos``."""
    vtable = pos - _fb_read(buf, "<i", pos)
    return pos, vtable, _fb_read(buf, "<H", vtable)


def _fb_field(buf: memoryview, table: tuple[int, int, int], slot: int) -> int | None:
    """Absolute position of a table's field, or None when absent."""
    pos, vtable, size = table
    entry = 4 + 2 * slot
    if entry + 2 > size:
        return None
    offset = _fb_read(buf, "<H", vtable + entry)
    return pos + offset if offset else None


# -- msgpack fields ------------------------------------------------------------------------------

def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters (a Changeset's runs to pages)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... (a {type(value).__name__})"


def _tname(value: object) -> str:
    return "nil" if value is None else type(value).__name__


def _keys(value: object, keys: tuple[str, ...], what: str) -> None:
    if not isinstance(value, dict):
        raise ChangesetError(f"malformed changeset: {what} should be a map, got {_tname(value)}")
    missing = [k for k in keys if k not in value]
    extra = [repr(k) for k in value if k not in keys]
    if missing or extra:
        raise ChangesetError(f"malformed changeset: {what} "
                             + "; ".join(([f"lacks {', '.join(missing)}"] if missing else [])
                                         + ([f"has unknown keys {', '.join(extra)}"] if extra else [])))


def _typed(value: object, typ: type, what: str) -> Any:
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise ChangesetError(f"malformed changeset: {what} should be {typ.__name__}, got {_tname(value)}")
    return value


def _count(value: object, what: str) -> int:
    _typed(value, int, what)
    assert isinstance(value, int)
    if not 0 <= value <= _MAX_INT:
        raise ChangesetError(f"malformed changeset: {what} {value} is out of range [0, 2**63)")
    return value


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ChangesetError(f"malformed changeset: {what} should be a non-empty str, got {_tname(value)}")
    return value


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list):
        raise ChangesetError(f"malformed changeset: {what} should be a list, got {_tname(value)}")
    return [_typed(x, str, what) for x in value]


def _columns(value: object, where: str) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise ChangesetError(f"malformed changeset: {where}: columns should be a list, got {_tname(value)}")
    out = []
    for i, col in enumerate(value):
        if not isinstance(col, list) or len(col) != 2:
            raise ChangesetError(f"malformed changeset: {where}: column {i} should be a [name, type] pair")
        out.append((_name(col[0], f"{where}: column {i} name"), _typed(col[1], str, f"{where}: column {i} type")))
    return out


def _unique(names: list[str], what: str, fold: bool = True) -> None:
    seen: set[str] = set()
    for n in names:
        k = fold_identifier(n) if fold else n
        if k in seen:
            raise ChangesetError(f"malformed changeset: {what} {n!r} appears twice")
        seen.add(k)


def _subset(value: object, names: list[str], what: str) -> None:
    if not isinstance(value, list):
        raise ChangesetError(f"malformed changeset: {what} should be a list, got {_tname(value)}")
    for x in value:
        if not isinstance(x, str) or x not in names:
            raise ChangesetError(f"malformed changeset: {what} names {x!r}, which is not a column")
    _unique(value, what, fold=False)


def _kind(value: object, where: str) -> ChangeKind:
    if not isinstance(value, str) or value not in ("base", "derived"):
        raise ChangesetError(f"malformed changeset: {where}: kind {value!r} is neither 'base' nor 'derived'")
    return ChangeKind(value)
