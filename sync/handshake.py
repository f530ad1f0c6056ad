"""The connection handshake (see ``sync/PROTOCOL.md``): one implementation for peers and local control."""

from __future__ import annotations

import asyncio

from sync import crypto
from sync.protocol import PROTOCOL_VERSION, ProtocolError, decode, encode, frame, read_frame

HANDSHAKE_FRAME = 64 * 1024  # handshake frames are tiny; refuse anything larger


async def send_plain(writer: asyncio.StreamWriter, message: dict) -> None:
    """Send one unsealed (handshake) message."""
    writer.write(frame(encode(message)))
    await writer.drain()


async def recv_plain(reader: asyncio.StreamReader) -> dict:
    """Receive one unsealed (handshake) message."""
    return decode(await read_frame(reader, HANDSHAKE_FRAME))


def check_hello(hello: dict) -> tuple[bytes, str]:
    """Validate a hello; return the peer's nonce and site id."""
    if hello.get("t") != "hello":
        raise ProtocolError(f"expected a hello, got {hello.get('t')!r}")
    if hello.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {hello.get('v')!r} is not supported (this site speaks "
                            f"{PROTOCOL_VERSION})")
    nonce, site = hello.get("nonce"), hello.get("site")
    if not isinstance(nonce, bytes) or len(nonce) != 16 or not isinstance(site, str) or not site:
        raise ProtocolError("malformed hello")
    return nonce, site


async def client_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes,
                           me: str) -> tuple[crypto.Channel, str]:
    """Run the client side: prove the secret, check the server's proof; return the channel and server site id."""
    mine = crypto.nonce()
    await send_plain(writer, {"t": "hello", "v": PROTOCOL_VERSION, "site": me, "nonce": mine})
    hello = await recv_plain(reader)
    if hello.get("t") == "error":
        raise ProtocolError(f"peer refused the connection: {hello.get('message')}")
    theirs, peer = check_hello(hello)
    try:
        crypto.check_proof(crypto.proof(secret, "server", theirs, mine, peer), hello.get("proof"))
    except crypto.AuthError:
        await send_plain(writer, {"t": "error", "message": "authentication failed"})
        raise
    await send_plain(writer, {"t": "auth", "proof": crypto.proof(secret, "client", mine, theirs, me)})
    return crypto.Channel(secret, mine, theirs, is_client=True), peer


async def server_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes,
                           me: str) -> tuple[crypto.Channel, str]:
    """Run the server side: check the client's hello and proof; return the channel and client site id."""
    mine = crypto.nonce()
    hello = await recv_plain(reader)
    try:
        theirs, peer = check_hello(hello)
    except ProtocolError as e:
        await send_plain(writer, {"t": "error", "message": str(e)})
        raise
    await send_plain(writer, {"t": "hello", "v": PROTOCOL_VERSION, "site": me, "nonce": mine,
                              "proof": crypto.proof(secret, "server", mine, theirs, me)})
    auth = await recv_plain(reader)
    if auth.get("t") == "error":
        raise crypto.AuthError(f"the peer refused us: {auth.get('message')}")
    try:
        crypto.check_proof(crypto.proof(secret, "client", theirs, mine, peer), auth.get("proof"))
    except crypto.AuthError:
        await send_plain(writer, {"t": "error", "message": "authentication failed"})
        raise
    return crypto.Channel(secret, theirs, mine, is_client=False), peer
