"""The connection handshake (see ``sync/PROTOCOL.md``): one implementation for peers and local control.

Four plaintext messages: client ``hello``, server ``hello`` (with its secret proof and key signature),
client ``auth`` (the same from the client), server ``ok``. Both proofs and both signatures cover a hash
of everything both hellos said (site ids, nonces, identity keys, key-exchange values), so nothing can
be swapped in transit, and the session keys come from the secret plus an ephemeral X25519 exchange.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Callable

import msgpack

from crr.sync import crypto
from crr.sync.protocol import PROTOCOL_VERSION, ProtocolError, decode, encode, frame, read_frame

HANDSHAKE_FRAME = 64 * 1024  # handshake frames are tiny; refuse anything larger
MAX_SITE_ID = 200  # characters

# Called with (site id, public key) once a peer has proved both; raises crypto.IdentityError to refuse.
TrustCheck = Callable[[str, bytes], None]


@dataclass
class Handshake:
    """The outcome of a successful handshake."""

    channel: crypto.Channel
    site: str  # the peer's site id, proved by its key (and pinned, where a trust check was given)
    key: bytes  # the peer's Ed25519 public key


async def send_plain(writer: asyncio.StreamWriter, message: dict) -> None:
    """Send one unsealed (handshake) message."""
    writer.write(frame(encode(message)))
    await writer.drain()


async def recv_plain(reader: asyncio.StreamReader) -> dict:
    """Receive one unsealed (handshake) message."""
    return decode(await read_frame(reader, HANDSHAKE_FRAME))


def check_hello(hello: dict) -> tuple[bytes, str, bytes, bytes]:
    """Validate a hello; return the peer's nonce, site id, identity key and key-exchange value."""
    if hello.get("t") != "hello":
        raise ProtocolError(f"expected a hello, got {str(hello.get('t'))[:40]!r}")
    if hello.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {str(hello.get('v'))[:20]!r} is not supported (this site speaks "
                            f"{PROTOCOL_VERSION}); run the same crr version on every site")
    nonce, site, key, dh = hello.get("nonce"), hello.get("site"), hello.get("key"), hello.get("dh")
    if not isinstance(nonce, bytes) or len(nonce) != 16:
        raise ProtocolError("malformed hello: the nonce must be 16 bytes")
    if not isinstance(site, str) or not site or len(site) > MAX_SITE_ID or not site.isprintable():
        raise ProtocolError(f"malformed hello: the site id must be 1-{MAX_SITE_ID} printable characters")
    for name, value in (("key", key), ("dh", dh)):
        if not isinstance(value, bytes) or len(value) != crypto.KEY_BYTES:
            raise ProtocolError(f"malformed hello: {name!r} must be {crypto.KEY_BYTES} bytes")
    return nonce, site, key, dh


def transcript_hash(client: tuple[str, bytes, bytes, bytes], server: tuple[str, bytes, bytes, bytes]) -> bytes:
    """SHA-256 of both hellos' (site id, nonce, identity key, key-exchange value), unambiguously encoded."""
    return hashlib.sha256(msgpack.packb(["crr handshake", PROTOCOL_VERSION, *client, *server],
                                        use_bin_type=True)).digest()


def _told(e: crypto.AuthError) -> str:
    """What the peer is told when we refuse it."""
    return e.remote if isinstance(e, crypto.IdentityError) else "authentication failed"


def _why(refusal: dict) -> str:
    """What a peer's refusal said, with what a bare "authentication failed" means."""
    said = str(refusal.get("message"))[:300]
    if said == "authentication failed":
        said += " (the two sides hold different deployment secrets)"
    return said


def _signed(role: str, h: bytes) -> bytes:
    return b"crr handshake signature|" + role.encode() + b"|" + h


async def client_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes, me: str,
                           identity: crypto.Identity | None = None, trust: TrustCheck | None = None) -> Handshake:
    """Run the client side: prove the secret and our key, check the server's; return the session."""
    identity = identity or crypto.Identity.ephemeral()
    mine, dh = crypto.nonce(), crypto.KeyExchange()
    await send_plain(writer, {"t": "hello", "v": PROTOCOL_VERSION, "site": me, "nonce": mine,
                              "key": identity.public, "dh": dh.public})
    hello = await recv_plain(reader)
    if hello.get("t") == "error":
        raise ProtocolError(f"peer refused the connection: {str(hello.get('message'))[:300]}")
    theirs, peer, peer_key, peer_dh = check_hello(hello)
    h = transcript_hash((me, mine, identity.public, dh.public), (peer, theirs, peer_key, peer_dh))
    shared = await _authenticate(writer, secret, "server", h, hello, peer, peer_key, dh, peer_dh, trust)
    await send_plain(writer, {"t": "auth", "proof": crypto.proof(secret, "client", h),
                              "sig": identity.sign(_signed("client", h))})
    answer = await recv_plain(reader)
    if answer.get("t") == "error":
        raise crypto.AuthError(f"{peer} refused this side's proof: {_why(answer)}")
    if answer.get("t") != "ok":
        raise ProtocolError(f"expected the handshake's ok, got {str(answer.get('t'))[:40]!r}")
    return Handshake(crypto.Channel(secret + shared, mine, theirs, h, is_client=True), peer, peer_key)


async def _authenticate(writer: asyncio.StreamWriter, secret: bytes, role: str, h: bytes, message: dict, peer: str,
                        peer_key: bytes, dh: crypto.KeyExchange, peer_dh: bytes, trust: TrustCheck | None) -> bytes:
    """Check the peer's proof of the secret and its signature over the transcript (``role`` is the peer's),
    pin its key, and return the key-exchange secret; tell the peer why before raising AuthError."""
    try:
        crypto.check_proof(crypto.proof(secret, role, h), message.get("proof"))
        crypto.verify_signature(peer_key, message.get("sig"), _signed(role, h), peer)
        if trust is not None:
            trust(peer, peer_key)
        return dh.shared(peer_dh)
    except crypto.AuthError as e:
        await send_plain(writer, {"t": "error", "message": _told(e)})
        raise


async def server_handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes, me: str,
                           identity: crypto.Identity | None = None, trust: TrustCheck | None = None) -> Handshake:
    """Run the server side: check the client's hello, proof and key; return the session."""
    identity = identity or crypto.Identity.ephemeral()
    mine, dh = crypto.nonce(), crypto.KeyExchange()
    hello = await recv_plain(reader)
    try:
        theirs, peer, peer_key, peer_dh = check_hello(hello)
    except ProtocolError as e:
        await send_plain(writer, {"t": "error", "message": str(e)})
        raise
    h = transcript_hash((peer, theirs, peer_key, peer_dh), (me, mine, identity.public, dh.public))
    await send_plain(writer, {"t": "hello", "v": PROTOCOL_VERSION, "site": me, "nonce": mine, "key": identity.public,
                              "dh": dh.public, "proof": crypto.proof(secret, "server", h),
                              "sig": identity.sign(_signed("server", h))})
    auth = await recv_plain(reader)
    if auth.get("t") == "error":
        raise crypto.AuthError(f"the connecting peer refused this side's proof: {_why(auth)}")
    shared = await _authenticate(writer, secret, "client", h, auth, peer, peer_key, dh, peer_dh, trust)
    await send_plain(writer, {"t": "ok"})
    return Handshake(crypto.Channel(secret + shared, theirs, mine, h, is_client=False), peer, peer_key)
