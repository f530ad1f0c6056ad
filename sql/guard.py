"""The write guard: what an arbitrary SQL statement may change, judged by what DuckDB will execute.

crr runs the statements it does not handle itself (anything but crr DDL and plain DML) through DuckDB as
they are; the caller must first know whether such a statement could change a crr relation.
:func:`statement_effects` tells it: whether the statement is read-only, every table it names, and the
tables it may write (a statement that only *reads* a crr relation, e.g. ``CREATE TABLE report AS SELECT *
FROM t``, writes only ``report``).

How it decides. DuckDB's parser gives the statement type; for SELECT-type statements its JSON
serialization gives the whole tree (a data-modifying CTE shows as an INSERT/UPDATE/DELETE query node with
its target); DuckDB's tokenizer finds the statement inside EXPLAIN ANALYZE, PREPARE, CALL, COPY (...) TO
and ``query('...')``, which are judged by that statement. sqlglot's tree, where it parses and reads the
same words as DuckDB, is walked as well: a data-changing node writes every table it names outside the
parts that only read (the query of INSERT ... SELECT and CREATE ... AS, the FROM/USING/WHERE of UPDATE,
DELETE and MERGE). Anything crr cannot see through is not read-only and may write every name in its text.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass

import duckdb
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

from crr.errors import SqlError, UnsupportedSqlError, first_line
from crr.sql.parse import DIALECT, fold_identifier, normalize_name, parse_one, statement_count_error


@dataclass(frozen=True)
class Effects:
    """What a statement may do to tables.

    Names are folded identifiers; ``schema.`` (with the dot) stands for a schema the statement names.
    ``writes`` over-approximates: when crr cannot tell which tables a statement changes, it holds every
    name in ``tables``. It is empty for a read-only statement.
    """

    read_only: bool  # DuckDB will change no table (nor any other catalog entry)
    tables: frozenset[str]  # every table it names, read or written, and ``schema.`` for each schema it names
    writes: frozenset[str]  # the tables (and ``schema.`` entries) it may change
    tree: exp.Expression | None = None  # sqlglot's tree, kept only if it reads the statement as DuckDB does


def statement_effects(sql: str, tree: exp.Expression | None = None) -> Effects:
    """Judge one statement that is neither crr DDL nor plain DML by what DuckDB will execute.

    ``tree`` is sqlglot's parse of ``sql`` (identifiers folded, see :func:`crr.sql.parse.parse_one`) if the
    caller has it; without one the guard parses ``sql`` itself. Raises SqlError for several statements, and
    UnsupportedSqlError for statements crr refuses whatever they touch: USE and changes of the current
    schema, PREPARE of a statement that may write, IMPORT DATABASE / COPY FROM DATABASE, macros that
    would replace a built-in function, and SQL text it cannot check.
    """
    return _guard(sql, tree, 0) if tree is not None else _statement(sql, 0)


def is_plain_dml(sql: str, tree: exp.Insert | exp.Update | exp.Delete) -> bool:
    """True if sqlglot's INSERT, UPDATE or DELETE ``tree`` is all that ``sql`` does: DuckDB reads the same
    words, no data-changing statement is nested in it (a data-modifying CTE), and no SQL text it runs
    (``query('...')``) writes. Such a statement crr may rewrite, or pass as it is when its target is not a
    crr relation; any other goes to :func:`statement_effects`.

    Raises UnsupportedSqlError for SQL text crr cannot check (see :func:`statement_effects`).
    """
    toks = _tokens(sql)
    if toks is None or not _agrees(sql, toks):  # sqlglot read other code than DuckDB would run
        return False
    return _sql_text_effects(sql, toks, 0).read_only and not _facts(tree).nested_writes


# ---------------------------------------------------------------------------------------------------
# What is known to read, and what is known to write

def _nodes(*names: str) -> tuple[type, ...]:
    """The sqlglot node classes of these names that this sqlglot version has (older ones lack some)."""
    return tuple(getattr(exp, name) for name in names if hasattr(exp, name))


_WRITES = _nodes(
    "Insert", "Update", "Delete", "Merge", "Create", "Drop", "Alter", "Copy", "Command", "TruncateTable", "Use", "Set",
    "Pragma", "Transaction", "Commit", "Rollback", "Attach", "Detach", "Comment", "Refresh", "Cache", "Uncache",
    "LoadData", "Export", "Grant", "Revoke", "Execute", "Analyze")
"""sqlglot nodes that change something (or that sqlglot could not parse: Command); none is in a pure read."""

_READ_SLOTS: dict[type, frozenset[str]] = {
    exp.Insert: frozenset({"expression", "with", "with_", "returning", "where"}),
    exp.Update: frozenset({"with", "with_", "expressions", "from", "from_", "where", "returning", "order", "limit"}),
    exp.Delete: frozenset({"with", "with_", "using", "where", "returning", "order", "limit"}),
    exp.Merge: frozenset({"with", "with_", "using", "on", "whens", "expressions", "returning"}),
    exp.Create: frozenset({"expression"}),
}
"""The arguments of a data-changing sqlglot node that only read: its query, its conditions, its source.
Every table named anywhere else in the node may be changed: the target, an index's table, the table a
REFERENCES clause names (a foreign key constrains writes to that table). A write nested in a read slot
(a data-modifying CTE) is a node of its own and names its own targets. (``with_``/``from_`` are the
names newer sqlglot versions give these arguments.)"""

_ROOTS: dict[str, tuple[type, ...]] = {
    "INSERT": _nodes("Insert"), "UPDATE": _nodes("Update"), "DELETE": _nodes("Delete", "TruncateTable"),
    "MERGE_INTO": _nodes("Merge"), "CREATE": _nodes("Create"), "CREATE_FUNC": _nodes("Create"),
    "DROP": _nodes("Drop"), "ALTER": _nodes("Alter", "AlterTable"),
}
"""DuckDB statement types, and the sqlglot root nodes that may stand for them. The write targets in
sqlglot's tree are trusted only when its root is the statement DuckDB will run."""

_READ_NODES = {"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE", "BOUND_SUBQUERY_NODE"}
"""DuckDB query node types that only read; any other (INSERT/UPDATE/DELETE/MERGE query nodes) may write."""

_READ_PRAGMAS = {"table_info", "show", "show_tables", "show_tables_expanded", "show_databases", "database_list",
                 "database_size", "storage_info", "metadata_info", "functions", "collations", "version",
                 "platform", "user_agent"}
"""``PRAGMA name(...)`` forms that only read the catalog."""

_DML_CTE_WORDS = {"insert", "update", "delete", "merge"}
_DML_WORDS = {"insert", "update", "delete", "merge", "copy", "truncate", "create", "drop", "alter"}
_UNCHECKABLE = "json_execute_serialized_sql"  # runs a serialized statement, data-modifying CTEs included
_MAX_DEPTH = 8
# Settings a statement may change on a site's connection: resources and diagnostics, which never change
# what a query returns. That connection maintains the views and exports the changesets, so any other
# setting (integer_division, default_collation, TimeZone, arrow_lossless_conversion, ...) would make
# views differ from their queries or changesets unreadable elsewhere.
SETTINGS_ALLOWED = frozenset({
    "threads", "worker_threads", "external_threads", "memory_limit", "max_memory", "temp_directory",
    "max_temp_directory_size", "checkpoint_threshold", "wal_autocheckpoint", "enable_progress_bar",
    "enable_progress_bar_print", "progress_bar_time", "enable_profiling", "profiling_output", "profile_output",
    "profiling_mode", "custom_profiling_settings", "enable_object_cache", "explain_output", "log_query_path",
    "enable_logging", "logging_level", "logging_mode", "logging_storage", "enable_external_access",
    "enable_http_metadata_cache", "extension_directory", "autoinstall_known_extensions",
    "autoload_known_extensions", "allow_community_extensions", "custom_extension_repository",
})
SETTING_PREFIXES_ALLOWED = ("s3_", "http_", "azure_", "gcs_", "hf_")  # credentials and options of file systems
_NAME = re.compile(r'"(?:[^"]|"")+"|[A-Za-z_][\w$]*')


# ---------------------------------------------------------------------------------------------------
# DuckDB's parser

_duck_lock = threading.Lock()
_duck_con: tuple[int, duckdb.DuckDBPyConnection] | None = None


def _duck() -> duckdb.DuckDBPyConnection:
    """crr's private in-memory DuckDB connection, used only to parse (one per process; callers hold the lock)."""
    global _duck_con
    if _duck_con is None or _duck_con[0] != os.getpid():
        _duck_con = (os.getpid(), duckdb.connect(":memory:"))
    return _duck_con[1]


def _duck_parse(sql: str) -> list[str] | str:
    """DuckDB's statement types for ``sql`` (one per statement), or the first line of its parser's
    error when it refuses the text."""
    with _duck_lock:
        try:
            return [s.type.name for s in _duck().extract_statements(sql)]
        except duckdb.Error as e:
            return first_line(e)


def _duck_types(sql: str) -> list[str] | None:
    """DuckDB's statement types for ``sql`` (one per statement), or None if DuckDB's parser refuses it."""
    parsed = _duck_parse(sql)
    return None if isinstance(parsed, str) else parsed


def duckdb_parse_error(sql: str) -> str | None:
    """The first line of DuckDB's parser error for ``sql``, or None when DuckDB's parser reads it
    (sqlglot reads some text DuckDB refuses, and gives it a meaning of its own)."""
    parsed = _duck_parse(sql)
    return parsed if isinstance(parsed, str) else None


_builtins: frozenset[str] | None = None


def builtin_functions() -> frozenset[str]:
    """The names (lower case) of the functions and macros DuckDB has built in."""
    global _builtins
    with _duck_lock:
        if _builtins is None:
            rows = _duck().execute("SELECT DISTINCT function_name FROM duckdb_functions() "
                                   "WHERE database_name = 'system'").fetchall()
            _builtins = frozenset(str(r[0]).lower() for r in rows)
        return _builtins


def _duck_tree(sql: str) -> dict | None:
    """DuckDB's own parse tree of a SELECT-type statement as JSON, or None if it cannot serialize it."""
    with _duck_lock:
        try:
            row = _duck().execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
        except duckdb.Error:
            return None
    data = json.loads(row[0]) if row and row[0] else None
    return None if not isinstance(data, dict) or data.get("error") else data


# ---------------------------------------------------------------------------------------------------
# DuckDB's tokens

@dataclass(frozen=True)
class _Tok:
    """One DuckDB token: where it starts, its kind (keyword, identifier, string_const, operator...), its text."""

    start: int
    kind: str
    text: str

    @property
    def word(self) -> str:
        """The token as a folded identifier or keyword ('' for strings, numbers and operators)."""
        return normalize_name(self.text) if self.kind in ("keyword", "identifier") else ""


def _tokens(sql: str) -> list[_Tok] | None:
    """DuckDB's tokens of ``sql`` without comments, or None if its tokenizer fails."""
    try:
        raw = duckdb.tokenize(sql)
    except Exception:  # noqa: BLE001 - any failure means: cannot see through it
        return None
    # DuckDB reports byte offsets into the UTF-8 text; map them to character offsets
    encoded = sql.encode()
    chars = {b: len(encoded[:b].decode(errors="ignore")) for b, _ in raw} if len(encoded) != len(sql) else None
    raw = [(chars[b] if chars else b, kind) for b, kind in raw]
    toks = []
    for i, (start, kind) in enumerate(raw):
        end = raw[i + 1][0] if i + 1 < len(raw) else len(sql)
        if kind.name != "comment":
            toks.append(_Tok(start, kind.name, sql[start:end].strip()))
    return toks


_TRICKY = ("/*", "$", "\\", "&")  # nested comments, dollar quotes, backslash and unicode escapes
_STRINGS = {getattr(TokenType, name) for name in (
    "STRING", "BYTE_STRING", "HEREDOC_STRING", "NATIONAL_STRING", "RAW_STRING", "BIT_STRING", "HEX_STRING",
    "UNICODE_STRING", "IDENTIFIER") if hasattr(TokenType, name)}


def _agrees(sql: str, toks: list[_Tok]) -> bool:
    """True if sqlglot's tokenizer sees the same words as DuckDB's (they can differ on nested comments and
    escaped strings, and then sqlglot's tree is not what DuckDB would run)."""
    if not any(mark in sql for mark in _TRICKY):
        return True  # plain quotes and -- comments: both tokenizers follow the SQL standard
    try:
        theirs = Dialect.get_or_raise(DIALECT).tokenize(sql)
    except Exception:  # noqa: BLE001 - sqlglot cannot tokenize it: it cannot vouch for it either
        return False
    ours = {t.start for t in toks if t.kind in ("keyword", "identifier")}
    starts, spans = set(), []
    for t in theirs:
        if t.token_type in _STRINGS and t.token_type is not TokenType.IDENTIFIER:
            continue
        starts.add(t.start)
        if t.token_type is not TokenType.IDENTIFIER and any(c.isspace() for c in t.text):
            spans.append((t.start, t.end))  # a keyword of several words, e.g. ORDER BY
    if not all(p in starts or any(a < p <= b for a, b in spans) for p in ours):
        return False
    words = {t.start for t in theirs if t.token_type is TokenType.IDENTIFIER
             or (t.token_type not in _STRINGS and (t.text[:1].isalpha() or t.text[:1] == "_"))}
    return words <= {t.start for t in toks}  # and no word of sqlglot's is inside a DuckDB comment or string


def _close(toks: list[_Tok], i: int) -> int:
    """Index of the ``)`` that closes the ``(`` at ``toks[i]``, or -1."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].kind == "operator":
            depth += toks[j].text.count("(") - toks[j].text.count(")")
            if depth <= 0:
                return j if depth == 0 else -1
    return -1


def _string_value(text: str) -> str | None:
    """The value of a plain '...' or $$...$$ string token; None for anything else (E-strings, ...)."""
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        return text[1:-1].replace("''", "'")
    m = re.fullmatch(r"(\$[A-Za-z_]?\w*\$)(.*)\1", text, re.S)
    return m.group(2) if m else None


def _words(sql: str) -> set[str]:
    """Every name in ``sql`` (strings and comments too), folded, plus ``name.`` for each before a dot."""
    names: set[str] = set()
    for m in _NAME.finditer(sql):
        name = normalize_name(m.group())
        names.add(name)
        if sql[m.end():].lstrip().startswith("."):
            names.add(f"{name}.")
    return names


def _dml_keywords(toks: list[_Tok]) -> int:
    """How many INSERT, UPDATE, DELETE and MERGE keywords DuckDB sees."""
    return sum(1 for t in toks if t.kind == "keyword" and t.word in _DML_CTE_WORDS)


# ---------------------------------------------------------------------------------------------------
# sqlglot's tree

@dataclass
class _Facts:
    """What one walk of sqlglot's tree found."""

    complete: bool  # no part sqlglot could only keep as an opaque Command
    writes: bool  # a data-changing node anywhere, the root included
    nested_writes: bool  # a data-changing node below the root
    tables: set[str]  # the tables it names, and ``schema.`` for each schema it names
    targets: set[str]  # the tables (and ``schema.``) its data-changing nodes name outside their read slots
    dml_words: int  # the INSERT/UPDATE/DELETE/MERGE keywords its nodes account for


def _facts(tree: exp.Expression) -> _Facts:
    """Walk sqlglot's tree once."""
    facts = _Facts(complete=True, writes=False, nested_writes=False, tables=set(), targets=set(), dml_words=0)
    for node in tree.walk():
        if isinstance(node, _WRITES):
            facts.writes = True
            facts.nested_writes = facts.nested_writes or node is not tree
            facts.complete = facts.complete and not isinstance(node, exp.Command)
            facts.targets |= _written_tables(node)
            facts.dml_words += isinstance(node, (exp.Insert, exp.Update, exp.Delete, exp.Merge))
        elif isinstance(node, exp.Table):
            facts.tables |= _table_names(node)
        elif isinstance(node, exp.Var) and isinstance(node.parent, (exp.OnConflict, exp.When)) \
                and node.name.upper() in ("DO UPDATE", "DELETE"):
            facts.dml_words += 1  # ON CONFLICT DO UPDATE, MERGE ... THEN DELETE: part of their statement
    return facts


def _table_names(table: exp.Table) -> set[str]:
    """A table reference's name, and ``schema.`` if it is qualified."""
    names = set()
    if table.name:
        names.add(table.name)
    if table.db:
        names.add(f"{table.db}.")
    return names


def _written_tables(node: exp.Expression) -> set[str]:
    """The tables a data-changing node names outside the arguments that only read (see ``_READ_SLOTS``)."""
    reads = _READ_SLOTS.get(type(node), frozenset())
    names: set[str] = set()
    for key, value in node.args.items():
        if key in reads:
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, exp.Expression):
                for table in child.find_all(exp.Table):
                    names |= _table_names(table)
    return names


def _trusted_targets(kind: str, tree: exp.Expression | None, facts: _Facts | None, toks: list[_Tok]) -> set[str] | None:
    """The tables sqlglot's tree says the statement writes, or None if the tree cannot vouch for that: it
    is incomplete, its root is not the statement DuckDB will run, or DuckDB sees an INSERT, UPDATE, DELETE
    or MERGE keyword that no node of the tree accounts for."""
    if tree is None or facts is None or not isinstance(tree, _ROOTS.get(kind, ())):
        return None
    if _dml_keywords(toks) > facts.dml_words:
        return None
    return facts.targets


# ---------------------------------------------------------------------------------------------------
# DuckDB's JSON tree

def _json_effects(tree: dict) -> tuple[bool, set[str], set[str] | None]:
    """Walk DuckDB's JSON tree: whether every query node only reads, the base tables it names, and the
    tables its INSERT/UPDATE/DELETE query nodes write (None if one of them has a target crr cannot read)."""
    read_only, tables = True, set()
    writes: set[str] | None = set()
    stack: list = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str):
                if kind.endswith("_NODE") and kind not in _READ_NODES:
                    read_only = False
                    target = _json_target(node)
                    if target is None:
                        writes = None
                    else:
                        tables |= target
                        if writes is not None:
                            writes |= target
                elif kind == "BASE_TABLE" and node.get("table_name"):
                    tables |= _json_names(node.get("table_name"), node.get("schema_name"))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return read_only, tables, writes


def _json_target(node: dict) -> set[str] | None:
    """The table a DuckDB INSERT/UPDATE/DELETE query node writes, or None if it is another node or its
    target is not a plain table name."""
    kind, table = node.get("type"), node.get("table")
    if kind == "INSERT_QUERY_NODE" and isinstance(table, str) and table and not node.get("table_ref"):
        return _json_names(table, node.get("schema"))
    if kind in ("UPDATE_QUERY_NODE", "DELETE_QUERY_NODE") and isinstance(table, dict) \
            and table.get("type") == "BASE_TABLE" and table.get("table_name"):
        return _json_names(table["table_name"], table.get("schema_name"))
    return None


def _json_names(table: object, schema: object) -> set[str]:
    """A table name from DuckDB's JSON, folded as crr folds names, and ``schema.`` if there is a schema."""
    names = {fold_identifier(str(table))}
    if schema:
        names.add(f"{fold_identifier(str(schema))}.")
    return names


# ---------------------------------------------------------------------------------------------------
# The verdict on one statement

def _effects(read_only: bool, tables: set[str] | frozenset[str], writes: set[str] | frozenset[str] | None,
             tree: exp.Expression | None = None) -> Effects:
    """Effects with the invariants: nothing written by a read-only statement; a statement that may write
    but whose targets are unknown (None) or not found may write every table it names."""
    if read_only:
        written: frozenset[str] = frozenset()
    else:
        written = frozenset(writes) if writes else frozenset(tables)
    return Effects(read_only=read_only, tables=frozenset(tables), writes=written, tree=tree)


def _statement(sql: str, depth: int) -> Effects:
    """What an inner statement (after EXPLAIN ANALYZE, PREPARE ... AS, COPY (...) TO) does."""
    if depth > _MAX_DEPTH:
        raise UnsupportedSqlError("statement nested too deeply for crr to check")
    try:
        tree: exp.Expression | None = parse_one(sql)
    except SqlError:
        tree = None
    return _guard(sql, tree, depth)


def _sql_text_effects(sql: str, toks: list[_Tok] | None, depth: int) -> Effects:
    """Check SQL text that table functions run: ``query('...')`` is judged by its text; text crr cannot read
    (not one constant string) and ``json_execute_serialized_sql`` are refused."""
    low = sql.lower()
    if _UNCHECKABLE in low:
        raise UnsupportedSqlError(f"{_UNCHECKABLE} runs a statement crr cannot check (it may change crr relations); "
                                  "run that statement itself")
    if "query" not in low:
        return _effects(True, set(), set())
    toks = toks if toks is not None else _tokens(sql)
    if toks is None:
        return _effects(False, _words(sql), None)
    read_only, tables, writes = True, set(), set()
    for i, tok in enumerate(toks):
        if tok.word == "query" and i + 1 < len(toks) and toks[i + 1].text == "(":
            text = _string_value(toks[i + 2].text) if i + 3 < len(toks) and toks[i + 2].kind == "string_const" \
                and toks[i + 3].text == ")" else None
            if text is None:
                raise UnsupportedSqlError("query(...) with SQL text that is not one constant string: crr cannot check "
                                          "what it runs; pass the SQL as a literal string")
            inner = _statement(text, depth + 1)
            read_only = read_only and inner.read_only
            tables |= inner.tables
            writes |= inner.writes
    return _effects(read_only, tables, writes)


def _guard(sql: str, tree: exp.Expression | None, depth: int) -> Effects:
    """:func:`statement_effects` at nesting ``depth`` (a statement inside EXPLAIN ANALYZE, query('...')...)."""
    if depth > _MAX_DEPTH:
        raise UnsupportedSqlError("statement nested too deeply for crr to check")
    toks = _tokens(sql)
    if tree is not None and (toks is None or not _agrees(sql, toks)):
        tree = None  # sqlglot read other code than DuckDB would run: go by DuckDB alone
    facts = _facts(tree) if tree is not None else None
    if facts is not None and not facts.complete:
        facts = None  # sqlglot understood only part of it: its tree vouches for nothing
    text = _sql_text_effects(sql, toks, depth)
    types = _duck_types(sql)
    if types is None or toks is None or not toks:
        # DuckDB's parser (without any extension the site may load) cannot read it: it is not read-only
        return _effects(False, _words(sql) | text.tables, None, tree)
    if len(types) != 1:
        raise statement_count_error(len(types))
    kind, first = types[0], toks[0].word
    base = facts.tables if facts is not None else _words(sql)
    _refuse_setting(kind, toks)
    _refuse_builtin_override(kind, toks)
    _refuse_transaction_control(kind)
    _refuse_internal_prepared(toks)
    if first == "import" or (first in ("copy", "pragma") and len(toks) > 1
                             and toks[1].word in ("from", "import_database", "copy_database")):
        raise UnsupportedSqlError("IMPORT DATABASE and COPY FROM DATABASE run statements crr cannot check (they may "
                                  "write crr relations); load the data into plain tables another way")
    if kind == "SELECT":
        own = _select(sql, facts, toks)
    elif kind == "EXPLAIN":
        own = _explain(sql, toks, depth)
    elif kind == "PREPARE":
        own = _prepare(sql, toks, depth)
    elif kind == "CALL" and len(toks) > 1:
        own = _statement("SELECT * FROM " + sql[toks[1].start:], depth + 1)  # CALL f(...) = SELECT * FROM f(...)
    elif kind == "COPY":
        own = _copy(sql, toks, facts, depth)
    elif kind == "SET":  # a setting or variable changes no table (schema switches were refused above)
        own = _effects(facts is not None and not facts.nested_writes, base, None)
    elif kind == "PRAGMA":
        own = _effects(first == "pragma" and len(toks) > 1 and toks[1].word in _READ_PRAGMAS, base | _words(sql), None)
    elif kind in ("VACUUM", "EXPORT"):  # ANALYZE recomputes statistics, EXPORT writes files: no row changes
        own = _effects(True, base, None)
    elif kind == "MULTI" and first in ("pivot", "unpivot"):
        # a PIVOT statement that first looks up its columns' values: DuckDB cannot serialize it, so it is a read
        # if sqlglot parsed all of it and neither its tree nor its keywords hold a data-changing statement
        read_only = facts is not None and not facts.writes \
            and not any(t.kind == "keyword" and t.word in _DML_WORDS for t in toks)
        own = _effects(read_only, base, None)
    elif kind == "ATTACH":  # the new database's name qualifies names as a schema does: `_crr.x` would be ambiguous
        own = _effects(False, base | _words(sql) | {f"{w}." for w in _words(sql) if not w.endswith(".")}, None)
    else:  # CREATE, DROP, ALTER, INSERT, UPDATE, DELETE, MERGE, TRANSACTION, LOAD, DETACH...
        own = _effects(False, base, _trusted_targets(kind, tree, facts, toks))
    return _effects(own.read_only and text.read_only, own.tables | text.tables, own.writes | text.writes, tree)


def _refuse_transaction_control(kind: str) -> None:
    """Refuse BEGIN, COMMIT, ROLLBACK and their synonyms: a site runs each write and each merge as a
    transaction of its own, and one the application opened around them would hold some of them
    uncommitted (a write to a table no view reads is one autocommitted statement)."""
    if kind == "TRANSACTION":
        raise UnsupportedSqlError("BEGIN, COMMIT and ROLLBACK are not supported: crr runs each write and each "
                                  "merge as one transaction of its own; write several rows in one statement "
                                  "(or with Site.insert_many) to make them one change")


def _refuse_internal_prepared(toks: list[_Tok]) -> None:
    """Refuse PREPARE, EXECUTE and DEALLOCATE of crr's own prepared statements (``_crr…``, see
    :mod:`crr.prepared`)."""
    if toks[0].word in ("prepare", "execute", "deallocate") and any(t.word.startswith("_crr") for t in toks[1:3]):
        raise UnsupportedSqlError("prepared statements named _crr... belong to crr; name yours otherwise")


def _refuse_setting(kind: str, toks: list[_Tok]) -> None:
    """Refuse USE, SET/PRAGMA of schema or search_path to anything but main, and SET or RESET of a setting
    not in :data:`SETTINGS_ALLOWED` (``SET VARIABLE`` is allowed: a view may not read variables)."""
    if kind != "SET":
        return
    words = [t.word for t in toks]
    if words[0] == "use":
        raise UnsupportedSqlError("USE is not supported: crr sites keep main as the current schema (crr's own "
                                  "statements use unqualified names); qualify names instead, e.g. other_db.main.t")
    if words[0] not in ("set", "pragma", "reset"):
        raise UnsupportedSqlError(f"crr cannot check this setting statement ({toks[0].text} ...)")
    i = 2 if len(words) > 2 and words[1] in ("session", "global", "local") else 1
    if i >= len(toks) or words[i] == "variable":
        return
    if words[i] not in ("schema", "search_path"):
        if words[i] not in SETTINGS_ALLOWED and not words[i].startswith(SETTING_PREFIXES_ALLOWED):
            raise UnsupportedSqlError(
                f"{words[0].upper()} {toks[i].text} is not supported on a crr site: the site's connection maintains "
                "its views and writes its changesets, and a setting that can change what SQL computes would make "
                "views differ from their queries or from other sites'; settings of resources and diagnostics "
                "(threads, memory_limit, temp_directory, profiling, s3_/http_ options) and SET VARIABLE are allowed")
        return
    if words[0] == "reset":
        return
    value = toks[i + 1:]
    if value and value[0].text.lower() in ("=", "to"):
        value = value[1:]
    if value and value[-1].text == ";":
        value = value[:-1]
    if len(value) == 1:
        v = value[0]
        text = _string_value(v.text) if v.kind == "string_const" else v.word
        if text is not None and text.strip().lower() in ("main", "default"):
            return
    raise UnsupportedSqlError(f"SET {words[i]} to anything but main is not supported: crr sites keep main as the "
                              "current schema (crr's own statements use unqualified names); qualify names instead")


def _refuse_builtin_override(kind: str, toks: list[_Tok]) -> None:
    """Refuse CREATE MACRO / FUNCTION named like a function DuckDB has built in: the macro would replace it
    in every statement, crr's own maintenance and merge SQL included (e.g. ``greatest``)."""
    if kind not in ("CREATE", "CREATE_FUNC"):
        return
    words = [t.word for t in toks]
    i = 1
    while i < len(words) and words[i] in ("or", "replace", "temp", "temporary"):
        i += 1
    if i >= len(words) or words[i] not in ("macro", "function"):
        return
    i += 1
    if words[i:i + 3] == ["if", "not", "exists"]:
        i += 3
    if i >= len(toks):
        return
    while i + 2 < len(toks) and toks[i + 1].text == ".":  # catalog.schema.name: the name is the last part
        i += 2
    name = toks[i].word
    if name.lower() in builtin_functions():
        raise UnsupportedSqlError(f"a macro named {name} would replace DuckDB's built-in {name}, which crr's own "
                                  "statements call; give the macro another name")


def _select(sql: str, facts: _Facts | None, toks: list[_Tok]) -> Effects:
    """A SELECT-type statement (SELECT, WITH, FROM, VALUES, TABLE, DESCRIBE, SHOW, SUMMARIZE...).

    It can change a table only through a data-modifying CTE, which needs an INSERT, UPDATE, DELETE or MERGE
    keyword; without one and with sqlglot's full tree, that tree gives the tables. Otherwise DuckDB's own
    tree (JSON) decides, and gives the tables its data-modifying CTEs write.
    """
    if facts is not None and not any(t.kind == "keyword" and t.word in _DML_CTE_WORDS for t in toks):
        return _effects(not facts.writes, facts.tables, None)
    duck = _duck_tree(sql)
    if duck is None:
        tables = _words(sql) | (facts.tables if facts is not None else set())
        return _effects(False, tables, None)
    read_only, tables, writes = _json_effects(duck)
    if facts is not None:
        read_only = read_only and not facts.writes
        tables |= facts.tables
        if writes is not None:
            writes |= facts.targets
    if writes is None:  # a write whose target crr cannot read: it may write any name in the text
        tables |= _words(sql)
    return _effects(read_only, tables, writes)


def _explain(sql: str, toks: list[_Tok], depth: int) -> Effects:
    """EXPLAIN only plans its statement (read-only); EXPLAIN ANALYZE runs it, so it does what it does."""
    if toks[0].word != "explain" or len(toks) < 2:
        return _effects(False, _words(sql), None)
    i, analyze = 1, False
    if toks[1].text == "(":  # EXPLAIN (option, ...): DuckDB runs the statement if ANALYZE is named at all
        j = _close(toks, 1)
        if j < 0:
            return _effects(False, _words(sql), None)
        analyze = any(t.word in ("analyze", "analyse") for t in toks[2:j])
        i = j + 1
    while i < len(toks) and toks[i].word in ("analyze", "analyse"):
        analyze, i = True, i + 1
    if i >= len(toks):
        return _effects(False, _words(sql), None)
    inner = sql[toks[i].start:]
    if analyze:
        return _statement(inner, depth + 1)
    try:
        return _effects(True, _statement(inner, depth + 1).tables, None)
    except SqlError:
        return _effects(True, set(), None)


def _prepare(sql: str, toks: list[_Tok], depth: int) -> Effects:
    """PREPARE name AS statement: allowed only for a read-only statement (EXECUTE could not be checked)."""
    i = 2
    if i < len(toks) and toks[i].text == "(":
        i = _close(toks, i) + 1 if _close(toks, i) >= 0 else len(toks)
    if i + 1 < len(toks) and toks[i].word == "as":
        stmt = _statement(sql[toks[i + 1].start:], depth + 1)
        if stmt.read_only:
            return stmt
    raise UnsupportedSqlError("PREPARE is supported only for read-only statements: what EXECUTE later runs cannot "
                              "be checked; run the statement itself (Site.execute takes parameters)")


def _copy(sql: str, toks: list[_Tok], facts: _Facts | None, depth: int) -> Effects:
    """COPY table/(query) TO file only reads (what the query does aside); COPY table FROM file writes the table."""
    if len(toks) > 1 and toks[1].text == "(":
        j = _close(toks, 1)
        if j > 2 and j + 1 < len(toks) and toks[j + 1].word == "to":
            return _statement(sql[toks[2].start:toks[j].start], depth + 1)
        return _effects(False, _words(sql), None)
    depth_ = 0
    for tok in toks[1:]:
        if tok.kind == "operator":
            depth_ += tok.text.count("(") - tok.text.count(")")
        elif depth_ == 0 and tok.word in ("from", "to"):
            table = facts.tables if facts is not None else _words(sql[:tok.start])
            return _effects(tok.word == "to", table, table)
    return _effects(False, _words(sql), None)
