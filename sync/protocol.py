"""The wire protocol: length-prefixed msgpack frames over TCP (or a Unix socket for local control).

Frame: 4-byte big-endian length, then the body (at most ``MAX_FRAME`` bytes). The first two frames
each way are plaintext handshake messages; every later frame body is sealed (see
:mod:`sync.crypto`) and decodes to a msgpack map with a type key ``t``. See ``sync/PROTOCOL.md``.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import msgpack

from crr.errors import CrrError

PROTOCOL_VERSION = 1
MAX_FRAME = 256 * 1024 * 1024
_LEN = struct.Struct(">I")


class ProtocolError(CrrError):
    """A peer broke the protocol: bad frame, unknown message, wrong version, oversized frame."""


async def read_frame(reader: asyncio.StreamReader, max_frame: int = MAX_FRAME) -> bytes:
    """Read one frame body; raise ProtocolError if it is oversized, EOFError at a clean end."""
    try:
        head = await reader.readexactly(_LEN.size)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            raise EOFError("connection closed") from None
        raise ProtocolError("connection closed inside a frame header") from None
    (size,) = _LEN.unpack(head)
    if size > max_frame:
        raise ProtocolError(f"frame of {size} bytes exceeds the limit of {max_frame} bytes")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise ProtocolError("connection closed inside a frame (truncated frame)") from None


def frame(body: bytes) -> bytes:
    """The bytes of one frame carrying ``body``."""
    return _LEN.pack(len(body)) + body


def encode(message: dict[str, Any]) -> bytes:
    """msgpack-encode a message map."""
    return msgpack.packb(message, use_bin_type=True)


def decode(body: bytes) -> dict[str, Any]:
    """Decode a message map, raising ProtocolError for anything else."""
    try:
        message = msgpack.unpackb(body, raw=False)
    except (msgpack.UnpackException, ValueError, TypeError) as e:
        raise ProtocolError(f"undecodable message ({type(e).__name__})") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ProtocolError("a message must be a map with a string type 't'")
    return message
