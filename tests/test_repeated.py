"""A changeset that repeats what a site holds is told by one query and writes nothing (crr.repeated);
one that brings anything new, or anything forged, takes the general path as before."""

from __future__ import annotations

import dataclasses

import pytest

import crr
from tests.conftest import app, aug
from tests.test_crafted import edit, state
from tests.test_point import _statements


def _sites() -> dict[str, crr.Site]:
    """A base site A (keyed r, unkeyed s), its peer B, a view site V (remote r and s, a join view:
    r and s are replicas there, ``$e``) and V2 holding V's view as a remote table (derivations in
    ``$m``), each having merged all there is so far, then a catch-up from a later cursor (so a
    changeset from cursor 0 starts before the cursor merged last, and not where the last one did)."""
    a, b, v, v2 = (crr.Site(site_id=n) for n in ("A", "B", "V", "V2"))
    for site in (a, b):
        site.execute("CREATE REPLICATED TABLE r (k INT PRIMARY KEY, x INT)")
        site.execute("CREATE REPLICATED TABLE s (x INT, y VARCHAR)")
    v.execute("CREATE REMOTE TABLE r (k INT, x INT)")
    v.execute("CREATE REMOTE TABLE s (x INT, y VARCHAR)")
    v.execute("CREATE MATERIALIZED VIEW j AS SELECT r.k, s.y FROM r JOIN s ON r.x = s.x")
    v2.execute("CREATE REMOTE TABLE j (k INT, y VARCHAR)")
    a.execute("INSERT INTO r VALUES (1, 10), (2, 20), (3, 10)")
    a.execute("INSERT INTO s VALUES (10, 'ten'), (20, 'twenty'), (30, NULL)")
    a.execute("DELETE FROM r WHERE k = 3")
    a.execute("UPDATE r SET x = 30 WHERE k = 2")
    for dst in (b, v):
        for rel in ("r", "s"):
            dst.merge(a.changes(relations=[rel]).to_bytes())
    v2.merge(v.changes(relations=["j"]).to_bytes())
    mid = {"A": a.cursor, "V": v.cursor}
    a.execute("INSERT INTO s VALUES (40, 'forty')")
    v.merge(a.changes(since=mid["A"], relations=["s"]).to_bytes())
    b.merge(a.changes(since=mid["A"], relations=["s"]).to_bytes())
    for rel in ("r", "s"):  # a catch-up that brings nothing: a later since for every relation
        b.merge(a.changes(since=a.cursor, relations=[rel]).to_bytes())
        v.merge(a.changes(since=a.cursor, relations=[rel]).to_bytes())
    v2.merge(v.changes(since=mid["V"], relations=["j"]).to_bytes())  # (the entry of s's new row)
    return {"A": a, "B": b, "V": v, "V2": v2}


EDGES = [("A", "B", "r"), ("A", "B", "s"), ("A", "V", "r"), ("A", "V", "s"), ("V", "V2", "j")]


@pytest.mark.parametrize("src, dst, rel", EDGES)
def test_a_repeated_changeset_runs_one_query_and_changes_nothing(src: str, dst: str, rel: str) -> None:
    """A site's whole changes of a relation, again: every home (a replicated table's ``$t`` and
    ``_crr.cl``, a replica's ``$e``, a remote table's derivations) holds them; one statement runs."""
    sites = _sites()
    before = state(sites[dst])
    data = sites[src].changes(relations=[rel]).to_bytes()
    ran = _statements(sites[dst], lambda: sites[dst].merge(data))
    assert len(ran) == 1 and ran[0].startswith("SELECT EXISTS"), ran
    assert state(sites[dst]) == before


def test_a_tracked_repeat_records_the_cursor() -> None:
    """A tracked merge of a repeat writes the peer's cursor (and nothing else)."""
    sites = _sites()
    a, b = sites["A"], sites["B"]
    before = state(b)
    b.merge(a.changes(relations=["s"]).to_bytes(), track=True)
    assert b.peer_cursor("A", "s") == a.cursor
    assert state(b) == before


def _grown(sites: dict[str, crr.Site]) -> None:
    """A deletes one row of s that every site holds: its entry grows, nothing else changes."""
    sites["A"].execute("DELETE FROM s WHERE x = 10")


def _new_row(sites: dict[str, crr.Site]) -> None:
    """A writes a new row of r."""
    sites["A"].execute("INSERT INTO r VALUES (5, 20)")


def _re_inserted(sites: dict[str, crr.Site]) -> None:
    """A inserts again the key it deleted: the entry grows to an odd length."""
    sites["A"].execute("INSERT INTO r VALUES (3, 10)")


@pytest.mark.parametrize("change", [_grown, _new_row, _re_inserted])
def test_a_snapshot_bringing_one_change_is_merged_in_full(change) -> None:
    """A site's snapshot (changes from cursor 0) holding one change among rows every site holds is
    merged: the check must not take it for a repeat. Every site ends equal to A, V's view to its query."""
    sites = _sites()
    change(sites)
    for dst in ("B", "V"):
        for rel in ("r", "s"):
            sites[dst].merge(sites["A"].changes(relations=[rel]).to_bytes())
    sites["V2"].merge(sites["V"].changes(relations=["j"]).to_bytes())
    for rel in ("r", "s"):
        assert app(sites["B"], rel) == app(sites["A"], rel)
        assert aug(sites["B"], rel) == aug(sites["A"], rel)
        assert app(sites["V"], rel) == app(sites["A"], rel)
    expected = sites["A"].execute("SELECT r.k, s.y FROM r JOIN s ON r.x = s.x ORDER BY ALL NULLS FIRST")
    assert app(sites["V"], "j") == expected
    assert app(sites["V2"], "j") == expected


def _values(table, rel: str):
    """The tuples with their second value changed, under the same ids."""
    forged = "'forged'" if rel in ("s", "j") else "c1 + 1"
    columns = [f"{forged} AS c1" if n == "c1" else n for n in table.column_names]
    return edit(table, f"SELECT {', '.join(columns)} FROM x")


FORGERIES = {
    "a tuple's values": lambda cs, rc: dataclasses.replace(cs, relations=[dataclasses.replace(rc, tuples=_values(rc.tuples, rc.name))]),
    "an entry's length 0": lambda cs, rc: dataclasses.replace(cs, cl=edit(cs.cl, "SELECT id, rel, 0 AS cl, kh, stamp FROM x")),
    "a keyed entry without its stamp": lambda cs, rc: dataclasses.replace(
        cs, cl=edit(cs.cl, "SELECT id, rel, cl, kh, CASE WHEN kh IS NULL THEN stamp END AS stamp FROM x")),
    "another key hash": lambda cs, rc: dataclasses.replace(
        cs, cl=edit(cs.cl, "SELECT id, rel, cl, CASE WHEN kh IS NULL THEN NULL ELSE kh + 1 END AS kh, stamp FROM x")),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
@pytest.mark.parametrize("src, dst, rel", [("A", "B", "r"), ("A", "V", "r")])
def test_a_forged_repeat_is_refused_not_skipped(src: str, dst: str, rel: str, forgery: str) -> None:
    """A snapshot the site holds, with one thing forged (under the same ids), is refused as the
    general path refuses it, and changes nothing."""
    sites = _sites()
    cs = sites[src].changes(relations=[rel])
    forged = FORGERIES[forgery](cs, cs.relation(rel))
    before = state(sites[dst])
    with pytest.raises(crr.ChangesetError):
        sites[dst].merge(forged.to_bytes())
    assert state(sites[dst]) == before


@pytest.mark.parametrize("forgery", ["a derivation without its tuple", "a tuple's values"])
def test_forged_derivations_repeated_are_refused(forgery: str) -> None:
    """V's view rows again at V2, with a derivation's tuple left out, or a value changed under the
    same vid: refused, not taken for a repeat, and nothing changes."""
    sites = _sites()
    cs = sites["V"].changes(relations=["j"])
    rc = cs.relation("j")
    if forgery == "a derivation without its tuple":
        rc = dataclasses.replace(rc, tuples=rc.tuples.slice(1))
    else:
        rc = dataclasses.replace(rc, tuples=_values(rc.tuples, "j"))
    before = state(sites["V2"])
    with pytest.raises(crr.ChangesetError):
        sites["V2"].merge(dataclasses.replace(cs, relations=[rc]).to_bytes())
    assert state(sites["V2"]) == before
