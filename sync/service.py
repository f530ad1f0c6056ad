"""The sync service: a site exchanging changesets with its peers by itself.

It runs an asyncio event loop in a background thread that owns the :class:`crr.Site` (DuckDB
connections are not for concurrent use, so every site call happens on that thread). It listens for
peers, dials static peers (reconnecting with backoff), authenticates every connection, and pulls:

* for every relation the local site holds as a replicated or remote table that a connected peer
  serves with the same schema fingerprint and may write here, it asks for the changes after the
  cursor stored for (peer, relation) and merges them with ``Site.merge(..., track=True)``, which
  advances that cursor in the merge's own transaction;
* a peer that has new changes (a local write, or a merge that changed something) sends a short
  ``notice`` to all connected peers, which then pull; a slow periodic pull covers lost notices.

Only the public crr API is used: ``Site.changes``, ``Site.merge``, ``Site.peer_cursor``, ``Changeset``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack

from crr.changeset import Changeset
from crr.errors import ChangesetError, CrrError
from crr.site import Site
from sync import crypto, handshake
from sync.protocol import ProtocolError, decode, encode, frame, read_frame

log = logging.getLogger("crr.sync")


@dataclass
class Link:
    """One authenticated connection to a peer."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    channel: crypto.Channel
    peer: str
    address: str
    outgoing: bool
    since: float = field(default_factory=time.time)
    serves: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (fingerprint, kind)
    peer_cursor: int = 0  # the peer's own sequence number, as last announced
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    wanted: asyncio.Event = field(default_factory=asyncio.Event)
    next_rid: int = 0
    bytes_in: int = 0
    bytes_out: int = 0

    async def send(self, message: dict[str, Any]) -> None:
        """Seal and send one message."""
        body = self.channel.seal(encode(message))
        self.bytes_out += len(body) + 4
        self.writer.write(frame(body))
        await self.writer.drain()

    async def recv(self, max_frame: int) -> dict[str, Any]:
        """Receive and open one message."""
        body = await read_frame(self.reader, max_frame)
        self.bytes_in += len(body) + 4
        return decode(self.channel.open(body))

    def close(self) -> None:
        """Close the connection and fail its pending requests."""
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("connection closed"))
        self.writer.close()


def _plain(value: Any) -> Any:
    """msgpack fallback for query results (dates, decimals, UUIDs ...): their text."""
    return str(value)


class SyncService:
    """Background replication for one site. ``start()``, ``stop()``, ``status()``, ``execute()``."""

    def __init__(self, site: Site, secret: bytes, listen: tuple[str, int] | None = None,
                 peers: list[tuple[str, int]] | None = None, allow: dict[str, set[str]] | None = None,
                 control_path: str | None = None, pull_interval: float = 2.0,
                 max_frame: int = 256 * 1024 * 1024) -> None:
        self.site = site
        self.secret = secret
        self.listen = listen
        self.static_peers = list(peers or [])
        self.allow = allow  # peer site id -> relations it may write here (None: any peer, any relation)
        self.control_path = control_path
        self.pull_interval = pull_interval
        self.max_frame = max_frame
        self.links: dict[str, Link] = {}
        self.address: tuple[str, int] | None = None
        self.refused: list[str] = []  # reasons of refused traffic, newest last (also logged)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task] = set()
        self._ready = threading.Event()
        self._stopping = False
        self._error: BaseException | None = None  # a failure while starting, re-raised by start()

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

    def call(self, fn, *args, timeout: float = 120):
        """Run ``fn(*args)`` on the service thread (where the site lives) and return its result."""
        assert self._loop is not None, "the sync service is not running"

        async def run():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        """Run a statement on the site (from any thread) and tell peers if it changed something."""
        return self.call(self._execute_here, sql, params)

    def status(self) -> dict:
        """Relations, peers, cursors and how far behind each stream is."""
        return self.call(self._status_here)

    # -- the loop ---------------------------------------------------------------------------------
    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup())
        except BaseException as e:  # noqa: BLE001 - reported to start()
            self._error = e
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
            log.info("site %s listening on %s:%s", self.site.site_id, *self.address)
        if self.control_path:
            if os.path.exists(self.control_path):
                os.unlink(self.control_path)
            server = await asyncio.start_unix_server(self._accept_control, self.control_path)
            os.chmod(self.control_path, 0o600)
            self._servers.append(server)
        for host, port in self.static_peers:
            self._spawn(self._dial_forever(host, port))
        self._spawn(self._periodic())

    async def _shutdown(self) -> None:
        for server in self._servers:
            server.close()
        for link in list(self.links.values()):
            link.close()
        for task in list(self._tasks):
            task.cancel()
        if self.control_path and os.path.exists(self.control_path):
            os.unlink(self.control_path)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def add_peer(self, host: str, port: int) -> None:
        """Dial a peer (e.g. one found by discovery); reconnects until the service stops."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(lambda: self._spawn(self._dial_forever(host, port)))

    # -- connections ------------------------------------------------------------------------------
    async def _dial_forever(self, host: str, port: int) -> None:
        delay = 0.2
        while not self._stopping:
            writer = None
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
                link = await asyncio.wait_for(self._handshake(reader, writer, True, f"{host}:{port}"), 10)
                delay = 0.2
                await self._serve_link(link)
            except (OSError, asyncio.TimeoutError, EOFError, ConnectionError) as e:
                log.debug("peer %s:%s unreachable: %s", host, port, e)
            except CrrError as e:
                self._refuse(f"{host}:{port}: {e}")
            finally:
                if writer is not None:
                    writer.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        try:
            link = await asyncio.wait_for(self._handshake(reader, writer, False, address), 10)
        except (asyncio.TimeoutError, EOFError, ConnectionError, OSError, CrrError) as e:
            self._refuse(f"{address}: handshake failed: {str(e) or type(e).__name__}")
            writer.close()
            return
        try:
            await self._serve_link(link)
        except (asyncio.TimeoutError, EOFError, ConnectionError, OSError) as e:
            log.debug("connection from %s ended: %s", address, e)
        except CrrError as e:
            self._refuse(f"{address}: {e}")

    def _refuse(self, reason: str) -> None:
        log.warning("refused: %s", reason)
        self.refused.append(reason)
        del self.refused[:-100]

    async def _handshake(self, reader, writer, is_client: bool, address: str) -> Link:
        run = handshake.client_handshake if is_client else handshake.server_handshake
        channel, peer = await run(reader, writer, self.secret, self.site.site_id)
        return Link(reader=reader, writer=writer, channel=channel, peer=peer, address=address, outgoing=is_client)

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
        log.info("connected to %s (%s)", link.peer, link.address)
        puller = self._spawn(self._pull_loop(link))
        try:
            await link.send(self._serves_message())
            while True:
                message = await link.recv(self.max_frame)
                await self._dispatch(link, message)
        except (EOFError, ConnectionError, asyncio.IncompleteReadError):
            pass
        except CrrError as e:
            self._refuse(f"{link.peer} ({link.address}): {e}")
        finally:
            puller.cancel()
            link.close()
            if self.links.get(link.peer) is link:
                del self.links[link.peer]
            log.info("disconnected from %s", link.peer)

    def _serves_message(self) -> dict:
        rels = [[name, self.site.relation(name).fingerprint, kind] for name, kind in self.site.relations().items()
                if kind != "source"]  # a source keeps no copy to serve
        return {"t": "serves", "relations": rels, "cursor": self.site.cursor}

    # -- messages ---------------------------------------------------------------------------------
    async def _dispatch(self, link: Link, m: dict) -> None:
        t = m["t"]
        if t == "serves":
            link.serves = {r[0]: (r[1], r[2]) for r in m.get("relations", []) if isinstance(r, list) and len(r) == 3}
            link.peer_cursor = int(m.get("cursor", 0))
            link.wanted.set()
        elif t == "notice":
            link.peer_cursor = max(link.peer_cursor, int(m.get("cursor", 0)))
            link.wanted.set()
        elif t == "pull":
            rel, since, rid = m.get("relation"), m.get("since", 0), m.get("rid")
            if not isinstance(rel, str) or self.site.relations().get(rel, "source") == "source" \
                    or not isinstance(since, int):
                await link.send({"t": "error", "rid": rid, "message": f"this site does not serve {rel!r}"})
                return
            data = self.site.changes(since=since, relations=[rel]).to_bytes()
            await link.send({"t": "changes", "rid": rid, "data": data})
        elif t in ("changes", "error") and m.get("rid") in link.pending:
            fut = link.pending.pop(m["rid"])
            if not fut.done():
                fut.set_result(m)
        elif t == "error":
            self._refuse(f"{link.peer} reports: {m.get('message')}")
        else:
            raise ProtocolError(f"unexpected message type {t!r}")

    async def _request(self, link: Link, message: dict, timeout: float = 60) -> dict:
        link.next_rid += 1
        rid = message["rid"] = link.next_rid
        fut = asyncio.get_running_loop().create_future()
        link.pending[rid] = fut
        await link.send(message)
        return await asyncio.wait_for(fut, timeout)

    def _wanted_relations(self, link: Link) -> list[str]:
        out = []
        for name, kind in self.site.relations().items():
            if kind == "view" or name not in link.serves:
                continue
            fingerprint, peer_kind = link.serves[name]
            if kind == "replicated" and peer_kind != "replicated":
                continue  # a replica merges only other replicas of the table
            if fingerprint != self.site.relation(name).fingerprint:
                self._refuse(f"{link.peer} serves {name} with another schema (fingerprint {fingerprint}); not pulling it")
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
            except (ConnectionError, asyncio.TimeoutError):
                return

    async def _pull(self, link: Link) -> None:
        changed = False
        for name in self._wanted_relations(link):
            since = self.site.peer_cursor(link.peer, name)
            reply = await self._request(link, {"t": "pull", "relation": name, "since": since})
            if reply["t"] == "error":
                self._refuse(f"{link.peer} would not serve {name}: {reply.get('message')}")
                continue
            data = reply.get("data")
            try:
                cs = Changeset.from_bytes(data if isinstance(data, bytes) else b"")
                if cs.source != link.peer or [r.name for r in cs.relations] != [name]:
                    raise ChangesetError(f"{link.peer} answered a pull of {name} with changes of "
                                         f"{[r.name for r in cs.relations]} from {cs.source}")
                result = self.site.merge(cs, track=True)
            except CrrError as e:
                self._refuse(f"changes of {name} from {link.peer}: {e}")
                continue
            changed = changed or result.changed
        if changed:
            await self._notify(exclude=link.peer)

    async def _notify(self, exclude: str | None = None) -> None:
        message = {"t": "notice", "cursor": self.site.cursor}
        for peer, link in list(self.links.items()):
            if peer != exclude:
                try:
                    await link.send(message)
                except (ConnectionError, OSError):
                    pass

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.pull_interval)
            for link in list(self.links.values()):
                link.wanted.set()

    # -- local operations -------------------------------------------------------------------------
    def _execute_here(self, sql: str, params: Any) -> list[tuple]:
        before = self.site.cursor
        rows = self.site.execute(sql, params)
        if self.site.cursor != before and self._loop is not None:
            self._spawn(self._notify())
        return rows

    def _status_here(self) -> dict:
        peers = []
        for peer, link in sorted(self.links.items()):
            streams = []
            for name in self._wanted_relations(link):
                cursor = self.site.peer_cursor(peer, name)
                streams.append({"relation": name, "cursor": cursor, "behind": max(0, link.peer_cursor - cursor)})
            peers.append({"site": peer, "address": link.address, "direction": "out" if link.outgoing else "in",
                          "connected_seconds": round(time.time() - link.since, 1), "peer_cursor": link.peer_cursor,
                          "bytes_in": link.bytes_in, "bytes_out": link.bytes_out, "streams": streams})
        return {"site": self.site.site_id, "cursor": self.site.cursor,
                "listening": f"{self.address[0]}:{self.address[1]}" if self.address else None,
                "relations": self.site.relations(), "peers": peers,
                "cursors": [list(map(str, c)) for c in self.site.peer_cursors()],
                "refused": self.refused[-10:]}

    # -- local control channel (crr sql / crr status while serving) ---------------------------------
    async def _accept_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            link = await asyncio.wait_for(self._handshake(reader, writer, False, "control"), 10)
            while True:
                m = await link.recv(self.max_frame)
                try:
                    if m["t"] == "sql":
                        rows = self._execute_here(m["sql"], m.get("params"))
                        body = {"t": "rows", "rows": [list(r) for r in rows]}
                    elif m["t"] == "status":
                        body = {"t": "status", "status": self._status_here()}
                    else:
                        raise ProtocolError(f"unexpected control message {m['t']!r}")
                except CrrError as e:
                    body = {"t": "error", "message": str(e), "kind": type(e).__name__}
                link.writer.write(frame(link.channel.seal(msgpack.packb(body, use_bin_type=True, default=_plain))))
                await link.writer.drain()
        except (EOFError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
        except CrrError as e:
            self._refuse(f"control channel: {e}")
        finally:
            writer.close()
