"""Credentials of a deployment and of each site, and the encryption of frames between peers.

Two credentials, two questions (see ``sync/PROTOCOL.md``, "Trust model"):

* the **deployment secret**, shared by every peer, proves *membership*: only a holder can complete a
  handshake, read frames or seal them;
* each site's **Ed25519 key pair** proves *which* member is talking: the handshake is signed by the
  site's private key, and every site pins the public key it first saw for a site id
  (trust on first use, :class:`TrustStore`); a known site id presenting another key is refused.

The private key lives beside the site's database in ``<db>.key`` (PKCS#8 PEM, mode 0600, written
atomically); pinned peer keys in ``<db>.peers.json``. In-memory sites get an ephemeral key and pins
that last as long as the process.

After the handshake every frame is sealed with ChaCha20-Poly1305 under a per-direction key derived
from the secret *and* an ephemeral X25519 exchange, with the frame's sequence number as nonce: a
stranger cannot read, inject, replay, reorder or truncate frames, and another member of the
deployment cannot read or forge the frames of a session it is not part of.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import tempfile

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from crr.errors import CrrError

KEY_BYTES = 32  # Ed25519 and X25519 public keys


class AuthError(CrrError):
    """A peer failed to prove it knows the deployment secret, or a sealed frame did not verify."""


class IdentityError(AuthError):
    """A peer's key does not match the key pinned for its site id, or a key file is unusable.

    ``remote`` is the short reason told to the peer (the full message, for the local log, may name files).
    """

    def __init__(self, message: str, remote: str | None = None) -> None:
        super().__init__(message)
        self.remote = remote or "identity refused"


MIN_SECRET_BYTES = 16  # the deployment secret's least length (the command line, the API)


def load_secret(path: str | None = None, env: str = "CRR_SECRET") -> bytes:
    """The deployment secret from a file or the environment variable ``CRR_SECRET``."""
    if path:
        with open(path, "rb") as f:
            secret = f.read().strip()
    else:
        secret = os.environ.get(env, "").encode()
    if len(secret) < MIN_SECRET_BYTES:
        raise AuthError("no usable deployment secret: give --secret-file FILE (or set CRR_SECRET) with at least "
                        f"{MIN_SECRET_BYTES} bytes shared by all peers, e.g. "
                        "`python -c 'import secrets; print(secrets.token_hex(32))'`")
    return secret


def nonce() -> bytes:
    """A fresh random handshake nonce."""
    return os.urandom(16)


def fingerprint(public_key: bytes) -> str:
    """A short printable name of a public key (first 16 hex digits of its SHA-256), for logs and errors."""
    return hashlib.sha256(public_key).hexdigest()[:16]


def proof(secret: bytes, role: str, transcript_hash: bytes) -> bytes:
    """Proof that the side acting as ``role`` knows the secret, bound to the whole handshake transcript."""
    return hmac.new(secret, role.encode() + b"|" + transcript_hash, hashlib.sha256).digest()


def check_proof(expected: bytes, got: object) -> None:
    """Raise AuthError unless the proofs match (constant-time compare)."""
    if not isinstance(got, bytes) or not hmac.compare_digest(expected, got):
        raise AuthError("the peer could not prove it knows the deployment secret")


def verify_signature(public_key: bytes, signature: object, data: bytes, site: str) -> None:
    """Raise AuthError unless ``signature`` is ``site``'s Ed25519 signature of ``data``."""
    try:
        if not isinstance(signature, bytes):
            raise InvalidSignature
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, data)
    except (InvalidSignature, ValueError):
        raise AuthError(f"site {site!r} could not prove it holds the private key of the public key it presented "
                        f"({fingerprint(public_key)})") from None


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_private(path: str, data: bytes, replace: bool) -> bool:
    """Write ``data`` to ``path`` atomically with mode 0600; with ``replace=False`` never overwrite.

    Returns False if ``replace`` is False and the file already exists (someone else created it).
    """
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # atomic create-if-absent: two writers cannot both win
            except FileExistsError:
                return False
        _fsync_dir(path)
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _check_private_mode(path: str) -> None:
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        raise IdentityError(f"the site key {path} is readable by other users (mode {mode:o}); "
                            f"run `chmod 600 {path}` (or delete it to make a new key, which every peer must then "
                            "unpin)")


def check_file_path(path: str, what: str, option: str, example: str) -> None:
    """Refuse a ``path`` crr keeps a file at that is a folder or another non-file (IdentityError naming
    ``what`` and the ``option`` that sets it, with ``example`` as a file name in that folder)."""
    if os.path.isdir(path):
        raise IdentityError(f"{what} {path} is a folder; give a file path ({option} FILE), e.g. "
                            f"{os.path.join(path, example)}")
    if os.path.exists(path) and not os.path.isfile(path):
        raise IdentityError(f"{what} {path} is not a regular file; give a file path ({option} FILE)")


class Identity:
    """A site's Ed25519 key pair: proves which site is talking."""

    def __init__(self, private_key: Ed25519PrivateKey, path: str | None = None) -> None:
        self._private = private_key
        self.path = path
        self.public: bytes = private_key.public_key().public_bytes(serialization.Encoding.Raw,
                                                                   serialization.PublicFormat.Raw)

    @classmethod
    def ephemeral(cls) -> "Identity":
        """A fresh key pair kept only in memory (in-memory sites, the local control client)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load_or_create(cls, path: str) -> "Identity":
        """The key pair stored at ``path``, created there (mode 0600, atomically) if absent."""
        check_file_path(path, "the site key", "--key-file", "site.key")
        try:
            if not os.path.exists(path):
                key = Ed25519PrivateKey.generate()
                pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
                if _write_private(path, pem, replace=False):
                    return cls(key, path)
            _check_private_mode(path)
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise IdentityError(f"cannot read or create the site key {path}: {e.strerror or e}; make its folder "
                                "writable by this user") from None
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as e:
            raise IdentityError(f"the site key {path} is not a usable private key ({e}); restore it from a backup, "
                                "or delete it to make a new key (every peer must then unpin this site)") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise IdentityError(f"the site key {path} is not an Ed25519 key; delete it to make a new one")
        return cls(key, path)

    @property
    def fingerprint(self) -> str:
        """Short printable name of the public key."""
        return fingerprint(self.public)

    def sign(self, data: bytes) -> bytes:
        """Ed25519 signature of ``data``."""
        return self._private.sign(data)


class TrustStore:
    """Pinned public keys of peer sites (site id -> key), persisted as JSON (``None`` path: in memory).

    File format: ``{"format": "crr-peer-keys", "version": 1, "keys": {site id: hex public key}}``; an
    administrator may pre-fill it (then refuse unknown sites with ``trust_new_peers=False``) or delete
    an entry to let a site that really changed its key be pinned again.
    """

    FORMAT = "crr-peer-keys"

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.keys: dict[str, bytes] = {}
        if path is not None:
            self._check_path(path)
        if path is not None and os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    doc = json.loads(f.read().decode())
                if not isinstance(doc, dict) or doc.get("format") != self.FORMAT or not isinstance(doc.get("keys"), dict):
                    raise ValueError("not a crr peer key file")
                for site, key in doc["keys"].items():
                    raw = bytes.fromhex(key)
                    if len(raw) != KEY_BYTES:
                        raise ValueError(f"the key of {site!r} is not {KEY_BYTES} bytes")
                    self.keys[site] = raw
            except (OSError, ValueError, UnicodeDecodeError, AttributeError, TypeError) as e:
                raise IdentityError(f"cannot read the pinned peer keys {path}: {e}; repair it, or delete it to trust "
                                    "every peer again on first use") from None

    @staticmethod
    def _check_path(path: str) -> None:
        """Refuse at once a path where pins could never be saved (a folder, or in a missing folder)."""
        check_file_path(path, "the pinned peer keys file", "--trust-file", "peers.json")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise IdentityError(f"the folder {folder} of the pinned peer keys file {path} does not exist; create "
                                "it first, or give another --trust-file")

    def get(self, site: str) -> bytes | None:
        """The key pinned for ``site``, if any."""
        return self.keys.get(site)

    def pin(self, site: str, key: bytes) -> None:
        """Pin ``site`` to ``key`` and persist the store."""
        self.keys[site] = key
        self._save()

    def forget(self, site: str) -> None:
        """Unpin ``site`` (it will be trusted on first use again)."""
        if self.keys.pop(site, None) is not None:
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        doc = {"format": self.FORMAT, "version": 1, "keys": {s: k.hex() for s, k in sorted(self.keys.items())}}
        try:
            _write_private(self.path, (json.dumps(doc, indent=1) + "\n").encode(), replace=True)
        except OSError as e:
            raise IdentityError(f"cannot save the pinned peer keys {self.path}: {e.strerror or e}") from None


class KeyExchange:
    """An ephemeral X25519 key pair for one handshake (forward secrecy, keys other members cannot derive)."""

    def __init__(self) -> None:
        self._private = X25519PrivateKey.generate()
        self.public: bytes = self._private.public_key().public_bytes(serialization.Encoding.Raw,
                                                                     serialization.PublicFormat.Raw)

    def shared(self, peer_public: bytes) -> bytes:
        """The shared secret with the peer's ephemeral public key; AuthError on a degenerate key."""
        try:
            return self._private.exchange(X25519PublicKey.from_public_bytes(peer_public))
        except ValueError:
            raise AuthError("the peer sent an unusable key-exchange value") from None


class Channel:
    """Seals outgoing and opens incoming frames of one connection."""

    def __init__(self, key_material: bytes, client_nonce: bytes, server_nonce: bytes, transcript_hash: bytes,
                 is_client: bool) -> None:
        keys = HKDF(algorithm=hashes.SHA256(), length=64, salt=client_nonce + server_nonce,
                    info=b"crr session v2|" + transcript_hash).derive(key_material)
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
