"""Write rules: what an authenticated peer may make this site merge (the rule is in ``sync/PROTOCOL.md``).

A changeset answering a pull is checked against the sender's ``--allow`` rules before it is merged;
only the public site API is used (``relations``, ``lineage``: :class:`crr.sync.served.ServedSite`), and ``Changeset``.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from crr.changeset import ChangeKind, Changeset
from crr.errors import ChangesetError
from crr.sync.served import ServedSite


class WriteRuleError(ChangesetError):
    """A changeset carries something its sender may not write here (see ``sync/PROTOCOL.md``)."""


def _storage(column: pa.ChunkedArray) -> pa.Array:
    """One array of a column's plain values (ids arrive as an extension type over 16-byte binaries)."""
    array = column.combine_chunks()
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def check_write_rules(site: ServedSite, sender: str, relation: str, cs: Changeset,
                      allow: dict[str, set[str]] | None) -> None:
    """Refuse (WriteRuleError) a changeset that ``sender`` may not make this site merge.

    ``cs`` was received from the authenticated site ``sender`` in answer to a pull of ``relation``.
    It may carry only: the changes of ``relation`` itself, from ``sender``; causal-length rows of base
    relations in that relation's lineage (for a base relation: the relation itself, each row
    accompanied by its tuple, so the engine checks the row's id against the tuple's values); and,
    when write rules are given, a causal-length row of base relation X only if the sender may write
    X here, or X is neither held here nor in the lineage of another remote table or source here
    that the sender may not write (the rule, and why, is in ``sync/PROTOCOL.md``).
    """
    names = [r.name for r in cs.relations]
    if cs.source != sender:
        raise WriteRuleError(f"{sender} sent a changeset that claims to come from {cs.source!r}; a peer sends only "
                             "its own changesets (it may relay others' writes inside them)")
    if names != [relation]:
        raise WriteRuleError(f"{sender} answered a pull of {relation} with changes of {names}")
    may = None if allow is None else allow.get(sender, set())
    if may is not None and relation not in may:
        raise WriteRuleError(f"{sender} may not write {relation} here (--allow)")
    rc = cs.relations[0]
    held = site.relations()
    if rc.kind is ChangeKind.BASE:
        lineage = {relation}
        if list(rc.lineage) != [relation]:
            raise WriteRuleError(f"{sender} sent base relation {relation} with the lineage {list(rc.lineage)}; a "
                                 "base relation's lineage is itself")
    else:
        lineage = set(rc.lineage) | (site.lineage(relation) if relation in held else set())
    cl = cs.cl
    if cl is None or cl.num_rows == 0:
        return
    if "rel" not in cl.column_names or "id" not in cl.column_names:
        raise ChangesetError(f"malformed changeset from {sender}: causal lengths without id and rel columns")
    rels = cl.column("rel").unique().to_pylist()
    if any(not isinstance(x, str) for x in rels):
        raise ChangesetError(f"malformed changeset from {sender}: a causal-length row without a relation name")
    outside = sorted(set(rels) - lineage)
    if outside:
        raise WriteRuleError(f"{sender} answered a pull of {relation} with causal lengths of {', '.join(outside)}, "
                             f"outside {relation}'s lineage ({', '.join(sorted(lineage)) or 'none'})")
    if rc.kind is ChangeKind.BASE:
        # every causal-length change of a base tuple comes with the tuple (crr/changeset.py), whose id the
        # engine checks against its values: a row that names another relation's tuple id cannot hide here
        try:
            ids = _storage(cl.column("id"))
            tuple_ids = _storage(rc.tuples.column("id")) if "id" in rc.tuples.column_names else ids[:0]
            covered = pc.all(pc.is_in(ids, value_set=tuple_ids)).as_py() is not False
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError) as e:
            raise ChangesetError(f"malformed changeset from {sender}: causal-length ids of {relation} cannot be "
                                 f"matched with its tuple ids ({e})") from None
        if not covered:
            raise WriteRuleError(f"{sender} answered a pull of {relation} with causal lengths of tuples it did not "
                                 "send; each causal-length change of a base tuple must come with the tuple")
    if may is None:
        return
    for x in sorted(set(rels) - may):
        fix = f"to trust {sender} with {x}'s deletions add it to that peer's --allow rule ({sender}={relation},{x})"
        if x in held:
            raise WriteRuleError(f"{sender} may write {relation} but not {x} here, and its changes of {relation} carry "
                                 f"causal lengths of {x}, which is a {held[x]} table here; {fix}")
        for other, kind in sorted(held.items()):
            if kind in ("remote", "source") and other != relation and other not in may and x in site.lineage(other):
                raise WriteRuleError(f"{sender} may write {relation} but not {other} here, and its changes of "
                                     f"{relation} carry causal lengths of {x}, which also decide {other}; {fix}")
