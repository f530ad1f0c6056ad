"""The wire protocol: length-prefixed msgpack frames over TCP (or a Unix socket for local control).

Frame: 4-byte big-endian length, then the body (at most ``MAX_FRAME`` bytes). The handshake's
messages are plaintext frames; every later frame body is sealed (see :mod:`crr.sync.crypto`) and decodes
to a msgpack map with a type key ``t`` whose fields :func:`check_message` validates. Frames being
received count against a :class:`MemoryBudget` shared by all connections. See ``sync/PROTOCOL.md``.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Any, Callable

import msgpack

from crr.errors import CrrError

PROTOCOL_VERSION = 2
MAX_FRAME = 256 * 1024 * 1024
MAX_CURSOR = 2**63 - 1
MAX_NAME = 4096  # characters of a relation name or fingerprint
_LEN = struct.Struct(">I")


class ProtocolError(CrrError):
    """A peer broke the protocol: bad frame, unknown or malformed message, wrong version, oversized frame."""


class MemoryLimitError(ProtocolError):
    """A frame could not be received within the memory budget shared by all connections."""


async def read_header(reader: asyncio.StreamReader, max_frame: int = MAX_FRAME) -> int:
    """Read one frame header; return the body size. ProtocolError if oversized, EOFError at a clean end."""
    try:
        head = await reader.readexactly(_LEN.size)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            raise EOFError("connection closed") from None
        raise ProtocolError("connection closed inside a frame header") from None
    (size,) = _LEN.unpack(head)
    if size > max_frame:
        hint = ""
        if all(32 <= b < 127 for b in head):  # text, e.g. b"HTTP" or b"SSH-": no crr frame starts so
            hint = f" (its first bytes read {head.decode('ascii')!r}: is the peer a crr serve?)"
        raise ProtocolError(f"frame of {size} bytes exceeds the limit of {max_frame} bytes{hint}")
    return size


async def read_body(reader: asyncio.StreamReader, size: int, timeout: float | None = None) -> bytes:
    """Read a frame body of ``size`` bytes, within ``timeout`` seconds if given."""
    try:
        return await asyncio.wait_for(reader.readexactly(size), timeout)
    except asyncio.IncompleteReadError:
        raise ProtocolError("connection closed inside a frame (truncated frame)") from None
    except asyncio.TimeoutError:
        raise ProtocolError(f"a frame of {size} bytes did not arrive within {timeout:.0f} s (stalled sender)") from None


async def read_frame(reader: asyncio.StreamReader, max_frame: int = MAX_FRAME) -> bytes:
    """Read one frame body; raise ProtocolError if it is oversized, EOFError at a clean end."""
    return await read_body(reader, await read_header(reader, max_frame))


def body_timeout(size: int) -> float:
    """How long a frame body may take to arrive: 30 s plus 64 KiB/s (a stalled sender must not hold memory)."""
    return 30.0 + size / 65536


def frame(body: bytes) -> bytes:
    """The bytes of one frame carrying ``body``."""
    return _LEN.pack(len(body)) + body


_TUPLE = 1  # msgpack extension code of a tuple in query results (msgpack has arrays only)
_BIG_INT = 2  # msgpack extension code of an integer outside msgpack's 64 bits (HUGEINT values), as decimal text
_INT_RANGE = (-(1 << 63), 1 << 64)  # the integers msgpack packs itself


def _big_ints(v: Any) -> Any:
    """``v`` with every integer msgpack cannot pack (beyond 64 bits) as a :data:`_BIG_INT` extension, in
    lists, tuples and maps (keys too) at any depth."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v if _INT_RANGE[0] <= v < _INT_RANGE[1] else msgpack.ExtType(_BIG_INT, str(int(v)).encode("ascii"))
    if isinstance(v, tuple):
        return tuple(_big_ints(x) for x in v)
    if isinstance(v, list):
        return [_big_ints(x) for x in v]
    if isinstance(v, dict):
        return {_big_ints(k): _big_ints(x) for k, x in v.items()}
    return v


def encode(message: dict[str, Any], default: Callable[[Any], Any] | None = None, *, results: bool = False) -> bytes:
    """msgpack-encode a message map (``default`` converts values msgpack does not know). ``results``: the
    message carries query results or a statement's parameters, whose tuples (DuckDB's ARRAY and unnamed
    STRUCT values) stay tuples, whose integers may pass 64 bits (HUGEINT) and whose maps may have keys
    of any type, as :func:`decode` with ``results`` reads them."""
    if not results:
        return msgpack.packb(message, use_bin_type=True, default=default)

    def value(v: Any) -> Any:  # what strict_types hands over: tuples, subclasses, and unknown types
        if isinstance(v, tuple):
            return msgpack.ExtType(_TUPLE, msgpack.packb(list(v), use_bin_type=True, default=value, strict_types=True))
        for known in (int, float, str, bytes, list, dict):
            if isinstance(v, known):  # a subclass of a type msgpack packs (an IntEnum, an OrderedDict)
                return known(v)
        if default is None:
            raise TypeError(f"cannot encode a {type(v).__name__}")
        return default(v)

    try:
        return msgpack.packb(message, use_bin_type=True, default=value, strict_types=True)
    except OverflowError:  # an integer beyond 64 bits (rare: converted only then)
        return msgpack.packb(_big_ints(message), use_bin_type=True, default=value, strict_types=True)


def _results_ext(code: int, data: bytes) -> Any:
    if code == _TUPLE:
        return tuple(msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_results_ext))
    if code == _BIG_INT:
        return int(data.decode("ascii"))
    return msgpack.ExtType(code, data)


def decode(body: bytes, *, results: bool = False) -> dict[str, Any]:
    """Decode a message map, raising ProtocolError for anything else (``results``: see :func:`encode`)."""
    try:
        if results:
            message = msgpack.unpackb(body, raw=False, strict_map_key=False, ext_hook=_results_ext)
        else:
            message = msgpack.unpackb(body, raw=False)
    except (msgpack.UnpackException, ValueError, TypeError) as e:
        raise ProtocolError(f"undecodable message ({type(e).__name__})") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ProtocolError("a message must be a map with a string type 't'")
    return message


# -- message validation -------------------------------------------------------------------------------
def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _cursor(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_CURSOR


def _name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME


def _relations(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(r, list) and len(r) == 3 and _name(r[0]) and _name(r[1])
        and r[2] in ("replicated", "remote", "view") for r in value)


def _optional_cursor(value: Any) -> bool:
    return value is None or _cursor(value)


# type -> field -> (check, what it must be, required)
_FIELDS: dict[str, dict[str, tuple[Callable[[Any], bool], str, bool]]] = {
    "serves": {"relations": (_relations, "a list of [name, fingerprint, kind] with kind replicated, remote or view",
                             True),
               "cursor": (_cursor, "an integer from 0 to 2^63-1", True)},
    "notice": {"cursor": (_cursor, "an integer from 0 to 2^63-1", True)},
    "pull": {"rid": (_cursor, "an integer from 0 to 2^63-1", True), "relation": (_name, "a relation name", True),
             "since": (_cursor, "an integer from 0 to 2^63-1", True)},
    "changes": {"rid": (_cursor, "an integer from 0 to 2^63-1", True),
                "data": (lambda v: isinstance(v, bytes), "bytes", True)},
    "error": {"rid": (_optional_cursor, "an integer from 0 to 2^63-1 or nil", False),
              "message": (lambda v: isinstance(v, str), "a string", True)},
    "sql": {"sql": (lambda v: isinstance(v, str), "a string", True),
            "params": (lambda v: v is None or isinstance(v, (list, dict)), "a list, a map or nil", False)},
    "status": {},
}
PEER_MESSAGES = frozenset({"serves", "notice", "pull", "changes", "error"})
CONTROL_MESSAGES = frozenset({"sql", "status"})


def check_message(message: dict[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    """Validate a decoded message's type and every field it uses; raise ProtocolError naming the problem.

    Fields a message type does not define are ignored (room for compatible additions).
    """
    t = message["t"]
    if t not in allowed:
        raise ProtocolError(f"unexpected message type {_show(t)}")
    for name, (ok, what, required) in _FIELDS[t].items():
        if name not in message:
            if required:
                raise ProtocolError(f"malformed {t!r} message: field {name!r} is missing")
            continue
        if not ok(message[name]):
            raise ProtocolError(f"malformed {t!r} message: field {name!r} must be {what}, got {_show(message[name])}")
    return message


# -- memory --------------------------------------------------------------------------------------------
class MemoryBudget:
    """Bytes of received frames held at once, across all connections of a service (event-loop only).

    A connection reserves a frame's size after reading its header and before reading its body, and
    releases it once the message has been handled. Reservations wait in arrival order while the budget
    is spent (the sender is slowed down: its bytes stay in the kernel's buffers) and fail with
    MemoryLimitError after ``wait`` seconds, or at once for a frame larger than the whole budget.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self.refused = 0
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()

    async def acquire(self, n: int, wait: float) -> None:
        """Reserve ``n`` bytes, waiting at most ``wait`` seconds."""
        if n > self.limit:
            self.refused += 1
            raise MemoryLimitError(f"a frame of {n} bytes exceeds the memory budget of {self.limit} bytes")
        if not self._waiters and self.used + n <= self.limit:
            self._take(n)
            return
        fut = asyncio.get_running_loop().create_future()
        entry = (n, fut)
        self._waiters.append(entry)
        try:
            await asyncio.wait({fut}, timeout=wait)
        except BaseException:
            self._abandon(entry)
            raise
        if not fut.done():
            self._abandon(entry)
            self.refused += 1
            raise MemoryLimitError(f"a frame of {n} bytes waited {wait:g} s for memory: {self.used} of "
                                   f"{self.limit} bytes are held by frames of other connections")

    def release(self, n: int) -> None:
        """Give back ``n`` reserved bytes."""
        self.used -= n
        self._grant()

    def _take(self, n: int) -> None:
        self.used += n
        self.peak = max(self.peak, self.used)

    def _abandon(self, entry: tuple[int, asyncio.Future]) -> None:
        n, fut = entry
        if fut.done() and not fut.cancelled():
            self.release(n)  # granted just as the waiter gave up
            return
        fut.cancel()
        try:
            self._waiters.remove(entry)
        except ValueError:
            pass
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.limit:
            n, fut = self._waiters.popleft()
            if fut.done():
                continue
            self._take(n)
            fut.set_result(None)
