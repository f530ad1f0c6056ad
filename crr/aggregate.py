"""Aggregate views: ``GROUP BY`` with COUNT, COUNT(DISTINCT), SUM, AVG, MIN and MAX.

An aggregate view runs over the rows of its FROM/WHERE *core*: the join of its set-valued inputs
before any projection (DESIGN 1.4). crr keeps that core as an ordinary provenance view whose
columns are every column of every FROM occurrence (``k0, k1, ...``, so rows stay distinct exactly
as SQL's join of sets is), the group keys (``g0, ...``) and the aggregated arguments (``x0, ...``);
the core's present rows live in ``_crr."<v>$r"``. Each batch's membership changes of the core
(rows that entered, ``sign`` +1, or left, -1) then maintain, set-at-a-time:

* ``_crr."<v>$g"``, one row per group: ``n`` (rows), and per aggregate term ``c<j>`` (non-NULL
  arguments), ``s<j>`` (their sum), ``m<j>`` (their extreme) or ``d<j>`` (distinct values), plus
  ``stale`` (an extreme left the group, or a sum overflowed or is not finite, inf or NaN: re-read
  from ``$r`` for that group only);
* ``_crr."<v>$d<j>"``, per COUNT(DISTINCT) term: ``(group keys, x, n)``, the multiplicity of each
  value in each group;
* the APP table ``main.<v>``, whose rows are the user's SELECT list evaluated over the state of the
  groups the batch touched (all groups are rewritten when the SELECT list omits a group key, and
  the single row is rewritten when there is no GROUP BY).

Sums and counts are kept exactly (DuckDB's own types: HUGEINT for integer sums, DECIMAL(38, s) for
decimals); a DOUBLE sum is added to while rows arrive, so it may differ from a fresh evaluation in
the last bits (as evaluations adding in other orders do), and is re-read from its group's rows when
rows leave (subtracting loses what adding absorbed: 1e17 + 1.0 - 1e17 is 0.0).
An aggregate is a deterministic function of its converged core, so sites declaring the same
aggregate over the same inputs converge; its own tuples are never replicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

import duckdb
from sqlglot import exp

from crr.arrow_result import arrow_rows
from crr.errors import SqlError
from crr.types import quote_ident
from crr.sql.compile import unaliased_names, unknown_input_error
from crr.sql.statements import DIALECT
from crr.sql.validate import NON_DETERMINISTIC, check_table, function_name, refuse

Columns = list[tuple[str, str]]


class AggKind(Enum):
    """The aggregate functions an aggregate view maintains."""

    COUNT_STAR = "count(*)"
    COUNT = "count"
    COUNT_DISTINCT = "count(distinct)"
    SUM = "sum"
    AVG = "avg"
    MIN = "min"
    MAX = "max"


class AggregateStatement(Enum):
    """The statements a batch runs on an aggregate view (see :func:`statement_sql`)."""

    STATE_MERGE = "merge the groups' deltas into $g, returning the groups touched"
    DISTINCT_MERGE = "merge a COUNT(DISTINCT) term's value multiplicities into $d<j>"
    DISTINCT_COUNT = "recount the distinct values of the groups touched"
    REREAD = "re-read MIN/MAX and SUM of the groups flagged stale (an extreme left, a sum overflowed or is not finite)"
    APP_DELETE = "delete the APP rows of the groups touched"
    APP_INSERT = "insert the APP rows of the groups touched"


@dataclass(frozen=True)
class AggTerm:
    """One distinct aggregate call of the query: its kind and argument (``x<arg>``; None for COUNT(*))."""

    kind: AggKind
    arg: int | None


@dataclass(frozen=True)
class AggregateSpec:
    """Everything the engine needs to maintain one aggregate view."""

    name: str
    core: exp.Select  # the SPJ core: k0.. (every input column), g0.. (group keys), x0.. (arguments)
    groups: int  # number of group keys (at least 1: no GROUP BY keeps one constant key g0)
    grouped: bool  # whether the query has GROUP BY
    args: int  # number of aggregated arguments
    terms: tuple[AggTerm, ...]
    outputs: tuple[str, ...]  # the user's SELECT list over the state table ``s`` (SQL)
    having: str | None  # the HAVING predicate over ``s`` (SQL)
    key_outputs: tuple[int, ...] | None  # per group key, the output column holding it (None: not all do)
    app_columns: tuple[tuple[str, str], ...] = ()  # the APP table's columns, as DuckDB types the query
    float_columns: frozenset[str] = frozenset()  # the core's group keys and arguments typed FLOAT or DOUBLE

    def state_table(self) -> str:
        """The per-group state table."""
        return f"_crr.{quote_ident(self.name + '$g')}"

    def rows_table(self) -> str:
        """The table of the core's present rows."""
        return f"_crr.{quote_ident(self.name + '$r')}"

    def distinct_table(self, j: int) -> str:
        """The value multiplicities of COUNT(DISTINCT) term ``j``."""
        return f"_crr.{quote_ident(f'{self.name}$d{j}')}"

    def tables(self) -> list[str]:
        """Every hidden table the view keeps besides its provenance."""
        return [self.state_table(), self.rows_table()] + [
            self.distinct_table(j) for j, t in enumerate(self.terms) if t.kind is AggKind.COUNT_DISTINCT]


# -- analysis ------------------------------------------------------------------------------------

_TEMPORAL = {"DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_S", "TIMESTAMP_MS",
             "TIMESTAMP_NS", "TIME WITH TIME ZONE", "INTERVAL"}
_AGGREGATES = {exp.Count: AggKind.COUNT, exp.Sum: AggKind.SUM, exp.Avg: AggKind.AVG, exp.Min: AggKind.MIN,
               exp.Max: AggKind.MAX}
_DUCKDB_AGGREGATES: set[str] | None = None


def _duckdb_aggregates() -> set[str]:
    """Names of DuckDB's aggregate functions (so one sqlglot does not know is still recognised)."""
    global _DUCKDB_AGGREGATES
    if _DUCKDB_AGGREGATES is None:
        con = duckdb.connect()
        _DUCKDB_AGGREGATES = {r[0].lower() for r in con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'aggregate'").fetchall()}
        con.close()
    return _DUCKDB_AGGREGATES


def is_aggregate(query: exp.Expression) -> bool:
    """Whether a view query aggregates (GROUP BY, HAVING, or an aggregate function in its SELECT list;
    one inside a subquery aggregates the subquery, not the view, and one with OVER is a window
    function, which the view's validation refuses by that name)."""
    if not isinstance(query, exp.Select):
        return False
    if query.args.get("group") or query.args.get("having"):
        return True
    inner = (exp.Select, exp.Subquery, exp.Exists, exp.Window)
    return any(_is_aggregate_call(node) for e in query.expressions
               for node in e.walk(prune=lambda n: isinstance(n, inner)) if not isinstance(node, inner))


def _is_aggregate_call(node: exp.Expression) -> bool:
    if isinstance(node, exp.AggFunc):
        return True
    return isinstance(node, exp.Anonymous) and str(node.this).lower() in _duckdb_aggregates()


def analyse_aggregate(name: str, query: exp.Select, relation_columns: Callable[[str], Columns | None],
                      describe: Callable[[str], Columns], written: str | None = None) -> AggregateSpec:
    """Validate an aggregate view query and split it into its core and its aggregate (the APP
    table's columns are named and typed as DuckDB evaluates the query; named after ``written``, the
    query's text as the application wrote it, when DuckDB reads it alone)."""
    for arg, construct in (("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET"),
                           ("qualify", "QUALIFY"), ("windows", "WINDOW clauses")):
        if query.args.get(arg):
            raise refuse(construct, "order or limit when you read the view instead")
    if query.args.get("with_") or query.args.get("with"):
        raise refuse("WITH (common table expressions)", "create the inner query as its own materialized view and "
                     "aggregate over it")
    if query.find(exp.Placeholder, exp.Parameter) is not None:  # in WHERE too (SELECT and HAVING: over_state)
        raise refuse("parameters (? or $n)", "a view definition is fixed; write the value")
    distinct = query.args.get("distinct")
    if distinct is not None:
        raise refuse("SELECT DISTINCT in an aggregate view", "group by the columns instead")
    group = query.args.get("group")
    if group is not None:
        if any(group.args.get(arg) for arg in ("grouping_sets", "cube", "rollup", "totals")) or any(
                isinstance(g, (exp.GroupingSets, exp.Rollup, exp.Cube)) for g in group.expressions):
            raise refuse("GROUPING SETS, ROLLUP or CUBE", "create one aggregate view per grouping")
        if group.args.get("all"):
            raise refuse("GROUP BY ALL", "list the group keys")
    from_ = query.args.get("from_") or query.args.get("from")
    if from_ is None:
        raise refuse("a SELECT without FROM", "a view reads crr relations")
    occurrences = [from_.this] + [j.this for j in query.args.get("joins") or []]
    columns_of: dict[str, list[str]] = {}
    for t in occurrences:
        if not isinstance(t, exp.Table) or not isinstance(t.this, exp.Identifier):
            raise refuse(f"{t.sql(DIALECT)[:40]} in the FROM of an aggregate view",
                         "aggregate views read crr relations (a subquery can be its own view)")
        check_table(t)
        cols = relation_columns(t.name)
        if cols is None:
            raise unknown_input_error(t.name)
        columns_of[t.alias_or_name] = [c for c, _ in cols]
    collate = query.find(exp.Collate)
    if collate is not None:
        raise refuse(f"COLLATE ({collate.sql(DIALECT)[:40]})",
                     "crr groups and compares values as stored; group by lower(x) or another normal form instead")
    aliases = {e.alias: e.this for e in query.expressions if isinstance(e, exp.Alias)}
    using = any(j.args.get("using") for j in query.args.get("joins") or [])  # USING merges the named columns

    def qualified(node: exp.Expression) -> exp.Expression:
        """A copy with every column qualified by the one occurrence holding it (to compare keys)."""
        node = node.copy()
        for col in list(node.find_all(exp.Column)):
            if not col.table:
                owners = [a for a, cols in columns_of.items() if col.name in cols]
                if len(owners) == 1:
                    col.set("table", exp.to_identifier(owners[0]))
                elif len(owners) > 1 and not using:
                    raise SqlError(f"column {col.name} of aggregate view {name} is ambiguous: each of "
                                   f"{', '.join(owners)} has one; qualify it (e.g. {owners[0]}.{col.name})")
        for ident in node.find_all(exp.Identifier):  # "g" and g are one column: compare them as one text
            ident.set("quoted", True)
        return node

    keys: list[exp.Expression] = []
    listed = [g.unnest() for g in (group.expressions if group is not None else [])]  # GROUP BY (g) is GROUP BY g
    listed = [k for g in listed for k in (g.expressions if isinstance(g, exp.Tuple) else [g])]  # (g, x): g, x
    for g in listed:
        if isinstance(g, exp.Literal) and g.is_int:
            pos = int(g.this)
            if not 1 <= pos <= len(query.expressions):
                raise SqlError(f"GROUP BY {pos}: the SELECT list has {len(query.expressions)} columns")
            g = query.expressions[pos - 1]
            g = g.this if isinstance(g, exp.Alias) else g
        elif (isinstance(g, exp.Column) and not g.table and g.name in aliases
              and not any(g.name in cols for cols in columns_of.values())):
            g = aliases[g.name]
        if any(_is_aggregate_call(n) for n in g.walk()):
            raise refuse("aggregates in GROUP BY", "")
        keys.append(g)
    grouped = bool(keys)
    key_sql = [qualified(k).sql(DIALECT) for k in keys]

    terms: list[AggTerm] = []
    args: list[str] = []  # argument SQL (qualified), by index
    arg_nodes: list[exp.Expression] = []

    def term_of(call: exp.Expression) -> int:
        if call.find(exp.Order) is not None or isinstance(call.parent, exp.WithinGroup):
            raise refuse(f"ordered aggregates ({call.sql(DIALECT)[:60]})", "")
        if isinstance(call, exp.Anonymous) or type(call) not in _AGGREGATES:
            shown = "string_agg" if isinstance(call, exp.GroupConcat) else function_name(call)
            raise refuse(f"aggregate function {shown}()",
                         "aggregate views maintain COUNT, COUNT(DISTINCT), SUM, AVG, MIN and MAX")
        if isinstance(call.parent, exp.Filter):
            raise refuse("FILTER clauses on aggregates", "put the condition in WHERE, or in a separate view")
        kind = _AGGREGATES[type(call)]
        arg = call.this
        if isinstance(arg, exp.Distinct):
            if kind in (AggKind.MIN, AggKind.MAX):
                arg = arg.expressions[0]
            elif kind is AggKind.COUNT:
                if len(arg.expressions) != 1:
                    raise refuse("COUNT(DISTINCT) of several columns", "count the distinct values of one expression")
                kind, arg = AggKind.COUNT_DISTINCT, arg.expressions[0]
            else:
                raise refuse(f"{kind.value.upper()}(DISTINCT ...)", "only COUNT(DISTINCT x) is maintained")
        if kind is AggKind.COUNT and (arg is None or isinstance(arg, exp.Star)):
            term = AggTerm(AggKind.COUNT_STAR, None)
        else:
            if arg is None or call.expressions:
                raise refuse(f"{function_name(call)}() with {'no' if arg is None else 'several'} arguments", "")
            if any(_is_aggregate_call(n) for n in arg.walk()):
                raise refuse("aggregates of aggregates", "")
            text = qualified(arg).sql(DIALECT)
            if text not in args:
                args.append(text)
                arg_nodes.append(arg.copy())
            term = AggTerm(kind, args.index(text))
        if term not in terms:
            terms.append(term)
        return terms.index(term)

    def over_state(expr: exp.Expression, where: str) -> str:
        """The expression over the state table ``s``: aggregates and group keys replaced."""
        for node in expr.walk():
            if isinstance(node, exp.Window):
                raise refuse("window functions (OVER)", "")
            if isinstance(node, (exp.Select, exp.Subquery, exp.Exists)):
                raise refuse(f"subqueries in {where}", "")
            if isinstance(node, exp.Func) and (function_name(node) in NON_DETERMINISTIC
                                               or type(node).__name__.lower() in NON_DETERMINISTIC):
                raise refuse(f"non-deterministic function {node.sql(DIALECT)[:60]}",
                             "a view must give the same result on every site")
            if isinstance(node, (exp.Placeholder, exp.Parameter)):
                raise refuse("parameters (? or $n)", "a view definition is fixed; write the value")
        expr = expr.copy()

        def swap(node: exp.Expression) -> exp.Expression:
            if _is_aggregate_call(node):
                j = term_of(node)
                return exp.maybe_parse(_term_value(terms[j], j), dialect=DIALECT)
            text = qualified(node).sql(DIALECT)
            if text in key_sql and not isinstance(node, exp.Literal):
                return exp.column(f"g{key_sql.index(text)}", table="s")
            return node

        out = expr.transform(swap, copy=False)
        for col in out.find_all(exp.Column):
            if col.table != "s":
                raise SqlError(f"column {col.sql(DIALECT)} of aggregate view {name} must appear in GROUP BY "
                               "or be used in an aggregate function")
        return out.sql(DIALECT)

    outputs = []
    for e in query.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            raise refuse("* in an aggregate view", "list the group keys and aggregates")
        outputs.append(over_state(e.this if isinstance(e, exp.Alias) else e, "the SELECT list"))
    having = query.args.get("having")
    grouped_names = {k.name for k in keys if isinstance(k, exp.Column)}
    having_sql = over_state(_with_aliases(having.this, aliases, grouped_names), "HAVING") if having is not None else None
    for node in arg_nodes + keys:
        if any(_is_aggregate_call(n) for n in node.walk()):
            raise refuse("aggregates of aggregates", "")

    # the core: every column of every occurrence, then the group keys and the arguments
    core = query.copy()
    for arg in ("group", "having", "order", "limit", "distinct"):
        core.set(arg, None)
    projections: list[exp.Expression] = []
    for alias, cols in columns_of.items():
        for c in cols:
            projections.append(exp.alias_(exp.column(c, table=alias, quoted=True), f"k{len(projections)}"))
    for i, k in enumerate(keys or [exp.Literal.number(0)]):
        projections.append(exp.alias_(k.copy(), f"g{i}"))
    for j, a in enumerate(arg_nodes):
        projections.append(exp.alias_(a.copy(), f"x{j}"))
    core.set("expressions", projections)
    averaged = {t.arg for t in terms if t.kind is AggKind.AVG}
    arg_types = {n: t for n, t in describe(core.sql(DIALECT))}
    float_columns = frozenset(n for n, t in arg_types.items() if n[0] in "gx" and t.upper() in ("FLOAT", "DOUBLE"))
    if averaged:
        for j in sorted(averaged):
            if arg_types.get(f"x{j}", "").upper().split("(")[0] in _TEMPORAL:
                raise refuse(f"AVG of a {arg_types[f'x{j}']} ({arg_nodes[j].sql(DIALECT)[:60]})",
                             "the view keeps a running SUM for AVG, which DuckDB has not for times; average "
                             "epoch(x) and convert back with to_timestamp when you read the view")

    key_outputs = None
    if grouped:
        positions = []
        for i in range(len(keys)):
            pos = next((p for p, o in enumerate(outputs) if o == f"s.g{i}"), None)
            positions.append(pos)
        if all(p is not None for p in positions):
            key_outputs = tuple(p for p in positions if p is not None)
    app_columns = describe(query.sql(DIALECT))
    names = unaliased_names(written, query, len(app_columns), describe) or [n for n, _ in app_columns]
    app_columns = [(n, t) for n, (_, t) in zip(names, app_columns)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SqlError(f"view {name} has several output columns named {', '.join(dupes)}; "
                       "give each a distinct name with AS")
    return AggregateSpec(name=name, core=core, groups=max(len(keys), 1), grouped=grouped, args=len(arg_nodes),
                         terms=tuple(terms), outputs=tuple(outputs), having=having_sql, key_outputs=key_outputs,
                         app_columns=tuple(app_columns), float_columns=float_columns)


def _with_aliases(expr: exp.Expression, aliases: dict[str, exp.Expression], grouped: set[str]) -> exp.Expression:
    """``expr`` (a HAVING predicate) with the SELECT list's aliases it names replaced by their
    expressions, as DuckDB reads them (HAVING n > 1 for count(*) AS n; HAVING x > 4 for sum(x) AS x),
    except a grouped column's name, which DuckDB reads as the column."""
    expr = expr.copy()
    for col in list(expr.find_all(exp.Column)):
        if not col.table and col.name in aliases and col.name not in grouped:
            col.replace(exp.Paren(this=aliases[col.name].copy()))
    return expr


def _term_value(term: AggTerm, j: int) -> str:
    """SQL of an aggregate term's value over the state row ``s`` (SQL's answer on no rows: NULL, or 0)."""
    if term.kind is AggKind.COUNT_STAR:
        return "s.n"
    if term.kind is AggKind.COUNT:
        return f"s.c{j}"
    if term.kind is AggKind.COUNT_DISTINCT:
        return f"s.d{j}"
    if term.kind is AggKind.SUM:
        return f"(CASE WHEN s.c{j} > 0 THEN s.s{j} END)"
    if term.kind is AggKind.AVG:
        return f"(CASE WHEN s.c{j} > 0 THEN s.s{j} / s.c{j} END)"
    return f"(CASE WHEN s.c{j} > 0 THEN s.m{j} END)"


# -- statements ------------------------------------------------------------------------------------

def _keys(spec: AggregateSpec, q: str) -> str:
    return ", ".join(f"{q}g{i}" for i in range(spec.groups))


def _unsigned_zero(spec: AggregateSpec, column: str, q: str = "") -> str:
    """SQL of core column ``column`` with a float ``-0.0`` as ``0.0``: the state keeps group keys and
    extremes so, since ``-0.0 = 0.0`` puts both in one group (or makes either the extreme) and which
    one came first differs from site to site."""
    if column not in spec.float_columns:
        return f"{q}{column}"
    return f"(CASE WHEN {q}{column} = 0 THEN abs({q}{column}) ELSE {q}{column} END)"


def _match(spec: AggregateSpec, a: str, b: str) -> str:
    return " AND ".join(f"{a}.g{i} IS NOT DISTINCT FROM {b}.g{i}" for i in range(spec.groups))


def create_sql(spec: AggregateSpec, core_columns: Columns) -> list[str]:
    """DDL of the rows table, the state table (typed by DuckDB over the empty rows table), the
    COUNT(DISTINCT) tables and the APP table; and the no-GROUP-BY view's one state and APP row."""
    rows = ", ".join(f"{quote_ident(n)} {t}" for n, t in core_columns)
    stmts = [f"CREATE TABLE {spec.rows_table()} ({rows})"]
    cols = ["count(*) AS n"]
    for j, t in enumerate(spec.terms):
        x = f"x{t.arg}"
        if t.kind in (AggKind.COUNT, AggKind.SUM, AggKind.AVG, AggKind.MIN, AggKind.MAX):
            cols.append(f"count({x}) AS c{j}")
        if t.kind in (AggKind.SUM, AggKind.AVG):
            cols.append(f"sum({x}) AS s{j}")
        if t.kind in (AggKind.MIN, AggKind.MAX):
            cols.append(f"{t.kind.value}({x}) AS m{j}")
        if t.kind is AggKind.COUNT_DISTINCT:
            cols.append(f"count(DISTINCT {x}) AS d{j}")
            stmts.append(f"CREATE TABLE {spec.distinct_table(j)} AS SELECT {_keys(spec, '')}, {x} AS x, "
                         f"count(*) AS n FROM {spec.rows_table()} GROUP BY ALL")
    stmts.append(f"CREATE TABLE {spec.state_table()} AS SELECT {_keys(spec, '')}, {', '.join(cols)}, false AS stale "
                 f"FROM {spec.rows_table()} GROUP BY ALL")
    if not spec.grouped:
        zeros = ", ".join(["0"] + [("0" if c.split(" AS ")[1][0] in "cd" else "NULL") for c in cols[1:]])
        stmts.append(f"INSERT INTO {spec.state_table()} VALUES (0, {zeros}, false)")
    app = ", ".join(f"{quote_ident(n)} {t}" for n, t in spec.app_columns)
    stmts.append(f"CREATE TABLE main.{quote_ident(spec.name)} ({app})")
    return stmts


def empty_view_sql(spec: AggregateSpec) -> str | None:
    """For a view without GROUP BY: the INSERT of SQL's one row over no rows (COUNT 0, the rest NULL,
    unless HAVING drops it), run after the view is first filled and only while no row reached it (a
    filled view has its row from the fill: over data, ``10 // count(*)`` is defined where it is not
    over no rows)."""
    if spec.grouped:
        return None
    return app_insert_sql(spec, None) + (" AND" if spec.having else " WHERE") + " s.n = 0"


def state_merge_sql(spec: AggregateSpec, delta: str) -> str:
    """MERGE of a batch's core changes (``delta``: core columns and ``sign``) into the state table,
    returning the group keys of every group touched (deleted groups included) and ``stale``."""
    parts = ["sum(sign) AS dn"]
    sets = ["n = s.n + d.dn"]
    ins_cols, ins_vals = ["n"], ["d.dn"]
    stale = []
    for j, t in enumerate(spec.terms):
        x = f"x{t.arg}"
        if t.kind in (AggKind.COUNT, AggKind.SUM, AggKind.AVG, AggKind.MIN, AggKind.MAX):
            parts.append(f"sum(CASE WHEN {x} IS NULL THEN 0 ELSE sign END) AS dc{j}")
            sets.append(f"c{j} = s.c{j} + d.dc{j}")
            ins_cols.append(f"c{j}")
            ins_vals.append(f"d.dc{j}")
        if t.kind in (AggKind.SUM, AggKind.AVG):
            parts.append(f"sum({x}) FILTER (WHERE sign > 0) AS si{j}")
            parts.append(f"sum({x}) FILTER (WHERE sign < 0) AS sd{j}")
            # the values that left first, then those that came: the order that does not overflow when
            # a group's extreme integers leave. An overflow (NULL from try) or a sum that is not
            # finite (an inf or NaN in it, or one that left: inf - inf is NaN) marks the group stale
            # and the sum is re-read from its rows (reread_sql), as DuckDB would evaluate it. So does
            # a float sum that values left: subtracting them is no order of adding the rows there are
            # (1e17 + 1.0 is 1e17, and taking 1e17 away left 0.0 where the rows sum to 1.0)
            new = f"try((coalesce(s.s{j}, 0) - coalesce(d.sd{j}, 0)) + coalesce(d.si{j}, 0))"
            sets.append(f"s{j} = CASE WHEN s.c{j} + d.dc{j} = 0 THEN NULL ELSE {new} END")
            stale.append(f"(s.c{j} + d.dc{j} > 0 AND NOT coalesce(isfinite(CAST({new} AS DOUBLE)), false))")
            stale.append(f"(s.c{j} + d.dc{j} > 0 AND d.sd{j} IS NOT NULL AND typeof(s.s{j}) IN ('DOUBLE', 'FLOAT'))")
            ins_cols.append(f"s{j}")
            ins_vals.append(f"d.si{j}")
        if t.kind in (AggKind.MIN, AggKind.MAX):
            f, cmp = ("least", "<=") if t.kind is AggKind.MIN else ("greatest", ">=")
            parts.append(f"{t.kind.value}({_unsigned_zero(spec, x)}) FILTER (WHERE sign > 0) AS mi{j}")
            parts.append(f"{t.kind.value}({_unsigned_zero(spec, x)}) FILTER (WHERE sign < 0) AS md{j}")
            left = f"(d.md{j} IS NOT NULL AND d.md{j} {cmp} s.m{j})"
            sets.append(f"m{j} = CASE WHEN {left} THEN s.m{j} ELSE {f}(s.m{j}, d.mi{j}) END")
            stale.append(left)
            ins_cols.append(f"m{j}")
            ins_vals.append(f"d.mi{j}")
    sets.append(f"stale = s.stale OR {' OR '.join(stale)}" if stale else "stale = s.stale")
    keys = _keys(spec, "")
    unsigned = ", ".join(f"{_unsigned_zero(spec, f'g{i}')} AS g{i}" for i in range(spec.groups))
    source = f"(SELECT {unsigned}, {', '.join(parts)} FROM {delta} GROUP BY ALL)"
    empty = "WHEN MATCHED AND s.n + d.dn = 0 THEN DELETE " if spec.grouped else ""
    return f"""MERGE INTO {spec.state_table()} AS s USING {source} AS d ON {_match(spec, 's', 'd')}
        {empty}WHEN MATCHED THEN UPDATE SET {', '.join(sets)}
        WHEN NOT MATCHED THEN INSERT ({keys}, {', '.join(ins_cols)}, stale)
            VALUES ({_keys(spec, 'd.')}, {', '.join(ins_vals)}, false)
        RETURNING {keys}, stale"""


def distinct_merge_sql(spec: AggregateSpec, j: int, delta: str) -> str:
    """MERGE of the value multiplicities of COUNT(DISTINCT) term ``j`` (a value leaves at 0)."""
    x = f"x{spec.terms[j].arg}"
    keys = _keys(spec, "")
    return f"""MERGE INTO {spec.distinct_table(j)} AS t
        USING (SELECT {keys}, {x} AS x, sum(sign) AS dn FROM {delta} WHERE {x} IS NOT NULL GROUP BY ALL) AS d
        ON {_match(spec, 't', 'd')} AND t.x = d.x
        WHEN MATCHED AND t.n + d.dn = 0 THEN DELETE
        WHEN MATCHED THEN UPDATE SET n = t.n + d.dn
        WHEN NOT MATCHED THEN INSERT VALUES ({_keys(spec, 'd.')}, d.x, d.dn)"""


def distinct_count_sql(spec: AggregateSpec, j: int, touched: str) -> str:
    """UPDATE of term ``j``'s distinct count in the groups ``touched``."""
    return f"""UPDATE {spec.state_table()} AS s SET d{j} = r.k
        FROM (SELECT {_keys(spec, 'a.')}, count(t.x) AS k FROM {touched} a
              LEFT JOIN {spec.distinct_table(j)} t ON {_match(spec, 'a', 't')} GROUP BY ALL) r
        WHERE {_match(spec, 's', 'r')}"""


REREAD_KINDS = (AggKind.MIN, AggKind.MAX, AggKind.SUM, AggKind.AVG)
"""The terms whose value a group flagged ``stale`` re-reads from its rows: an extreme that left, a sum
that overflowed or is not finite."""


def reread_sql(spec: AggregateSpec) -> str:
    """UPDATE re-reading MIN/MAX and SUM terms from the rows table for the stale groups only."""
    # per term, its state column and the aggregate that recomputes it: s<j> (SUM, AVG) or m<j> (MIN, MAX)
    reread = [(f"s{j}", "sum", t.arg) if t.kind in (AggKind.SUM, AggKind.AVG) else (f"m{j}", t.kind.value, t.arg)
              for j, t in enumerate(spec.terms) if t.kind in REREAD_KINDS]
    cols = ", ".join(f"{fn}({_unsigned_zero(spec, f'x{arg}', 'c.') if fn in ('min', 'max') else f'c.x{arg}'}) AS {col}"
                     for col, fn, arg in reread)
    sets = ", ".join(f"{col} = r.{col}" for col, _, _ in reread)
    return f"""UPDATE {spec.state_table()} AS s SET {sets}, stale = false
        FROM (SELECT {_keys(spec, 'c.')}, {cols} FROM {spec.rows_table()} c
              SEMI JOIN (SELECT {_keys(spec, '')} FROM {spec.state_table()} WHERE stale) st ON {_match(spec, 'c', 'st')}
              GROUP BY ALL) r
        WHERE {_match(spec, 's', 'r')}"""


def app_delete_sql(spec: AggregateSpec, touched: str | None) -> str:
    """DELETE of the APP rows of the groups ``touched`` (all rows when ``touched`` is None)."""
    app = f"main.{quote_ident(spec.name)}"
    if touched is None or spec.key_outputs is None:
        return f"DELETE FROM {app}"
    match = " AND ".join(f"app.{quote_ident(spec.app_columns[p][0])} IS NOT DISTINCT FROM a.g{i}"
                         for i, p in enumerate(spec.key_outputs))
    return f"DELETE FROM {app} AS app USING {touched} a WHERE {match}"


def app_insert_sql(spec: AggregateSpec, touched: str | None) -> str:
    """INSERT of the APP rows of the groups ``touched`` (all groups when None), HAVING applied."""
    app = f"main.{quote_ident(spec.name)}"
    where = ["s.n > 0"] if spec.grouped else []
    if spec.having:
        where.append(f"({spec.having})")
    source = f"{spec.state_table()} s"
    if touched is not None and spec.key_outputs is not None:
        source += f" SEMI JOIN {touched} a ON {_match(spec, 's', 'a')}"
    return (f"INSERT INTO {app} SELECT {', '.join(spec.outputs)} FROM {source}"
            + (f" WHERE {' AND '.join(where)}" if where else ""))


def maintain(con: duckdb.DuckDBPyConnection, spec: AggregateSpec, delta: str,
             register: Callable[[str, object], str]) -> None:
    """Apply one batch's core changes (``delta``: core columns plus ``sign``) to the state and APP.

    Statements: the state MERGE; per COUNT(DISTINCT) term its MERGE and recount; the MIN/MAX and SUM
    re-read when a group is stale; the APP DELETE and INSERT of the groups touched.
    """
    touched = arrow_rows(con, state_merge_sql(spec, delta))
    if touched.num_rows == 0:
        return
    view = register(f"_crr_groups_{spec.name}", touched)
    for j, t in enumerate(spec.terms):
        if t.kind is AggKind.COUNT_DISTINCT:
            con.execute(distinct_merge_sql(spec, j, delta))
            con.execute(distinct_count_sql(spec, j, view))
    if any(t.kind in REREAD_KINDS for t in spec.terms) and any(touched.column("stale").to_pylist()):
        con.execute(reread_sql(spec))
    scope = view if spec.grouped else None
    con.execute(app_delete_sql(spec, scope))
    con.execute(app_insert_sql(spec, scope))
