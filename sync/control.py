"""Client of a running ``crr serve``'s local control channel (a Unix socket next to the database).

DuckDB lets one process open a file for writing, so while ``crr serve`` holds a site, ``crr sql`` and
``crr status`` send their requests to it through ``<db>.sock``; the socket is private to its owner
(mode 0600) and the client must also prove it knows the deployment secret. The client uses a
throw-away key pair: the control channel is local and its peers are never pinned.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from crr import errors
from crr.errors import CrrError
from crr.sync import crypto
from crr.sync import handshake
from crr.sync.protocol import ProtocolError, decode, encode, frame, read_frame


def socket_path(db: str) -> str:
    """Where ``crr serve --db db`` listens for local control: beside the file ``db`` resolves to, so that a
    symbolic link to a site file (or a path through a linked folder) reaches the serve of that file."""
    return os.path.realpath(db) + ".sock"


def answers(path: str) -> bool:
    """Whether a server accepts connections on the unix socket ``path`` (else it is absent or stale)."""
    if not os.path.exists(path):
        return False
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def server_running(db: str) -> bool:
    """Whether a ``crr serve`` for this database answers on its control socket."""
    return answers(socket_path(db))


async def _request(path: str, secret: bytes, message: dict[str, Any]) -> dict[str, Any]:
    """Send one request; a query's answer may come in several ``rows`` frames (``more`` until the last)."""
    reader, writer = await asyncio.open_unix_connection(path)
    try:
        try:
            done = await handshake.client_handshake(reader, writer, secret, "control")
        except EOFError:
            raise crypto.AuthError("the server closed the control connection during the handshake "
                                   "(wrong secret?)") from None
        writer.write(frame(done.channel.seal(encode(message, results=True))))  # parameters may pass 64 bits
        await writer.drain()
        rows: list = []
        while True:
            answer = decode(done.channel.open(await read_frame(reader)), results=True)
            if answer.get("t") != "rows":
                return answer
            part = answer.get("rows")
            if not isinstance(part, list):
                raise ProtocolError("the server sent a malformed rows answer")
            rows.extend(part)
            if not answer.get("more"):
                return {"t": "rows", "rows": rows}
    except EOFError:  # after the handshake: the secret was right
        raise CrrError("the crr serve closed the control connection before it answered (it was stopped, or "
                       "failed), so the statement may or may not have run; check, then run it again, and see the "
                       "serve's log") from None
    finally:
        writer.close()


def request(db: str, secret: bytes, message: dict[str, Any]) -> dict[str, Any]:
    """Send one control request to the server holding ``db`` and return its answer."""
    answer = asyncio.run(_request(socket_path(db), secret, message))
    if answer.get("t") == "error":
        kind = getattr(errors, str(answer.get("kind")), None)  # the server's error, as running it here raises it
        if isinstance(kind, type) and issubclass(kind, CrrError):
            raise kind(str(answer.get("message")))
        raise CrrError(f"{answer.get('kind', 'error')}: {answer.get('message')}")
    return answer
