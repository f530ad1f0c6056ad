"""Error types. Every error crr raises derives from :class:`CrrError`.

Each message says what was wrong and what to do about it. An operation that raises one of these has
changed nothing: local writes and merges run in one DuckDB transaction that is rolled back on error.
"""

from __future__ import annotations


class CrrError(Exception):
    """Base class of every error raised by crr."""


class SqlError(CrrError):
    """A statement could not be parsed or bound (syntax error, unknown column, bad parameter count)."""


class UnsupportedSqlError(SqlError):
    """A statement or view query uses a construct crr does not support; the message names it."""


class CatalogError(CrrError):
    """A relation is unknown, already exists, has the wrong kind, or is still needed by a view."""


class ReadOnlyRelationError(CatalogError):
    """A write was aimed at a materialized view or a remote table; only replicated tables take writes."""


class ConstraintError(CrrError):
    """A write would violate a declared constraint (primary key, NOT NULL)."""


class TypeMismatchError(CrrError):
    """A value does not fit the declared column type, or a column type is not supported."""


class ChangesetError(CrrError):
    """Changeset bytes are malformed, truncated, corrupted, or of an unknown format version."""


class SchemaMismatchError(ChangesetError):
    """A changeset's schema for a relation differs from the local declaration of that relation."""


class ViewQueryError(SqlError, ChangesetError):
    """A view's query fails on the rows a write or a merge brings (a cast of a text that is no number,
    a division by zero of integers); the message names the view. Both a :class:`SqlError` (a refused
    write) and a :class:`ChangesetError` (a refused merge)."""

    @classmethod
    def on_data(cls, view: str, detail: str) -> ViewQueryError:
        """The error of ``view``'s query failing on a change's data, ``detail`` the engine's own words
        (one line), with what to do: the same text on both backends."""
        return cls(f"view {view} cannot be maintained: its query fails on the changed data ({detail}); "
                   f"nothing was changed. Write values the query accepts, or declare the view with "
                   f"expressions that cannot fail (TRY_CAST, TRY). A merge derives from the versions its "
                   f"source overwrote too: if the value was replaced there already, drop the view, merge, "
                   f"and declare the view again")


class SiteError(CrrError):
    """The site file cannot be opened as asked (wrong site id, closed site, newer storage format)."""


def first_line(error: BaseException | str) -> str:
    """The first line of an error's text that says something (Spark's parse errors begin with an
    empty one), for a message of crr's that quotes it."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else (type(error).__name__ if isinstance(error, BaseException) else "")
