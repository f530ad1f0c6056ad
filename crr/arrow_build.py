"""Arrow arrays built from Python values by their buffers, for the single-row write path.

``pa.array`` (and ``pa.scalar``) asks pandas, on the first call in a process, whether its input is a
pandas object, which imports pandas when it is installed: 200-300 ms that a site's first write would
pay (measured: the first single-row INSERT with a view took 346 ms, the next ones 24-38 ms). The
arrays the point path builds (texts, flags, 128-bit ids) are simple enough to lay out directly;
each builder here equals ``pa.array(values, type)`` (a test compares them).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pyarrow as pa


def _validity(values: Sequence[object]) -> tuple[pa.Buffer | None, int]:
    """A validity bitmap for ``values`` (None where every value is present) and the null count."""
    nulls = sum(1 for v in values if v is None)
    if not nulls:
        return None, 0
    return _bitmap([v is not None for v in values]), nulls


def _bitmap(bits: Sequence[bool]) -> pa.Buffer:
    """Bits packed least-significant first, as Arrow lays out validity and booleans."""
    out = bytearray((len(bits) + 7) // 8)
    for i, bit in enumerate(bits):
        if bit:
            out[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bytes(out))


def strings(values: Sequence[str | None]) -> pa.Array:
    """``pa.array(values, pa.string())`` without pyarrow's pandas probe."""
    encoded = [b"" if v is None else v.encode() for v in values]
    offsets, total = [0], 0
    for e in encoded:
        total += len(e)
        offsets.append(total)
    validity, nulls = _validity(values)
    return pa.StringArray.from_buffers(len(values), pa.py_buffer(struct.pack(f"<{len(offsets)}i", *offsets)),
                                       pa.py_buffer(b"".join(encoded)), validity, nulls)


def bools(values: Sequence[bool | None]) -> pa.Array:
    """``pa.array(values, pa.bool_())`` without pyarrow's pandas probe."""
    validity, nulls = _validity(values)
    return pa.BooleanArray.from_buffers(pa.bool_(), len(values), [validity, _bitmap([bool(v) for v in values])],
                                        nulls)


def binary16(values: Sequence[bytes]) -> pa.Array:
    """``pa.array(values, pa.binary(16))`` for 16-byte values, none missing, without the pandas probe."""
    if any(len(v) != 16 for v in values):
        raise ValueError("every value must be 16 bytes")
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(values), [None, pa.py_buffer(b"".join(values))])


def string_scalar(value: str) -> pa.Scalar:
    """``pa.scalar(value, pa.string())`` without pyarrow's pandas probe (for compute arguments)."""
    return strings([value])[0]


def int64_range(n: int) -> pa.Array:
    """``pa.array(range(n), pa.int64())`` without pyarrow's pandas probe."""
    return pa.Int64Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(struct.pack(f"<{n}q", *range(n)))])


def int64_scalar(value: int) -> pa.Scalar:
    """``pa.scalar(value, pa.int64())`` without pyarrow's pandas probe (for compute arguments)."""
    return pa.Int64Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(struct.pack("<q", value))])[0]


FALSE = bools([False])[0]
"""A false ``pa.BooleanScalar`` built without pyarrow's pandas probe (for compute arguments)."""
