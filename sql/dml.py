"""Turn INSERT / UPDATE / DELETE on a replicated table into queries that yield the affected rows.

crr does not let DuckDB modify a replicated table directly: the write has to go through the AUG
layer (ids, causal lengths, stamps). So each DML statement becomes one or two ``SELECT`` queries
over the APP table (which always equals the visible state) whose results are the rows to delete
and the rows to insert. Parameters (``?``, ``$n``) keep their positions, so the caller passes the
statement's parameters unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from crr.errors import SqlError, UnsupportedSqlError
from crr.sql.parse import fold_identifier
from crr.sql.statements import DIALECT


@dataclass(frozen=True)
class Constant:
    """A cell of an INSERT's VALUES written as a literal: an integer (``5``, ``-5``), a string
    (``'x'``) or a boolean, as Python holds it (see :func:`_constant`)."""

    value: int | str | bool


Cell = int | Constant | None
"""What one value of an INSERT's VALUES row is (:attr:`RowQueries.params_at`): the position of its
``?`` among the statement's parameters, a :class:`Constant`, or None (NULL, or a column the INSERT
does not name)."""


@dataclass(frozen=True)
class KeyedUpdate:
    """An UPDATE of one row at most, read from its text: ``UPDATE t SET c = cell, ... WHERE k = cell AND
    ...`` with no FROM and no WITH, every cell a ``?`` parameter, NULL or a literal
    (:data:`Cell`), and the WHERE a conjunction of ``column = cell`` equalities, one per column
    (:attr:`RowQueries.by_key`). When the equalities name exactly the table's key, a caller may find
    the row by the key's values and write its new values without running ``new``."""

    sets: tuple[tuple[str, Cell], ...]  # (column, cell) of each SET, in the order written
    where: tuple[tuple[str, Cell], ...]  # (column, cell) of each equality of the WHERE


@dataclass
class RowQueries:
    """SQL of the rows a statement removes (``old``) and adds (``new``); either may be None.

    Both select the table's columns in declaration order, named positionally ``c0, c1, ...`` (crr's
    internal names, which no user column name can collide with); ``new`` casts every value to its
    declared type. For an UPDATE, ``old`` and ``new`` are one query whose rows carry each row's new
    values (``c0, c1, ...``) and its old values (``o0, o1, ...``).
    """

    old: str | None
    new: str | None
    # an INSERT ... VALUES whose cells are all ``?`` parameters, NULL or plain literals: per row, each
    # table column's :data:`Cell`, so a caller may read the rows from the parameters and the
    # literals without running ``new``
    params_at: tuple[tuple[Cell, ...], ...] | None = None
    # a DELETE: the statement itself, run on the APP table, and the name its rows go by there (the
    # target's alias or name), so a caller may delete the APP rows directly and read them RETURNING
    delete: str | None = None
    qualifier: str | None = None
    # an INSERT whose source's width the text does not tell: ``new`` makes DuckDB's binder refuse a
    # source of another width, with its message about set operations (see :func:`insert_rows`)
    width_checked: bool = False
    # what the statement's values are to the application, in the order of crr's names for them: an
    # UPDATE's ``_crr_set_<i>`` ("the value of SET n"), an INSERT's ``_crr_in_<i>`` ("the value for
    # column n"); see :func:`internal_names_named`
    values_named: tuple[str, ...] = ()
    # an UPDATE of parameters and literals whose WHERE equates columns with such values (see
    # :class:`KeyedUpdate`), so a caller may find the row by its key without running ``new``
    by_key: KeyedUpdate | None = None

    def internal_names_named(self, message: str) -> str:
        """A database error's ``message`` about a rows query of this statement, naming a value as the
        application knows it ("when casting the value of SET n") rather than by crr's name for it
        (DuckDB: "when casting from source column _crr_set_0")."""
        found = _VALUE_CAST.search(message) if self.values_named else None
        if found is None or int(found.group(1)) >= len(self.values_named):
            return message
        return f"{message[:found.start()]}{self.values_named[int(found.group(1))]}"


# the end of DuckDB's conversion error (the message quotes the value before it, which may hold any text)
_VALUE_CAST = re.compile(r'from source column "?_crr_(?:set|in)_(\d+)"?\s*$')


def _q(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _cast(e: exp.Expression, type_sql: str) -> exp.Expression:
    return exp.Cast(this=e, to=exp.DataType.build(type_sql, dialect=DIALECT))


def _with_ctes(tree: exp.Expression, query: exp.Select) -> exp.Select:
    """``query`` with the statement's leading ``WITH`` (``WITH x AS (...) INSERT ...``), whose names its
    parts read."""
    ctes = tree.args.get("with_")
    if ctes is not None:
        query.set("with_", ctes.copy())
    return query


def _refuse_cte_named_like(tree: exp.Expression, target: exp.Table, verb: str) -> None:
    """Refuse ``WITH table AS (...) UPDATE table ...`` (or DELETE): the statement's target would be
    the CTE, which DuckDB refuses (it can only change a base table); the rows query crr derives
    from the statement would read the CTE in the table's place and change other rows."""
    ctes = tree.args.get("with_")
    for cte in ctes.expressions if ctes is not None and not target.db else []:
        if fold_identifier(cte.alias) == fold_identifier(target.name):
            action = "update" if verb == "UPDATE" else "delete from"
            raise SqlError(f"the WITH clause names a CTE {cte.alias}, as the table this {verb} changes; DuckDB "
                           f"can only {action} a base table: give the CTE another name")


def _refuse(tree: exp.Expression, arg: str, what: str, instead: str) -> None:
    """Refuse a clause crr does not maintain (``tree``'s ``arg``), saying what to write ``instead``."""
    if tree.args.get(arg):
        raise UnsupportedSqlError(f"{what} is not supported on replicated tables; {instead}")


_UPSERT = "UPDATE the rows whose key is there, and INSERT ... SELECT ... WHERE NOT EXISTS (...) the others"
_RETURNING = "run the statement, then SELECT the rows it changed"
_BOUNDED = "name the rows in WHERE (e.g. by their key, or a key IN (SELECT ... ORDER BY ... LIMIT n))"


def insert_rows(tree: exp.Insert, table: str, columns: list[tuple[str, str]]) -> RowQueries:
    """Rows added by ``INSERT INTO table [(cols)] VALUES ... | SELECT ...``."""
    _refuse(tree, "conflict", "INSERT ... ON CONFLICT", _UPSERT)
    _refuse(tree, "returning", "INSERT ... RETURNING", _RETURNING)
    _refuse(tree, "alternative", "INSERT OR REPLACE / INSERT OR IGNORE", _UPSERT)
    _refuse(tree, "by_name", "INSERT ... BY NAME", "list the columns: INSERT INTO t (a, b) SELECT a, b ...")
    _refuse(tree, "overwrite", "INSERT OVERWRITE", "DELETE FROM the table, then INSERT, in two statements")
    names = [c for c, _ in columns]
    if isinstance(tree.this, exp.Schema):
        target_cols = [e.name for e in tree.this.expressions]
        for c in target_cols:
            if c not in names:
                raise SqlError(f"table {table} has no column {c} (columns: {', '.join(names)})")
        if len(set(target_cols)) != len(target_cols):
            raise SqlError(f"INSERT names a column of {table} twice")
    else:
        target_cols = names
    source = tree.expression
    if source is None and tree.args.get("default"):
        raise UnsupportedSqlError("INSERT ... DEFAULT VALUES is not supported; list the values")
    if source is None:
        raise SqlError(f"INSERT INTO {table} needs its rows: VALUES (...) or a query")
    width = _width(source)
    if width is not None and width != len(target_cols):
        raise SqlError(f"INSERT into {table} gives {width} values for {len(target_cols)} columns "
                       f"({', '.join(target_cols)}); give one value per column")
    if isinstance(source, exp.Values):
        if any(isinstance(v, exp.Var) and v.name.upper() == "DEFAULT" for row in source.expressions
               for v in (row.expressions if isinstance(row, exp.Tuple) else [row])):
            raise UnsupportedSqlError("INSERT ... VALUES (..., DEFAULT) is not supported: crr tables have no column "
                                      "defaults; give the value (or NULL), or leave the column out of the column list")
        # each cell is cast to its column's type inside the list, as DuckDB's own INSERT does, so literals
        # of different types in one column ('infinity' beside TIMESTAMP '...') need not unify first
        types = dict(columns)
        values = source.copy()
        for row in values.expressions:
            if isinstance(row, exp.Tuple) and len(row.expressions) == len(target_cols):
                row.set("expressions", [_cast(e, types[c]) for e, c in zip(row.expressions, target_cols)])
        source = exp.select("*").from_(exp.Subquery(this=values))
    elif width is None:
        # the text does not tell the width (``SELECT *``): a first UNION ALL branch of no rows and exactly
        # the columns inserted into makes DuckDB's binder refuse a source of another width, where the
        # alias below would take its first columns and drop the rest
        empty = exp.select(*[exp.alias_(exp.Null(), f"c{i}", quoted=True) for i in range(len(target_cols))]).limit(0)
        source = exp.select("*").from_(exp.Subquery(this=exp.Union(
            this=exp.Subquery(this=empty), expression=exp.Subquery(this=source.copy()), distinct=False)))
    # the source's columns get crr's names (``_crr_in_<i>``: no application column's name) so that a
    # failed cast names a value crr can name again for the application (RowQueries.values_named)
    inner_alias = exp.TableAlias(this=_q("_crr_src"), columns=[_q(f"_crr_in_{i}") for i in range(len(target_cols))])
    subquery = exp.Subquery(this=source.copy(), alias=inner_alias)
    projections = []
    for name, type_sql in columns:
        if name in target_cols:
            value: exp.Expression = exp.column(f"_crr_in_{target_cols.index(name)}", table="_crr_src", quoted=True)
        else:
            value = exp.Null()
        projections.append(exp.alias_(_cast(value, type_sql), f"c{len(projections)}", quoted=True))
    query = _with_ctes(tree, exp.select(*projections).from_(subquery))
    return RowQueries(old=None, new=query.sql(DIALECT), params_at=_params_at(tree, names, target_cols),
                      width_checked=width is None, values_named=tuple(f"the value for column {c}" for c in target_cols))


def _width(source: exp.Expression) -> int | None:
    """How many values each row of an INSERT's source has, when its text tells (VALUES, or a SELECT
    list without ``*``); None otherwise (DuckDB's binder then checks too few, and more are dropped)."""
    while isinstance(source, exp.Subquery):
        source = source.this
    if isinstance(source, exp.SetOperation):
        return _width(source.this)
    if isinstance(source, exp.Values):
        widths = {len(row.expressions) if isinstance(row, exp.Tuple) else 1 for row in source.expressions}
        return widths.pop() if len(widths) == 1 else None
    def expands(e: exp.Expression) -> bool:  # *, * EXCLUDE (...), t.*, COLUMNS(...): widths the text does not tell
        return isinstance(e, (exp.Star, exp.Columns)) or isinstance(e, exp.Column) and isinstance(e.this, exp.Star)

    if isinstance(source, exp.Select) and not any(expands(e) for e in source.expressions):
        return len(source.expressions)
    return None


def _params_at(tree: exp.Insert, names: list[str], target_cols: list[str]) -> tuple[tuple[Cell, ...], ...] | None:
    """:attr:`RowQueries.params_at` of an INSERT, or None when some cell is not a ``?``, NULL or a
    literal :func:`_constant` takes."""
    values = tree.expression
    if not isinstance(values, exp.Values):
        return None
    rows, cells = [], _Cells()
    for row in values.expressions:
        if not isinstance(row, exp.Tuple) or len(row.expressions) != len(target_cols):
            return None
        at: dict[str, Cell] = {}
        for col, e in zip(target_cols, row.expressions):
            cell = cells.read(e)
            if cell is _NOT_A_CELL:
                return None
            at[col] = cell
        rows.append(tuple(at.get(name) for name in names))
    if not cells.every_param_read(tree):
        return None  # a parameter outside the VALUES cells: positions would not line up
    return tuple(rows)


class _NotACell:
    """The kind of :data:`_NOT_A_CELL`."""


_NOT_A_CELL = _NotACell()
"""What :meth:`_Cells.read` gives for an expression that is no :data:`Cell` (a column, a call...)."""


class _Cells:
    """Reads the cells of a statement in the order written, numbering its ``?`` parameters so."""

    def __init__(self) -> None:
        self.params = 0  # the ``?`` read so far

    def read(self, e: exp.Expression) -> Cell | _NotACell:
        """``e`` as a :data:`Cell`: a ``?`` (its position), NULL (None), a literal :func:`_constant`
        takes, or :data:`_NOT_A_CELL`."""
        if isinstance(e, exp.Placeholder) and e.this is None:
            self.params += 1
            return self.params - 1
        if isinstance(e, exp.Null):
            return None
        constant = _constant(e)
        return _NOT_A_CELL if constant is None else constant

    def every_param_read(self, tree: exp.Expression) -> bool:
        """Whether the cells read hold every parameter of ``tree`` (else positions would not line up)."""
        return self.params == sum(1 for _ in tree.find_all(exp.Placeholder))


def _constant(cell: exp.Expression) -> Constant | None:
    """A VALUES cell that is a string literal, an integer literal (digits, perhaps negated) or
    TRUE/FALSE, as a :class:`Constant`; None for any other expression (a decimal, a cast, a
    function call, an E-string...). The rows statement holds the literal as sqlglot writes it back,
    so the value is the one DuckDB reads there."""
    if isinstance(cell, exp.Boolean):
        return Constant(bool(cell.this))
    negated = isinstance(cell, exp.Neg)
    literal = cell.this if negated else cell
    if not isinstance(literal, exp.Literal) or not isinstance(literal.this, str):
        return None
    if literal.is_string:
        return None if negated else Constant(literal.this)
    if re.fullmatch(r"[0-9]+", literal.this):
        return Constant(-int(literal.this) if negated else int(literal.this))
    return None


def _target(tree: exp.Expression) -> exp.Table:
    target = tree.this
    if isinstance(target, exp.Schema):  # pragma: no cover - not produced for UPDATE/DELETE
        target = target.this
    return target


def update_rows(tree: exp.Update, table: str, columns: list[tuple[str, str]]) -> RowQueries:
    """Rows removed and added by ``UPDATE table SET ... [FROM ...] [WHERE ...]``."""
    _refuse(tree, "returning", "UPDATE ... RETURNING", _RETURNING)
    _refuse(tree, "order", "UPDATE ... ORDER BY", _BOUNDED)
    _refuse(tree, "limit", "UPDATE ... LIMIT", _BOUNDED)
    _refuse_cte_named_like(tree, _target(tree), "UPDATE")
    names = [c for c, _ in columns]
    target = _target(tree).copy()
    qualifier = target.alias_or_name
    assignments: dict[str, exp.Expression] = {}
    for eq in tree.expressions:
        if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
            raise UnsupportedSqlError(f"UPDATE assignment {eq.sql(DIALECT)} is not supported; use SET col = expr")
        if eq.this.table:
            qualifier = ".".join(part for part in (eq.this.catalog, eq.this.db, eq.this.table) if part)
            raise SqlError(f"qualified column names in UPDATE ... SET are not supported (DuckDB refuses them "
                           f"too): write SET {eq.this.name} = ..., without {qualifier}.")
        col = eq.this.name
        if col not in names:
            raise SqlError(f"table {table} has no column {col} (columns: {', '.join(names)})")
        if col in assignments:
            raise SqlError(f"UPDATE sets column {col} twice")
        if eq.expression.find(exp.Unnest, exp.Explode) is not None:
            raise UnsupportedSqlError(f"UPDATE ... SET {col} = {eq.expression.sql(DIALECT)[:60]}: a set-returning "
                                      "function gives a row several new values; DuckDB refuses UNNEST in SET too")
        if (isinstance(eq.expression, exp.Column) and eq.expression.name == "default" and not eq.expression.table
                and not eq.expression.this.quoted):
            raise UnsupportedSqlError(f"UPDATE ... SET {col} = DEFAULT is not supported: crr tables have no "
                                      "column defaults; SET it to a value (or NULL)")
        assignments[col] = eq.expression
    # SET expressions come first, in the order written, so positional parameters keep their order.
    set_cols = list(assignments)
    set_proj = [exp.alias_(assignments[c].copy(), f"_crr_set_{i}", quoted=True) for i, c in enumerate(set_cols)]
    old_proj = [exp.alias_(exp.column(n, table=qualifier, quoted=True), f"_crr_old_{i}", quoted=True)
                for i, n in enumerate(names)]
    inner = exp.select(*set_proj, *old_proj).from_(target)
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is not None:
        for extra in [from_.this, *from_.expressions]:
            if extra is not None:
                inner = inner.join(extra.copy(), join_type="cross")
    where = tree.args.get("where")
    if where is not None:
        inner = inner.where(where.this.copy())
    new_proj = []
    for i, (n, type_sql) in enumerate(columns):
        src = f"_crr_set_{set_cols.index(n)}" if n in assignments else f"_crr_old_{i}"
        new_proj.append(exp.alias_(_cast(exp.column(src, quoted=True), type_sql), f"c{i}", quoted=True))
    old_cols = [exp.alias_(exp.column(f"_crr_old_{i}", quoted=True), f"o{i}", quoted=True) for i in range(len(names))]
    query = exp.select(*new_proj, *old_cols).from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=_q("_crr_upd"))))
    if from_ is not None:
        # a row the FROM matches several times is updated once, with the values of one match, as
        # DuckDB does (each match was a new row of its own: an unkeyed row became several)
        query = query.distinct(*[exp.column(f"_crr_old_{i}", quoted=True) for i in range(len(names))])
    sql = _with_ctes(tree, query).sql(DIALECT)
    by_key = _keyed_update(tree, assignments, names, qualifier) if from_ is None and where is not None else None
    return RowQueries(old=sql, new=sql, values_named=tuple(f"the value of SET {c}" for c in set_cols), by_key=by_key)


def _keyed_update(tree: exp.Update, assignments: dict[str, exp.Expression], names: list[str],
                  qualifier: str) -> KeyedUpdate | None:
    """:attr:`RowQueries.by_key` of an UPDATE (its SET ``assignments``, the table's column ``names``,
    the name its rows go by), or None when it is not a :class:`KeyedUpdate`. Positional parameters
    are numbered in the order written: the SET values, then the WHERE's equalities left to right."""
    if tree.args.get("with") is not None or tree.args.get("with_") is not None:
        return None
    cells = _Cells()
    sets: list[tuple[str, Cell]] = []
    for col, value in assignments.items():
        cell = cells.read(value)
        if cell is _NOT_A_CELL:
            return None
        sets.append((col, cell))  # type: ignore[arg-type]
    where: list[tuple[str, Cell]] = []
    condition = tree.args["where"].this
    for eq in (condition.flatten() if isinstance(condition, exp.And) else [condition]):
        if not isinstance(eq, exp.EQ):
            return None
        column, value = (eq.this, eq.expression) if isinstance(eq.this, exp.Column) else (eq.expression, eq.this)
        if (not isinstance(column, exp.Column) or column.name not in names or column.db or column.catalog
                or column.table not in ("", qualifier) or any(c == column.name for c, _ in where)):
            return None
        cell = cells.read(value)
        if cell is _NOT_A_CELL:
            return None
        where.append((column.name, cell))  # type: ignore[arg-type]
    if not cells.every_param_read(tree):
        return None  # a parameter elsewhere: positions would not line up
    return KeyedUpdate(tuple(sets), tuple(where))


def delete_rows(tree: exp.Delete, table: str, columns: list[tuple[str, str]]) -> RowQueries:
    """Rows removed by ``DELETE FROM table [USING ...] [WHERE ...]``."""
    _refuse(tree, "returning", "DELETE ... RETURNING", _RETURNING)
    _refuse(tree, "limit", "DELETE ... LIMIT", _BOUNDED)
    _refuse_cte_named_like(tree, _target(tree), "DELETE")
    target = _target(tree).copy()
    qualifier = target.alias_or_name
    proj = [exp.alias_(exp.column(n, table=qualifier, quoted=True), f"c{i}", quoted=True)
            for i, (n, _) in enumerate(columns)]
    query = exp.select(*proj).from_(target)
    for extra in tree.args.get("using") or []:
        query = query.join(extra.copy(), join_type="cross")
    where = tree.args.get("where")
    if where is not None:
        query = query.where(where.this.copy())
    if tree.args.get("using"):
        query = query.distinct()
    return RowQueries(old=_with_ctes(tree, query).sql(DIALECT), new=None, delete=tree.sql(DIALECT), qualifier=qualifier)
