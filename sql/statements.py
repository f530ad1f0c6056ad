"""Parse one SQL statement and classify it: crr DDL, DML, or something DuckDB runs as it is.

crr extends DuckDB's SQL with ``CREATE REPLICATED TABLE``, ``CREATE REMOTE TABLE``,
``CREATE REMOTE SOURCE`` and ``CREATE MATERIALIZED VIEW`` (and their ``DROP``). Identifiers are case-insensitive: unquoted and
quoted names are folded to lower case, as DuckDB compares them (see :mod:`crr.sql.parse`). Whether any other
statement may change a table, and which, is the write guard's call (:mod:`crr.sql.guard`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from enum import Enum

from sqlglot import Dialect, exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from crr.errors import SqlError, UnsupportedSqlError
from crr.sql.guard import Effects, duckdb_parse_error, is_plain_dml, statement_effects
from crr.sql.parse import (DIALECT, STATEMENT_END, WORD_GAP, fold_identifier, normalize_name, parse_one,
                           without_leading_blank, words_of)

__all__ = [
    "DIALECT", "RelationKind", "DmlKind", "ColumnDecl", "CreateTable", "CreateView", "Drop", "Dml", "Other",
    "Statement", "classify", "fold_identifier", "normalize_name", "parse_one", "RESERVED_PREFIX", "is_reserved",
    "check_not_reserved", "creates_relation",
]  # DIALECT, fold_identifier, normalize_name and parse_one live in crr.sql.parse; importable here as before

_G = WORD_GAP  # between two words, spaces and comments
_CREATE_TABLE = re.compile(rf"^\s*create{_G}(replicated{_G}table|remote{_G}table|remote{_G}source){_G}", re.I)
_CREATE_VIEW = re.compile(rf"^\s*create{_G}(or{_G}replace{_G})?materialized{_G}view{_G}", re.I)
_VIEW_QUERY = re.compile(r"\bas\s+((\(\s*)*(select|with|from|values)\b)", re.I)
_DROP = re.compile(
    rf"^\s*drop{_G}(replicated{_G}table|remote{_G}table|remote{_G}source|materialized{_G}view|table|view){_G}"
    rf"(if{_G}exists{_G})?(\"(?:[^\"]|\"\")+\"|[A-Za-z_][\w$]*)" + STATEMENT_END,
    re.I | re.S,
)


class RelationKind(str, Enum):
    """What a crr relation is at a site (stored by value in the catalog)."""

    REPLICATED = "replicated"  # a replicated table: written here, its tuples are their own provenance
    REMOTE = "remote"  # a readable copy of a relation held elsewhere
    SOURCE = "source"  # a relation held elsewhere that only feeds this site's views
    VIEW = "view"  # a materialized view computed here


class DmlKind(str, Enum):
    """The kind of a DML statement on a replicated table."""

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclass
class ColumnDecl:
    """A declared column: name, DuckDB type text, and whether NULL is refused."""

    name: str
    type_sql: str
    not_null: bool = False


@dataclass
class CreateTable:
    """``CREATE REPLICATED TABLE``, ``CREATE REMOTE TABLE`` or ``CREATE REMOTE SOURCE``."""

    kind: RelationKind  # REPLICATED, REMOTE or SOURCE
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
    written: str | None = None  # the query's text as the statement has it (DuckDB names columns after it)


@dataclass
class Drop:
    """``DROP`` of a crr relation; ``kind`` is the kind the statement named, if any."""

    kind: RelationKind | None  # the kind named, None for a plain DROP TABLE / DROP VIEW
    name: str
    if_exists: bool
    plain: str = ""  # "table" or "view" for a plain DROP


@dataclass
class Dml:
    """INSERT, UPDATE or DELETE aimed at a table."""

    kind: DmlKind
    target: str
    tree: exp.Expression

    @functools.cached_property
    def parameters(self) -> tuple[int, frozenset[str]]:
        """The parameters the statement takes: how many values a list must hold (the number of ``?``,
        or the largest ``$n``), and the names of its ``$name`` parameters."""
        marks = [p.this for p in self.tree.find_all(exp.Placeholder)]
        numbered = [int(m) for m in marks if m is not None and str(m).isdigit()]
        names = frozenset(str(m) for m in marks if m is not None and not str(m).isdigit())
        return (max(numbered) if numbered else sum(1 for m in marks if m is None)), names


@dataclass
class Other:
    """Any other statement: passes through to DuckDB, after the caller checks it changes no crr relation.

    ``read_only`` is True only if DuckDB will change no table; ``tables`` holds every table the statement
    names, read or written, and ``schema.`` for each schema it names; ``writes`` holds those it may change
    (see :class:`crr.sql.guard.Effects`). A statement that is not read-only and is given no ``writes`` may
    change every name in ``tables``.
    """

    sql: str
    tree: exp.Expression | None
    read_only: bool
    tables: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.read_only:
            self.writes = set()
        elif not self.writes:
            self.writes = set(self.tables)

    @classmethod
    def judged(cls, sql: str, effects: Effects) -> Other:
        """The statement ``sql`` with the write guard's verdict on it."""
        return cls(sql=sql, tree=effects.tree, read_only=effects.read_only, tables=set(effects.tables),
                   writes=set(effects.writes))


Statement = CreateTable | CreateView | Drop | Dml | Other


def classify(sql: str) -> Statement:
    """Parse and classify one statement (:class:`SqlError` for anything but a string)."""
    if not isinstance(sql, str):
        raise SqlError(f"execute takes one SQL statement as a string, got {type(sql).__name__}")
    known = _others.get(sql)
    if known is not None:  # apps repeat their queries: the verdict is a function of the text alone
        return known
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as e:
        raise SqlError(f"the statement text is not valid Unicode ({e.reason} at character {e.start}); DuckDB "
                       "keeps only valid UTF-8 text, as a parameter too: fix the text, or store such a value as "
                       "bytes in a BLOB column") from None
    body = without_leading_blank(sql)  # crr's DDL after a comment is crr's DDL
    m = _CREATE_TABLE.match(body)
    if m:
        return _create_table(_kind_of(words_of(m.group(1))), "CREATE TABLE " + body[m.end():])
    m = _CREATE_VIEW.match(body)
    if m:
        if m.group(1):
            raise UnsupportedSqlError(
                "CREATE OR REPLACE MATERIALIZED VIEW is not supported; DROP the view, then CREATE it"
            )
        return _create_view(body)
    m = _DROP.match(body)
    if m:
        words = words_of(m.group(1))
        kind = _kind_of(words) if len(words) == 2 else None
        return Drop(kind=kind, name=normalize_name(m.group(3)), if_exists=bool(m.group(2)),
                    plain="" if kind else words[0])
    try:
        tree: exp.Expression | None = parse_one(sql)
    except SqlError as e:
        if not str(e).startswith("cannot parse"):
            raise
        tree = None  # DuckDB-only syntax: DuckDB's own parser decides in the guard
    if isinstance(tree, (exp.Insert, exp.Update, exp.Delete)):
        target = tree.this
        if isinstance(target, exp.Schema):
            target = target.this
        if isinstance(target, exp.Table):
            # a table of another schema or database (o.t) is not crr's t: DuckDB runs it, as the guard allows
            in_main = not target.catalog and target.db in ("", "main")
            if in_main and is_plain_dml(sql, tree):
                kind = {exp.Insert: DmlKind.INSERT, exp.Update: DmlKind.UPDATE, exp.Delete: DmlKind.DELETE}[type(tree)]
                return Dml(kind=kind, target=target.name, tree=tree)
        elif isinstance(target, exp.Expression):
            raise UnsupportedSqlError(f"{tree.key.upper()} into {target.sql(DIALECT)} is not supported")
        else:
            tree = None  # sqlglot misread it (DELETE t WHERE ...): DuckDB's parser decides in the guard
        # a write nested in a CTE (or SQL text), or words sqlglot reads otherwise than DuckDB: not a plain
        # statement crr can rewrite or pass as it is
    return _remember(Other.judged(sql, statement_effects(sql, tree)))


_others: dict[str, Other] = {}


def _remember(stmt: Other) -> Other:
    """Keep the verdict on a statement for when it comes again (a bounded cache)."""
    if len(_others) >= 512:
        _others.clear()
    _others[stmt.sql] = stmt
    return stmt


def creates_relation(sql: str) -> bool:
    """Whether ``sql`` starts (after spaces and comments) as the crr DDL that declares a relation,
    which :func:`classify` reads as such: what may create a site file through ``crr sql``."""
    body = without_leading_blank(sql)
    view = _CREATE_VIEW.match(body)
    return bool(_CREATE_TABLE.match(body) or (view and not view.group(1)))


def _kind_of(words: list[str]) -> RelationKind:
    """The relation kind a DDL phrase's two words (:func:`words_of`) name: ``remote source`` -> source,
    ``remote table`` -> remote..."""
    first, second = words
    return {"replicated": RelationKind.REPLICATED, "materialized": RelationKind.VIEW}.get(first) or (
        RelationKind.SOURCE if second == "source" else RelationKind.REMOTE)


RESERVED_PREFIX = "_crr"  # crr's own objects: the schema _crr, temporary tables and Arrow views _crr_...


def is_reserved(name: str) -> bool:
    """Whether a table name belongs to crr's namespace (DuckDB folds identifiers' case)."""
    return name.lower().startswith(RESERVED_PREFIX)


def check_not_reserved(name: str) -> None:
    """Refuse a new relation named like crr's own objects, which would hide it from the site's SQL."""
    if is_reserved(name):
        raise UnsupportedSqlError(f"names starting with {RESERVED_PREFIX} belong to crr (its own tables); "
                                  f"name {name} otherwise")


def _create_table(kind: RelationKind, sql: str) -> CreateTable:
    tree = parse_one(sql)
    what = {RelationKind.REPLICATED: "REPLICATED TABLE", RelationKind.REMOTE: "REMOTE TABLE",
            RelationKind.SOURCE: "REMOTE SOURCE"}[kind]
    if not isinstance(tree, exp.Create) or not isinstance(tree.this, exp.Schema):
        raise SqlError(f"CREATE {what} needs a column list: CREATE {what} name (col type, ...)")
    if tree.expression is not None:
        raise UnsupportedSqlError(f"CREATE {what} ... AS SELECT is not supported; create the table, then INSERT ... SELECT")
    schema = tree.this
    name = schema.this.name
    if schema.this.db:
        raise UnsupportedSqlError(f"crr relations live in the main schema; drop the schema prefix from {schema.this.sql(DIALECT)}")
    check_not_reserved(name)
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
                    if key:
                        raise SqlError(f"table {name} declares its PRIMARY KEY twice ({key[0]}, {col.name}); "
                                       "for a key of several columns write PRIMARY KEY (a, b) after the columns")
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
                raise SqlError(f"table {name} declares its PRIMARY KEY twice; for a key of several columns write "
                               "PRIMARY KEY (a, b) after the columns, and no column PRIMARY KEY")
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
    if isinstance(tree, exp.Command):  # sqlglot could not read the query: say where, as for a plain query
        query = _VIEW_QUERY.search(body)
        if query:
            parse_one(body[query.start(1):])
    if not isinstance(tree, exp.Create) or tree.expression is None:
        raise SqlError("CREATE MATERIALIZED VIEW needs a query: CREATE MATERIALIZED VIEW name AS SELECT ...")
    refused = duckdb_parse_error(body)
    if refused:  # a view means what DuckDB makes of its text (sqlglot reads BETWEEN SYMMETRIC, DuckDB does not)
        raise SqlError(f"DuckDB cannot read the query of view {tree.this.name}: {refused}; write it in DuckDB's SQL")
    target = tree.this
    if isinstance(target, exp.Schema):
        raise UnsupportedSqlError("a column list after the view name is not supported; name the columns with AS in the query")
    if target.db:
        raise UnsupportedSqlError(f"crr relations live in the main schema; drop the schema prefix from {target.sql(DIALECT)}")
    check_not_reserved(target.name)
    query = tree.expression
    return CreateView(name=target.name, query=query, sql=query.sql(DIALECT),
                      if_not_exists=bool(tree.args.get("exists")), written=_written_query(body, query))


def _written_query(body: str, query: exp.Expression) -> str | None:
    """The text of ``query`` as ``body`` (a CREATE VIEW statement) has it: from the token after the
    first ``AS`` token (a name or a comment holding "as select" is no such token) to the end of the
    last token that is not a semicolon (comments are no tokens); None when that text does not parse
    to ``query``."""
    try:
        tokens = Dialect.get_or_raise(DIALECT).tokenize(body)
    except SqlglotError:
        return None
    start = next((i + 1 for i, t in enumerate(tokens) if t.token_type is TokenType.ALIAS), len(tokens))
    ends = [t for t in tokens[start:] if t.token_type is not TokenType.SEMICOLON]
    if not ends:
        return None
    text = body[tokens[start].start:ends[-1].end + 1]
    try:
        return text if parse_one(text) == query else None
    except SqlError:
        return None
