"""Compile a view query into delta-merge plans (sqlglot expressions, backend-neutral).

A view ``V = B1 UNION ... UNION Bk`` is normalised into branches. Each branch is
``SELECT <projections> FROM X1 AS a1, ..., Xn AS an WHERE <predicate>``: inner-join conditions
(ON / USING) move into the predicate, stars are expanded, and every column is qualified with its
alias. For an input occurrence ``ai`` that has new augmented tuples, the delta plan is the branch
with ``Xi`` replaced by its delta and every other ``Xj`` by its full augmented state, plus one more
output column, the product of the inputs' monomials::

    SELECT CAST(p1 AS T1) AS c1, ..., sort(distinct(a1._crr_ids ++ ... ++ an._crr_ids)) AS _crr_ids
    FROM <delta of X_i> AS ai, <state of X_j> AS aj, ... WHERE <predicate>

Summing (``+``) the results into the view is the engine's job; duplicates collapse there.
The sources are supplied by the engine as SQL expressions with the input's columns plus
``_crr_ids`` (the monomial, a sorted list of tuple ids), so the same plan runs on any backend that
has array functions (sqlglot transpiles them: ``list_concat``/``list_distinct``/``list_sort`` on
DuckDB, ``concat``/``array_distinct``/``array_sort`` on Spark).

The delta identities
--------------------

Every relation is a set of tuples, each annotated with its provenance, a sum of monomials (sorted
id lists) in an idempotent semiring: ``p + p = p`` and ``t * t = t``. A relation's augmented (AUG)
state only grows: a delete raises a causal length and changes which tuples are visible (``in?``,
evaluated by the engine after the plans ran), never the AUG state. So a batch is an insert-only
delta ``dX`` for each input ``X``, and every operator below is monotone. ``X'`` is the AUG state
*after* the batch (``X' = X + dX``); the engine applies a batch to an input before it runs the plans
that read it (base tuples first, then views in dependency order), so ``source(X, delta=False)``
reads ``X'``. The identities, and where each is built:

* selection and projection (:meth:`Branch.select`): ``d(pi sigma_p A) = pi sigma_p dA``. Both
  distribute over ``+``; a projection adds up the monomials of the tuples it merges, which is what
  summing rows with equal values into the view does. ``DISTINCT`` changes nothing (set semantics).
* product and join (:meth:`ViewPlan.delta_queries`, with :func:`monomial_product` for the
  annotation): ``d(A x B) = dA x B' + A' x dB``, and for ``n`` factors
  ``d(X1 x ... x Xn) = sum_i X1' x ... x dXi x ... x Xn'``. The exact change is
  ``A' x B' - A x B = dA x B + A' x dB``; the plans read the new state ``B'`` in the first term
  too, so products of two new tuples (``dA x dB``) come out of both terms. That is safe because
  ``+`` is idempotent (a product derived twice is added once), and it spares the engine any
  snapshot of an input's old state. An inner join is a selection over the product (:func:`_normalise`
  moves ON and USING into the predicate), so the same identity covers equi- and theta-joins.
  A product's monomial is the product of its factors' monomials: the sorted union of their ids.
* self join (:meth:`ViewPlan.delta_queries`): each occurrence of a relation is its own factor, so
  ``d(A x A) = dA x A' + A' x dA``; ``changed`` names relations, hence every occurrence of a changed
  relation gets a term, and ``t * t = t`` makes a tuple joined with itself carry the monomial ``[t]``.
* union (:func:`flatten_union`, :meth:`ViewPlan.delta_queries`): ``d(A u B) = dA u dB``. Branches
  are maintained one by one; a branch none of whose inputs changed emits no plan, and a tuple two
  branches derive gets both monomials (provenance of a union is the sum).
* view over a view (:meth:`ViewPlan.delta_queries`, through ``source``): a view input ``W`` is read
  as its AUG state, whose monomials are already over base tuple ids, and ``dW`` is the monomials the
  batch added to ``W``; ``d(V(W)) = V(dW)`` by the identities above, since the engine finishes
  ``W`` (its ``dW`` and ``W'``) before it runs ``V``'s plans.

``tests/fixtures/compile/delta_plans.sql`` holds the plans these builders emit for a set of views
(checked text for text, and run on DuckDB against recomputation, by ``tests/test_compile_golden.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from sqlglot import exp

from crr.errors import CatalogError, CrrError, SqlError
from crr.sql.statements import DIALECT
from crr.sql.validate import validate_view_query

IDS = "_crr_ids"

Columns = list[tuple[str, str]]
SourceFn = Callable[[str, bool], exp.Expression]


@dataclass
class Occurrence:
    """One appearance of an input relation in a branch, under its alias."""

    relation: str
    alias: str


@dataclass
class Branch:
    """A normalised SELECT-FROM-WHERE branch of the view: ``pi_projections sigma_predicate (X1 x ... x Xn)``.

    Each occurrence is one factor of the product, even when two occurrences read the same relation
    (a self join); joins are already folded into ``predicate`` (see :func:`_normalise`).
    """

    projections: list[exp.Expression]  # unaliased, qualified expressions
    occurrences: list[Occurrence]
    predicate: exp.Expression | None
    names: list[str | None]  # output names the query gives (alias or column name), None if unnamed
    columns_of: dict[str, list[str]] = field(default_factory=dict)  # alias -> its input's column names

    def positional(self) -> "Branch":
        """This branch reading its inputs' AUG columns: ``alias.name`` becomes ``alias.c<position>``.

        Delta plans run over AUG state, whose columns are named by position (see
        :mod:`crr.catalog`), so no user column name can meet an internal one (``_crr_ids``...).
        """
        def rename(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Column) and node.table in self.columns_of:
                position = self.columns_of[node.table].index(node.name)
                return exp.column(f"c{position}", table=node.table, quoted=True)
            return node
        return Branch(projections=[p.transform(rename) for p in self.projections],
                      occurrences=self.occurrences,
                      predicate=self.predicate.transform(rename) if self.predicate is not None else None,
                      names=self.names, columns_of=self.columns_of)

    def determines_occurrences(self, types_of: dict[str, dict[str, str]], output_types: list[str]) -> bool:
        """Whether each output row of this branch fixes the row of every occurrence it came from.

        True when every column of every occurrence is *determined*: projected bare (``a.x``, typed
        as the output column), or equated by a conjunct ``a.x = b.y`` of the predicate to a
        determined column of the same type (``types_of[alias][column]``). Equality within one type
        fixes the value, and so its canonical encoding (:mod:`crr.types` encodes both zeros, and
        every NaN, as one value), hence the tuple's id: over inputs whose monomials each hold one id,
        a view tuple then has exactly one derivation. ``SELECT r1.*, r2.k FROM r1 JOIN r2 ON r1.c =
        r2.c`` over ``r2 (k, c)`` qualifies; a projection dropping a column, or a join on columns of
        two types (``'05' = 5``), does not. A conjunct ``a.x = literal`` fixes ``a.x`` too when the
        literal is of the column's own kind (:func:`_fixed_by_literal`).
        """
        def bare(node: exp.Expression) -> tuple[str, str] | None:
            if isinstance(node, exp.Column) and node.table in self.columns_of:
                return (node.table, node.name)
            return None

        known = {c for c, t in zip((bare(p) for p in self.projections), output_types)
                 if c is not None and types_of[c[0]][c[1]] == t}
        equal = []
        for conjunct in _conjuncts(self.predicate):
            if isinstance(conjunct, exp.EQ):
                left, right = bare(conjunct.this), bare(conjunct.expression)
                if left is not None and right is not None and types_of[left[0]][left[1]] == types_of[right[0]][right[1]]:
                    equal.append((left, right))
                for column, other in ((left, conjunct.expression), (right, conjunct.this)):
                    if column is not None and _fixed_by_literal(types_of[column[0]][column[1]], other):
                        known.add(column)
        grown = True
        while grown:
            grown = False
            for left, right in equal:
                if (left in known) != (right in known):
                    known |= {left, right}
                    grown = True
        return all((alias, c) in known for alias, cols in self.columns_of.items() for c in cols)

    def select(self, names: list[str], types: list[str] | None, source: Callable[[int], exp.Expression],
               with_ids: bool, single: list[bool] | None = None) -> exp.Select:
        """The branch as a SELECT whose i-th input is ``source(i)``, optionally with the monomial column.
        ``source`` gives a new tree at every call: the SELECT takes it as its own, uncopied.

        This builds ``pi sigma_p (S1 x ... x Sn)`` for the sources ``Si = source(i)``: the
        occurrences become a CROSS JOIN, the predicate a WHERE. Selection and projection commute
        with ``+`` (``d(pi sigma_p A) = pi sigma_p dA``), so a delta plan is this SELECT with one
        source a delta; the product of the factors' monomials (:func:`monomial_product`) is each
        output row's monomial, and the engine adds rows with equal values up into one tuple whose
        provenance is the sum of their monomials. ``types`` casts each projection to the view's
        column type, so every branch of a UNION yields the same types. ``single[i]``: the i-th
        input's monomials hold one id each (see :func:`monomial_product`).
        """
        proj = []
        built = {t: exp.DataType.build(t, dialect=DIALECT) for t in set(types)} if types is not None else {}
        for i, p in enumerate(self.projections):
            e = p.copy()
            if types is not None:
                e = exp.Cast(this=e, to=built[types[i]].copy())  # each type parsed once
            proj.append(exp.alias_(e, names[i], quoted=True, copy=False))
        if with_ids:
            proj.append(exp.alias_(monomial_product([o.alias for o in self.occurrences], single), IDS, quoted=True,
                                   copy=False))
        # every part is a new tree, so the builders take them as they are: their default copies the
        # whole query at each step (most of the compile time of a view over a table of 1000 columns)
        query = exp.select(*proj, copy=False)
        for i, occ in enumerate(self.occurrences):
            src = source(i)
            aliased = exp.alias_(src, occ.alias, table=True, quoted=True, copy=False) \
                if not isinstance(src, exp.Table) else src.as_(occ.alias, quoted=True, copy=False)
            query = query.from_(aliased, copy=False) if i == 0 \
                else query.join(aliased, join_type="cross", copy=False)
        if self.predicate is not None:
            query = query.where(self.predicate.copy(), copy=False)
        return query


_INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
                            "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"})


def unknown_input_error(name: str) -> CatalogError:
    """The error of a view reading ``name``, which is no crr relation at the site (plain and aggregate
    views alike)."""
    return CatalogError(f"view input {name} is not a crr relation at this site; declare it with CREATE REPLICATED "
                        "TABLE, CREATE REMOTE TABLE or CREATE MATERIALIZED VIEW")


def _fixed_by_literal(column_type: str, literal: exp.Expression) -> bool:
    """Whether ``column = literal`` leaves the column one value: an integer literal (maybe negated)
    and an integer column, a string literal and a VARCHAR column, TRUE or FALSE and a BOOLEAN one.
    Other pairs are left out: a DOUBLE literal against a BIGINT column compares them as DOUBLE, which
    several BIGINTs can equal."""
    if isinstance(literal, exp.Neg):
        literal = literal.this
        if not (isinstance(literal, exp.Literal) and literal.is_int):
            return False
    if isinstance(literal, exp.Boolean):
        return column_type == "BOOLEAN"
    if not isinstance(literal, exp.Literal):
        return False
    if literal.is_string:
        return column_type == "VARCHAR"
    return literal.is_int and column_type in _INTEGER_TYPES


def _conjuncts(predicate: exp.Expression | None) -> list[exp.Expression]:
    """The top-level AND terms of a predicate (none for no predicate)."""
    if predicate is None:
        return []
    if isinstance(predicate, exp.Paren):
        return _conjuncts(predicate.this)
    if isinstance(predicate, exp.And):
        return _conjuncts(predicate.this) + _conjuncts(predicate.expression)
    return [predicate]


def monomial_product(aliases: list[str], single: list[bool] | None = None) -> exp.Expression:
    """The product of the inputs' monomials: the sorted set union of their id lists.

    A product tuple ``(t1, ..., tn)`` of tuples with monomials ``m1, ..., mn`` has monomial
    ``m1 * ... * mn``; the product is idempotent (``t * t = t``), so it is the set union of the ids,
    kept sorted as the canonical form (a self-joined tuple keeps one copy of its id).

    ``single[i]`` says that input ``i``'s monomials hold exactly one id (a base relation's). The
    product of two such, ``[a] * [b]``, is ``[a, b]`` or ``[b, a]`` by order, and ``[a]`` when
    ``a = b`` (a self join meeting one tuple): a CASE on the two ids, the same list as the general
    form. On DuckDB the general form's ``list_sort(list_distinct(list_concat(...)))`` took 47 ms
    for 100k rows, the CASE 4 ms.
    """
    cols = [exp.column(IDS, table=a, quoted=True) for a in aliases]
    if len(cols) == 1:
        return cols[0]
    if len(cols) == 2 and single is not None and all(single):
        # sqlglot indexes from 0 and writes each dialect's own base (DuckDB [1], Spark [0])
        a, b = (exp.Bracket(this=c.copy(), expressions=[exp.Literal.number(0)]) for c in cols)
        return exp.Case(ifs=[exp.If(this=exp.LT(this=a.copy(), expression=b.copy()),
                                    true=exp.Array(expressions=[a.copy(), b.copy()])),
                             exp.If(this=exp.GT(this=a.copy(), expression=b.copy()),
                                    true=exp.Array(expressions=[b.copy(), a.copy()]))],
                        default=cols[0])
    # typed sqlglot nodes, so the plan transpiles (DuckDB list_concat/list_distinct/list_sort,
    # Spark concat/array_distinct/array_sort, ...)
    joined = exp.ArrayConcat(this=cols[0], expressions=cols[1:])
    return exp.ArraySort(this=exp.ArrayDistinct(this=joined))


@dataclass
class ViewPlan:
    """A compiled view: output schema, normalised branches, and delta-plan builders."""

    name: str
    columns: Columns
    branches: list[Branch]
    # one branch whose output rows each fix the rows they came from (Branch.determines_occurrences):
    # over inputs whose monomials hold one id each, every tuple of the view has one derivation
    one_derivation: bool = False

    @property
    def inputs(self) -> list[str]:
        """Distinct input relations, in order of first appearance."""
        seen: list[str] = []
        for b in self.branches:
            for o in b.occurrences:
                if o.relation not in seen:
                    seen.append(o.relation)
        return seen

    def width(self, input_width: Callable[[str], int | None]) -> int | None:
        """Largest number of ids in one monomial of this view, or None when an input's is unknown."""
        widths = []
        for b in self.branches:
            total = 0
            for o in b.occurrences:
                w = input_width(o.relation)
                if w is None:
                    return None
                total += w
            widths.append(total)
        return max(widths)

    def delta_queries(self, changed: set[str], source: SourceFn,
                      single_id: Callable[[str], bool] | None = None) -> list[exp.Select]:
        """One plan per (branch, occurrence) whose relation is in ``changed``.

        ``single_id(relation)``, when given, says whether every monomial of ``relation`` holds exactly
        one id (a base relation); products of two such inputs then take a cheaper, equal form
        (:func:`monomial_product`).

        ``source(relation, delta)`` gives the SQL of a relation's delta (``delta=True``) or full
        augmented state, each with the relation's AUG columns (``c0, c1, ...``) plus ``_crr_ids``,
        as a new tree at every call (the plan takes it as its own, uncopied: :meth:`Branch.select`);
        the plan's output columns are the view's AUG columns plus ``_crr_ids``.

        The identity each plan implements: for a branch ``X1 x ... x Xn`` filtered and projected,
        ``delta(X1 x ... x Xn) = sum_i X1' x ... x dXi x ... x Xn'`` where ``Xj'`` is the state of
        ``Xj`` after this batch's changes to it; summing every term into the view is safe because
        ``+`` is idempotent (a derivation found by two terms is added once). For two inputs:
        ``delta(A x B) = dA x B' + A' x dB``; the exact change is ``dA x B + A' x dB``, and the
        products ``dA x dB`` the first term adds on top are found by the second term as well.

        * Self join: the sum runs over occurrences, not relations, so a relation read twice gives
          two terms, ``delta(A x A) = dA x A' + A' x dA`` (one plan per occurrence of each changed
          relation).
        * UNION: ``delta(B1 u ... u Bk) = delta(B1) u ... u delta(Bk)``: the plans of every branch, in
          branch order; a branch none of whose inputs is in ``changed`` contributes none.
        * View over a view: an input that is a view is just another factor; ``source`` reads its AUG
          monomials (over base tuple ids) and, for ``delta=True``, the monomials this batch added
          to it, which the engine computed first (views run in dependency order).

        The plans come out in branch order, then occurrence order within a branch.
        """
        names = [f"c{i}" for i in range(len(self.columns))]
        types = [t for _, t in self.columns]
        plans = []
        for b in (b.positional() for b in self.branches):
            for i, occ in enumerate(b.occurrences):
                if occ.relation not in changed:
                    continue
                single = [single_id(o.relation) for o in b.occurrences] if single_id is not None else None
                plans.append(b.select(names, types,
                                      lambda j, i=i, b=b: source(b.occurrences[j].relation, j == i),
                                      with_ids=True, single=single))
        return plans

    def full_query(self, source: Callable[[str], exp.Expression] | None = None) -> exp.Expression:
        """The view as a plain set query over its inputs (APP tables unless ``source`` is given: a new
        tree at every call, as for :meth:`delta_queries`).

        No delta and no monomials: the branches under ``UNION`` (set semantics), with the view's
        output names. The compiler uses it to let DuckDB type the view's columns.
        """
        names = [c for c, _ in self.columns]
        selects = [b.select(names, None,
                            (lambda j, b=b: source(b.occurrences[j].relation)) if source
                            else (lambda j, b=b: table_ref(b.occurrences[j].relation)),
                            with_ids=False)
                   for b in self.branches]
        query: exp.Expression = selects[0]
        for s in selects[1:]:
            query = exp.union(query, s, distinct=True)
        return query


def table_ref(relation: str) -> exp.Table:
    """A reference to the APP table of ``relation``, whatever characters its name holds."""
    return exp.Table(this=exp.to_identifier(relation, quoted=True))


def flatten_union(query: exp.Expression) -> list[exp.Select]:
    """The SELECT branches of a (validated) UNION tree, left to right.

    ``B1 UNION (B2 UNION B3)`` and ``(B1 UNION B2) UNION B3`` give the same list: UNION is
    associative under set semantics, and a view is maintained branch by branch
    (``delta(A u B) = dA u dB``, see :meth:`ViewPlan.delta_queries`).
    """
    if isinstance(query, exp.Subquery):
        return flatten_union(query.this)
    if isinstance(query, exp.Union):
        return flatten_union(query.this) + flatten_union(query.expression)
    assert isinstance(query, exp.Select)
    return [query]


def compile_view(name: str, query: exp.Expression, relation_columns: Callable[[str], Columns | None],
                 describe: Callable[[str], Columns], written: str | None = None) -> ViewPlan:
    """Validate and compile ``CREATE MATERIALIZED VIEW name AS query``.

    ``relation_columns(r)`` returns the columns of crr relation ``r`` at this site (None if there
    is no such relation); ``describe(sql)`` returns the output columns DuckDB derives for a query;
    ``written``, the query's text as the application wrote it, names unaliased columns as DuckDB
    names them (see :func:`unaliased_names`).
    """
    validate_view_query(query)
    branches = [_normalise(s, relation_columns) for s in flatten_union(query)]
    for b in branches:
        if name in [o.relation for o in b.occurrences]:
            raise SqlError(f"view {name} cannot read itself")
    # Output names: explicit aliases, column names, or DuckDB's own naming of the first branch.
    explicit = list(branches[0].names)
    if any(n is None for n in explicit):
        described = unaliased_names(written, flatten_union(query)[0], len(explicit), describe) or \
            _normalised_names(branches[0], explicit, describe)
        explicit = [n or described[i] for i, n in enumerate(explicit)]
    names = [str(n) for n in explicit]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SqlError(f"view {name} has several output columns named {', '.join(dupes)}; "
                       "give each a distinct name with AS")
    for b in branches[1:]:
        if len(b.projections) != len(names):
            raise SqlError(f"the branches of UNION in view {name} have different numbers of columns "
                           f"({len(names)} and {len(b.projections)})")
    plan = ViewPlan(name=name, columns=[(n, "") for n in names], branches=branches)
    columns = describe(plan.full_query().sql(DIALECT))
    plan.columns = [(n, t) for n, (_, t) in zip(names, columns)]
    if len(branches) == 1:
        b = branches[0]
        types_of = {o.alias: dict(relation_columns(o.relation) or []) for o in b.occurrences}
        plan.one_derivation = b.determines_occurrences(types_of, [t for _, t in plan.columns])
    return plan


def unaliased_names(written: str | None, first: exp.Expression, width: int,
                    describe: Callable[[str], Columns]) -> list[str] | None:
    """DuckDB's names of a query's ``width`` output columns, or None when it cannot say.

    DuckDB names an unaliased expression after its text as written (``SELECT A::VARCHAR`` gives
    ``CAST(A AS VARCHAR)``, ``a IS NOT NULL`` gives ``(a IS NOT NULL)``), so the query's text as the
    application wrote it (``written``) is described; without it, or when DuckDB cannot read it alone,
    the first branch as sqlglot writes it (``first``; ``(a IS NOT NULL)`` comes out as
    ``(NOT (a IS NULL))`` then), unqualified.
    """
    for sql in ([written] if written else []) + [first.sql(DIALECT)]:
        try:
            names = [n for n, _ in describe(sql)]
        except CrrError:
            continue
        if len(names) == width:
            return names
    return None


def _normalised_names(branch: "Branch", explicit: list[str | None], describe: Callable[[str], Columns]) -> list[str]:
    """DuckDB's names of the first branch's columns from its normalised form (columns qualified):
    when the branch as written cannot be described alone."""
    probe = branch.select([n or f"_crr_col{i}" for i, n in enumerate(explicit)], None,
                          lambda j: table_ref(branch.occurrences[j].relation), with_ids=False)
    for proj, n in zip(probe.expressions, explicit):
        if n is None:
            proj.replace(proj.this)
    return [name for name, _ in describe(probe.sql(DIALECT))]


def _normalise(select: exp.Select, relation_columns: Callable[[str], Columns | None]) -> Branch:
    """One SELECT of the view as a :class:`Branch`.

    Every FROM item and JOIN becomes an occurrence (a factor of the product), and every inner-join
    condition joins the WHERE predicate: ``A JOIN B ON c`` is ``sigma_c (A x B)`` and ``A JOIN B
    USING (k)`` is ``sigma_{A.k = B.k} (A x B)`` with ``k`` read from ``A`` afterwards. So a join has no
    delta rule of its own: it is the product's rule under a selection. Stars are expanded and every
    column is qualified with its occurrence's alias, so a plan never depends on name resolution.
    """
    from_ = select.args.get("from_") or select.args.get("from")
    tables = [from_.this] + [j.this for j in select.args.get("joins") or []]
    occurrences: list[Occurrence] = []
    columns_of: dict[str, list[str]] = {}
    for t in tables:
        rel = t.name
        cols = relation_columns(rel)
        if cols is None:
            raise unknown_input_error(rel)
        alias = t.alias_or_name
        if alias in columns_of:
            raise SqlError(f"the name {alias} appears twice in FROM; give each occurrence a distinct alias")
        occurrences.append(Occurrence(relation=rel, alias=alias))
        columns_of[alias] = [c for c, _ in cols]
    aliases = [o.alias for o in occurrences]
    conditions: list[exp.Expression] = []
    using_hidden: dict[str, set[str]] = {}  # alias -> columns a USING join merged into an earlier input
    using_first: dict[str, str] = {}  # USING column -> alias that represents it
    for idx, join in enumerate(select.args.get("joins") or [], start=1):
        right = aliases[idx]
        if join.args.get("on") is not None:
            conditions.append(join.args["on"].copy())
        for ident in join.args.get("using") or []:
            col = ident.name
            left = next((a for a in aliases[:idx] if col in columns_of[a]), None)
            if left is None or col not in columns_of[right]:
                raise SqlError(f"USING ({col}): the column is not on both sides of the join")
            left = using_first.get(col, left)
            using_first[col] = left
            using_hidden.setdefault(right, set()).add(col)
            conditions.append(exp.EQ(this=exp.column(col, table=left, quoted=True),
                                     expression=exp.column(col, table=right, quoted=True)))
    where = select.args.get("where")
    if where is not None:
        conditions.append(where.this.copy())
    predicate = exp.and_(*conditions) if conditions else None
    projections: list[exp.Expression] = []
    names: list[str | None] = []
    for e in select.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            only = e.table if isinstance(e, exp.Column) else None
            if only and only not in columns_of:
                raise SqlError(f"{only}.* names no input of the view (inputs: {', '.join(aliases)})")
            expanded = [exp.column(c, table=a, quoted=True)
                        for a in aliases if only in (None, a)
                        for c in columns_of[a] if only or c not in using_hidden.get(a, set())]
            projections.extend(expanded)
            names.extend(c.name for c in expanded)
        else:
            projections.append((e.this if isinstance(e, exp.Alias) else e).copy())
            names.append(e.alias if isinstance(e, exp.Alias)
                         else e.name if isinstance(e, exp.Column) else None)
    qualify = lambda node: _qualify(node, columns_of, using_first)  # noqa: E731
    projections = [p.transform(qualify) for p in projections]
    if predicate is not None:
        predicate = predicate.transform(qualify)
    return Branch(projections=projections, occurrences=occurrences, predicate=predicate, names=names,
                  columns_of=columns_of)


def _qualify(node: exp.Expression, columns_of: dict[str, list[str]], using_first: dict[str, str]) -> exp.Expression:
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        return node
    if node.table:
        if node.table not in columns_of:
            raise SqlError(f"{node.sql(DIALECT)} names no input of the view (inputs: {', '.join(columns_of)})")
        if node.name not in columns_of[node.table]:
            raise SqlError(f"{node.table} has no column {node.name} (columns: {', '.join(columns_of[node.table])})")
        return node
    owners = [a for a, cols in columns_of.items() if node.name in cols]
    if not owners:
        raise SqlError(f"no input of the view has a column {node.name}")
    if len(owners) > 1:
        if node.name in using_first:
            owners = [using_first[node.name]]
        else:
            raise SqlError(f"column {node.name} is ambiguous (in {', '.join(owners)}); qualify it with an alias")
    return exp.column(node.name, table=owners[0], quoted=True)
