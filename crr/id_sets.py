"""Set membership of 128-bit tuple ids held in Arrow (as DuckDB returns UHUGEINT: 16 bytes each).

pyarrow hashes 16-byte binary values slowly (15 ms to look up 100k ids in 100k, against 5 ms for 64-bit integers); ids are
hashes, so their low 64 bits almost always tell them apart. :func:`index_in` hashes the low words as
``uint64`` and then compares the high words of each match; when some match differs in its high word
(two ids sharing a low word, chance about n^2 / 2^65), the lookup is done again by whole values, so
the answer is always exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crr.arrow_build import binary16, int64_scalar

_LOW, _HIGH = int64_scalar(0), int64_scalar(1)  # list positions of an id's two words


def id_storage(ids: pa.ChunkedArray | pa.Array) -> pa.Array:
    """An id column as plain 16-byte values (DuckDB's UHUGEINT arrives as an Arrow extension type)."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    return getattr(ids, "storage", ids)


def ids_arrow(ids: list[int]) -> pa.Array:
    """Tuple ids as Arrow, laid out as DuckDB's UHUGEINT arrives (16 bytes, little-endian)."""
    return binary16([i.to_bytes(16, "little") for i in ids])


def _words(ids: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, pa.Array]:
    """Two 64-bit words of each id (the low and high ones on a little-endian machine; on a big-endian
    one the words hold byte-swapped halves, which :func:`index_in` compares just as well: it needs
    only that equal ids have equal words)."""
    values = id_storage(ids)
    n = len(values)
    words = pa.Array.from_buffers(pa.uint64(), 2 * n, [None, values.buffers()[1]], offset=2 * values.offset)
    pairs = pa.FixedSizeListArray.from_arrays(words, 2)
    return pc.list_element(pairs, _LOW), pc.list_element(pairs, _HIGH)


def index_in(values: pa.ChunkedArray | pa.Array, value_set: pa.ChunkedArray | pa.Array) -> pa.Array:
    """For each id of ``values``, its position in ``value_set`` (int32), or null where it is absent
    (ids are never null; with nulls the lookup is pyarrow's, where a null finds a null)."""
    values_s, set_s = id_storage(values), id_storage(value_set)
    if values_s.null_count or set_s.null_count:
        return pc.index_in(values_s, value_set=set_s)
    low, high = _words(values_s)
    set_low, set_high = _words(set_s)
    at = pc.index_in(low, value_set=set_low)
    if pc.any(pc.not_equal(pc.take(set_high, at), high)).as_py():
        # a low word that two different ids share: look those values up by whole value
        return pc.index_in(values_s, value_set=set_s)
    return at


def all_in(values: pa.ChunkedArray | pa.Array, value_set: pa.ChunkedArray | pa.Array) -> bool:
    """Whether every id of ``values`` is in ``value_set``."""
    if len(values) == 0:
        return True
    return index_in(values, value_set).null_count == 0


def _low_words(values: pa.Array) -> np.ndarray:
    """The first 64-bit word of each 16-byte value (see :func:`_words`), as a numpy view of its buffer."""
    words = np.frombuffer(values.buffers()[1], dtype=np.uint64, count=2 * (values.offset + len(values)))
    return words[2 * values.offset::2]


def _repeats(words: np.ndarray) -> bool:
    """Whether some word occurs twice: numpy sorts 100k of them in about 1 ms, where pyarrow's
    ``count_distinct`` hashes them in 10-30 ms."""
    ordered = np.sort(words)
    return bool((ordered[1:] == ordered[:-1]).any())


def distinct_keys(key_hashes: pa.ChunkedArray | pa.Array) -> bool:
    """Whether no key hash occurs twice among the non-null ones (an unkeyed entry's is null): decided
    on their low words when those are distinct (so are the key hashes), by whole values otherwise."""
    kh = id_storage(key_hashes)
    if len(kh) - kh.null_count < 2:
        return True
    words = _low_words(kh)
    if kh.null_count:
        words = words[np.asarray(kh.is_valid())]
    if not _repeats(words):
        return True
    return pc.count_distinct(kh, mode="only_valid").as_py() == len(kh) - kh.null_count


def distinct_ids(ids: pa.ChunkedArray | pa.Array) -> bool:
    """Whether no id occurs twice, decided on the ids' low words: True only when those are distinct
    (so are the ids); False when some repeat (then an id may repeat, or two ids share a low word)."""
    if len(ids) < 2:
        return True
    return not _repeats(_low_words(id_storage(ids)))


MAX_LISTED_IDS = 64
"""The most ids a statement lists as constants (:func:`listed_ids`) where it would otherwise join a
batch's table of them with a large one: DuckDB then filters the large table's scan by the constants
instead of building and probing a hash table (of the large side, for an ``IN (subquery)``)."""


def listed_ids(ids: pa.ChunkedArray | pa.Array) -> list[int] | None:
    """The distinct ids of ``ids`` as Python ints, sorted, when there are at most
    :data:`MAX_LISTED_IDS` of them and none is null; None otherwise."""
    listed = listed_id_bytes(ids)
    return None if listed is None else sorted(int.from_bytes(b, "little") for b in listed)


def listed_id_bytes(ids: pa.ChunkedArray | pa.Array) -> list[bytes] | None:
    """The distinct ids of ``ids`` as their 16 bytes (as a Spark site stores them,
    :func:`crr.spark.encoding.hugeint_to_binary`), sorted, when there are at most
    :data:`MAX_LISTED_IDS` of them and none is null; None otherwise."""
    values = id_storage(ids)
    if len(values) > MAX_LISTED_IDS or values.null_count:
        return None
    return sorted(set(values.to_pylist()))


def ids_sql(ids: Sequence[int]) -> str:
    """SQL of a list of UHUGEINT constants, comma-separated (``NULL::UHUGEINT`` when empty)."""
    return ", ".join(f"{i}::UHUGEINT" for i in ids) or "NULL::UHUGEINT"
