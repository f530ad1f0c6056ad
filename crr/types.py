"""Column types crr supports and the canonical encoding that tuple ids are hashed from.

A tuple id is ``t = md5_number(enc(R, v))`` (128 bits, DuckDB ``UHUGEINT``), where ``enc`` is the
canonical text encoding below. It depends only on the relation name, the column type *families*
and the values, so the same tuple gets the same id on every site, in every process and on every run.

Encoding of a tuple ``(v1, ..., vn)`` of relation ``R``::

    <len(R)>:<R> | f(v1) | f(v2) | ... | f(vn)

with ``|`` a literal separator and ``f`` the field encoding, a one-letter family tag then a payload:

===========  ===  ===================================================================================
family       tag  payload
===========  ===  ===================================================================================
NULL         N    (none) -- any type
integer      i    decimal text, e.g. ``i-42`` (TINYINT .. HUGEINT, UTINYINT .. UHUGEINT)
decimal      n    decimal text at the declared scale, e.g. ``n1.50`` for DECIMAL(10,2)
float        f    shortest round-trip text of the value as DOUBLE; ``-0.0`` is encoded as ``0``
                  (it compares equal to ``0.0``), NaN as ``nan``, infinities as ``inf``/``-inf``
string       s    ``<byte length>:<utf-8 text>``, e.g. ``s5:héll`` is never ambiguous
boolean      b    ``1`` or ``0``
date         d    ISO date, e.g. ``d2024-02-29``
timestamp    t    microseconds since the epoch (TIMESTAMP, and TIMESTAMPTZ as UTC instants: ``z``)
time         h    ``HH:MM:SS[.ffffff]``
blob         x    upper-case hex of the bytes
uuid         u    canonical lower-case 8-4-4-4-12 text
===========  ===  ===================================================================================

Different families have different tags, so ``1`` (INTEGER), ``'1'`` (VARCHAR) and ``1.0`` (DOUBLE)
get different ids, and so do ``(NULL, 'a')`` and ``('a', NULL)``. Key hashes (``kh``) use the same
encoding over the key columns with the relation name prefixed by ``key:``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crr.errors import TypeMismatchError

_INTEGER = {
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
    "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT",
}
_FLOAT = {"FLOAT", "DOUBLE"}
_SIMPLE = {
    "VARCHAR": "string", "BOOLEAN": "boolean", "DATE": "date", "TIMESTAMP": "timestamp",
    "TIMESTAMP WITH TIME ZONE": "timestamptz", "TIME": "time", "BLOB": "blob", "UUID": "uuid",
}
SUPPORTED_TYPES_TEXT = (
    "integers (TINYINT..HUGEINT and unsigned), DECIMAL(p,s), FLOAT, DOUBLE, VARCHAR, BOOLEAN, DATE, "
    "TIMESTAMP, TIMESTAMPTZ, TIME, BLOB, UUID"
)


@dataclass(frozen=True)
class Column:
    """A column of a relation: its name and its canonical DuckDB type name (as DESCRIBE prints it)."""

    name: str
    type: str

    @property
    def family(self) -> str:
        """The type family that decides the id encoding."""
        return type_family(self.type)


def type_family(duckdb_type: str) -> str:
    """Map a canonical DuckDB type name to its encoding family, or raise TypeMismatchError."""
    t = duckdb_type.upper().strip()
    if t in _INTEGER:
        return "integer"
    if t in _FLOAT:
        return "float"
    if re.fullmatch(r"DECIMAL\(\d+,\s*\d+\)", t):
        return "decimal"
    if t in _SIMPLE:
        return _SIMPLE[t]
    raise TypeMismatchError(
        f"column type {duckdb_type} is not supported by crr; use one of: {SUPPORTED_TYPES_TEXT}"
    )


def quote_ident(name: str) -> str:
    """Quote an identifier for DuckDB SQL."""
    return '"' + name.replace('"', '""') + '"'


def quote_str(text: str) -> str:
    """Quote a string literal for DuckDB SQL."""
    return "'" + text.replace("'", "''") + "'"


_FIELD_SQL = {
    "integer": "'i' || CAST({x} AS VARCHAR)",
    "decimal": "'n' || CAST({x} AS VARCHAR)",
    "float": "'f' || CASE WHEN isnan({x}) THEN 'nan' WHEN {x} = 0 THEN '0' ELSE CAST(CAST({x} AS DOUBLE) AS VARCHAR) END",
    "string": "'s' || CAST(strlen({x}) AS VARCHAR) || ':' || {x}",
    "boolean": "CASE WHEN {x} THEN 'b1' ELSE 'b0' END",
    "date": "'d' || CAST({x} AS VARCHAR)",
    "timestamp": "'t' || CAST(epoch_us({x}) AS VARCHAR)",
    "timestamptz": "'z' || CAST(epoch_us({x}) AS VARCHAR)",
    "time": "'h' || CAST({x} AS VARCHAR)",
    "blob": "'x' || hex({x})",
    "uuid": "'u' || CAST({x} AS VARCHAR)",
}


def field_sql(expr: str, family: str) -> str:
    """SQL text encoding one value (SQL expression ``expr``) of the given family, NULL -> 'N'."""
    if family not in _FIELD_SQL:  # pragma: no cover - type_family guards every caller
        raise TypeMismatchError(f"no encoding for type family {family}")
    return f"coalesce({_FIELD_SQL[family].format(x=expr)}, 'N')"


def tuple_encoding_sql(prefix: str, columns: list[Column], qualifier: str = "") -> str:
    """SQL text of the canonical encoding of a row: ``<len>:<prefix>|f(c1)|...|f(cn)``."""
    head = quote_str(f"{len(prefix.encode())}:{prefix}")
    parts = [head]
    for col in columns:
        ref = (qualifier + "." if qualifier else "") + quote_ident(col.name)
        parts.append(field_sql(ref, col.family))
    return " || '|' || ".join(parts)


def tuple_id_sql(relation: str, columns: list[Column], qualifier: str = "") -> str:
    """SQL expression of the 128-bit tuple id ``H(R, v)`` of each row."""
    return f"md5_number({tuple_encoding_sql(relation, columns, qualifier)})"


def key_hash_sql(relation: str, key_columns: list[Column], qualifier: str = "") -> str:
    """SQL expression of the 128-bit key hash ``kh`` of each row of a keyed relation."""
    return f"md5_number({tuple_encoding_sql('key:' + relation, key_columns, qualifier)})"
