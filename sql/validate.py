"""Check that a view query stays inside SPJR + UNION under set semantics.

Allowed: SELECT lists of columns and deterministic scalar expressions (with renames), FROM with inner
joins (equi or theta), cross joins and self joins through aliases, WHERE with deterministic
predicates, DISTINCT, and UNION. Everything else is refused with an error naming the construct,
because its result could not be maintained from p-semiring provenance (aggregates, negation,
ordering, non-determinism, recursion).
"""

from __future__ import annotations

from sqlglot import exp

from crr.errors import UnsupportedSqlError
from crr.sql.statements import DIALECT

NON_DETERMINISTIC = {
    "random", "rand", "uuid", "gen_random_uuid", "uuidv4", "uuidv7", "now", "current_timestamp",
    "current_date", "current_time", "currenttimestamp", "currentdate", "currenttime",
    "currentdatetime", "localtimestamp", "localtime", "get_current_timestamp", "get_current_time",
    "transaction_timestamp", "today", "nextval", "currval", "setseed", "txid_current",
    "current_query", "current_setting", "current_user", "currentuser", "session_user", "user",
    "version", "random_uuid", "current_schema", "current_database", "current_catalog",
    "current_role", "getvariable", "getenv", "current_schemas", "in_search_path",
}


def refuse(construct: str, hint: str = "") -> UnsupportedSqlError:
    """Build the error for an unsupported construct in a view query."""
    msg = f"materialized views do not support {construct}"
    msg += f"; {hint}" if hint else ("; views are SPJR + UNION: SELECT, FROM with inner joins, WHERE, DISTINCT, UNION, "
                                     "or a GROUP BY of such a query with COUNT, SUM, AVG, MIN or MAX")
    return UnsupportedSqlError(msg)


def function_name(node: exp.Func) -> str:
    """Lower-case SQL name of a function node."""
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    return node.sql_name().lower()


def validate_view_query(query: exp.Expression) -> None:
    """Raise UnsupportedSqlError naming the first construct outside SPJR + UNION."""
    if isinstance(query, exp.Subquery):
        return validate_view_query(query.this)
    if isinstance(query, exp.Union):
        if not query.args.get("distinct"):
            raise refuse("UNION ALL", "use UNION: views have set semantics")
        if query.args.get("by_name"):
            raise refuse("UNION BY NAME", "list the same columns in the same order in each branch and use UNION")
        for arg in ("side", "kind", "on"):
            if query.args.get(arg):
                raise refuse(f"UNION with {arg.upper()}", "use a plain UNION")
        for side in (query.this, query.expression):
            validate_view_query(side)
        _check_set_operation_modifiers(query)
        return
    if isinstance(query, exp.Except):
        raise refuse("EXCEPT (negation)", "provenance can only express monotone queries")
    if isinstance(query, exp.Intersect):
        raise refuse("INTERSECT", "express it as a join on all columns")
    if not isinstance(query, exp.Select):
        raise refuse(f"a {query.key.upper()} query")
    _validate_select(query)


def _check_set_operation_modifiers(query: exp.Expression) -> None:
    for arg, name in (("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET")):
        if query.args.get(arg):
            raise refuse(name, "order or limit when you read the view instead")
    with_ = query.args.get("with_") or query.args.get("with")
    if with_:
        _refuse_with(with_)


def _refuse_with(with_: exp.With) -> None:
    if with_.args.get("recursive"):
        raise refuse("recursive CTEs (WITH RECURSIVE)", "provenance covers non-recursive queries only")
    raise refuse("WITH (common table expressions)",
                 "create the inner query as its own materialized view and select from it")


def _validate_select(select: exp.Select) -> None:
    with_ = select.args.get("with_") or select.args.get("with")
    if with_:
        _refuse_with(with_)
    checks = [
        ("group", "GROUP BY (aggregation)", "aggregates cannot be maintained from provenance"),
        ("having", "HAVING", ""),
        ("order", "ORDER BY", "order when you read the view instead"),
        ("limit", "LIMIT", "limit when you read the view instead"),
        ("offset", "OFFSET", ""),
        ("qualify", "QUALIFY", ""),
        ("windows", "WINDOW clauses", ""),
        ("sample", "SAMPLE", ""),
        ("laterals", "LATERAL", ""),
        ("pivots", "PIVOT", ""),
        ("into", "SELECT INTO", ""),
    ]
    for arg, construct, hint in checks:
        if select.args.get(arg):
            raise refuse(construct, hint)
    distinct = select.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        raise refuse("DISTINCT ON", "")
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        raise refuse("a SELECT without FROM", "a view reads crr relations")
    for source in [from_.this, *[j.this for j in select.args.get("joins") or []]]:
        _check_source(source)
    for join in select.args.get("joins") or []:
        _check_join(join)
    for node in select.walk():
        _check_node(node, select)


_TABLE_ARGS = {"this", "db", "catalog", "alias"}  # what a relation in FROM may carry besides nothing
_TABLE_ARG_NAMES = {"sample": ("TABLESAMPLE", "a sample is not deterministic"),
                    "pivots": ("PIVOT or UNPIVOT", "unpivot into a replicated table instead"),
                    "when": ("time travel (AT ...)", ""), "version": ("time travel (AT ...)", "")}


def check_table(table: exp.Table) -> None:
    """Refuse what a relation in a view's FROM carries that crr's compiler would not evaluate: a column
    list on its alias (``t AS t2(a, b)``), TABLESAMPLE, PIVOT/UNPIVOT, time travel, and the like."""
    alias = table.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise refuse(f"column aliases on a relation in FROM ({alias.sql(DIALECT)[:40]})",
                     "rename the columns in the SELECT list")
    for arg, value in table.args.items():
        if value and arg not in _TABLE_ARGS:
            construct, hint = _TABLE_ARG_NAMES.get(arg, (arg.upper(), ""))
            raise refuse(f"{construct} on a relation in FROM", hint)


def check_relation_names(query: exp.Expression) -> None:
    """Refuse a relation named with a database or a schema other than ``main`` (``other.t``): crr
    binds a view's relations by name to its own, so another database's ``t`` would silently read
    crr's ``t``. (Checked when a view is declared; a view stored before this check opens as it is.)"""
    for table in query.find_all(exp.Table):
        if table.catalog or table.db not in ("", "main"):
            raise refuse(f"a relation of another database or schema ({table.sql(DIALECT)[:60]})",
                         "a view reads this site's crr relations, named without a prefix (or with main.)")


def _check_source(source: exp.Expression) -> None:
    if isinstance(source, exp.Table):
        if not isinstance(source.this, exp.Identifier):
            raise refuse(f"table function {source.this.sql(DIALECT)} in FROM", "views read crr relations only")
        check_table(source)
        return
    if isinstance(source, exp.Values):
        raise refuse("VALUES in FROM", "put constant rows in a replicated table")
    if isinstance(source, exp.Subquery):
        raise refuse("subqueries in FROM", "create the subquery as its own materialized view and select from it")
    if isinstance(source, exp.Unnest):
        raise refuse("UNNEST", "")
    raise refuse(f"{source.key.upper()} in FROM", "")


def _check_join(join: exp.Join) -> None:
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    method = (join.args.get("method") or "").upper()
    if side:
        raise refuse(f"{side} OUTER JOIN", "outer joins are not monotone in provenance; use an inner join")
    if kind in ("SEMI", "ANTI"):
        raise refuse(f"{kind} JOIN", "use an inner join (SEMI) or nothing (ANTI is negation)")
    if kind not in ("", "INNER", "CROSS"):
        raise refuse(f"{kind} JOIN", "")
    if method:
        raise refuse(f"{method} JOIN", "write the join condition with ON")


def _check_node(node: exp.Expression, root: exp.Select) -> None:
    if node is root:
        return
    if isinstance(node, exp.AggFunc):
        raise refuse(f"aggregate function {function_name(node)}()", "aggregates cannot be maintained from provenance")
    if isinstance(node, exp.Window):
        raise refuse("window functions (OVER)", "")
    if isinstance(node, exp.Exists):
        parent = node.parent
        raise refuse("NOT EXISTS (negation)" if isinstance(parent, exp.Not) else "EXISTS subqueries",
                     "express it as an inner join")
    if isinstance(node, (exp.Select, exp.Union, exp.Except, exp.Intersect)) and node is not root:
        raise refuse("subqueries in expressions (IN / scalar subqueries)", "express it as an inner join")
    if isinstance(node, exp.Func):
        name = function_name(node)
        cls = type(node).__name__.lower()
        if name in NON_DETERMINISTIC or cls in NON_DETERMINISTIC:
            raise refuse(f"non-deterministic function {node.sql(DIALECT)[:60]}",
                         "a view must give the same result on every site; store the value in a table")
    if isinstance(node, exp.Star):  # * or t.*
        for arg in ("except", "except_", "replace", "rename"):
            if node.args.get(arg):
                raise refuse(f"* {'EXCLUDE' if arg.startswith('except') else arg.upper()}", "list the columns")
    picked = node.this if isinstance(node, (exp.Like, exp.ILike, exp.SimilarTo)) else None  # * LIKE 'k%'
    if isinstance(picked, exp.Star) or (isinstance(picked, exp.Column) and isinstance(picked.this, exp.Star)):
        raise refuse("* LIKE / SIMILAR TO (columns picked by a pattern)", "list the columns")
    if isinstance(node, exp.Collate):
        raise refuse(f"COLLATE ({node.sql(DIALECT)[:40]})",
                     "crr groups and compares values as stored; compare lower(x) or another normal form instead")
    if isinstance(node, exp.Columns) if hasattr(exp, "Columns") else False:
        raise refuse("COLUMNS(...)", "list the columns")
    if isinstance(node, exp.Placeholder) or isinstance(node, exp.Parameter):
        raise refuse("parameters (? or $n)", "a view definition is fixed; write the value")
