"""Write rules (``allow``): what a changeset from an authenticated peer may carry, checked before merging."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import crr
from crr.sync.rules import WriteRuleError, check_write_rules
from crr.sync.service import SyncService
from tests.test_sync_service import SECRET, _site, rows, wait_for


def _deleting(cl: pa.Table, rel: str | None = None) -> pa.Table:
    """The causal-length rows ``cl`` one step later (present -> deleted), optionally relabelled as ``rel``."""
    i = cl.schema.get_field_index("cl")
    out = cl.set_column(i, cl.schema.field(i), pc.add(cl.column("cl"), 1).cast(cl.schema.field(i).type))
    if rel is not None:
        j = out.schema.get_field_index("rel")
        out = out.set_column(j, out.schema.field(j), pa.array([rel] * out.num_rows, out.schema.field(j).type))
    return out


def _with_cl(cs: crr.Changeset, extra: pa.Table) -> crr.Changeset:
    """``cs`` carrying the extra causal-length rows (not validated: the write rules must hold on their own)."""
    cs.cl = pa.concat_tables([cs.cl, extra.cast(cs.cl.schema)])
    return cs


@pytest.fixture
def pair():
    """a and b both hold r and s; b wrote s, and a has a replica of it (reads are open to every member)."""
    a, b = crr.Site(site_id="a"), crr.Site(site_id="b")
    for site in (a, b):
        site.execute("CREATE REPLICATED TABLE r (x INT)")
        site.execute("CREATE REPLICATED TABLE s (y INT)")
    b.execute("INSERT INTO s VALUES (1), (2)")
    a.merge(b.changes(relations=["s"]))
    a.execute("INSERT INTO r VALUES (5)")
    yield a, b
    a.close()
    b.close()


def test_honest_changesets_pass(pair):
    a, b = pair
    for allow in (None, {"a": {"r"}}):
        check_write_rules(b, "a", "r", a.changes(relations=["r"]), allow)
        check_write_rules(b, "a", "r", a.changes(since=a.cursor - 1, relations=["r"]), allow)  # the last write
    a.execute("DELETE FROM r")
    check_write_rules(b, "a", "r", a.changes(relations=["r"]), {"a": {"r"}})


@pytest.mark.parametrize("allow", [None, {"a": {"r"}}])
def test_causal_lengths_of_another_relation_are_refused(pair, allow):
    a, b = pair
    forged = _with_cl(a.changes(relations=["r"]), _deleting(a.changes(relations=["s"]).cl))
    with pytest.raises(WriteRuleError, match="causal lengths of s, outside r's lineage"):
        check_write_rules(b, "a", "r", forged, allow)


def test_causal_lengths_relabelled_with_the_pulled_relation_are_refused(pair):
    """Rows naming r but carrying the ids of s's tuples: the engine merges causal lengths by id alone."""
    a, b = pair
    forged = _with_cl(a.changes(relations=["r"]), _deleting(a.changes(relations=["s"]).cl, rel="r"))
    with pytest.raises(WriteRuleError, match="tuples it did not send"):
        check_write_rules(b, "a", "r", forged, {"a": {"r"}})


def test_source_relations_and_lineage_must_match_the_pull(pair):
    a, b = pair
    with pytest.raises(WriteRuleError, match="claims to come from 'b'"):
        check_write_rules(b, "a", "s", b.changes(relations=["s"]), None)
    with pytest.raises(WriteRuleError, match="answered a pull of r with changes of"):
        check_write_rules(b, "a", "r", a.changes(relations=["r", "s"]), None)
    with pytest.raises(WriteRuleError, match="may not write s here"):
        check_write_rules(b, "a", "s", a.changes(relations=["s"]), {"a": {"r"}})
    cs = a.changes(relations=["r"])
    cs.relations[0].lineage = ["r", "s"]
    with pytest.raises(WriteRuleError, match="lineage is itself"):
        check_write_rules(b, "a", "r", cs, None)


def test_a_view_sender_is_trusted_with_its_lineage_only_where_nothing_else_depends_on_it():
    """v computes w over r. A site that holds only w may take r's causal lengths from v (they decide w);
    a site that also holds r (or another relation over r) must allow v to write r too."""
    a = crr.Site(site_id="a")
    a.execute("CREATE REPLICATED TABLE r (a INT, b VARCHAR)")
    v = crr.Site(site_id="v")
    v.execute("CREATE REMOTE TABLE r (a INT, b VARCHAR)")
    v.execute("CREATE MATERIALIZED VIEW w AS SELECT b FROM r WHERE a > 0")
    a.execute("INSERT INTO r VALUES (1, 'x'), (2, 'y')")
    v.merge(a.changes())
    a.execute("DELETE FROM r WHERE a = 2")
    v.merge(a.changes())
    w = v.changes(relations=["w"])
    assert set(w.cl.column("rel").to_pylist()) == {"r"}
    only_w = crr.Site(site_id="f1")
    only_w.execute("CREATE REMOTE TABLE w (b VARCHAR)")
    check_write_rules(only_w, "v", "w", w, {"v": {"w"}})
    both = crr.Site(site_id="f2")
    both.execute("CREATE REMOTE TABLE w (b VARCHAR)")
    both.execute("CREATE REMOTE TABLE r (a INT, b VARCHAR)")
    with pytest.raises(WriteRuleError, match=r"r, which is a remote table here.*--allow rule \(v=w,r\)"):
        check_write_rules(both, "v", "w", w, {"v": {"w"}})
    check_write_rules(both, "v", "w", w, {"v": {"w", "r"}})
    # a second remote table over r, written by someone else: v's causal lengths of r would decide it too
    other = crr.Site(site_id="f3")
    other.execute("CREATE REMOTE TABLE w (b VARCHAR)")
    other.execute("CREATE REMOTE TABLE w2 (b VARCHAR)")
    other.merge(w)  # w's lineage (r) is now known here
    w2 = crr.Site(site_id="v2")
    w2.execute("CREATE REMOTE TABLE r (a INT, b VARCHAR)")
    w2.execute("CREATE MATERIALIZED VIEW w2 AS SELECT b FROM r WHERE a < 100")
    w2.merge(a.changes())
    other.merge(w2.changes(relations=["w2"]))
    with pytest.raises(WriteRuleError, match="also decide w2"):
        check_write_rules(other, "v", "w", v.changes(relations=["w"]), {"v": {"w"}, "v2": {"w2"}})
    for s in (a, v, only_w, both, other, w2):
        s.close()


def test_allowed_peer_cannot_delete_another_relation_over_the_network(tmp_path):
    """The reported bypass: a may write r at b; it answers b's pull of r with deletions of all of s."""
    ddl = ("CREATE REPLICATED TABLE r (a INT, b VARCHAR)", "CREATE REPLICATED TABLE s (y INT)")
    a, b = _site(tmp_path, "a", ddl), _site(tmp_path, "b", ddl)
    b.execute("INSERT INTO s VALUES (1), (2)")
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), allow={"a": {"r"}}).start()
    sa = SyncService(a, SECRET, peers=[sb.address]).start()
    try:
        assert wait_for(lambda: rows(sa, "SELECT * FROM s ORDER BY y") == [(1,), (2,)])  # a read s from b
        honest = a.changes

        def lying_changes(since=None, relations=None):
            cs = honest(since=since, relations=relations)
            if relations == ["r"]:
                cs = _with_cl(cs, _deleting(honest(relations=["s"]).cl))
            return cs

        a.changes = lying_changes
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        # refused as it is decoded (outside every lineage the changeset declares) or by the write rules
        assert wait_for(lambda: any(re.search('causal lengths of "?s"?', r) for r in sb.refused), 10)
        assert rows(sb, "SELECT * FROM s ORDER BY y") == [(1,), (2,)]
        assert rows(sb, "SELECT * FROM r") == []  # the whole changeset was refused
        a.changes = honest
        sa.execute("INSERT INTO r VALUES (2, 'y')")  # honest again: both rows arrive, s is untouched
        assert wait_for(lambda: rows(sb, "SELECT * FROM r ORDER BY a") == [(1, "x"), (2, "y")], 30)
        assert rows(sb, "SELECT * FROM s ORDER BY y") == [(1,), (2,)]
    finally:
        sa.stop()
        sb.stop()
        a.close()
        b.close()
