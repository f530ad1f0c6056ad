"""crr.id_sets: membership of 128-bit ids in Arrow, against Python's sets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crr.id_sets import all_in, ids_arrow, index_in

# ids sharing low or high words with each other, as well as arbitrary ones
words = st.sampled_from([0, 1, 2**64 - 1, 12345])
ids = st.one_of(st.integers(0, 2**128 - 1), st.builds(lambda lo, hi: hi << 64 | lo, words, words))


@given(st.lists(ids, max_size=30), st.lists(ids, max_size=30, unique=True), st.integers(0, 3))
def test_index_in_finds_exactly_the_ids_of_the_set(values, value_set, offset):
    got = index_in(ids_arrow(values).slice(min(offset, len(values))), ids_arrow(value_set)).to_pylist()
    want = [value_set.index(v) if v in value_set else None for v in values[min(offset, len(values)):]]
    assert got == want
    assert all_in(ids_arrow(values), ids_arrow(value_set)) == (set(values) <= set(value_set))
