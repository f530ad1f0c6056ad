"""Changesets: bytes round trip, corruption, schema mismatch, and atomic, idempotent merges."""

from __future__ import annotations

import pytest

import crr
from tests.conftest import app, aug


def _pair():
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for s in (a, b):
        s.execute("CREATE REPLICATED TABLE t (k INT, v VARCHAR)")
        s.execute("CREATE MATERIALIZED VIEW w AS SELECT v FROM t")
    a.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y')")
    return a, b


def _snapshot(site):
    return {r: (app(site, r), aug(site, r)) for r in site.relations()}, site.cursor


def test_round_trip_and_idempotent_merge():
    a, b = _pair()
    cs = a.changes()
    data = cs.to_bytes()
    again = crr.Changeset.from_bytes(data)
    assert again.source == "a" and again.cursor == cs.cursor and len(again) == len(cs)
    first = b.merge(data)
    assert first["t"]["inserted"] == 2 and first.changed
    state = _snapshot(b)
    assert not b.merge(data).changed  # idempotent
    assert _snapshot(b) == state
    assert a.changes(since=cs.cursor).relation("t").tuples.num_rows == 0


@pytest.mark.parametrize("mangle", [
    lambda d: d[: len(d) // 2],                   # truncated
    lambda d: d[:-1] + bytes([d[-1] ^ 0xFF]),     # flipped bit in the body
    lambda d: b"garbage" * 10,                     # not a changeset
    lambda d: d[:5] + bytes([99]) + d[6:],         # unknown format version
    lambda d: b"",
])
def test_corrupted_bytes_are_refused_and_change_nothing(mangle):
    a, b = _pair()
    state = _snapshot(b)
    with pytest.raises(crr.ChangesetError):
        b.merge(mangle(a.changes().to_bytes()))
    assert _snapshot(b) == state


def test_schema_mismatch_names_relation_and_both_schemas():
    a, _ = _pair()
    c = crr.Site(site_id="c")
    c.execute("CREATE REPLICATED TABLE t (k BIGINT, v VARCHAR)")
    state = _snapshot(c)
    with pytest.raises(crr.SchemaMismatchError) as err:
        c.merge(a.changes())
    assert "relation t" in str(err.value) and "k INTEGER" in str(err.value) and "k BIGINT" in str(err.value)
    assert _snapshot(c) == state


def test_unknown_relations_are_ignored():
    a, _ = _pair()
    d = crr.Site(site_id="d")
    d.execute("CREATE REPLICATED TABLE other (z INT)")
    result = d.merge(a.changes())
    assert sorted(result.ignored) == ["t", "w"] and not result.changed


def test_forged_ids_are_refused():
    a, b = _pair()
    cs = a.changes(relations=["t"])
    rc = cs.relations[0]
    rc.tuples = rc.tuples.set_column(2, "c1", __import__("pyarrow").array(["forged"] * rc.tuples.num_rows))
    state = _snapshot(b)
    with pytest.raises(crr.ChangesetError, match="do not match"):
        b.merge(crr.Changeset.from_bytes(cs.to_bytes()))
    assert _snapshot(b) == state


def test_wrong_column_types_in_payload_are_refused():
    a, b = _pair()
    cs = a.changes(relations=["t"])
    rc = cs.relations[0]
    rc.tuples = rc.tuples.set_column(1, "k", rc.tuples.column(1).cast("int64"))
    with pytest.raises(crr.ChangesetError, match="columns"):
        b.merge(cs)


def test_merge_failure_midway_rolls_back_everything(monkeypatch):
    a, b = _pair()
    state = _snapshot(b)
    from crr import maintain

    original = maintain.Maintainer._refresh_derived

    def boom(self, rel, *args):
        original(self, rel, *args)
        raise RuntimeError("injected failure after part of the merge was written")

    monkeypatch.setattr(maintain.Maintainer, "_refresh_derived", boom)
    with pytest.raises(RuntimeError, match="injected"):
        b.merge(a.changes())
    monkeypatch.undo()
    assert _snapshot(b) == state
    b.merge(a.changes())  # and the site still works
    assert app(b, "w") == [("x",), ("y",)]


def test_local_write_failure_midway_rolls_back(monkeypatch):
    a, _ = _pair()
    state = _snapshot(a)
    from crr import maintain

    def boom(self, rel):
        raise RuntimeError("injected failure while patching the APP layer")

    monkeypatch.setattr(maintain.Maintainer, "_patch_base", boom)
    with pytest.raises(RuntimeError):
        a.execute("INSERT INTO t VALUES (3, 'z')")
    monkeypatch.undo()
    assert _snapshot(a) == state


def test_views_replicate_to_other_sites():
    a, _ = _pair()
    e = crr.Site(site_id="e")
    e.execute("CREATE REMOTE TABLE w (v VARCHAR)")
    e.merge(a.changes(relations=["w"]))
    assert app(e, "w") == [("x",), ("y",)]
    a.execute("DELETE FROM t WHERE k = 1")
    e.merge(a.changes(relations=["w"]))  # the deletion travels as a causal-length entry of t
    assert app(e, "w") == [("y",)]
    assert e.lineage("w") == {"t"}


def test_tuple_with_several_new_derivations_appears_once():
    """A view tuple gaining several derivations in one merge, with no visibility flip in that merge
    (the causal lengths arrived earlier through another relation's stream), shows up once."""
    base = crr.Site(site_id="base")
    base.execute("CREATE REPLICATED TABLE r (a INT, b INT)")
    base.execute("CREATE MATERIALIZED VIEW pb AS SELECT b FROM r")
    base.execute("INSERT INTO r VALUES (1, 7), (2, 7), (3, 7)")
    viewer = crr.Site(site_id="viewer")
    viewer.execute("CREATE REMOTE TABLE pb (b INT)")
    viewer.execute("CREATE REMOTE TABLE r (a INT, b INT)")
    viewer.execute("CREATE MATERIALIZED VIEW q AS SELECT b FROM r")
    viewer.merge(base.changes(relations=["pb"]))  # brings r's causal lengths first
    viewer.merge(base.changes(relations=["r"]))  # then three derivations of q's <7> at once
    assert viewer.execute("SELECT * FROM q") == [(7,)]
    assert viewer.execute("SELECT * FROM pb") == [(7,)]
