"""What the sync service asks of the site it serves: :class:`crr.Site` and
:class:`crr.spark.SparkSite` both provide it, so ``crr serve`` fronts either kind."""

from __future__ import annotations

from typing import Any, Iterable, Protocol

from crr.catalog import Relation
from crr.changeset import Changeset


class ServedSite(Protocol):
    """The public site API the service uses (see :class:`crr.Site` for each method's contract)."""

    site_id: str
    path: str

    @property
    def cursor(self) -> int:
        """The sequence number of the site's last committed change."""

    def relations(self) -> dict[str, str]:
        """The relations held: name -> kind."""

    def relation(self, name: str) -> Relation:
        """A relation's catalog entry."""

    def lineage(self, name: str) -> set[str]:
        """The base relations in a relation's provenance."""

    def changes(self, since: int | None = None, relations: Iterable[str] | None = None) -> Changeset:
        """Everything changed after ``since``."""

    def knows_cursor(self, since: int) -> bool:
        """Whether ``since`` is a cursor this copy of the site handed out."""

    def merge(self, changeset: Changeset | bytes, *, track: bool = False) -> Any:
        """Merge a changeset; the result has ``changed``."""

    def peer_cursor(self, peer: str, relation: str) -> int:
        """The source cursor of the last tracked merge of ``relation`` from ``peer``."""

    def peer_cursors(self) -> list[tuple[str, str, int, Any]]:
        """All tracked cursors, read as committed."""

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        """Run one statement."""

    def interrupt(self) -> None:
        """Stop the operation another thread runs on the site."""
