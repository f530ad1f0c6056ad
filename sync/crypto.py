"""Authentication and encryption between peers that share a deployment secret.

Handshake (both sides know ``secret``; it never crosses the wire):

1. each side sends a random 16-byte nonce and its site id;
2. each proves knowledge of the secret with ``HMAC-SHA256(secret, role | nonce_self | nonce_peer | site_id)``
   and checks the other's proof (constant-time compare);
3. both derive two session keys with HKDF-SHA256 (salt = both nonces), one per direction.

After the handshake every frame is sealed with ChaCha20-Poly1305 under the direction's key, with the
frame's sequence number as nonce: a stranger can neither read frames nor inject, replay, reorder or
truncate them without the receiver noticing (decryption fails and the connection is closed).
"""

from __future__ import annotations

import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from crr.errors import CrrError


class AuthError(CrrError):
    """A peer failed to prove it knows the deployment secret, or a sealed frame did not verify."""


def load_secret(path: str | None = None, env: str = "CRR_SECRET") -> bytes:
    """The deployment secret from a file or the environment variable ``CRR_SECRET``."""
    if path:
        with open(path, "rb") as f:
            secret = f.read().strip()
    else:
        secret = os.environ.get(env, "").encode()
    if len(secret) < 16:
        raise AuthError("no usable deployment secret: give --secret-file FILE (or set CRR_SECRET) with at least "
                        "16 bytes shared by all peers, e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`")
    return secret


def nonce() -> bytes:
    """A fresh random handshake nonce."""
    return os.urandom(16)


def proof(secret: bytes, role: str, own_nonce: bytes, peer_nonce: bytes, site_id: str) -> bytes:
    """Proof that ``site_id`` (acting as ``role``) knows the secret, bound to both nonces."""
    return hmac.new(secret, role.encode() + b"|" + own_nonce + peer_nonce + site_id.encode(), hashlib.sha256).digest()


def check_proof(expected: bytes, got: object) -> None:
    """Raise AuthError unless the proofs match."""
    if not isinstance(got, bytes) or not hmac.compare_digest(expected, got):
        raise AuthError("the peer could not prove it knows the deployment secret")


class Channel:
    """Seals outgoing and opens incoming frames of one connection."""

    def __init__(self, secret: bytes, client_nonce: bytes, server_nonce: bytes, is_client: bool) -> None:
        keys = HKDF(algorithm=hashes.SHA256(), length=64, salt=client_nonce + server_nonce,
                    info=b"crr session v1").derive(secret)
        c2s, s2c = ChaCha20Poly1305(keys[:32]), ChaCha20Poly1305(keys[32:])
        self._send, self._recv = (c2s, s2c) if is_client else (s2c, c2s)
        self._send_seq = 0
        self._recv_seq = 0

    def seal(self, payload: bytes) -> bytes:
        """Encrypt and authenticate the next outgoing frame."""
        out = self._send.encrypt(self._send_seq.to_bytes(12, "big"), payload, None)
        self._send_seq += 1
        return out

    def open(self, sealed: bytes) -> bytes:
        """Decrypt the next incoming frame; raise AuthError if it was forged, replayed or reordered."""
        try:
            out = self._recv.decrypt(self._recv_seq.to_bytes(12, "big"), sealed, None)
        except InvalidTag:
            raise AuthError("a frame failed authentication (forged, replayed, reordered or corrupted)") from None
        self._recv_seq += 1
        return out
