"""What a site is opened with, checked the same way for a DuckDB site (:class:`crr.Site`) and a Spark
site (:class:`crr.spark.SparkSite`): its id and the clock-skew bound of its merges."""

from __future__ import annotations

import reprlib

from crr.errors import SiteError
from crr.types import is_utf8


def check_site_id(site_id: object) -> None:
    """:class:`SiteError` unless ``site_id`` is None (one is generated) or non-empty Unicode text."""
    if site_id is None:
        return
    if not isinstance(site_id, str) or not site_id.strip():
        raise SiteError(f"site_id must be a non-empty string, got {site_id!r}; or leave it out to have one "
                        "generated")
    if not is_utf8(site_id):
        raise SiteError(f"site_id must be valid Unicode text (it travels in every changeset), got {site_id!r}")


def clock_skew(seconds: object) -> float:
    """A clock skew bound in seconds, as a float; :class:`SiteError` for NaN, a negative number or
    anything else (``float("inf")``: no bound)."""
    try:
        skew = float(seconds)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past a float's range
        skew = float("nan")
    if not skew >= 0:  # NaN too
        raise SiteError(f"max_clock_skew must be a number of seconds >= 0 (float('inf'): no bound), not "
                        f"{reprlib.repr(seconds)}")
    return skew
