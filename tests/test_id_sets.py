"""crr.id_sets: membership of 128-bit ids in Arrow, against Python's sets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pyarrow as pa

from crr.id_sets import all_in, distinct_ids, distinct_keys, ids_arrow, index_in

# ids sharing low or high words with each other, as well as arbitrary ones
words = st.sampled_from([0, 1, 2**64 - 1, 12345])
ids = st.one_of(st.integers(0, 2**128 - 1), st.builds(lambda lo, hi: hi << 64 | lo, words, words))


@given(st.lists(ids, max_size=30), st.lists(ids, max_size=30, unique=True), st.integers(0, 3))
def test_index_in_finds_exactly_the_ids_of_the_set(values, value_set, offset):
    got = index_in(ids_arrow(values).slice(min(offset, len(values))), ids_arrow(value_set)).to_pylist()
    want = [value_set.index(v) if v in value_set else None for v in values[min(offset, len(values)):]]
    assert got == want
    assert all_in(ids_arrow(values), ids_arrow(value_set)) == (set(values) <= set(value_set))


@given(st.lists(ids, max_size=30), st.integers(0, 3))
def test_distinct_ids_is_true_only_for_distinct_ids(values, offset):
    """True means no id repeats; it may say False for distinct ids sharing a low word (it is used to
    skip a DISTINCT, so only a wrong True would be a bug), never for ids whose low words differ."""
    k = min(offset, len(values))
    got = distinct_ids(ids_arrow(values).slice(k))
    values = values[k:]
    if got:
        assert len(set(values)) == len(values)
    if len({v % 2**64 for v in values}) == len(values):
        assert got


@settings(deadline=None)  # the first call loads pyarrow's hash kernel
@given(st.lists(st.one_of(st.none(), ids), max_size=30), st.integers(0, 3))
def test_distinct_keys_tells_exactly_whether_a_key_hash_repeats(values, offset):
    """Exact, nulls left out (an unkeyed entry's key hash is null): key hashes sharing a low word
    but not a high one are distinct; a repeated one is found however far apart."""
    k = min(offset, len(values))
    arrow = pa.array([None if v is None else v.to_bytes(16, "little") for v in values], pa.binary(16)).slice(k)
    present = [v for v in values[k:] if v is not None]
    assert distinct_keys(arrow) == (len(set(present)) == len(present))


def test_index_in_reads_duckdbs_uhugeint_arrow_chunked_and_sliced():
    """Ids as DuckDB returns them (an extension type over 16 bytes, in several chunks), looked up in a
    sliced set."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    con.execute("SET arrow_lossless_conversion = true")
    con.execute("CREATE TABLE t AS SELECT ((i::UHUGEINT << 70) + i::UHUGEINT)::UHUGEINT AS id FROM range(5000) r(i)")
    table = con.sql("SELECT id FROM t ORDER BY id").to_arrow_table()
    ids = table.column("id")
    assert "uhugeint" in str(ids.type)
    chunked = pa.chunked_array([ids.combine_chunks().slice(0, 2500), ids.combine_chunks().slice(2500)])
    value_set = ids.combine_chunks().slice(1000, 2000)  # ids 1000..2999
    at = index_in(chunked, value_set).to_pylist()
    assert at == [i - 1000 if 1000 <= i < 3000 else None for i in range(5000)]
    assert all_in(chunked.slice(1200, 100), value_set) and not all_in(chunked.slice(900, 200), value_set)
