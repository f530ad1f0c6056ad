"""The sync service: a site exchanging changesets with its peers by itself.

It runs an asyncio event loop in a background thread that owns the site, a :class:`crr.Site` or a
:class:`crr.spark.SparkSite` (:class:`crr.sync.served.ServedSite`). One call at a time uses the
site, holding the service's site lock: the quick ones on that thread, merges, changes and
statements on a worker thread, so the loop keeps its connections and answers status while a
Spark job runs. It listens for
peers, dials static peers (reconnecting with backoff), authenticates every connection (the
deployment secret proves membership, the site's key pair proves which site is talking; see
:mod:`crr.sync.crypto`), and pulls:

* for every relation the local site holds as a replicated or remote table that a connected peer
  serves with the same schema fingerprint and may write here, it asks for the changes after the
  cursor stored for (peer, relation), checks them against the sender's write rules
  (:func:`check_write_rules`) and merges them with ``Site.merge(..., track=True)``, which advances
  that cursor in the merge's own transaction; a relation whose merge fails is retried with backoff
  and shown by :meth:`SyncService.status`, without holding up the others;
* a peer that has new changes (a local write, or a merge that changed something) sends a short
  ``notice`` to all connected peers, which then pull; a slow periodic pull covers lost notices.

Every received message is validated field by field (:func:`crr.sync.protocol.check_message`), and the
bytes of frames being received count against one memory budget shared by all connections.

Only the public site API is used (:class:`crr.sync.served.ServedSite`), and ``Changeset``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from crr.changeset import Changeset
from crr.errors import CrrError
from crr.sync import crypto, handshake
from crr.sync.control import answers
from crr.sync.protocol import (CONTROL_MESSAGES, PEER_MESSAGES, MemoryBudget, ProtocolError, body_timeout,
                           check_message, decode, encode, frame, read_body, read_header)
from crr.sync.rules import check_write_rules
from crr.sync.served import ServedSite

log = logging.getLogger("crr.sync")

MiB = 1024 * 1024
CONTROL_CHUNK = 20_000  # rows per answer frame of a control query


@dataclass
class Link:
    """One authenticated connection to a peer."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    channel: crypto.Channel
    peer: str
    address: str
    outgoing: bool
    budget: MemoryBudget
    key: bytes = b""
    since: float = field(default_factory=time.time)
    serves: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (fingerprint, kind)
    peer_cursor: int = 0  # the peer's own sequence number, as last announced
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    wanted: asyncio.Event = field(default_factory=asyncio.Event)
    next_rid: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    held: int = 0  # bytes of the memory budget this connection holds
    warned: set = field(default_factory=set)  # (relation, fingerprint) schema differences already logged
    closed: bool = False
    results: bool = False  # a control link: requests carry a statement's parameters (protocol.decode's results)

    async def send(self, message: dict[str, Any]) -> None:
        """Seal and send one message."""
        await self.send_sealed(self.channel.seal(encode(message)))

    async def send_sealed(self, body: bytes) -> None:
        """Send one already sealed frame body."""
        self.bytes_out += len(body) + 4
        self.writer.write(frame(body))
        await self.writer.drain()

    async def recv(self, max_frame: int, memory_wait: float) -> tuple[dict[str, Any], int]:
        """Receive and open one message; returns it with the budget it holds (give it back with release)."""
        size = await read_header(self.reader, max_frame)
        await self.budget.acquire(size, memory_wait)
        self.held += size
        try:
            body = await read_body(self.reader, size, body_timeout(size))
            self.bytes_in += size + 4
            return decode(self.channel.open(body), results=self.results), size
        except BaseException:
            self.release(size)
            raise

    def release(self, n: int) -> None:
        """Give back ``n`` bytes of budget held by this connection (no-op once the connection closed)."""
        n = min(n, self.held)
        self.held -= n
        self.budget.release(n)

    def close(self) -> None:
        """Close the connection, fail its pending requests and give back its memory."""
        self.closed = True
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("connection closed"))
                fut.exception()  # retrieved: a request already given up must not log "never retrieved"
        self.pending.clear()
        self.release(self.held)
        self.writer.close()


@dataclass
class Failure:
    """A relation whose changes from a peer could not be merged; retried with backoff."""

    peer: str
    relation: str
    error: str
    attempts: int
    first: float
    next_try: float  # time.monotonic() of the next attempt

    def describe(self) -> dict[str, Any]:
        """The status entry."""
        return {"peer": self.peer, "relation": self.relation, "error": self.error, "attempts": self.attempts,
                "failing_since": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.first)),
                "retry_in_seconds": round(max(0.0, self.next_try - time.monotonic()), 1)}


class RateLimitedLog:
    """Warnings of one kind: the first ``burst`` per ``interval`` seconds, then one summary line."""

    def __init__(self, logger: logging.Logger, burst: int = 5, interval: float = 10.0) -> None:
        self.logger, self.burst, self.interval = logger, burst, interval
        self._windows: dict[str, list] = {}  # kind -> [window start, logged, suppressed, latest, flush handle]

    def warn(self, kind: str, message: str, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Log ``message`` unless ``kind`` already logged ``burst`` lines in this interval (then count it)."""
        now = time.monotonic()
        w = self._windows.get(kind)
        if w is not None and now - w[0] >= self.interval:
            self.flush(kind)
            w = None
        if w is None:
            w = self._windows[kind] = [now, 0, 0, "", None]
        if w[1] < self.burst:
            w[1] += 1
            self.logger.warning("refused: %s", message)
            return
        w[2] += 1
        w[3] = message
        if w[4] is None and loop is not None:
            w[4] = loop.call_later(max(0.0, w[0] + self.interval - now), self.flush, kind)

    def flush(self, kind: str) -> None:
        """End ``kind``'s interval: log how many lines it suppressed, if any."""
        w = self._windows.pop(kind, None)
        if w is None:
            return
        if w[4] is not None:
            w[4].cancel()
        if w[2]:
            self.logger.warning("refused %d more (%s) in the last %.0f s without logging each; latest: %s",
                                w[2], kind, time.monotonic() - w[0], w[3])

    def flush_all(self) -> None:
        """Log every pending summary."""
        for kind in list(self._windows):
            self.flush(kind)


CONTROL_WATCH_SECONDS = 0.2  # how often a running control statement checks that its client is still there
STOP_STATEMENT_SECONDS = 20.0  # how long stop() interrupts a running statement before it goes on without it


def _plain(value: Any) -> Any:
    """msgpack fallback for query results (dates, decimals, UUIDs ...): their text."""
    return str(value)


def _is_memory(path: str) -> bool:
    return path == "" or path.startswith(":memory:")


def _address(value: object, what: str, lowest: int) -> tuple[str, int]:
    """``value`` as a (host, port) pair, or a CrrError saying what ``what`` takes (a "host:port" string
    was read letter by letter, and failed at start() binding some other address)."""
    ok = (isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], str) and value[0]
          and isinstance(value[1], int) and not isinstance(value[1], bool) and lowest <= value[1] <= 65535)
    if not ok:
        raise CrrError(f"{what} is a (host, port) pair with a port from {lowest} to 65535, e.g. "
                       f"(\"127.0.0.1\", 7700), not {value!r}")
    host, port = value  # type: ignore[misc]
    return host, port


class SyncService:
    """Background replication for one site. ``start()``, ``stop()``, ``status()``, ``execute()``.

    ``SyncService(site, secret, listen=(host, port), peers=[(host, port)], allow={site: {relation}})``.
    The site's key pair is read from (or created at) ``<db>.key`` and peer keys are pinned in
    ``<db>.peers.json`` (in memory for an in-memory site); ``key_file``/``trust_file`` move them,
    ``trusted_keys`` pins keys given by the application, and ``trust_new_peers=False`` refuses every
    site whose key is not pinned yet. ``max_buffered`` bounds the bytes of frames received at once
    over all connections; a frame that cannot get memory within ``memory_wait`` seconds ends its
    connection. A relation whose merge fails is retried after ``retry_delays[0]`` seconds, doubling up
    to ``retry_delays[1]``. Refusals are logged ``log_burst`` per kind per ``log_interval`` seconds,
    then summarised.
    """

    def __init__(self, site: ServedSite, secret: bytes, listen: tuple[str, int] | None = None,
                 peers: list[tuple[str, int]] | None = None, allow: dict[str, set[str]] | None = None,
                 control_path: str | None = None, pull_interval: float = 2.0,
                 max_frame: int = 256 * MiB, *, key_file: str | None = None, trust_file: str | None = None,
                 trusted_keys: dict[str, bytes | str] | None = None, trust_new_peers: bool = True,
                 max_buffered: int = 512 * MiB, memory_wait: float = 30.0,
                 retry_delays: tuple[float, float] = (1.0, 300.0), log_burst: int = 5,
                 log_interval: float = 10.0, max_handshakes: int = 64) -> None:
        if isinstance(secret, str):
            secret = secret.encode()  # a secret kept as text (CRR_SECRET, a config value): its UTF-8 bytes
        if not isinstance(secret, (bytes, bytearray)) or len(secret) < crypto.MIN_SECRET_BYTES:
            raise crypto.AuthError(f"the deployment secret must be at least {crypto.MIN_SECRET_BYTES} bytes shared by "
                                   "all peers (as bytes or text), e.g. secrets.token_hex(32)")
        self.site = site
        self.secret = bytes(secret)
        self.listen = None if listen is None else _address(listen, "listen", lowest=0)
        if isinstance(peers, str) or (isinstance(peers, tuple) and len(peers) == 2 and isinstance(peers[0], str)):
            raise CrrError(f"peers is a list of (host, port) pairs, e.g. [(\"10.0.0.2\", 7700)], not {peers!r}")
        self.static_peers = [_address(p, "a peer's address", lowest=1) for p in peers or []]
        self.allow = allow  # peer site id -> relations it may write here (None: any peer, any relation)
        self.control_path = control_path
        if not (isinstance(pull_interval, (int, float)) and 0 < pull_interval < float("inf")):
            raise CrrError(f"pull_interval must be a positive number of seconds, not {pull_interval!r}")
        self.pull_interval = pull_interval
        self.budget = MemoryBudget(max_buffered)
        self.max_frame = min(max_frame, max_buffered)  # a frame larger than the whole budget could never be read
        self.memory_wait = memory_wait
        self.retry_delays = retry_delays
        self.max_handshakes = max_handshakes
        in_memory = _is_memory(site.path)
        base = None if in_memory else os.path.abspath(site.path)
        key_file = key_file or (None if base is None else base + ".key")
        trust_file = trust_file or (None if base is None else base + ".peers.json")
        self.identity = crypto.Identity.load_or_create(key_file) if key_file else crypto.Identity.ephemeral()
        self.trust = crypto.TrustStore(trust_file)
        self.trusted_keys = {s: self._key_bytes(s, k) for s, k in (trusted_keys or {}).items()}
        self.trust_new_peers = trust_new_peers
        self.links: dict[str, Link] = {}
        self.address: tuple[str, int] | None = None
        self.refused: list[str] = []  # reasons of refused traffic, newest last (also logged, rate-limited)
        self.failures: dict[tuple[str, str], Failure] = {}  # (peer, relation) -> failing merge
        self._log = RateLimitedLog(log, log_burst, log_interval)
        self._handshakes = 0
        # the site is used by the loop and, for control queries, by a worker thread: one at a time
        self._site_lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task] = set()
        self._statements: set[asyncio.Future] = set()  # statements running on worker threads (_statement)
        self._ready = threading.Event()
        self._stopping = False
        self._error: BaseException | None = None  # a failure while starting, re-raised by start()
        self._announced: list | None = None  # the relations of the last serves message sent to every peer
        self.unreachable: dict[str, str] = {}  # a dialled peer's address -> why its last dial failed

    @staticmethod
    def _key_bytes(site: str, key: bytes | str) -> bytes:
        try:
            raw = key if isinstance(key, bytes) else bytes.fromhex(key)
        except ValueError:
            raw = b""
        if len(raw) != crypto.KEY_BYTES:
            raise crypto.IdentityError(f"the trusted key given for site {site!r} is not a {crypto.KEY_BYTES}-byte "
                                       "Ed25519 public key (raw bytes or hex); copy it from that site's status()['key']")
        return raw

    @property
    def public_key(self) -> str:
        """This site's public key (hex): what peers pin, and what an administrator may pre-pin."""
        return self.identity.public.hex()

    # -- lifecycle (called from any thread) ------------------------------------------------------
    def start(self) -> "SyncService":
        """Start the event loop thread; returns once listening."""
        self._thread = threading.Thread(target=self._run, name=f"crr-sync-{self.site.site_id}", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error:
            raise self._error
        return self

    def stop(self) -> None:
        """Stop syncing and close every connection (the site stays open)."""
        if self._loop is None:
            return
        self._stopping = True
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(30)
        self._loop = None

    def __enter__(self) -> "SyncService":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 120, hold_site: bool = True) -> Any:
        """Run ``fn(*args)`` on the service thread (where the site lives) and return its result; holding
        the site (merges and statements wait) unless ``hold_site`` is false (a read of committed state)."""
        if self._loop is None:
            raise CrrError("the sync service is not running; call start() first")

        async def run():
            if not hold_site:
                return fn(*args)
            async with self._site_lock:
                return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        """Run a statement on the site (from any thread) and tell peers if it changed something. It runs
        on a worker thread: merges wait for it, but the service keeps its connections and answers
        :meth:`status` meanwhile."""
        loop = self._loop
        if loop is None:
            raise CrrError("the sync service is not running; call start() first")
        return asyncio.run_coroutine_threadsafe(self._statement(sql, params), loop).result()

    def status(self) -> dict:
        """Relations, peers, cursors, whether each stream is behind, failing merges, memory and refusals.
        Answered while a statement or merge runs: it reads committed state only (Site.peer_cursors)."""
        return self.call(self._status_here, hold_site=False)

    def forget_peer_key(self, site_id: str) -> None:
        """Unpin a peer's key (after that site really changed its key); it is trusted on first use again."""
        self.trust.forget(site_id)

    # -- the loop ---------------------------------------------------------------------------------
    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup())
        except BaseException as e:  # noqa: BLE001 - reported to start()
            self._error = e
            for server in self._servers:  # a listener opened before the failure must not stay bound
                server.close()
            self._servers.clear()
            loop.close()
            self._loop = None
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _startup(self) -> None:
        if self.listen is not None:
            server = await asyncio.start_server(self._accept, self.listen[0], self.listen[1])
            self._servers.append(server)
            self.address = server.sockets[0].getsockname()[:2]
            log.info("site %s listening on %s:%s (key %s)", self.site.site_id, *self.address,
                     self.identity.fingerprint)
        if self.control_path:
            if os.path.lexists(self.control_path):
                if not stat.S_ISSOCK(os.lstat(self.control_path).st_mode):
                    raise CrrError(f"{self.control_path} exists and is not a socket; move it away (crr uses that "
                                   "path for its control socket)")
                if answers(self.control_path):
                    raise CrrError(f"another crr serve answers on {self.control_path}; stop it first, or reach it "
                                   "with crr sql / crr status")
                os.unlink(self.control_path)  # a stale socket of a server that did not stop cleanly
            server = await asyncio.start_unix_server(self._accept_control, self.control_path)
            os.chmod(self.control_path, 0o600)
            self._servers.append(server)
        self._announced = self._serves_message()["relations"]
        for host, port in self.static_peers:
            self._spawn(self._dial_forever(host, port))
        self._spawn(self._periodic())

    async def _shutdown(self) -> None:
        running = [t for t in self._statements if not t.done()]
        if running:  # a statement must not outlive the service on the site (its caller would wait for ever)
            log.info("stopping: interrupting %d running statement(s)", len(running))
            deadline = time.monotonic() + STOP_STATEMENT_SECONDS
            while not all(t.done() for t in running) and time.monotonic() < deadline:
                self.site.interrupt()  # again until it lands: DuckDB drops one that comes between queries
                await asyncio.wait(running, timeout=0.1)
        for server in self._servers:
            server.close()
        for link in list(self.links.values()):
            link.close()
        # Cancel the handlers and let them finish their cleanup while the loop still runs. A connection
        # accepted just before the servers closed starts its handler while the first ones end, so look
        # again: a handler left pending would be closed with the loop, its cleanup then failing on it.
        for _ in range(5):
            tasks = [t for t in self._tasks if t is not asyncio.current_task() and not t.done()]
            if not tasks:
                break
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=5)
        self._log.flush_all()
        if self.control_path and os.path.exists(self.control_path):
            os.unlink(self.control_path)

    def _track(self) -> None:
        """Count the running task (a connection handler started by asyncio) among those stop() ends."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def add_peer(self, host: str, port: int) -> None:
        """Dial a peer (e.g. one found by discovery); reconnects until the service stops."""
        if self._loop is None:
            raise CrrError("the sync service is not running; call start() before add_peer()")
        self._loop.call_soon_threadsafe(lambda: self._spawn(self._dial_forever(host, port)))

    # -- connections ------------------------------------------------------------------------------
    async def _dial_forever(self, host: str, port: int) -> None:
        """Dial a peer until the service stops, again after each disconnection (backing off to 5 s); a
        peer that cannot be reached is logged once and listed by :meth:`status` until it answers. An
        address that turns out to be this site itself is given up."""
        address = f"{host}:{port}"
        delay = 0.2
        while not self._stopping:
            writer = None
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
                link = await asyncio.wait_for(self._handshake(reader, writer, True, address), 10)
                self.unreachable.pop(address, None)
                if link.peer == self.site.site_id:
                    log.warning("peer %s has this site's id %s (it is this site, or a copy of its file); not "
                                "dialling it again", address, link.peer)
                    return
                delay = 0.2
                await self._serve_link(link)
            except (OSError, asyncio.TimeoutError, EOFError, ConnectionError) as e:
                why = str(e) or type(e).__name__
                if address not in self.unreachable:
                    log.warning("peer %s unreachable (%s); retrying every few seconds", address, why)
                self.unreachable[address] = why
            except CrrError as e:
                self._refuse(f"{host}:{port}: {e}", kind=f"dial {host}:{port}")
            except Exception as e:  # noqa: BLE001 - one line, never a traceback, and keep dialling
                self._internal(f"connection to {host}:{port}", e)
            finally:
                if writer is not None:
                    writer.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one accepted connection. A handler that stop() cancels ends normally: Python 3.11's
        asyncio logs a cancelled connection handler as an error ("Exception in callback ...
        CancelledError")."""
        try:
            await self._accept_connection(reader, writer)
        except asyncio.CancelledError:
            writer.close()

    async def _accept_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._track()
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        if self._handshakes >= self.max_handshakes:
            self._refuse(f"{address}: {self._handshakes} connections are already authenticating; closed",
                         kind="connection")
            writer.close()
            return
        self._handshakes += 1
        try:
            link = await asyncio.wait_for(self._handshake(reader, writer, False, address), 10)
        except (asyncio.TimeoutError, EOFError, ConnectionError, OSError, CrrError) as e:
            self._refuse(f"{address}: handshake failed: {str(e) or type(e).__name__}",
                         kind="identity" if isinstance(e, crypto.IdentityError) else "connection")
            writer.close()
            return
        except Exception as e:  # noqa: BLE001
            self._internal(f"handshake with {address}", e)
            writer.close()
            return
        finally:
            self._handshakes -= 1
        try:
            await self._serve_link(link)
        except (asyncio.TimeoutError, EOFError, ConnectionError, OSError) as e:
            log.debug("connection from %s ended: %s", address, e)
        except CrrError as e:
            self._refuse(f"{address}: {e}", kind=f"peer {link.peer}")
        except Exception as e:  # noqa: BLE001
            self._internal(f"connection from {address}", e)

    def _refuse(self, reason: str, kind: str = "peer") -> None:
        """Record a refusal and log it (at most a few lines per kind and interval, then a count)."""
        self.refused.append(reason)
        del self.refused[:-100]
        self._log.warn(kind, reason, self._loop)

    def _internal(self, where: str, e: BaseException) -> None:
        """One log line for an unexpected error (the traceback only at debug level)."""
        log.error("%s dropped after an unexpected error: %s: %s", where, type(e).__name__, e,
                  exc_info=log.isEnabledFor(logging.DEBUG))
        self.refused.append(f"{where}: unexpected {type(e).__name__}: {e}")
        del self.refused[:-100]

    def _check_identity(self, site: str, key: bytes) -> None:
        """Trust check of the handshake: a site id is bound to the first key it proved (or a given one)."""
        if site == self.site.site_id:
            if key != self.identity.public:
                raise crypto.IdentityError(f"a peer claims to be this site ({site!r}) with another key "
                                           f"({crypto.fingerprint(key)}); refused",
                                           remote=f"site id {site!r} is taken")
            return
        pinned = self.trusted_keys.get(site) or self.trust.get(site)
        where = "the trusted_keys given to the service" if site in self.trusted_keys else self.trust.path or "memory"
        if pinned is not None:
            if pinned != key:
                raise crypto.IdentityError(
                    f"site {site!r} presented key {crypto.fingerprint(key)} but is pinned to key "
                    f"{crypto.fingerprint(pinned)} ({where}): another member of the deployment may be impersonating "
                    f"it. If {site!r} really has a new key, remove its entry from {where} and reconnect",
                    remote=f"site id {site!r} is bound to another key here")
            return
        if not self.trust_new_peers:
            raise crypto.IdentityError(
                f"site {site!r} (key {crypto.fingerprint(key)}) is not known here and new peers are not trusted "
                f"on first use; add its key to {where} to let it connect",
                remote=f"site {site!r} is not known here")
        self.trust.pin(site, key)
        log.info("pinned site %s to key %s on first contact (%s)", site, crypto.fingerprint(key), where)

    async def _handshake(self, reader, writer, is_client: bool, address: str) -> Link:
        run = handshake.client_handshake if is_client else handshake.server_handshake
        done = await run(reader, writer, self.secret, self.site.site_id, self.identity, self._check_identity)
        return Link(reader=reader, writer=writer, channel=done.channel, peer=done.site, address=address,
                    outgoing=is_client, budget=self.budget, key=done.key)

    async def _serve_link(self, link: Link) -> None:
        if link.peer == self.site.site_id:
            link.close()
            raise ProtocolError("connected to itself")
        old = self.links.get(link.peer)
        if old is not None:
            # keep one connection per peer site: the one dialled by the smaller site id
            keep_new = link.outgoing == (self.site.site_id < link.peer)
            if not keep_new:
                link.close()
                return
            old.close()
        self.links[link.peer] = link
        log.info("connected to %s (%s, key %s)", link.peer, link.address, crypto.fingerprint(link.key))
        puller = self._spawn(self._pull_loop(link))
        try:
            async with self._site_lock:
                serves = self._serves_message()
            await link.send(serves)
            while True:
                message, size = await link.recv(self.max_frame, self.memory_wait)
                kept = False
                try:
                    kept = await self._dispatch(link, check_message(message, PEER_MESSAGES), size)
                finally:
                    if not kept:
                        link.release(size)
        except (EOFError, ConnectionError, asyncio.IncompleteReadError):
            pass
        except CrrError as e:
            self._refuse(f"{link.peer} ({link.address}): {e}; connection closed", kind=f"peer {link.peer}")
        finally:
            puller.cancel()
            link.close()
            if self.links.get(link.peer) is link:
                del self.links[link.peer]
            log.info("disconnected from %s", link.peer)

    def _serves(self, name: str) -> bool:
        """Whether this site serves relation ``name``'s changes to peers: not a remote source (it keeps
        no copy) nor an aggregate view (its rows are never replicated), nor one it does not hold."""
        kind = self.site.relations().get(name, "source")
        return kind != "source" and self.site.relation(name).aggregate is None

    def _serves_message(self) -> dict:
        rels = [[name, self.site.relation(name).fingerprint, kind] for name, kind in self.site.relations().items()
                if self._serves(name)]
        return {"t": "serves", "relations": rels, "cursor": self.site.cursor}

    # -- messages ---------------------------------------------------------------------------------
    async def _dispatch(self, link: Link, m: dict, size: int) -> bool:
        """Handle one validated message; True if its memory is handed on (released later by the puller)."""
        t = m["t"]
        if t == "serves":
            link.serves = {r[0]: (r[1], r[2]) for r in m["relations"]}
            link.peer_cursor = m["cursor"]
            link.wanted.set()
        elif t == "notice":
            link.peer_cursor = max(link.peer_cursor, m["cursor"])
            link.wanted.set()
        elif t == "pull":
            rel, since, rid = m["relation"], m["since"], m["rid"]
            refused = None
            async with self._site_lock:
                served = self._serves(rel)
                if not self.site.knows_cursor(since):  # this site's file was restored from a backup since
                    log.info("%s resumes %s from cursor %d, which this copy of the site did not hand out (its last "
                             "change is %d): sending the full state", link.peer, rel, since, self.site.cursor)
                    since = 0  # which merges as safely; the rows the peer lacks are in it
                try:  # on a worker thread: a Spark site's changes are Spark jobs, and the loop goes on meanwhile
                    data = await asyncio.to_thread(self._changes_bytes, rel, since) if served else b""
                except CrrError as e:  # the peer's request, not this connection, is at fault
                    served, refused = False, str(e)
            if not served:
                await link.send({"t": "error", "rid": rid,
                                 "message": refused or f"this site does not serve {rel!r}"})
                return False
            await link.send({"t": "changes", "rid": rid, "data": data})
        elif t in ("changes", "error") and m.get("rid") in link.pending:
            fut = link.pending.pop(m["rid"])
            if not fut.done():
                fut.set_result((m, size))
                return True
        elif t == "error":
            self._refuse(f"{link.peer} reports: {m['message'][:300]}", kind=f"peer {link.peer}")
        # an answer to a request that timed out is dropped
        return False

    async def _request(self, link: Link, message: dict, timeout: float = 60) -> tuple[dict, int]:
        link.next_rid += 1
        rid = message["rid"] = link.next_rid
        fut = asyncio.get_running_loop().create_future()
        link.pending[rid] = fut
        await link.send(message)
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            link.pending.pop(rid, None)

    def _wanted_relations(self, link: Link) -> list[str]:
        out = []
        for name, kind in self.site.relations().items():
            if kind == "view" or name not in link.serves:
                continue
            fingerprint, peer_kind = link.serves[name]
            if kind == "replicated" and peer_kind != "replicated":
                continue  # a replica merges only other replicas of the table
            if fingerprint != self.site.relation(name).fingerprint:
                if (name, fingerprint) not in link.warned:  # once per connection, not at every pull
                    link.warned.add((name, fingerprint))
                    self._refuse(f"{link.peer} serves {name} with another schema (fingerprint {fingerprint}); "
                                 "not pulling it", kind=f"schema {link.peer}")
                continue
            if self.allow is not None and name not in self.allow.get(link.peer, set()):
                continue  # this peer may not write that relation here
            out.append(name)
        return out

    async def _pull_loop(self, link: Link) -> None:
        while True:
            await link.wanted.wait()
            link.wanted.clear()
            try:
                await self._pull(link)
            except (ConnectionError, OSError, asyncio.TimeoutError, EOFError) as e:
                log.debug("pulling from %s stopped: %s", link.peer, e)
                link.close()  # the peer reconnects and resumes from the stored cursors
                return
            except Exception as e:  # noqa: BLE001 - one line, then a fresh connection
                self._internal(f"pulling from {link.peer}", e)
                link.close()
                return

    async def _pull(self, link: Link) -> None:
        changed = False
        async with self._site_lock:
            wanted = self._wanted_relations(link)
        for key in [k for k in self.failures if k[0] == link.peer and k[1] not in wanted]:
            del self.failures[key]  # no longer pulled from that peer (dropped there or here): nothing fails
        for name in wanted:
            failure = self.failures.get((link.peer, name))
            if failure is not None and time.monotonic() < failure.next_try:
                continue  # backing off; the other relations go on
            async with self._site_lock:
                since = self.site.peer_cursor(link.peer, name)
            reply, size = await self._request(link, {"t": "pull", "relation": name, "since": since})
            try:
                if reply["t"] == "error":
                    self._failed(link.peer, name, f"the peer would not serve it: {reply['message'][:300]}")
                    continue
                async with self._site_lock:
                    changed = await self._merge_from(link.peer, name, reply["data"]) or changed
            finally:
                link.release(size)
        if changed:
            await self._notify(exclude=link.peer)

    def _changes_bytes(self, relation: str, since: int) -> bytes:
        return self.site.changes(since=since, relations=[relation]).to_bytes()

    def _merged(self, peer: str, name: str, data: bytes) -> tuple[bool, str | None]:
        """Check and merge one relation's changes from ``peer`` (on a worker thread, holding the site):
        whether the merge changed something, or why it failed."""
        try:
            cs = Changeset.from_bytes(data)
            check_write_rules(self.site, peer, name, cs, self.allow)
            return bool(self.site.merge(cs, track=True).changed), None
        except Exception as e:  # noqa: BLE001 - a CrrError, or e.g. a raw database error: this relation waits, the others go on
            return False, f"{type(e).__name__}: {e}"

    async def _merge_from(self, peer: str, name: str, data: bytes) -> bool:
        """Check and merge one relation's changes from ``peer`` on a worker thread (a Spark site's merge
        takes seconds, and the loop keeps the connections and answers status meanwhile); a failure is
        recorded and retried later."""
        changed, error = await asyncio.to_thread(self._merged, peer, name, data)
        if error is not None:
            self._failed(peer, name, error)
            return False
        failure = self.failures.pop((peer, name), None)
        if failure is not None:
            log.info("changes of %s from %s merge again (after %d failed attempts)", name, peer, failure.attempts)
        return changed

    def _failed(self, peer: str, name: str, error: str) -> None:
        now = time.monotonic()
        failure = self.failures.get((peer, name))
        if failure is None:
            failure = self.failures[(peer, name)] = Failure(peer, name, error, 0, time.time(), now)
        failure.attempts += 1
        failure.error = error
        first, most = self.retry_delays
        delay = min(first * 2 ** (failure.attempts - 1), most)
        failure.next_try = now + delay
        self._refuse(f"changes of {name} from {peer} not merged (attempt {failure.attempts}, next in {delay:.0f} s): "
                     f"{error}", kind=f"merge {peer} {name}")

    async def _notify(self, exclude: str | None = None) -> None:
        message = {"t": "notice", "cursor": self.site.cursor}
        for peer, link in list(self.links.items()):
            if peer != exclude:
                try:
                    await link.send(message)
                except (ConnectionError, OSError):
                    pass

    async def _announce(self) -> None:
        """Tell every connected peer what this site serves again when its relations changed since the
        last time (a CREATE or DROP, through this service or on the site object), and pull: a relation
        created here may be one a peer serves. A peer learns the relations at connect time only
        otherwise, and would never pull one created after it."""
        async with self._site_lock:
            message = self._serves_message()
        if message["relations"] == self._announced:
            return
        self._announced = message["relations"]
        for link in list(self.links.values()):
            try:
                await link.send(message)
            except (ConnectionError, OSError):
                pass
            link.wanted.set()

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.pull_interval)
            await self._announce()
            for link in list(self.links.values()):
                link.wanted.set()

    # -- local operations -------------------------------------------------------------------------
    async def _statement(self, sql: str, params: Any, client: Link | None = None) -> list[tuple]:
        """Run a statement on a worker thread, holding the site; then tell peers if it changed something.
        ``client``: the control connection it came from, whose leaving interrupts it."""
        async with self._site_lock:
            before = self.site.cursor
            running = asyncio.ensure_future(asyncio.to_thread(self.site.execute, sql, params))
            self._statements.add(running)  # stop() interrupts it and waits for it
            running.add_done_callback(self._statements.discard)
            rows = await (self._unless_client_leaves(client, running) if client is not None
                          else asyncio.shield(running))
            wrote = self.site.cursor != before
        if wrote:
            self._spawn(self._notify())
        self._spawn(self._announce())
        return rows

    def _status_here(self) -> dict:
        cursors = self.site.peer_cursors()
        tracked = {(p, r): int(c) for p, r, c, _ in cursors}
        peers = []
        for peer, link in sorted(self.links.items()):
            streams = []
            for name in self._wanted_relations(link):
                cursor = tracked.get((peer, name), 0)
                # behind: the peer announced changes past the last one merged from it (a count of them
                # would mislead: a site's first change after it opens jumps to the wall clock's number)
                stream = {"relation": name, "cursor": cursor, "behind": link.peer_cursor > cursor}
                failure = self.failures.get((peer, name))
                if failure is not None:
                    stream["error"] = failure.error
                streams.append(stream)
            peers.append({"site": peer, "key": link.key.hex(), "address": link.address,
                          "direction": "out" if link.outgoing else "in",
                          "connected_seconds": round(time.time() - link.since, 1), "peer_cursor": link.peer_cursor,
                          "bytes_in": link.bytes_in, "bytes_out": link.bytes_out, "streams": streams})
        return {"site": self.site.site_id, "key": self.public_key, "cursor": self.site.cursor, "serving": True,
                "listening": f"{self.address[0]}:{self.address[1]}" if self.address else None,
                "relations": self.site.relations(), "peers": peers,
                "unreachable": [{"address": a, "error": e} for a, e in sorted(self.unreachable.items())],
                "cursors": [[None if v is None else str(v) for v in c] for c in cursors],  # (a Spark site: no time)
                "failing": [f.describe() for _, f in sorted(self.failures.items())],
                "memory": {"buffered": self.budget.used, "peak": self.budget.peak, "limit": self.budget.limit,
                           "refused_frames": self.budget.refused},
                "refused": self.refused[-10:]}

    # -- local control channel (crr sql / crr status while serving) ---------------------------------
    async def _accept_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one control connection until its client leaves; like :meth:`_accept`, a handler that
        stop() cancels ends normally."""
        self._track()
        try:
            done = await asyncio.wait_for(handshake.server_handshake(reader, writer, self.secret, self.site.site_id,
                                                                     self.identity), 10)
            link = Link(reader=reader, writer=writer, channel=done.channel, peer="control", address="control",
                        outgoing=False, budget=self.budget, results=True)
            while True:
                m, size = await link.recv(self.max_frame, self.memory_wait)
                try:
                    await self._control(link, check_message(m, CONTROL_MESSAGES))
                finally:
                    link.release(size)
        except (EOFError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, OSError,
                asyncio.CancelledError):
            pass
        except CrrError as e:
            self._refuse(f"control channel: {e}", kind="control")
        except Exception as e:  # noqa: BLE001
            self._internal("control channel", e)
        finally:
            writer.close()

    async def _unless_client_leaves(self, link: Link, running: Any) -> Any:
        """Await a control statement running on a worker thread; if the client closes the connection
        meanwhile (Ctrl-C in crr sql), interrupt it, so it does not hold the site (and every merge)
        until it ends. The client sends nothing more before its answer, so the end of its stream can
        only mean it left."""
        task = asyncio.ensure_future(running)
        while not task.done():
            await asyncio.wait({task}, timeout=CONTROL_WATCH_SECONDS)
            if not task.done() and link.reader.at_eof():
                log.info("control client left while its statement ran; interrupting it")
                self.site.interrupt()
                break
        return await task

    async def _control(self, link: Link, m: dict) -> None:
        """Answer one control request.

        A statement runs on a worker thread (holding the site, so merges wait for it, but the loop keeps
        serving connections), and its rows go out in frames of CONTROL_CHUNK rows, packed and sealed on a
        worker thread too, while merges go on.
        """
        try:
            if m["t"] == "status":  # committed state only: it does not wait for a running statement
                status = self._status_here()
                await link.send_sealed(link.channel.seal(encode({"t": "status", "status": status}, _plain)))
                return
            rows = await self._statement(m["sql"], m.get("params"), link)
        except CrrError as e:
            await link.send({"t": "error", "message": str(e), "kind": type(e).__name__})
            return
        except Exception as e:  # noqa: BLE001 - e.g. a raw database error: the client gets it as an answer
            await link.send({"t": "error", "message": f"{type(e).__name__}: {e}", "kind": type(e).__name__})
            return
        for start in range(0, max(len(rows), 1), CONTROL_CHUNK):
            chunk = {"t": "rows", "rows": rows[start:start + CONTROL_CHUNK],
                     "more": start + CONTROL_CHUNK < len(rows)}
            sealed = await asyncio.to_thread(lambda c=chunk: link.channel.seal(encode(c, _plain, results=True)))
            await link.send_sealed(sealed)
