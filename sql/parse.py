"""Read SQL text into sqlglot trees the way crr names things: DuckDB's dialect, identifiers folded.

Identifiers are case-insensitive: unquoted and quoted names are folded to lower case (ASCII letters
only), as DuckDB compares them. This is the base the rest of ``crr.sql`` builds on; it imports nothing
from crr but its errors.
"""

from __future__ import annotations

import logging
import re
import threading

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from crr.errors import SqlError, first_line

DIALECT = "duckdb"
"""The sqlglot dialect crr reads and writes SQL in."""

# spaces and comments; atomic and possessive, so that no text is read two ways (a run of dashes as
# many comments: exponential backtracking) and a block comment never spans a "*/" (which would let
# "DROP TABLE p /* */; DELETE FROM t /* */" pass for one statement). DuckDB ends a "--" comment at
# "\r" too, and nests block comments: a "/*" inside one is not blank here (DuckDB's parser then
# reads the text), else "/* /* */ DROP TABLE x -- */ DELETE FROM t" passed for a DROP
_BLANK = r"(?>\s+|--[^\n\r]*+|/\*(?:[^*/]|\*(?!/)|/(?!\*))*+\*/)*+"
STATEMENT_END = _BLANK + ";?" + _BLANK + r"\Z"
"""A pattern of the end of one statement: an optional semicolon, spaces and comments around it (as
DuckDB reads ``DROP TABLE t; -- done``); a match of it ends the text."""
_LEADING_BLANK = re.compile(_BLANK)
WORD_GAP = r"(?=\s|--|/\*)" + _BLANK
"""A pattern of what separates two words of a statement: spaces and comments, at least one
(``CREATE /* note */ REPLICATED TABLE``); a comment this cannot read (a nested one) is no gap."""
_WORD_GAP = re.compile(WORD_GAP)


def words_of(phrase: str) -> list[str]:
    """The words of a phrase a :data:`WORD_GAP` pattern matched, lower case, without its comments."""
    return _WORD_GAP.sub(" ", phrase).lower().split()


def without_leading_blank(sql: str) -> str:
    """``sql`` from its first word on: without the spaces and comments before it (which DuckDB skips)."""
    match = _LEADING_BLANK.match(sql)
    return sql[match.end():] if match else sql


def holds_no_statement(sql: str) -> bool:
    """Whether ``sql`` is only spaces, comments and semicolons."""
    rest = without_leading_blank(sql)
    while rest.startswith(";"):
        rest = without_leading_blank(rest[1:])
    return not rest

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


class _CrrParsing(logging.Filter):
    """Drops sqlglot's warning that it read a statement as a plain Command (``LOAD``, ``CALL``, ...)
    while crr parses (crr judges such statements itself, so the warning was only noise on the user's
    terminal); the same warning from anyone else's parse is left alone."""

    def __init__(self) -> None:
        super().__init__()
        self.active = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(self.active, "on", False) and "Falling back to parsing as a 'Command'" in record.getMessage())


_QUIET = _CrrParsing()
logging.getLogger("sqlglot").addFilter(_QUIET)


def one_statement(trees: list[exp.Expression | None]) -> exp.Expression:
    """The one statement among what ``sqlglot.parse`` returns (not the empty ones, nor the
    ``Semicolon`` it gives a comment after the last ``;``: ``SELECT 1; -- done`` is one statement);
    SqlError when there are none or several."""
    statements = [t for t in trees if t is not None and not isinstance(t, exp.Semicolon)]
    if len(statements) != 1:
        raise statement_count_error(len(statements))
    return statements[0]


def statement_count_error(count: int) -> SqlError:
    """The error of a text holding ``count`` statements (none, or several) where crr runs one."""
    return SqlError(f"expected one SQL statement, got {count}; run statements one at a time")


def _spaced_parameter_casts(sql: str) -> str:
    """``sql`` with each ``?::`` (a parameter's cast, ``?::INT``) written ``? ::``: sqlglot's tokenizer
    reads ``?::`` as one operator (``QDCOLON``), so ``id = ?::INT`` did not parse, where DuckDB, which
    has no ``?`` operator, reads a parameter and a cast. Strings and comments are left as they are."""
    if "?::" not in sql:
        return sql
    try:
        tokens = Dialect.get_or_raise(DIALECT).tokenize(sql)
    except TokenError:
        return sql  # parse_one says why
    parts, last = [], 0
    for t in tokens:
        if t.token_type is TokenType.QDCOLON:
            parts += [sql[last:t.start], "? ::"]
            last = t.end + 1
    return "".join(parts) + sql[last:]


def parse_one(sql: str) -> exp.Expression:
    """Parse exactly one statement with sqlglot, raising SqlError on syntax errors or several statements."""
    _QUIET.active.on = True
    try:
        trees = sqlglot.parse(_spaced_parameter_casts(sql), read=DIALECT)
    except (ParseError, TokenError) as e:
        raise SqlError(f"cannot parse SQL: {first_line(e)}{_near(e)}") from None
    except RecursionError:  # sqlglot's parser recurses per nesting level; DuckDB's reads deeper
        raise SqlError("cannot parse SQL: nested too deeply for crr's parser") from None
    finally:
        _QUIET.active.on = False
    return _lower_identifiers(one_statement(trees))


def canonical_sql(sql: str) -> str:
    """One text for a statement however it was written: identifiers folded and quoted, comments
    dropped, sqlglot's spacing and keyword case (two definitions of a view that DuckDB reads alike,
    written with other spacing or letter case, give the same text)."""
    return parse_one(sql).sql(DIALECT, identify=True, comments=False)


def _near(error: Exception) -> str:
    """`` near '<token>'`` for a ParseError that says where it stopped, else ''."""
    found = [e.get("highlight") for e in getattr(error, "errors", []) if e.get("highlight")]
    return f" near {found[0]!r}" if found else ""


def _lower_identifiers(tree: exp.Expression) -> exp.Expression:
    for ident in tree.find_all(exp.Identifier):
        ident.set("this", fold_identifier(ident.this))
    return tree
