"""Threads sharing one site take turns: a decorator that runs a site's method holding the site's lock.

Both kinds of site (:class:`crr.site.Site`, :class:`crr.spark.SparkSite`) hold one connection and
one catalog snapshot; two threads' statements, merges or reads interleaved on them corrupt a write
or lose a commit, so each public method waits for the one running.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, ContextManager, TypeVar

T = TypeVar("T")


def one_thread_at_a_time(lock_of: Callable[[Any], ContextManager[Any]]) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A decorator running a method while holding ``lock_of(self)`` (a re-entrant lock: a method may
    call another)."""
    def decorate(method: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> T:
            with lock_of(self):
                return method(self, *args, **kwargs)
        return run
    return decorate
