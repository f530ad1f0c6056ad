"""A fault-injecting TCP proxy for testing sync under a bad network (loopback only).

It forwards connections from ``listen`` to ``target`` frame by frame (the protocol's 4-byte length
prefix) and, while faults are on, drops, duplicates, reorders, delays or truncates frames with the
given probabilities. ``partition()`` cuts every connection and refuses new ones until ``heal()``.
Seeded, so a failing run can be replayed.
"""

from __future__ import annotations

import asyncio
import random
import struct
import threading
from dataclasses import dataclass


@dataclass
class Faults:
    """Per-frame fault probabilities (0 = never)."""

    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    delay: float = 0.0  # probability of a delay of up to max_delay seconds
    truncate: float = 0.0  # probability of cutting a frame short and closing the connection
    max_delay: float = 0.2


class FaultProxy:
    """A TCP proxy with switchable faults, running its own event loop thread."""

    def __init__(self, target: tuple[str, int], faults: Faults | None = None, seed: int = 0) -> None:
        self.target = target
        self.faults = faults or Faults()
        self.rng = random.Random(seed)
        self.partitioned = False
        self.address: tuple[str, int] | None = None
        self.frames = 0
        self.bytes = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "FaultProxy":
        """Start listening on a free loopback port (``self.address``)."""
        self._thread.start()
        self._ready.wait(10)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.address = server.sockets[0].getsockname()[:2]
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        """Close everything."""
        self._loop.call_soon_threadsafe(self._close_all)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def partition(self) -> None:
        """Cut all connections and refuse new ones."""
        self.partitioned = True
        self._loop.call_soon_threadsafe(self._close_all)

    def heal(self, clear_faults: bool = True) -> None:
        """Accept connections again (and, by default, stop injecting faults)."""
        if clear_faults:
            self.faults = Faults()
        self.partitioned = False

    def _close_all(self) -> None:
        for w in list(self._writers):
            w.close()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.partitioned:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True)
        for w in (writer, up_writer):
            w.close()
            self._writers.discard(w)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held: bytes | None = None
        try:
            while not self.partitioned:
                head = await reader.readexactly(4)
                (size,) = struct.unpack(">I", head)
                data = head + await reader.readexactly(size)
                self.frames += 1
                self.bytes += len(data)
                f, rng = self.faults, self.rng
                if rng.random() < f.drop:
                    continue
                if rng.random() < f.truncate:
                    writer.write(data[: max(1, len(data) // 2)])
                    await writer.drain()
                    writer.close()
                    return
                if rng.random() < f.delay:
                    await asyncio.sleep(rng.random() * f.max_delay)
                if held is None and rng.random() < f.reorder:
                    held = data  # sent after the next frame
                    continue
                writer.write(data)
                if rng.random() < f.duplicate:
                    writer.write(data)
                if held is not None:
                    writer.write(held)
                    held = None
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()
