"""Changesets: the unit of replication, and their versioned, checksummed byte encoding.

A changeset carries, for each relation it covers, the augmented tuples (values plus id or view-tuple
id) and monomials changed after a cursor at the source site, plus the causal-length entries changed
after the cursor for every base relation in those relations' lineage. It is self-contained: every
monomial comes with its tuple's values, and every causal-length change of a held base tuple comes
with the tuple. Merging a changeset is a lattice join, so any changeset can be merged any number
of times, in any order, at any site.

Byte layout (``to_bytes``)::

    b"CRRCS" | version (1 byte) | blake2b-128 digest of body (16 bytes) | body

``body`` is a msgpack map; tables inside it are Arrow IPC streams (bytes), so whole batches move
without per-row Python work. Body keys: ``source`` (str), ``since`` and ``cursor`` (int),
``relations`` (list of maps: ``name``, ``kind`` (``base`` or ``derived``), ``columns``
([[name, type], ...]), ``key`` (list), ``fingerprint``, ``lineage`` (list), ``tuples`` (Arrow),
``monos`` (Arrow or nil)), and ``cl`` (Arrow table ``id, rel, cl, kh, stamp``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import msgpack
import pyarrow as pa
import pyarrow.ipc as ipc

from crr.errors import ChangesetError

MAGIC = b"CRRCS"
FORMAT_VERSION = 1
_HEADER = len(MAGIC) + 1 + 16


@dataclass
class RelationChanges:
    """The changes of one relation inside a changeset."""

    name: str
    kind: str  # "base" (a replicated table at the source) or "derived" (view or remote table)
    columns: list[tuple[str, str]]
    key: list[str]
    fingerprint: str
    lineage: list[str]
    tuples: pa.Table  # base: (id, cols...); derived: (vid, cols...)
    monos: pa.Table | None = None  # derived: (vid, ids)

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
        """Encode as versioned, checksummed bytes (see module docstring)."""
        body = msgpack.packb({
            "source": self.source,
            "since": self.since,
            "cursor": self.cursor,
            "relations": [{
                "name": r.name, "kind": r.kind, "columns": [list(c) for c in r.columns], "key": r.key,
                "fingerprint": r.fingerprint, "lineage": r.lineage, "tuples": _ipc(r.tuples),
                "monos": _ipc(r.monos) if r.monos is not None else None,
            } for r in self.relations],
            "cl": _ipc(self.cl) if self.cl is not None else None,
        }, use_bin_type=True)
        return MAGIC + bytes([self.version]) + hashlib.blake2b(body, digest_size=16).digest() + body

    @classmethod
    def from_bytes(cls, data: bytes) -> "Changeset":
        """Decode bytes made by :meth:`to_bytes`; raise ChangesetError for anything else."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ChangesetError(f"a changeset is bytes, not {type(data).__name__}")
        data = bytes(data)
        if len(data) < _HEADER or not data.startswith(MAGIC):
            raise ChangesetError("not a crr changeset (bad magic bytes or too short); "
                                 "pass bytes made by Changeset.to_bytes()")
        version = data[len(MAGIC)]
        if version != FORMAT_VERSION:
            raise ChangesetError(f"changeset format version {version} is not supported (this crr reads "
                                 f"version {FORMAT_VERSION}); upgrade the older site")
        digest, body = data[len(MAGIC) + 1:_HEADER], data[_HEADER:]
        if hashlib.blake2b(body, digest_size=16).digest() != digest:
            raise ChangesetError("changeset checksum mismatch: the bytes were truncated or corrupted in "
                                 "transit; fetch the changeset again")
        try:
            doc = msgpack.unpackb(body, raw=False)
            return cls(
                source=_typed(doc["source"], str, "source"),
                since=_typed(doc["since"], int, "since"),
                cursor=_typed(doc["cursor"], int, "cursor"),
                relations=[RelationChanges(
                    name=_typed(r["name"], str, "relation name"),
                    kind=_kind(r["kind"]),
                    columns=[(_typed(n, str, "column name"), _typed(t, str, "column type")) for n, t in r["columns"]],
                    key=[_typed(k, str, "key column") for k in r["key"]],
                    fingerprint=_typed(r["fingerprint"], str, "fingerprint"),
                    lineage=[_typed(x, str, "lineage") for x in r["lineage"]],
                    tuples=_table(r["tuples"]),
                    monos=_table(r["monos"]) if r["monos"] is not None else None,
                ) for r in doc["relations"]],
                cl=_table(doc["cl"]) if doc["cl"] is not None else None,
                version=version,
            )
        except ChangesetError:
            raise
        except (KeyError, TypeError, ValueError, msgpack.UnpackException) as e:
            raise ChangesetError(f"malformed changeset body ({type(e).__name__}: {e})") from None


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _table(data: object) -> pa.Table:
    if not isinstance(data, bytes):
        raise ChangesetError("malformed changeset: a table is not Arrow IPC bytes")
    try:
        return ipc.open_stream(data).read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise ChangesetError(f"malformed changeset: bad Arrow table ({e})") from None


def _typed(value: object, typ: type, what: str):
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise ChangesetError(f"malformed changeset: {what} should be {typ.__name__}, got {type(value).__name__}")
    return value


def _kind(value: object) -> str:
    if value not in ("base", "derived"):
        raise ChangesetError(f"malformed changeset: relation kind {value!r} is neither 'base' nor 'derived'")
    return value  # type: ignore[return-value]
