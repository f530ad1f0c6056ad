"""Mutation fuzzing of changesets against ``Site.merge``, run in a child process by test_changeset_fuzz.py.

A segfault or abort here kills only this process; the parent test sees the exit status and the last
line of the progress file (the mutation being merged). Modes::

    python -m tests.fuzz_merge_child random SEED COUNT BUDGET_S PROGRESS   # seeded mutations
    python -m tests.fuzz_merge_child one SEED INDEX OUT                    # write mutation INDEX's bytes
    python -m tests.fuzz_merge_child hypothesis EXAMPLES PROGRESS          # mutations chosen by hypothesis
    python -m tests.fuzz_merge_child bomb HEADROOM_BYTES                   # zstd inflation under RLIMIT_AS
    python -m tests.fuzz_merge_child merge FILE...                         # merge crafted bytes

Seeds are real changesets from a site with a replicated table of every supported type, a keyed
table, a remote table and views, built through the public API. Each mutation edits the msgpack
body (bytes, fields, or the Arrow IPC streams inside it: types, buffers, offsets, metadata,
compression) and recomputes the checksum, so only the decoder's validation stands between the
bytes and the engine. The result is merged into a site with the same schema: anything but success
or a ChangesetError is a failure, and for a sample of refusals the site must be unchanged.
Mutation ``i`` of seed ``s`` depends only on ``(s, i)``; the clock is frozen so seeds are stable.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import struct
import subprocess
import sys
import time
import traceback
import types
from typing import Any, Callable

import duckdb
import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

import crr
import crr.clock
from crr import changeset as changeset_module
from crr.types import Column, tuple_id_sql

_FAKE_NOW = [1_700_000_000.0]


def freeze_clock() -> None:
    """Make stamps deterministic (child processes only: it would change other tests' clocks)."""
    crr.clock.time = types.SimpleNamespace(time=lambda: _FAKE_NOW[0],  # type: ignore[attr-defined]
                                           time_ns=lambda: int(_FAKE_NOW[0] * 1e9))

HEADER = 5 + 1 + 16
TARGET_DDL = [
    "CREATE REPLICATED TABLE t (k INTEGER, v VARCHAR, b BLOB, f DOUBLE, flag BOOLEAN, d DATE, ts TIMESTAMP, "
    "tz TIMESTAMPTZ, tm TIME, dec DECIMAL(10,2), u UUID, h HUGEINT, uh UHUGEINT, bi BIGINT, fl FLOAT, "
    "ti TINYINT, us USMALLINT)",
    "CREATE REPLICATED TABLE p (pk INTEGER PRIMARY KEY, name VARCHAR, score DOUBLE)",
    "CREATE REMOTE TABLE r (x INTEGER, y VARCHAR)",
    "CREATE MATERIALIZED VIEW w AS SELECT v, k FROM t WHERE k > 1",
    "CREATE MATERIALIZED VIEW j AS SELECT t.v, p.name FROM t JOIN p ON t.k = p.pk",
    "CREATE MATERIALIZED VIEW vr AS SELECT y FROM r WHERE x <> 3",
]
T_ROWS = [
    "(1, 'a', 'ab'::BLOB, 1.5, true, DATE '2024-02-29', TIMESTAMP '2024-01-01 10:00:00', "
    "TIMESTAMPTZ '2024-01-01 10:00:00+00', TIME '10:11:12.5', 3.25, 'f81d4fae-7dec-11d0-a765-00a0c91e6bf6', "
    "-170141183460469231731687303715884105728, 340282366920938463463374607431768211455, -9223372036854775808, "
    "-0.0, -128, 65535)",
    "(2, 'héllo wörld 🎉', ''::BLOB, 'nan'::DOUBLE, false, DATE '1970-01-01', TIMESTAMP '1900-01-01', "
    "TIMESTAMPTZ '2000-06-01 00:00:00+05', TIME '00:00:00', -0.01, NULL, 0, 0, 9223372036854775807, "
    "'inf'::FLOAT, 127, 0)",
    "(3, '', NULL, '-inf'::DOUBLE, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(4, NULL, '\\x00\\xff'::BLOB, 0.0, true, DATE '2038-01-19', TIMESTAMP '2262-04-11 23:47:16', "
    "TIMESTAMPTZ '1969-12-31 23:59:59+00', TIME '23:59:59.999999', 99999999.99, "
    "'00000000-0000-0000-0000-000000000000', 1, 1, 1, 1.0, 0, 1)",
    "(5, 'edges', NULL, 1e308, NULL, DATE '5877642-06-25 (BC)', TIMESTAMP '290309-12-22 (BC) 00:00:00', "
    "TIMESTAMPTZ 'infinity', TIME '24:00:00', -99999999.99, NULL, 170141183460469231731687303715884105727, NULL, "
    "NULL, -3.4e38, NULL, NULL)",
]


def _site(site_id: str, ddl: list[str]) -> crr.Site:
    s = crr.Site(site_id=site_id)
    for stmt in ddl:
        s.execute(stmt)
    return s


def build_seeds() -> list[bytes]:
    """Real changesets (bytes): full states, deltas with deletions and updates, single relations."""
    origin = _site("origin", ["CREATE REPLICATED TABLE r (x INTEGER, y VARCHAR)"])
    origin.execute("INSERT INTO r VALUES (1, 'one'), (2, 'two'), (3, 'three'), (4, NULL)")
    src = _site("src", TARGET_DDL)
    src.merge(origin.changes().to_bytes())
    src.execute("INSERT INTO t VALUES " + ", ".join(T_ROWS))
    src.execute("INSERT INTO p VALUES (1, 'ann', 1.0), (2, 'bob', NULL), (4, 'dan', -2.5), (9, '', 0.0)")
    seeds = [src.changes().to_bytes()]
    cursor = src.cursor
    _FAKE_NOW[0] += 1
    src.execute("DELETE FROM t WHERE k = 3")
    src.execute("UPDATE p SET name = 'bea' WHERE pk = 2")
    src.execute("DELETE FROM p WHERE pk = 9")
    origin.execute("DELETE FROM r WHERE x = 2")
    src.merge(origin.changes().to_bytes())
    seeds.append(src.changes(since=cursor).to_bytes())
    for rels in (["p"], ["j"], ["r"], ["w", "t"], []):
        seeds.append(src.changes(relations=rels).to_bytes())
    seeds.append(src.changes().to_bytes())
    origin.close()
    src.close()
    return seeds


def target() -> crr.Site:
    """A fresh site with the schema of the seeds' source."""
    return _site("target", TARGET_DDL)


def _rows(table: pa.Table | None) -> list[str] | None:
    """A table's rows as sorted texts (temporal values as integers: Python cannot hold them all)."""
    if table is None:
        return None
    cols = []
    for col in table.columns:
        t = col.type
        if pa.types.is_date32(t):
            col = col.cast(pa.int32())
        elif pa.types.is_timestamp(t) or pa.types.is_time64(t):
            col = col.cast(pa.int64())
        cols.append(col)
    return sorted(map(repr, zip(*(c.to_pylist() for c in cols))))


def snapshot(site: crr.Site) -> tuple:
    """The site's APP tables and what ``changes()`` would send, in a comparable form."""
    apps = {}
    for name in site.relations():
        cols = ", ".join(f'CAST("{c}" AS VARCHAR)' for c in site.relation(name).column_names)
        apps[name] = sorted(map(repr, site.execute(f'SELECT {cols} FROM "{name}"')))
    cs = site.changes()
    rels = {rc.name: (_rows(rc.tuples), _rows(rc.monos)) for rc in cs.relations}
    return apps, rels, _rows(cs.cl), site.cursor


def frame(body: bytes, version: int | None = None) -> bytes:
    """Changeset bytes around a body, with a correct checksum."""
    v = changeset_module.FORMAT_VERSION if version is None else version
    return b"CRRCS" + bytes([v]) + hashlib.blake2b(body, digest_size=16).digest() + body


# -- Arrow IPC surgery ---------------------------------------------------------------------------

def _u(fmt: str, buf: bytes | bytearray, pos: int) -> int:
    return struct.unpack_from(fmt, buf, pos)[0]


def _fb_table(buf: bytes | bytearray, pos: int) -> tuple[int, int, int]:
    vt = pos - _u("<i", buf, pos)
    return pos, vt, _u("<H", buf, vt)


def _fb_field(buf: bytes | bytearray, table: tuple[int, int, int], slot: int) -> int | None:
    pos, vt, size = table
    if 4 + 2 * slot + 2 > size:
        return None
    off = _u("<H", buf, vt + 4 + 2 * slot)
    return pos + off if off else None


def _fb_vector(buf: bytes | bytearray, at: int) -> tuple[int, int]:
    vec = at + _u("<I", buf, at)
    return vec + 4, _u("<I", buf, vec)


def ipc_messages(stream: bytes | bytearray) -> list[dict[str, Any]]:
    """The messages of an IPC stream: kind, metadata and body spans, and for record batches the
    absolute positions of the batch length, FieldNode structs, Buffer structs and bodyLength."""
    out, pos = [], 0
    while pos + 8 <= len(stream):
        size = _u("<i", stream, pos + 4)
        pos += 8
        if size <= 0:
            break
        meta = bytes(stream[pos:pos + size])
        msg = _fb_table(meta, _u("<I", meta, 0))
        kind_at, body_at = _fb_field(meta, msg, 1), _fb_field(meta, msg, 3)
        kind = meta[kind_at] if kind_at is not None else 0
        body_len = _u("<q", meta, body_at) if body_at is not None else 0
        info: dict[str, Any] = {"kind": kind, "meta": pos, "body": pos + size, "body_len": body_len,
                                "body_len_at": pos + body_at if body_at is not None else None}
        if kind == 3:
            at = _fb_field(meta, msg, 2)
            assert at is not None
            rb = _fb_table(meta, at + _u("<I", meta, at))
            length_at = _fb_field(meta, rb, 0)
            info["length_at"] = pos + length_at if length_at is not None else None
            for name, slot in (("nodes", 1), ("buffers", 2)):
                f = _fb_field(meta, rb, slot)
                start, n = _fb_vector(meta, f) if f is not None else (0, 0)
                info[name] = [pos + start + 16 * i for i in range(n)]
            info["compression_at"] = _fb_field(meta, rb, 3)
        out.append(info)
        pos += size + body_len
    return out


def buffer_kinds(t: pa.DataType) -> list[str]:
    """Kinds of the IPC buffers of one field, in order (validity, offsets, data, bits)."""
    if isinstance(t, pa.ExtensionType):
        return buffer_kinds(t.storage_type)
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return ["validity", "offsets", "data"]
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return ["validity", "offsets64", "data"]
    if pa.types.is_list(t):
        return ["validity", "offsets"] + buffer_kinds(t.value_type)
    if pa.types.is_boolean(t):
        return ["validity", "bits"]
    return ["validity", "data"]


def write_ipc(table: pa.Table, compression: str | None = None, max_chunksize: int | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    opts = ipc.IpcWriteOptions(compression=compression)
    with ipc.new_stream(sink, table.schema, options=opts) as w:
        w.write_table(table, max_chunksize=max_chunksize)
    return sink.getvalue().to_pybytes()


def read_ipc(data: bytes) -> pa.Table:
    """Read a stream the seeds produced (valid Arrow)."""
    return ipc.open_stream(data).read_all()


def rle_zstd_frame(n: int, byte: int = 0) -> bytes:
    """A zstd frame of ``n`` copies of ``byte`` made of RLE blocks: 4 bytes per 128 KiB inflated."""
    out = [struct.pack("<I", 0xFD2FB528), bytes([0xC0, 0x38]), struct.pack("<Q", n)]
    left = n
    while left:
        k = min(left, 1 << 17)
        left -= k
        out.append(struct.pack("<I", (k << 3) | (1 << 1) | (left == 0))[:3] + bytes([byte]))
    return b"".join(out)


def zstd_bomb(stream: bytes, inflated: int, declared: int | None = None) -> bytes:
    """Re-encode an IPC stream with zstd buffers, then make its last buffer inflate to ``inflated`` bytes
    (its length prefix says ``declared``, by default the same)."""
    data = bytearray(write_ipc(read_ipc(stream), compression="zstd"))
    msgs = ipc_messages(data)
    batch = next(m for m in msgs if m["kind"] == 3)
    body = bytes(data[batch["body"]:batch["body"] + batch["body_len"]])
    bufs = [(_u("<q", data, p), _u("<q", data, p + 8)) for p in batch["buffers"]]
    contents = [body[o:o + n] for o, n in bufs]
    contents[-1] = struct.pack("<q", inflated if declared is None else declared) + rle_zstd_frame(inflated)
    new_body = bytearray()
    for p, c in zip(batch["buffers"], contents):
        struct.pack_into("<qq", data, p, len(new_body), len(c))
        new_body += c + b"\0" * (-len(c) % 8)
    struct.pack_into("<q", data, batch["body_len_at"], len(new_body))
    end = batch["body"] + batch["body_len"]
    return bytes(data[:batch["body"]]) + bytes(new_body) + bytes(data[end:])


def offsets_past_buffer(stream: bytes, column: int, value: int = 1 << 30) -> bytes:
    """Set the offset of slot 1 of a string/binary column to ``value`` (its last offset stays valid)."""
    data = bytearray(stream)
    schema = ipc.open_stream(stream).schema
    kinds = [k for i, f in enumerate(schema) for k in [(i, x) for x in buffer_kinds(f.type)]]
    batch = next(m for m in ipc_messages(data) if m["kind"] == 3)
    index = kinds.index((column, "offsets"))
    off = _u("<q", data, batch["buffers"][index])
    struct.pack_into("<i", data, batch["body"] + off + 4, value)
    return bytes(data)


# -- mutations -----------------------------------------------------------------------------------

Doc = dict[str, Any]
EXTREMES = [1 << 63, (1 << 63) + 1, (1 << 63) + 2, (1 << 63) - 1, (1 << 63) - 2, (1 << 64) - 1, 0,
            0x8000000300000000, 0x7FF8000000000001, 0xFFF0000000000000, 0x0000000100000000, 0x80000000]
INTS = [-1, 0, 1, 2, 7, 255, 2**31 - 1, 2**31, -2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -2**63]
JUNK: list[Any] = [None, True, False, 0, -1, 2**64 - 1, -2**63, 1.5, float("nan"), "", "x", "t", "base", "derived",
                   "id", "VARCHAR", "INTEGER", b"", b"\xff\xfe", b"\xff\xff\xff\xff\x00\x00\x00\x00", [], {},
                   ["a", "b"], [["k", "INTEGER"]], [None], {"a": 1}, msgpack.ExtType(5, b"zz"), "é \"q\" 'x'"]
TYPES = ["INTEGER", "BIGINT", "VARCHAR", "BLOB", "DOUBLE", "UHUGEINT", "HUGEINT", "BOOLEAN", "DATE", "TIMESTAMP",
         "TIMESTAMP WITH TIME ZONE", "TIME", "DECIMAL(10,2)", "DECIMAL(4,1)", "DECIMAL(99,2)", "UUID", "FLOAT",
         "INTEGER[]", "STRUCT(a INTEGER)", "MAP(VARCHAR, INTEGER)", "ENUM('a')", "", "varchar", "INTERVAL"]
NAMES = ["id", "vid", "ID", "a b", 'q"uote', "it's", "x.y", "a;b", "é", "🎉", "", " ", "seq", "k", "K", "t", "T",
         "\x00", "c0"]


def _tables(doc: Doc) -> list[tuple[Any, Any]]:
    """(container, key) of every Arrow table in the body."""
    out: list[tuple[Any, Any]] = []
    if isinstance(doc.get("cl"), bytes):
        out.append((doc, "cl"))
    for r in doc.get("relations") or []:
        if isinstance(r, dict):
            out += [(r, k) for k in ("tuples", "monos") if isinstance(r.get(k), bytes)]
    return out


def _relation(doc: Doc, rng: random.Random) -> dict | None:
    rels = [r for r in doc.get("relations") or [] if isinstance(r, dict)]
    return rng.choice(rels) if rels else None


def m_field_junk(doc: Doc, rng: random.Random) -> str:
    """Replace a body or relation field with a value of another type."""
    target = rng.choice([doc, _relation(doc, rng) or doc])
    key = rng.choice(sorted(target))
    target[key] = rng.choice(JUNK)
    return f"junk {key}"


def m_field_drop_or_add(doc: Doc, rng: random.Random) -> str:
    target = rng.choice([doc, _relation(doc, rng) or doc])
    if rng.random() < 0.5 and target:
        key = rng.choice(sorted(target))
        del target[key]
        return f"drop {key}"
    target[rng.choice(["extra", "version", "not_null", "nul\x00", "Name"])] = rng.choice(JUNK)
    return "add key"


def m_field_swap(doc: Doc, rng: random.Random) -> str:
    """Swap two fields' values, within a relation or between relations or with the body."""
    a = _relation(doc, rng)
    b = _relation(doc, rng)
    if a is None or b is None:
        return "none"
    ka, kb = rng.choice(sorted(a)), rng.choice(sorted(b))
    a[ka], b[kb] = b[kb], a[ka]
    return f"swap {ka}<->{kb}"


def m_ints(doc: Doc, rng: random.Random) -> str:
    key = rng.choice(["since", "cursor"])
    doc[key] = rng.choice(INTS)
    return f"int {key}"


def m_names(doc: Doc, rng: random.Random) -> str:
    """Rename a relation, a column, a key or lineage entry; duplicate or drop relations."""
    r = _relation(doc, rng)
    if r is None:
        return "none"
    what = rng.randrange(6)
    if what == 0:
        r["name"] = rng.choice(NAMES + [x["name"].upper() for x in doc["relations"] if isinstance(x, dict)
                                        and isinstance(x.get("name"), str)])
    elif what == 1 and isinstance(r.get("columns"), list) and r["columns"]:
        rng.choice(r["columns"])[0] = rng.choice(NAMES)
    elif what == 2:
        r[rng.choice(["key", "not_null", "lineage"])] = rng.sample(NAMES, rng.randrange(3))
    elif what == 3:
        doc["relations"].append(dict(r))
    elif what == 4:
        doc["relations"].remove(r)
    else:
        r["kind"] = {"base": "derived", "derived": "base"}.get(r.get("kind"), "base")
    return f"names {what}"


def m_columns(doc: Doc, rng: random.Random) -> str:
    """Change declared column types, or add, drop or reorder columns."""
    r = _relation(doc, rng)
    if r is None or not isinstance(r.get("columns"), list) or not r["columns"]:
        return "none"
    cols = r["columns"]
    what = rng.randrange(4)
    if what == 0:
        rng.choice(cols)[1] = rng.choice(TYPES)
    elif what == 1:
        cols.append([rng.choice(NAMES), rng.choice(TYPES)])
    elif what == 2:
        cols.pop(rng.randrange(len(cols)))
    else:
        rng.shuffle(cols)
    return f"columns {what}"


def _arrow_op(doc: Doc, rng: random.Random, fn: Callable[[pa.Table, random.Random], pa.Table | bytes | None],
              label: str) -> str:
    tables = _tables(doc)
    if not tables:
        return "none"
    holder, key = rng.choice(tables)
    try:
        table = read_ipc(holder[key])
        table.validate(full=True)
    except Exception:
        return "none"  # already mangled by an earlier op
    try:
        out = fn(table, rng)
    except Exception:
        out = None  # this op does not apply to this table
    if out is None:
        return "none"
    holder[key] = out if isinstance(out, bytes) else write_ipc(out)
    return f"{label} {key}"


def _column(table: pa.Table, rng: random.Random) -> int | None:
    return rng.randrange(table.num_columns) if table.num_columns else None


def _retype(col: pa.ChunkedArray, rng: random.Random) -> pa.ChunkedArray | pa.Array | None:
    t = col.type
    arr = col.combine_chunks()
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    options: list[Callable[[], Any]] = [
        lambda: pa.nulls(len(arr)),
        lambda: pc.dictionary_encode(storage),
        lambda: pa.StructArray.from_arrays([storage], ["x"]),
        lambda: pa.array([[x] for x in storage.to_pylist()], pa.list_(storage.type)),
        lambda: storage.cast(pa.large_binary()) if pa.types.is_binary(storage.type) else storage.cast(pa.int64()),
        lambda: storage.cast(pa.string_view()) if pa.types.is_string(storage.type) else storage.cast(pa.float64()),
        lambda: storage.cast(pa.binary()),
        lambda: storage.cast(pa.large_string()),
    ]
    if isinstance(t, pa.ExtensionType):
        options += [
            lambda: storage,
            lambda: pa.ExtensionArray.from_storage(pa.opaque(storage.type, "hugeint", "DuckDB"), storage),
            lambda: pa.ExtensionArray.from_storage(pa.opaque(storage.type, "uhugeint", "Other"), storage),
            lambda: pa.ExtensionArray.from_storage(pa.uuid(), storage),
            lambda: pa.ExtensionArray.from_storage(pa.bool8(), storage.cast(pa.int8())),
            lambda: storage.cast(pa.int8()),
        ]
    if pa.types.is_list(t):
        vals = pc.list_flatten(arr)
        vstore = vals.storage if isinstance(vals, pa.ExtensionArray) else vals
        options += [
            lambda: pa.LargeListArray.from_arrays(pa.array(arr.offsets.to_pylist(), pa.int64()), vals),
            lambda: pa.ListArray.from_arrays(arr.offsets, vstore),
            lambda: pa.ListArray.from_arrays(arr.offsets, pa.ExtensionArray.from_storage(
                pa.opaque(vstore.type, "hugeint", "DuckDB"), vstore)),
            lambda: pa.ListViewArray.from_arrays(arr.offsets[:-1], pc.list_value_length(arr), vals),
        ]
    if pa.types.is_timestamp(t):
        options += [lambda: arr.cast(pa.timestamp("ns", t.tz)), lambda: arr.cast(pa.timestamp("us")),
                    lambda: arr.cast(pa.timestamp("us", "Mars/Olympus")), lambda: arr.cast(pa.timestamp("us", "+05:00"))]
    if pa.types.is_decimal(t):
        options += [lambda: arr.cast(pa.decimal128(38, t.scale)), lambda: arr.cast(pa.decimal256(t.precision, t.scale))]
    if pa.types.is_integer(t):
        options += [lambda: arr.cast(pa.int16()), lambda: arr.cast(pa.uint32()), lambda: arr.cast(pa.date32())]
    try:
        return rng.choice(options)()
    except Exception:
        return None


def a_retype(table: pa.Table, rng: random.Random) -> pa.Table | None:
    i = _column(table, rng)
    if i is None:
        return None
    new = _retype(table.column(i), rng)
    return None if new is None else table.set_column(i, table.field(i).name, new)


def a_reshape(table: pa.Table, rng: random.Random) -> pa.Table | None:
    """Rename, drop, add, duplicate or reorder columns."""
    i = _column(table, rng)
    if i is None:
        return None
    what = rng.randrange(5)
    if what == 0:
        return table.rename_columns([rng.choice(NAMES) if j == i else n for j, n in enumerate(table.column_names)])
    if what == 1:
        return table.remove_column(i)
    if what == 2:
        return table.append_column(rng.choice(NAMES + ["extra"]), table.column(i))
    if what == 3:
        return table.add_column(0, table.field(i), table.column(i))
    order = list(range(table.num_columns))
    rng.shuffle(order)
    return table.select(order)


def a_rows(table: pa.Table, rng: random.Random) -> pa.Table | None:
    """Duplicate, drop or NULL rows; an empty table; or the same rows in several batches."""
    n = table.num_rows
    what = rng.randrange(5)
    if what == 0 and n:
        return pa.concat_tables([table, table.slice(rng.randrange(n), 1)])
    if what == 1 and n:
        return table.slice(0, rng.randrange(n))
    if what == 2 and n:
        i = _column(table, rng)
        assert i is not None
        col = table.column(i).combine_chunks()
        mask = pa.array([rng.random() < 0.5 for _ in range(n)])
        try:
            return table.set_column(i, table.field(i), pc.if_else(mask, pa.nulls(n, col.type), col))
        except Exception:
            return None
    if what == 3:
        return table.slice(0, 0)
    return write_ipc(table, max_chunksize=1) if n > 1 else None  # type: ignore[return-value]


def a_metadata(table: pa.Table, rng: random.Random) -> pa.Table | None:
    """Field metadata, extension names on plain fields, or non-nullable fields holding NULLs."""
    i = _column(table, rng)
    if i is None:
        return None
    f = table.field(i)
    meta = rng.choice([{"ARROW:extension:name": "arrow.uuid"}, {"ARROW:extension:name": "arrow.opaque",
                       "ARROW:extension:metadata": '{"type_name":"uhugeint","vendor_name":"DuckDB"}'},
                       {"ARROW:extension:name": "arrow.opaque", "ARROW:extension:metadata": "{not json"},
                       {"x": "y"}, None])
    storage = f.type.storage_type if isinstance(f.type, pa.ExtensionType) else f.type
    col = table.column(i)
    if isinstance(f.type, pa.ExtensionType):
        col = pa.chunked_array([c.storage for c in col.chunks], type=storage)
    nf = pa.field(f.name, storage, nullable=rng.random() < 0.5, metadata=meta)
    try:
        return pa.Table.from_arrays([col if j == i else table.column(j) for j in range(table.num_columns)],
                                    schema=pa.schema([nf if j == i else table.field(j)
                                                      for j in range(table.num_columns)]))
    except Exception:
        return None


def a_compress(table: pa.Table, rng: random.Random) -> bytes:
    return write_ipc(table, compression=rng.choice(["zstd", "lz4"]))


def a_bomb(table: pa.Table, rng: random.Random) -> bytes | None:
    if not table.num_rows:
        return None
    return zstd_bomb(write_ipc(table), 1 << 20, rng.choice([1 << 20, 1 << 31, 1 << 62]))


def _surgery(table: pa.Table, rng: random.Random) -> bytes | None:
    """Corrupt the IPC stream in place: buffer contents (offsets, validity, data), FieldNodes, Buffer
    structs, the batch length, or stream bytes."""
    data = bytearray(write_ipc(table))
    batches = [m for m in ipc_messages(data) if m["kind"] == 3]
    if not batches:
        return None
    b = rng.choice(batches)
    kinds = [k for f in table.schema for k in buffer_kinds(f.type)]
    if len(kinds) != len(b["buffers"]):
        return None
    what = rng.randrange(8)
    bufs = [(_u("<q", data, p), _u("<q", data, p + 8)) for p in b["buffers"]]
    if what == 7:  # an extreme value in a fixed-width column (8-byte aligned slot)
        choices = [i for i, k in enumerate(kinds) if k == "data" and bufs[i][1] >= 8]
        if not choices:
            return None
        off, n = bufs[rng.choice(choices)]
        struct.pack_into("<Q", data, b["body"] + off + rng.randrange(n // 8) * 8, rng.choice(EXTREMES))
        return bytes(data)
    if what <= 2:  # buffer contents
        wanted = ["offsets", "validity", "data"][what]
        choices = [i for i, k in enumerate(kinds) if k == wanted and bufs[i][1] >= 4]
        if not choices:
            return None
        off, n = bufs[rng.choice(choices)]
        at = b["body"] + off + rng.randrange(n // 4) * 4
        if wanted == "offsets":
            struct.pack_into("<i", data, at, rng.choice([1 << 30, -1, -(1 << 31), (1 << 31) - 1, n + 1, 3,
                                                         rng.randrange(-64, 64)]))
        elif wanted == "validity":
            data[at] ^= 1 << rng.randrange(8)
        else:
            data[at:at + 4] = rng.choice([b"\xff\xfe\xfd\xfc", b"\xc3\x28\x00\x00", b"\xed\xa0\x80\x00",
                                          rng.randbytes(4)])
    elif what == 3 and b["nodes"]:
        p = rng.choice(b["nodes"]) + rng.choice([0, 8])
        struct.pack_into("<q", data, p, rng.choice(INTS[:12] + [-5]) % (1 << 63) * rng.choice([1, -1]))
    elif what == 4 and b["buffers"]:
        p = rng.choice(b["buffers"]) + rng.choice([0, 8])
        struct.pack_into("<q", data, p, rng.choice([-8, 1, 3, 8, 1 << 20, 1 << 40, 2**63 - 1, -(2**63)]))
    elif what == 5 and b["length_at"] is not None:
        struct.pack_into("<q", data, b["length_at"], rng.choice([0, 1, 2, 100, 1 << 31, 1 << 40, -1]))
    else:
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    return bytes(data)


def a_surgery(table: pa.Table, rng: random.Random) -> bytes | None:
    try:
        return _surgery(table, rng)
    except Exception:
        return None


def a_swap(doc: Doc, rng: random.Random) -> str:
    """Put one table where another belongs."""
    tables = _tables(doc)
    if len(tables) < 2:
        return "none"
    (h1, k1), (h2, k2) = rng.sample(tables, 2)
    h1[k1], h2[k2] = h2[k2], h1[k1]
    return f"table swap {k1}<->{k2}"


def a_ipc_bytes(doc: Doc, rng: random.Random) -> str:
    """Byte-level damage to one IPC stream: flips, truncation, insertion, deletion, trailing bytes."""
    tables = _tables(doc)
    if not tables:
        return "none"
    holder, key = rng.choice(tables)
    holder[key] = _bytes_op(holder[key], rng)
    return f"ipc bytes {key}"


def _bytes_op(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    if not b:
        return bytes(rng.randbytes(rng.randrange(1, 9)))
    what = rng.randrange(7)
    i = rng.randrange(len(b))
    if what == 0:
        for _ in range(rng.randrange(1, 4)):
            j = rng.randrange(len(b))
            b[j] ^= 1 << rng.randrange(8)
    elif what == 1:
        del b[i:]
    elif what == 2:
        b[i:i] = rng.randbytes(rng.choice([1, 4, 8, 16]))
    elif what == 3:
        del b[i:i + rng.choice([1, 4, 8, 16])]
    elif what == 4:
        b[i:i + 8] = rng.choice([b"\xff" * 8, b"\x00" * 8, b"\x7f\xff\xff\xff\xff\xff\xff\xff"])
    elif what == 5:
        b += rng.randbytes(rng.choice([1, 8, 64]))
    else:
        j = rng.randrange(len(b))
        lo, hi = min(i, j), max(i, j)
        b[lo:lo] = b[lo:hi][:256]
    return bytes(b)


def _map_ids(col: pa.ChunkedArray, mapping: dict[bytes, bytes]) -> pa.Array:
    storage = pa.array([mapping.get(x, x) for x in col.combine_chunks().storage.to_pylist()], pa.binary(16))
    return pa.ExtensionArray.from_storage(col.type, storage)


def m_reid(doc: Doc, rng: random.Random) -> str:
    """Recompute every tuple id from its values (and carry causal lengths and monomials along), as a
    lying peer can: only for a body that passes validation, so DuckDB reads only validated tables."""
    try:
        cs = crr.Changeset.from_bytes(frame(msgpack.packb(doc, use_bin_type=True)))
    except crr.ChangesetError:
        return "reid: body already refused"
    con = duckdb.connect()
    con.execute("SET arrow_lossless_conversion = true")
    mapping: dict[bytes, bytes] = {}
    for rc, raw in zip(cs.relations, doc["relations"]):
        cols = [Column(n, t) for n, (_, t) in zip(rc.tuples.column_names[1:], rc.columns)]
        con.register("forged", rc.tuples)
        ids = con.sql(f"SELECT {tuple_id_sql(rc.name, cols)} FROM forged").to_arrow_table().column(0)
        con.unregister("forged")
        mapping.update(zip(rc.tuples.column(0).combine_chunks().storage.to_pylist(),
                           ids.combine_chunks().storage.to_pylist()))
        raw["tuples"] = write_ipc(rc.tuples.set_column(0, rc.tuples.field(0), ids))
    for rc, raw in zip(cs.relations, doc["relations"]):
        if rc.monos is not None:
            raw["monos"] = write_ipc(rc.monos.set_column(0, rc.monos.field(0), _map_ids(rc.monos.column(0), mapping)))
    if cs.cl is not None:
        doc["cl"] = write_ipc(cs.cl.set_column(0, cs.cl.field(0), _map_ids(cs.cl.column(0), mapping)))
    return "reid"


DOC_OPS: dict[str, Callable[[Doc, random.Random], str]] = {
    "field_junk": m_field_junk, "field_drop_or_add": m_field_drop_or_add, "field_swap": m_field_swap,
    "ints": m_ints, "names": m_names, "reid": m_reid, "columns": m_columns, "table_swap": a_swap, "ipc_bytes": a_ipc_bytes,
}
ARROW_OPS: dict[str, Callable[[pa.Table, random.Random], Any]] = {
    "retype": a_retype, "reshape": a_reshape, "rows": a_rows, "metadata": a_metadata, "compress": a_compress,
    "bomb": a_bomb, "surgery": a_surgery,
}
OP_NAMES = sorted(DOC_OPS) + sorted(ARROW_OPS) + ["body_bytes", "repack"]
WEIGHTS = {"surgery": 6, "retype": 4, "reshape": 2, "rows": 2, "body_bytes": 3, "metadata": 2, "field_junk": 2}


def apply_ops(seed: bytes, ops: list[str], rng: random.Random) -> tuple[bytes, list[str]]:
    """Mutate one seed changeset by ``ops`` in order; return the bytes (checksum recomputed) and a log."""
    doc: Any = msgpack.unpackb(seed[HEADER:], raw=False)
    raw: bytes | None = None  # set once the body is edited as bytes
    log = []
    for op in ops:
        if op == "body_bytes":
            raw = _bytes_op(raw if raw is not None else msgpack.packb(doc, use_bin_type=True), rng)
            log.append("body bytes")
            continue
        if raw is not None:
            log.append(f"{op}: skipped after body bytes")
            continue
        if op == "repack":  # str fields as bin, ints as other widths: the same values in other msgpack forms
            raw = msgpack.packb(doc, use_bin_type=False)
            log.append("repack as raw str")
        else:
            try:
                log.append(DOC_OPS[op](doc, rng) if op in DOC_OPS else _arrow_op(doc, rng, ARROW_OPS[op], op))
            except (TypeError, AttributeError, KeyError, ValueError, IndexError):
                log.append(f"{op}: does not apply")  # an earlier op changed the shape it needs
    body = raw if raw is not None else msgpack.packb(doc, use_bin_type=True)
    return frame(body), log


def mutation(seeds: list[bytes], seed: int, index: int) -> tuple[bytes, str]:
    """Mutation ``index`` of the seeded run ``seed``: deterministic in (seed, index)."""
    rng = random.Random(f"{seed}:{index}")
    s = rng.randrange(len(seeds))
    names = OP_NAMES
    ops = rng.choices(names, weights=[WEIGHTS.get(n, 1) for n in names], k=rng.choice([1, 1, 1, 2, 3]))
    if rng.random() < 0.25:
        ops.append("reid")  # a liar recomputes the ids of whatever it changed
    data, log = apply_ops(seeds[s], ops, rng)
    return data, f"seed {seed} index {index}: changeset {s}, ops {ops}: {'; '.join(log)}"


# -- running -------------------------------------------------------------------------------------

class Runner:
    """Merges inputs into a target site and records anything but success or ChangesetError."""

    def __init__(self, progress: str | None, sample: int = 25) -> None:
        self.site = target()
        self.progress = open(progress, "w", buffering=1) if progress else None
        self.sample = sample
        self.runs = self.refused = self.merged = 0
        self.failures: list[dict[str, str]] = []

    def run(self, data: bytes, desc: str) -> str | None:
        """Merge ``data``; return a failure text or None."""
        if self.progress:
            self.progress.write(desc + "\n")
        check = self.runs % self.sample == 0
        self.runs += 1
        before = snapshot(self.site) if check else None
        cursor = self.site.cursor
        try:
            self.site.merge(data)
        except crr.ChangesetError:
            self.refused += 1
            if self.site.cursor != cursor or (check and snapshot(self.site) != before):
                return self._fail(desc, "a refused merge changed the site's state")
        except Exception as e:
            self.site.close()
            self.site = target()
            return self._fail(desc, f"{type(e).__module__}.{type(e).__name__}: {e}\n{traceback.format_exc()}")
        else:
            self.merged += 1
        return None

    def _fail(self, desc: str, what: str) -> str:
        self.failures.append({"input": desc, "error": what})
        return what

    def report(self) -> dict[str, Any]:
        return {"runs": self.runs, "refused": self.refused, "merged": self.merged, "failures": self.failures}


def run_random(seed: int, count: int, budget: float, progress: str) -> dict[str, Any]:
    seeds = build_seeds()
    runner = Runner(progress)
    for i, s in enumerate(seeds):  # the unmutated seeds merge
        try:
            runner.site.merge(s)
        except Exception as e:
            runner.failures.append({"input": f"unmutated seed {i}", "error": f"{type(e).__name__}: {e}"})
    deadline = time.monotonic() + budget
    for i in range(count):
        if time.monotonic() > deadline:
            break
        data, desc = mutation(seeds, seed, i)
        runner.run(data, desc)
    return runner.report()


def run_hypothesis(examples: int, progress: str) -> dict[str, Any]:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    seeds = build_seeds()
    runner = Runner(progress)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(index=st.integers(0, len(seeds) - 1), ops=st.lists(st.sampled_from(OP_NAMES), min_size=1, max_size=3),
           salt=st.integers(0, 2**32 - 1))
    def merge_mutated(index: int, ops: list[str], salt: int) -> None:
        data, log = apply_ops(seeds[index], ops, random.Random(salt))
        failure = runner.run(data, f"hypothesis: changeset {index}, ops {ops}, salt {salt}: {'; '.join(log)}")
        assert failure is None, failure

    try:
        merge_mutated()
    except AssertionError:
        pass  # recorded in runner.failures (the shrunk example is the last one)
    return runner.report()


def run_bomb(headroom: int) -> dict[str, Any]:
    """Merge a zstd bomb inflating to 4 GiB with the address space capped at the current size + headroom."""
    seeds = build_seeds()
    doc = msgpack.unpackb(seeds[0][HEADER:], raw=False)
    rel = next(r for r in doc["relations"] if r["name"] == "t")
    rel["tuples"] = zstd_bomb(rel["tuples"], 1 << 32)
    data = frame(msgpack.packb(doc, use_bin_type=True))
    site = target()
    vm = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmSize:"))) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + headroom, vm + headroom))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out: dict[str, Any] = {"bytes": len(data)}
    for name, call in (("from_bytes", lambda: crr.Changeset.from_bytes(data)), ("merge", lambda: site.merge(data))):
        try:
            call()
            out[name] = "accepted"
        except Exception as e:
            out[name] = f"{type(e).__module__}.{type(e).__name__}: {e}"
    out["rss_growth"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss
    return out


def run_merge(paths: list[str]) -> list[dict[str, Any]]:
    """Merge each file's bytes into a fresh target site; report how each ended."""
    out = []
    for path in paths:
        site = target()
        before = snapshot(site)
        try:
            site.merge(open(path, "rb").read())
            out.append({"outcome": "merged"})
        except crr.ChangesetError as e:
            out.append({"outcome": "refused", "error": str(e), "unchanged": snapshot(site) == before})
        except Exception as e:
            out.append({"outcome": "raw", "error": f"{type(e).__module__}.{type(e).__name__}: {e}"})
        site.close()
    return out


def run_child(*args: str, timeout: float = 180) -> Any:
    """Run this module in a child process (the parent side); return its JSON report.

    A child that dies (segfault, abort) fails the calling test with its exit status and stderr.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-m", "tests.fuzz_merge_child", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (f"child {args[0]} exited with status {proc.returncode} "
                                  f"(negative: killed by that signal)\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    freeze_clock()
    mode = argv[0]
    if mode == "random":
        report = run_random(int(argv[1]), int(argv[2]), float(argv[3]), argv[4])
    elif mode == "hypothesis":
        report = run_hypothesis(int(argv[1]), argv[2])
    elif mode == "bomb":
        report = run_bomb(int(argv[1]))
    elif mode == "merge":
        report = run_merge(argv[1:])
    elif mode == "one":
        data, desc = mutation(build_seeds(), int(argv[1]), int(argv[2]))
        open(argv[3], "wb").write(data)
        report = {"input": desc}
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
