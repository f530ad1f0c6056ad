"""Parse one SQL statement and classify it: crr DDL, DML, or something DuckDB runs as it is.

crr extends DuckDB's SQL with ``CREATE REPLICATED TABLE``, ``CREATE REMOTE TABLE``,
``CREATE REMOTE SOURCE`` and ``CREATE MATERIALIZED VIEW`` (and their ``DROP``). Identifiers are case-insensitive: unquoted and
quoted names are folded to lower case, as DuckDB compares them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from crr.errors import SqlError, UnsupportedSqlError

DIALECT = "duckdb"

_CREATE_TABLE = re.compile(r"^\s*create\s+(replicated\s+table|remote\s+table|remote\s+source)\s+", re.I)
_CREATE_VIEW = re.compile(r"^\s*create\s+(or\s+replace\s+)?materialized\s+view\s+", re.I)
_DROP = re.compile(
    r"^\s*drop\s+(replicated\s+table|remote\s+table|remote\s+source|materialized\s+view|table|view)\s+"
    r"(if\s+exists\s+)?(\"(?:[^\"]|\"\")+\"|[A-Za-z_][\w$]*)\s*;?\s*$",
    re.I,
)
_READ_ONLY_HEADS = {"select", "with", "from", "show", "describe", "explain", "summarize", "values",
                    "pragma", "call", "table", "("}


@dataclass
class ColumnDecl:
    """A declared column: name, DuckDB type text, and whether NULL is refused."""

    name: str
    type_sql: str
    not_null: bool = False


@dataclass
class CreateTable:
    """``CREATE REPLICATED TABLE``, ``CREATE REMOTE TABLE`` or ``CREATE REMOTE SOURCE``."""

    kind: str  # "replicated" | "remote" | "source"
    name: str
    columns: list[ColumnDecl]
    key: list[str]
    if_not_exists: bool = False


@dataclass
class CreateView:
    """``CREATE MATERIALIZED VIEW name AS query``."""

    name: str
    query: exp.Expression
    sql: str
    if_not_exists: bool = False


@dataclass
class Drop:
    """``DROP`` of a crr relation; ``kind`` is the kind the statement named, if any."""

    kind: str | None  # "replicated" | "remote" | "source" | "view" | None (plain DROP TABLE / DROP VIEW)
    name: str
    if_exists: bool
    plain: str = ""  # "table" or "view" for a plain DROP


@dataclass
class Dml:
    """INSERT, UPDATE or DELETE aimed at a table."""

    kind: str  # "insert" | "update" | "delete"
    target: str
    tree: exp.Expression


@dataclass
class Other:
    """Any other statement: passes through to DuckDB (after the caller checks it touches no crr relation)."""

    sql: str
    tree: exp.Expression | None
    read_only: bool
    tables: set[str] = field(default_factory=set)


Statement = CreateTable | CreateView | Drop | Dml | Other


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold_identifier(name: str) -> str:
    """The form crr stores an identifier in: ASCII letters lower-cased, as DuckDB compares names
    (``"À"`` and ``"à"`` are different names to DuckDB, ``"A"`` and ``"a"`` the same)."""
    return name.translate(_ASCII_LOWER)


def normalize_name(name: str) -> str:
    """Fold an identifier (quoted or not) to the form crr stores in its catalog."""
    if len(name) >= 2 and name[0] == '"' and name[-1] == '"':
        name = name[1:-1].replace('""', '"')
    return fold_identifier(name)


def parse_one(sql: str) -> exp.Expression:
    """Parse exactly one statement with sqlglot, raising SqlError on syntax errors or several statements."""
    try:
        trees = [t for t in sqlglot.parse(sql, read=DIALECT) if t is not None]
    except ParseError as e:
        raise SqlError(f"cannot parse SQL: {_first_line(str(e))}") from None
    if len(trees) != 1:
        raise SqlError(f"expected one SQL statement, got {len(trees)}; run statements one at a time")
    return _lower_identifiers(trees[0])


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _lower_identifiers(tree: exp.Expression) -> exp.Expression:
    for ident in tree.find_all(exp.Identifier):
        ident.set("this", fold_identifier(ident.this))
    return tree


def classify(sql: str) -> Statement:
    """Parse and classify one statement."""
    m = _CREATE_TABLE.match(sql)
    if m:
        return _create_table(_kind_of(m.group(1)), "CREATE TABLE " + sql[m.end():])
    m = _CREATE_VIEW.match(sql)
    if m:
        if m.group(1):
            raise UnsupportedSqlError(
                "CREATE OR REPLACE MATERIALIZED VIEW is not supported; DROP the view, then CREATE it"
            )
        return _create_view(sql)
    m = _DROP.match(sql)
    if m:
        words = m.group(1).lower().split()
        kind = _kind_of(m.group(1)) if len(words) == 2 else None
        return Drop(kind=kind, name=normalize_name(m.group(3)), if_exists=bool(m.group(2)),
                    plain="" if kind else words[0])
    try:
        tree = parse_one(sql)
    except SqlError as e:
        # DuckDB-only syntax sqlglot cannot parse still runs when it is plainly a read
        head = sql.lstrip().split(None, 1)[0].lower() if sql.strip() else ""
        if head in _READ_ONLY_HEADS and str(e).startswith("cannot parse") and ";" not in sql.strip().rstrip(";"):
            return Other(sql=sql, tree=None, read_only=True)
        raise
    if isinstance(tree, (exp.Insert, exp.Update, exp.Delete)):
        target = tree.this
        if isinstance(target, exp.Schema):
            target = target.this
        if not isinstance(target, exp.Table):
            raise UnsupportedSqlError(f"{tree.key.upper()} into {target.sql(DIALECT)} is not supported")
        kind = {exp.Insert: "insert", exp.Update: "update", exp.Delete: "delete"}[type(tree)]
        return Dml(kind=kind, target=target.name, tree=tree)
    read_only = isinstance(tree, (exp.Query, exp.Describe, exp.Show)) or (
        isinstance(tree, exp.Command) and str(tree.this).lower() in _READ_ONLY_HEADS
    )
    tables = {t.name for t in tree.find_all(exp.Table) if t.name}
    schemas = {t.db for t in tree.find_all(exp.Table) if t.db}
    return Other(sql=sql, tree=tree, read_only=read_only, tables=tables | {f"{s}." for s in schemas})


def _kind_of(words: str) -> str:
    """The relation kind a DDL phrase names: ``remote source`` -> source, ``remote table`` -> remote..."""
    first, second = words.lower().split()
    return {"replicated": "replicated", "materialized": "view"}.get(first) or (
        "source" if second == "source" else "remote")


def _create_table(kind: str, sql: str) -> CreateTable:
    tree = parse_one(sql)
    what = {"replicated": "REPLICATED TABLE", "remote": "REMOTE TABLE", "source": "REMOTE SOURCE"}[kind]
    if not isinstance(tree, exp.Create) or not isinstance(tree.this, exp.Schema):
        raise SqlError(f"CREATE {what} needs a column list: CREATE {what} name (col type, ...)")
    if tree.expression is not None:
        raise UnsupportedSqlError(f"CREATE {what} ... AS SELECT is not supported; create the table, then INSERT ... SELECT")
    schema = tree.this
    name = schema.this.name
    if schema.this.db:
        raise UnsupportedSqlError(f"crr relations live in the main schema; drop the schema prefix from {schema.this.sql(DIALECT)}")
    columns: list[ColumnDecl] = []
    key: list[str] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            col = ColumnDecl(name=item.name, type_sql=item.args["kind"].sql(DIALECT) if item.args.get("kind") else "")
            if not col.type_sql:
                raise SqlError(f"column {col.name} of {name} has no type")
            for constraint in item.args.get("constraints") or []:
                ckind = constraint.args.get("kind")
                if isinstance(ckind, exp.NotNullColumnConstraint) and not ckind.args.get("allow_null"):
                    col.not_null = True
                elif isinstance(ckind, exp.PrimaryKeyColumnConstraint):
                    key.append(col.name)
                    col.not_null = True
                else:
                    raise UnsupportedSqlError(
                        f"column constraint {constraint.sql(DIALECT)} on {name}.{col.name} is not supported; "
                        "crr tables take NOT NULL and PRIMARY KEY only"
                    )
            columns.append(col)
        elif isinstance(item, exp.PrimaryKey):
            if key:
                raise SqlError(f"table {name} declares its PRIMARY KEY twice")
            key = [e.name for e in item.expressions]
        else:
            raise UnsupportedSqlError(
                f"table constraint {item.sql(DIALECT)} on {name} is not supported; crr tables take PRIMARY KEY only"
            )
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise SqlError(f"table {name} declares a column twice: {names}")
    for k in key:
        if k not in names:
            raise SqlError(f"PRIMARY KEY column {k} is not a column of {name} (columns: {', '.join(names)})")
        next(c for c in columns if c.name == k).not_null = True
    return CreateTable(kind=kind, name=name, columns=columns, key=key,
                       if_not_exists=bool(tree.args.get("exists")))


def _create_view(sql: str) -> CreateView:
    body = _CREATE_VIEW.sub("CREATE VIEW ", sql, count=1)
    tree = parse_one(body)
    if not isinstance(tree, exp.Create) or tree.expression is None:
        raise SqlError("CREATE MATERIALIZED VIEW needs a query: CREATE MATERIALIZED VIEW name AS SELECT ...")
    target = tree.this
    if isinstance(target, exp.Schema):
        raise UnsupportedSqlError("a column list after the view name is not supported; name the columns with AS in the query")
    if target.db:
        raise UnsupportedSqlError(f"crr relations live in the main schema; drop the schema prefix from {target.sql(DIALECT)}")
    query = tree.expression
    return CreateView(name=target.name, query=query, sql=query.sql(DIALECT),
                      if_not_exists=bool(tree.args.get("exists")))
