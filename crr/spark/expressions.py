r"""View expressions on a Spark site: DuckDB's values, or a refusal when the view is declared.

A Spark site runs the compiler's plans, which are DuckDB SQL, transpiled to Spark SQL by sqlglot.
Most expressions mean the same in both engines. Some do not, and a view holding one would compute
other rows on Spark than at every DuckDB site, with other tuple ids, so that the copies of the view
diverge. Measured on DuckDB 2.0 and Spark 4 (ANSI mode, its default):

* ``a / b`` by zero is ``inf``, ``-inf`` or ``NaN`` in DuckDB and an error on Spark, and Spark
  divides DECIMALs in DECIMAL arithmetic where DuckDB divides in DOUBLE;
* ``CAST(x AS INTEGER)`` rounds a DOUBLE half to even and a DECIMAL half away from zero in DuckDB;
  Spark truncates both;
* ``round`` of a DOUBLE keeps the sign of a zero in DuckDB (``round(-0.125)`` is ``-0.0``), not on Spark;
* ``dayofweek`` counts from 0 in DuckDB and from 1 on Spark;
* ``a % b`` of DOUBLEs by zero is NaN in DuckDB, an error on Spark; ``sign`` of a DOUBLE is a
  TINYINT in DuckDB (0 for NaN), a DOUBLE on Spark;
* ``.`` in a regular expression leaves out only ``\n`` in RE2, also ``\r`` and other line ends in Java;
* upper and lower case follow other Unicode rules (``upper('ß')``, ``ILIKE``), floats print otherwise
  (``1e+20`` against ``1.0E20``), transcendental functions differ in the last bit, ``ln`` of a
  negative is NaN against NULL, ``date_diff`` counts unit boundaries against whole units,
  ``regexp_replace`` replaces the first match against every match, ``hash`` is another function,
  Spark reads ``\`` in a LIKE pattern as an escape, rounds DECIMAL results past 38 digits, and
  takes ``chr`` modulo 256; regular expressions differ in ``$``, POSIX classes, flags and ``\s``.

:func:`spark_view_query` rewrites the first seven into forms both engines compute as DuckDB does
(DuckDB computes the rewritten query exactly as the original, so the view's rows and tuple ids do
not change), and refuses every other construct that is not known to compute the same values: the
allowed ones are listed here, each checked against DuckDB by ``tests/test_spark_expressions.py``.
A refused view can still be declared at a DuckDB site, whose rows the Spark site can hold as a
remote table.
"""

from __future__ import annotations

import re
from typing import Callable

from sqlglot import exp

from crr.errors import CrrError, UnsupportedSqlError
from crr.spark.encoding import spark_type
from crr.types import TypeFamily, type_family

Describe = Callable[[str], list[tuple[str, str]]]

# The structure of a query, literals and operators that compute the same in both engines.
_SAME: tuple[type[exp.Expression], ...] = (
    exp.Select, exp.From, exp.Join, exp.Table, exp.TableAlias, exp.Identifier, exp.Column, exp.Alias,
    exp.Star, exp.Where, exp.Distinct, exp.Union, exp.Subquery, exp.Paren, exp.Literal, exp.Boolean,
    exp.Null, exp.DataType, exp.DataTypeParam, exp.Tuple, exp.Interval, exp.Var,
    exp.And, exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.Between,
    exp.In, exp.Escape, exp.NullSafeEQ, exp.NullSafeNEQ,
    exp.Case, exp.If, exp.Coalesce, exp.Nullif, exp.Greatest, exp.Least,
    exp.Neg, exp.Abs, exp.Sqrt, exp.Pi,
    exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor,
    exp.Length, exp.Trim, exp.Replace, exp.Pad, exp.StrPosition, exp.StartsWith,
    exp.EndsWith, exp.Contains, exp.Repeat, exp.Translate, exp.Ascii,
    exp.MD5, exp.SHA, exp.SHA2, exp.Hex,
    exp.Year, exp.Month, exp.Day, exp.DayOfMonth, exp.DayOfYear, exp.WeekOfYear, exp.Quarter,
    exp.Hour, exp.Minute, exp.Second, exp.LastDay, exp.DateFromParts,
)
_NUMERIC = {TypeFamily.INTEGER, TypeFamily.DECIMAL, TypeFamily.FLOAT}
_EXACT = {TypeFamily.INTEGER, TypeFamily.DECIMAL}
_EXTRACT_PARTS = {"year", "month", "day", "hour", "minute", "quarter"}
_STRFTIME = re.compile(r"(%[YmdHMS]|[-/:. 0-9])*")
_TRUNC_UNITS = {"year", "quarter", "month", "week", "day", "hour", "minute", "second"}
# CAST(operand AS target): the pairs of type families both engines convert alike (others refused)
_CASTS: dict[TypeFamily, set[TypeFamily]] = {
    TypeFamily.STRING: {TypeFamily.STRING},
    TypeFamily.FLOAT: {TypeFamily.FLOAT},
    TypeFamily.DECIMAL: {TypeFamily.FLOAT, TypeFamily.DECIMAL},
    TypeFamily.INTEGER: {TypeFamily.FLOAT, TypeFamily.DECIMAL, TypeFamily.BOOLEAN},
    TypeFamily.BOOLEAN: {TypeFamily.INTEGER, TypeFamily.BOOLEAN},
    TypeFamily.DATE: {TypeFamily.TIMESTAMP, TypeFamily.DATE},
    TypeFamily.TIMESTAMP: {TypeFamily.DATE, TypeFamily.TIMESTAMP},
}  # read: operand -> targets (VARCHAR of a non-float and INTEGER of a number are handled below)


class _Refused(CrrError):
    """An expression a Spark site cannot compute as DuckDB does (turned into UnsupportedSqlError)."""


def spark_view_query(view: str, query: exp.Expression, describe: Describe, refuse: bool = True,
                     columns: list[tuple[str, str]] | None = None) -> exp.Expression:
    """Return ``query`` as a Spark site compiles it: a copy whose divisions, casts to integers and
    days of the week are written so that Spark computes DuckDB's values; raise UnsupportedSqlError
    naming the first expression a Spark site would compute otherwise. ``describe(sql)`` gives the
    output columns DuckDB derives for a query over the site's relations. ``refuse=False`` (a view
    stored before these checks, compiled again when its site opens) rewrites and refuses nothing else.
    ``columns``, the view's (name, DuckDB type) as compiled, alias the first branch's projections, so
    that a rewritten expression keeps the name DuckDB gave the original, and type a UNION's columns. ``query`` itself comes back when nothing
    needs rewriting."""
    tree = query.copy()
    if columns is not None:
        _name_projections(tree, [n for n, _ in columns])
    types = _Types(describe)
    rewrites: list[tuple[exp.Expression, exp.Expression]] = []
    for node in tree.walk():
        try:
            new = _check(node, types)
        except _Refused as e:
            if not refuse:
                continue
            raise UnsupportedSqlError(
                f"view {view}: a Spark site cannot compute {node.sql('duckdb')!r} as DuckDB does: {e}; "
                "declare the view at a DuckDB site (a Spark site can hold its rows as a remote table), "
                "or write the expression without it") from None
        if new is not None:
            rewrites.append((node, new))
    if refuse and isinstance(tree, exp.Union):
        _check_union_conversions(view, tree, columns if columns is not None else _described(tree, describe), types)
    if not rewrites:
        return query
    for node, new in reversed(rewrites):  # innermost first: an outer rewrite copies rewritten children
        node.replace(new(node) if callable(new) else new)
    return tree


def _described(tree: exp.Expression, describe: Describe) -> list[tuple[str, str]]:
    """The columns DuckDB derives for ``tree``, none when it cannot say."""
    try:
        return describe(tree.sql("duckdb"))
    except CrrError:
        return []


def _check_union_conversions(view: str, tree: exp.Union, columns: list[tuple[str, str]], types: "_Types") -> None:
    """Refuse a UNION whose branches' columns convert to the view's column types (``columns``) otherwise
    on Spark (the compiler casts each branch's columns to the union's types: a DOUBLE beside VARCHAR
    prints '1e+20' in DuckDB, '1.0E20' on Spark)."""
    branches, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (exp.Union, exp.Subquery)):
            stack.extend([node.this] + ([node.expression] if isinstance(node, exp.Union) else []))
        elif isinstance(node, exp.Select):
            branches.append(node)
    for branch in branches:
        for i, (proj, (_, to_name)) in enumerate(zip(branch.expressions, columns)):
            src_name = types.name_of(proj.this if isinstance(proj, exp.Alias) else proj)
            if src_name is None or src_name == to_name.upper():
                continue
            try:
                if _conversion(_family_of(src_name), src_name, _family_of(to_name) or TypeFamily.STRING,
                               to_name.upper()) is not None:
                    raise _Refused(f"rounds {src_name} to {to_name} otherwise")
            except _Refused as e:
                raise UnsupportedSqlError(
                    f"view {view}: a Spark site cannot compute column {i + 1} of the UNION as DuckDB does: it is "
                    f"{src_name} in one branch and {to_name} in the view, and {e}; CAST it in every branch to the "
                    "same type, or declare the view at a DuckDB site") from None


def _name_projections(tree: exp.Expression, names: list[str]) -> None:
    first = tree
    while isinstance(first, (exp.Union, exp.Subquery)):
        first = first.this
    projections = first.expressions if isinstance(first, exp.Select) else []
    if len(projections) != len(names) or any(isinstance(p, exp.Star) or isinstance(p, exp.Column) and p.is_star
                                             for p in projections):
        return
    for proj, name in zip(projections, names):
        if not isinstance(proj, exp.Alias):
            proj.replace(exp.alias_(proj.copy(), name, quoted=True))


class _Types:
    """DuckDB's type of an expression inside a view query, found by describing it over the FROM
    clause of the SELECT holding it."""

    def __init__(self, describe: Describe) -> None:
        self._describe = describe
        # by node (a node's type is asked by several checks), holding the node: an id alone is reused
        # by a node made after another was freed, which then got the freed node's type (CAST(m AS DOUBLE)
        # was rewritten as an integer cast once in a while)
        self._known: dict[int, tuple[exp.Expression, str | None]] = {}

    def of(self, node: exp.Expression) -> TypeFamily | None:
        """The family of DuckDB's type of ``node``, or None when it has none crr stores."""
        return _family_of(self.name_of(node))

    def name_of(self, node: exp.Expression) -> str | None:
        """DuckDB's name of the type of ``node`` (``DECIMAL(10,2)``), or None when it cannot say."""
        known = self._known.get(id(node))
        if known is None or known[0] is not node:
            known = self._known[id(node)] = (node, self._describe_type(node))
        return known[1]

    def _describe_type(self, node: exp.Expression) -> str | None:
        probe = exp.select(node.copy().as_("_crr_x"))
        select = node.find_ancestor(exp.Select)
        if select is not None and not isinstance(node, exp.Literal):
            source = select.args.get("from_") or select.args.get("from")
            if source is not None:
                probe.set("from_" if "from_" in exp.Select.arg_types else "from", source.copy())
            probe.set("joins", [j.copy() for j in select.args.get("joins") or []])
        try:
            return self._describe(probe.sql("duckdb"))[0][1].upper()
        except CrrError:
            return None


def _check(node: exp.Expression, types: _Types):
    """None when ``node`` computes the same on Spark; a rewrite (a node, or a function of the node
    with its children rewritten) when it is written otherwise; raise _Refused when it cannot be."""
    if isinstance(node, exp.Div):
        return _ieee_division
    if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)):
        operands = [node.this] + [node.args[a] for a in ("expression", "low", "high") if node.args.get(a)] + \
            list(node.expressions)
        families = {types.of(o) for o in operands if not isinstance(o, exp.Null)}
        if TypeFamily.STRING in families and len(families) > 1:
            raise _Refused("DuckDB compares text with a number or date by converting the text, which Spark "
                           "converts otherwise (CAST one side explicitly to the other's type)")
        return None
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
        _check_decimal_precision(node, types)
        return _date_arithmetic(node, types) if isinstance(node, (exp.Add, exp.Sub)) else None
    if isinstance(node, exp.Mod):
        return _ieee_mod if TypeFamily.FLOAT in {types.of(node.this), types.of(node.expression)} else None
    if isinstance(node, exp.Sign):
        return _float_sign if types.of(node.this) == TypeFamily.FLOAT else None
    if isinstance(node, exp.Like):
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string and "\\" not in pattern.this) \
                and not isinstance(node.parent, exp.Escape):
            raise _Refused("Spark reads a backslash in a LIKE pattern as an escape, DuckDB does not "
                           "(write a literal pattern without backslashes, or give an ESCAPE)")
        return None
    if isinstance(node, (exp.RegexpLike, exp.RegexpExtract, exp.RegexpReplace)):
        return _regexp(node)
    if isinstance(node, exp.Chr):
        if not all(_literal_int(a, nonzero=False, nonnegative=True) and int(a.this) < 128 for a in node.expressions or [node.this]):
            raise _Refused("Spark takes a code modulo 256 (only literal ASCII codes 0 to 127 agree)")
        return None
    if isinstance(node, exp.SplitPart):
        delimiter, index = node.args.get("delimiter"), node.args.get("part_index")
        if not (isinstance(delimiter, exp.Literal) and delimiter.is_string and delimiter.this
                and index is not None and _literal_int(index, nonzero=True, nonnegative=False)):
            raise _Refused("only a non-empty literal delimiter and a literal part other than 0 agree on Spark")
        return None
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        unit = node.args.get("unit")
        name = (unit.name if unit is not None else "").lower()
        if name not in _TRUNC_UNITS:
            raise _Refused(f"Spark truncates only to {', '.join(sorted(_TRUNC_UNITS))} (other units are NULL there)")
        return None
    if isinstance(node, exp.Interval):
        if not (isinstance(node.this, exp.Literal) and re.fullmatch(r"-?\d+", node.this.this.strip())
                and isinstance(node.args.get("unit"), exp.Var)):
            raise _Refused("only an INTERVAL of one literal number of one unit agrees on Spark")
        return None
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return _cast(node, types)
    if isinstance(node, exp.DayOfWeek):
        return lambda n: _day_of_week(n.this, iso=False)
    if isinstance(node, exp.DayOfWeekIso):
        return lambda n: _day_of_week(n.this, iso=True)
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in ("weekday", "dow"):
        return lambda n: _day_of_week(n.expressions[0], iso=False)
    if isinstance(node, exp.ILike):
        raise _Refused("Spark folds case by other Unicode rules ('İ' ILIKE 'i' is true in DuckDB only)")
    if isinstance(node, exp.DPipe) or isinstance(node, (exp.Concat, exp.ConcatWs)):
        for arg in node.iter_expressions():
            if types.of(arg) not in (TypeFamily.STRING, None) or isinstance(arg, exp.Literal) and not arg.is_string:
                raise _Refused("its arguments are not all VARCHAR (CAST them to VARCHAR first)")
        return None
    if isinstance(node, (exp.Floor, exp.Ceil, exp.Trunc)) or isinstance(node, exp.Round) and node.args.get("decimals"):
        if types.of(node.this) not in _EXACT:
            raise _Refused("Spark rounds a DOUBLE otherwise (apply it to an INTEGER or DECIMAL)")
        return None
    if isinstance(node, exp.IntDiv):
        if {types.of(node.this), types.of(node.expression)} != {TypeFamily.INTEGER}:
            raise _Refused("DuckDB's // of a DOUBLE or DECIMAL divides exactly; Spark's DIV takes integers only")
        return None
    if isinstance(node, exp.Round):
        return _signed_round if types.of(node.this) == TypeFamily.FLOAT else None
    if isinstance(node, (exp.Substring, exp.Left, exp.Right)):
        for name in ("start", "expression", "length"):
            arg = node.args.get(name)
            if arg is not None and not _literal_int(arg, nonzero=(name == "start"), nonnegative=(name != "start")):
                raise _Refused("its positions and lengths must be integer literals (a start other than 0, "
                               "lengths of 0 or more): Spark counts the others differently")
        return None
    if isinstance(node, exp.RegexpReplace):
        mods = node.args.get("modifiers")
        if not (isinstance(mods, exp.Literal) and mods.this == "g"):
            raise _Refused("DuckDB replaces the first match, Spark every match (pass 'g' to replace every match)")
        return None
    if isinstance(node, exp.DateDiff):
        unit = node.args.get("unit")
        if unit is None or unit.name.lower() not in ("day", "days") or \
                {types.of(node.this), types.of(node.expression)} != {TypeFamily.DATE}:
            raise _Refused("Spark counts whole units where DuckDB counts unit boundaries (only days between DATEs agree)")
        return None
    if isinstance(node, exp.Extract) or isinstance(node, exp.Anonymous) and str(node.this).lower() == "date_part":
        part = node.this if isinstance(node, exp.Extract) else (node.expressions[0] if node.expressions else None)
        if part is None or part.name.lower() not in _EXTRACT_PARTS:
            raise _Refused(f"only the parts {', '.join(sorted(_EXTRACT_PARTS))} agree on Spark")
        return None
    if isinstance(node, exp.TimeToStr):
        fmt = node.args.get("format")
        if not (isinstance(fmt, exp.Literal) and _STRFTIME.fullmatch(fmt.this)):
            raise _Refused("only the format codes %Y %m %d %H %M %S, with - / : . spaces and digits between "
                           "them, agree on Spark")
        return None
    if isinstance(node, exp.UnixToTime):
        if types.of(node.this) != TypeFamily.INTEGER:
            raise _Refused("only to_timestamp of an integer number of seconds agrees on Spark")
        return None
    if isinstance(node, exp.TimeToUnix):
        if types.of(node.this) != TypeFamily.DATE:
            raise _Refused("Spark drops the fraction of a second (epoch of a DATE agrees)")
        return None
    if isinstance(node, _SAME):
        return None
    if isinstance(node, exp.Func):
        name = node.sql_name() if not isinstance(node, exp.Anonymous) else str(node.this)
        raise _Refused(f"{name.lower()} is not among the functions known to give DuckDB's values on Spark")
    raise _Refused(f"{node.key.upper()} is not among the constructs known to give DuckDB's values on Spark")


_TIMES = {TypeFamily.DATE, TypeFamily.TIMESTAMP, TypeFamily.TIMESTAMPTZ}


_INTEGER_DIGITS = {"TINYINT": 3, "SMALLINT": 5, "INTEGER": 10, "BIGINT": 20}
_DECIMAL_TYPE = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def _precision(type_name: str | None) -> tuple[int, int] | None:
    """(precision, scale) of a DECIMAL or of an integer type as Spark widens it to one."""
    if type_name in _INTEGER_DIGITS:
        return _INTEGER_DIGITS[type_name], 0
    m = _DECIMAL_TYPE.fullmatch(type_name or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _check_decimal_precision(node: exp.Add | exp.Sub | exp.Mul, types: _Types) -> None:
    """Refuse DECIMAL arithmetic whose exact result needs more than 38 digits in Spark's typing: Spark
    then drops digits of the scale (spark.sql.decimalOperations.allowPrecisionLoss), DuckDB keeps them."""
    names = (types.name_of(node.this), types.name_of(node.expression))
    if not any(n and n.startswith("DECIMAL") for n in names):
        return
    sizes = [_precision(n) for n in names]
    if None in sizes:
        return  # a DOUBLE operand: DOUBLE arithmetic in both engines
    (p1, s1), (p2, s2) = sizes
    digits = p1 + p2 + 1 if isinstance(node, exp.Mul) else max(p1 - s1, p2 - s2) + max(s1, s2) + 1
    if digits > 38:
        raise _Refused(f"Spark would round its exact result of {digits} digits to 38 (CAST the operands to "
                       "DECIMALs of fewer digits)")


def _date_arithmetic(node: exp.Add | exp.Sub, types: _Types) -> None:
    """Refuse + and - on dates and timestamps other than DATE +/- INTEGER days and TIMESTAMP +/- an
    INTERVAL: DuckDB's DATE - DATE is a number of days, Spark's an interval; DATE + INTERVAL is a
    TIMESTAMP in DuckDB and a DATE on Spark."""
    left, right = types.of(node.this), types.of(node.expression)
    if not {left, right} & _TIMES:
        return None
    if {left, right} == {TypeFamily.DATE, TypeFamily.INTEGER} and (isinstance(node, exp.Add) or left == TypeFamily.DATE):
        return None
    if left == TypeFamily.TIMESTAMP and isinstance(node.expression, exp.Interval):
        return None
    raise _Refused("date arithmetic gives other types or values on Spark (DATE +/- INTEGER days and "
                   "TIMESTAMP +/- INTERVAL agree)")


def _literal_int(node: exp.Expression, nonzero: bool, nonnegative: bool) -> bool:
    value = node.this if isinstance(node, exp.Literal) and not node.is_string else None
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        value = "-" + node.this.this
    try:
        n = int(value) if value is not None else None
    except ValueError:
        return False
    return n is not None and not (nonzero and n == 0) and not (nonnegative and n < 0)


# text both engines read as the same value of a type, in a CAST of a string literal
_LITERAL_TEXT = {
    TypeFamily.DATE: re.compile(r"\d{4}-\d{2}-\d{2}"),
    TypeFamily.TIMESTAMP: re.compile(r"\d{4}-\d{2}-\d{2}( ([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?)?"),
    TypeFamily.INTEGER: re.compile(r"-?\d+"),
    TypeFamily.DECIMAL: re.compile(r"-?\d+(\.\d+)?"),
    TypeFamily.FLOAT: re.compile(r"-?\d+(\.\d+)?"),
    TypeFamily.BOOLEAN: re.compile(r"true|false", re.IGNORECASE),
    TypeFamily.STRING: re.compile(r".*", re.DOTALL),
}
_LITERAL_FORM = {  # what _LITERAL_TEXT takes, as a refusal says it
    TypeFamily.DATE: "YYYY-MM-DD",
    TypeFamily.TIMESTAMP: "YYYY-MM-DD, optionally with hh:mm, :ss and up to six decimals of a second",
    TypeFamily.INTEGER: "digits, optionally signed",
    TypeFamily.DECIMAL: "digits with an optional point and decimals (no exponent)",
    TypeFamily.FLOAT: "digits with an optional point and decimals (no exponent, NaN or infinity)",
    TypeFamily.BOOLEAN: "true or false",
}


def _cast(node: exp.Cast, types: _Types):
    to_name = types.name_of(exp.Cast(this=exp.Null(), to=node.args["to"].copy()))
    to = _family_of(to_name)
    if to is None:
        raise _Refused(f"a cast to {node.args['to'].sql('duckdb')} is not known to agree")
    if isinstance(node.this, exp.Literal) and node.this.is_string:
        if to in _LITERAL_TEXT and _LITERAL_TEXT[to].fullmatch(node.this.this):
            return None
        if to in _LITERAL_FORM:
            raise _Refused(f"Spark may read the text {node.this.this!r} otherwise; write the {to_name} literal as "
                           f"{_LITERAL_FORM[to]}")
        raise _Refused(f"no text of a {to_name} literal is known to read alike on Spark (its zone or form); "
                       "compare with a value the rows hold")
    src_name = types.name_of(node.this)
    return _conversion(_family_of(src_name), src_name, to, to_name)


def _family_of(type_name: str | None) -> TypeFamily | None:
    try:
        return type_family(type_name) if type_name else None
    except CrrError:
        return None


def _conversion(src: TypeFamily | None, src_name: str | None, to: TypeFamily, to_name: str):
    """None when Spark converts a value of type ``src_name`` to ``to_name`` as DuckDB does, the
    rewrite of a CAST that makes it so, or raise _Refused."""
    try:
        spark_type(to_name)
    except CrrError:
        raise _Refused(f"Spark has no type holding every {to_name}") from None
    if src is None:
        raise _Refused("the type of its operand is not known")
    if src_name == to_name:
        return None
    if to == TypeFamily.INTEGER and src in _NUMERIC | {TypeFamily.BOOLEAN}:
        if src == TypeFamily.FLOAT:
            return lambda n: _cast_rounded(n, half_even=True)
        if src == TypeFamily.DECIMAL:
            return lambda n: _cast_rounded(n, half_even=False)
        return None
    if to == TypeFamily.STRING and src not in (TypeFamily.FLOAT, TypeFamily.BLOB, TypeFamily.TIMESTAMPTZ,
                                                TypeFamily.TIME, TypeFamily.UUID):
        return None
    if src == TypeFamily.STRING and to != TypeFamily.STRING:
        raise _Refused("Spark parses text into other values and refuses text DuckDB reads (store typed values)")
    if src_name == "DOUBLE" and to_name == "FLOAT":
        raise _Refused("DuckDB refuses a DOUBLE beyond FLOAT's range, Spark makes it infinite")
    if to in _CASTS.get(src, set()):
        return None
    raise _Refused(f"{src.value} to {to.value} converts otherwise on Spark")


def _cast_rounded(node: exp.Cast, half_even: bool) -> exp.Expression:
    """CAST(x AS <integer>) as both engines compute DuckDB's: round x first (half away from zero:
    ROUND in both; half to even for a DOUBLE: ROUND of x / 2, doubled, on the halves)."""
    x = node.this
    if half_even:
        half = exp.EQ(this=exp.Abs(this=exp.Mod(this=x.copy(), expression=exp.Literal.number(1))),
                      expression=exp.Literal.number(0.5))
        even = exp.Mul(this=exp.Literal.number(2),
                       expression=exp.Round(this=exp.Div(this=x.copy(), expression=exp.Literal.number(2))))
        rounded = exp.Case(ifs=[exp.If(this=half, true=even)], default=exp.Round(this=x.copy()))
    else:
        rounded = exp.Round(this=x.copy())
    return type(node)(this=rounded, to=node.args["to"].copy(), safe=node.args.get("safe"))  # CAST or TRY_CAST


def _ieee_mod(node: exp.Mod) -> exp.Expression:
    """a % b of DOUBLEs as DuckDB computes it: by zero it is NaN (Spark raises REMAINDER_BY_ZERO)."""
    a, b = node.this, node.expression
    nan = exp.Case(ifs=[exp.If(this=exp.Is(this=a.copy(), expression=exp.Null()), true=exp.Null())],
                   default=exp.Cast(this=exp.Literal.string("NaN"), to=exp.DataType.build("DOUBLE")))
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=exp.EQ(this=_double(b), expression=exp.Literal.number(0)), true=nan)],
                                   default=exp.Mod(this=a.copy(), expression=b.copy())))


def _float_sign(node: exp.Sign) -> exp.Expression:
    """sign(x) of a DOUBLE as DuckDB computes it: -1, 0 or 1 as a TINYINT, 0 for NaN (Spark's is a
    DOUBLE, NaN for NaN). NaN is tested first: both engines order it above every number."""
    x = node.this
    return exp.Cast(this=exp.Case(ifs=[exp.If(this=exp.IsNan(this=x.copy()), true=exp.Literal.number(0)),
                                       exp.If(this=exp.GT(this=x.copy(), expression=exp.Literal.number(0)),
                                              true=exp.Literal.number(1)),
                                       exp.If(this=exp.LT(this=x.copy(), expression=exp.Literal.number(0)),
                                              true=exp.Literal.number(-1)),
                                       exp.If(this=exp.Is(this=x.copy(), expression=exp.Null()), true=exp.Null())],
                                  default=exp.Literal.number(0)),
                    to=exp.DataType.build("TINYINT"))


# a regular expression both RE2 (DuckDB) and java.util.regex (Spark) read alike: literal characters,
# classes of them, groups, alternation, quantifiers, ^, and the ASCII escapes \d \w (and their negations)
_REGEX_ESCAPES = set("dDwW.\\[](){}*+?|^-/")
_REGEX_REFUSED = ("$", "[:", "(?", "{,")


def _regexp(node: exp.Expression):
    """Check a regular expression function; rewrite its pattern's ``.`` (any character but a newline in
    RE2; Java also leaves out \\r, \\u0085, \\u2028 and \\u2029) to ``[^\\n]``, which both read alike."""
    pattern = node.expression
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise _Refused("only a literal pattern can be checked to mean the same to Spark's Java regular expressions")
    text = pattern.this
    bad = [t for t in _REGEX_REFUSED if t in text]
    escapes = {text[i + 1] for i in range(len(text) - 1) if text[i] == "\\" and (i == 0 or text[i - 1] != "\\")}
    if bad or not escapes <= _REGEX_ESCAPES or text.endswith("\\") and not text.endswith("\\\\"):
        raise _Refused("Java reads $, POSIX classes, (? groups, {,n}, and escapes other than \\d \\w \\D \\W "
                       "and escaped punctuation otherwise than RE2")
    options = node.args.get("modifiers") if isinstance(node, exp.RegexpReplace) else \
        node.args.get("flag") or node.args.get("parameters") or node.args.get("options")
    if isinstance(node, exp.RegexpReplace):
        if not (isinstance(options, exp.Literal) and options.this == "g"):
            raise _Refused("DuckDB replaces the first match, Spark every match (pass 'g' to replace every match)")
        replacement = node.args.get("replacement")
        if not (isinstance(replacement, exp.Literal) and replacement.is_string
                and "\\" not in replacement.this and "$" not in replacement.this):
            raise _Refused("a replacement must be literal text without \\ or $ (the engines name groups otherwise)")
    elif options is not None:
        raise _Refused("options of a regular expression are lost on the way to Spark")
    dotless = _without_dots(text)
    if dotless == text:
        return None

    def rewrite(n: exp.Expression) -> exp.Expression:
        n = n.copy()
        n.set("expression", exp.Literal.string(dotless))
        return n
    return rewrite


def _without_dots(pattern: str) -> str:
    """``pattern`` with every unescaped ``.`` outside a character class written ``[^\\n]``."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "]" or pattern[i + 1:i + 3] == "^]":  # a ] first in a class is literal
                out.append(pattern[i:i + (2 if pattern[i + 1] == "]" else 3)])
                i += 2 if pattern[i + 1] == "]" else 3
                continue
        elif ch == ".":
            out.append("[^\\n]")
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _signed_round(node: exp.Round) -> exp.Expression:
    """round(x) of a DOUBLE with the sign DuckDB keeps on a zero (round(-0.125) is -0.0; Spark rounds
    through a decimal, which has no negative zero): x * 0 is a zero of x's sign."""
    rounded = exp.Round(this=node.this.copy())
    zero = exp.EQ(this=rounded.copy(), expression=exp.Literal.number(0))
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=zero, true=exp.Mul(this=exp.Paren(this=node.this.copy()),
                                                                       expression=exp.Literal.number(0)))],
                                   default=rounded))


def _double(x: exp.Expression) -> exp.Expression:
    return exp.Cast(this=exp.Paren(this=x.copy()), to=exp.DataType.build("DOUBLE"))


def _ieee_division(node: exp.Div) -> exp.Expression:
    """a / b in DOUBLE arithmetic, as DuckDB divides: by zero it is inf, -inf (by the sign of a and of
    the zero) or NaN, never an error (Spark raises DIVIDE_BY_ZERO, and never divides by zero)."""
    a, b = _double(node.this), _double(node.expression)
    special = exp.Case(ifs=[
        exp.If(this=exp.Is(this=a.copy(), expression=exp.Null()), true=exp.Null()),
        exp.If(this=exp.Or(this=exp.IsNan(this=a.copy()), expression=exp.EQ(this=a.copy(), expression=exp.Literal.number(0))),
               true=exp.Cast(this=exp.Literal.string("NaN"), to=exp.DataType.build("DOUBLE"))),
        exp.If(this=exp.EQ(this=exp.Paren(this=exp.GT(this=a.copy(), expression=exp.Literal.number(0))),
                           expression=exp.Paren(this=exp.Not(this=exp.Like(
                               this=exp.Cast(this=b.copy(), to=exp.DataType.build("VARCHAR")),
                               expression=exp.Literal.string("-%"))))),
               true=exp.Cast(this=exp.Literal.string("Infinity"), to=exp.DataType.build("DOUBLE")))],
        default=exp.Cast(this=exp.Literal.string("-Infinity"), to=exp.DataType.build("DOUBLE")))
    divided = exp.Div(this=a.copy(), expression=b.copy())
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=exp.EQ(this=b.copy(), expression=exp.Literal.number(0)), true=special)],
                                   default=divided))


def _day_of_week(x: exp.Expression, iso: bool) -> exp.Expression:
    """DuckDB's dayofweek (0 = Sunday) or isodow (1 = Monday .. 7): days since a Sunday, modulo 7,
    which both engines count alike (dayofweek itself counts from 1 on Spark)."""
    days = exp.DateDiff(this=exp.Cast(this=x.copy(), to=exp.DataType.build("DATE")),
                        expression=exp.Cast(this=exp.Literal.string("1970-01-04"), to=exp.DataType.build("DATE")),
                        unit=exp.var("DAY"))
    dow = exp.Mod(this=exp.Paren(this=exp.Add(this=exp.Paren(this=exp.Mod(this=days, expression=exp.Literal.number(7))),
                                              expression=exp.Literal.number(7))),
                  expression=exp.Literal.number(7))
    if iso:  # Monday 1 .. Sunday 7
        dow = exp.Add(this=exp.Paren(this=exp.Mod(this=exp.Paren(this=exp.Add(this=dow, expression=exp.Literal.number(6))),
                                                  expression=exp.Literal.number(7))),
                      expression=exp.Literal.number(1))
    return exp.Paren(this=dow)
