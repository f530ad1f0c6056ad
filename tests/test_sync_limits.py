"""Sync under pressure: memory across connections, big control queries, refusal floods, malformed
messages, and relations whose merge fails."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time

import duckdb
import pytest

import crr
from crr.sync import control, crypto, handshake
from crr.sync.protocol import MAX_CURSOR, PEER_MESSAGES, ProtocolError, check_message
from crr.sync.service import SyncService
from tests.test_sync_service import SECRET, _site, rows, wait_for

KiB = 1024


# -- memory -----------------------------------------------------------------------------------------
async def _member(address, site_id):
    """An authenticated raw connection (a member of the deployment speaking frames by hand)."""
    reader, writer = await asyncio.open_connection(*address)
    await asyncio.wait_for(handshake.client_handshake(reader, writer, SECRET, site_id, crypto.Identity.ephemeral()), 5)
    return reader, writer


async def _closed(reader) -> bool:
    """Whether the server closed the connection (reading everything it still sent first)."""
    try:
        while await asyncio.wait_for(reader.read(65536), 5):
            pass
    except ConnectionResetError:
        pass
    return True


async def _until(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return False


def test_memory_is_bounded_across_connections(tmp_path):
    """Two members each start a 700 KiB frame; with 1 MiB for all connections the second must wait, then go."""
    a = _site(tmp_path, "a")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0), max_buffered=1024 * KiB, memory_wait=0.5).start()

    async def main():
        r1, w1 = await _member(sa.address, "m1")
        w1.write((700 * KiB).to_bytes(4, "big") + b"x" * 1000)  # a frame that stalls after 1000 bytes
        await w1.drain()
        assert await _until(lambda: sa.budget.used >= 700 * KiB), "the first frame never got its memory"
        r2, w2 = await _member(sa.address, "m2")
        w2.write((700 * KiB).to_bytes(4, "big") + b"y" * (700 * KiB))
        await w2.drain()
        assert await _until(lambda: any("m2" in r and "waited 0.5 s for memory" in r for r in sa.refused))
        assert await _closed(r2)  # the second connection was closed
        assert sa.budget.peak <= 1024 * KiB
        w1.close()
        assert await _until(lambda: sa.budget.used == 0), "a closed connection kept its memory"
        # a frame larger than the whole budget is refused at its header
        r3, w3 = await _member(sa.address, "m3")
        w3.write((2048 * KiB).to_bytes(4, "big"))
        await w3.drain()
        assert await _closed(r3)
        assert any("m3" in r and "exceeds the limit of 1048576 bytes" in r for r in sa.refused)
        w2.close()
        w3.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 30))
        status = sa.status()["memory"]
        assert status["limit"] == 1024 * KiB and status["buffered"] == 0 and status["refused_frames"] >= 1
    finally:
        sa.stop()
        a.close()


# -- a big query over the control channel ---------------------------------------------------------------
def test_a_long_control_query_runs_off_the_sync_loop(tmp_path):
    """While a statement sent over the control channel runs (held here until the test lets it go), the
    sync loop goes on: a new peer connects and authenticates. Before, the loop itself ran the statement
    and packed its rows, so nothing else happened until it finished (6.5 s for 3M rows)."""
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    path = str(tmp_path / "a.sock")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0), control_path=path).start()
    entered, release = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    execute = a.execute

    def slow_execute(sql, params=None):
        if sql.startswith("SELECT 'slow'"):
            threads.append(threading.current_thread())
            entered.set()
            release.wait(10)
        return execute(sql, params)

    a.execute = slow_execute
    n = 45_000  # more than two answer frames
    answers: list = []
    asker = threading.Thread(target=lambda: answers.append(asyncio.run(control._request(
        path, SECRET, {"t": "sql", "sql": f"SELECT 'slow', range FROM range({n})"}))))
    sb = None
    try:
        asker.start()
        assert entered.wait(10)
        sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address]).start()
        assert wait_for(lambda: "b" in sa.links, 5), "the sync loop stood still while the statement ran"
        assert not release.is_set() and threads[0] is not sa._thread
        release.set()
        asker.join(20)
        assert len(answers[0]["rows"]) == n and answers[0]["rows"][-1] == ("slow", n - 1)
        sb.execute("INSERT INTO r VALUES (1, 'x')")
        assert wait_for(lambda: rows(sa, "SELECT * FROM r") == [(1, "x")])
    finally:
        release.set()
        asker.join(20)
        if sb is not None:
            sb.stop()
        sa.stop()
        a.close()
        b.close()


def test_control_answers_small_results_errors_and_status(tmp_path):
    a = _site(tmp_path, "a")
    path = str(tmp_path / "a.sock")
    sa = SyncService(a, SECRET, control_path=path).start()
    try:
        ask = lambda m: asyncio.run(control._request(path, SECRET, m))  # noqa: E731
        assert ask({"t": "sql", "sql": "INSERT INTO r VALUES (1, 'x')"}) == {"t": "rows", "rows": [(1,)]}
        assert ask({"t": "sql", "sql": "SELECT * FROM r WHERE a > 5"}) == {"t": "rows", "rows": []}
        assert ask({"t": "sql", "sql": "SELECT * FROM nowhere"})["t"] == "error"
        assert ask({"t": "status"})["status"]["site"] == "a"
        with pytest.raises(crypto.AuthError):
            asyncio.run(control._request(path, b"w" * 32, {"t": "status"}))
    finally:
        sa.stop()
        a.close()


# -- refusal floods -------------------------------------------------------------------------------------
def test_refused_connections_do_not_flood_the_log(tmp_path, caplog):
    a = _site(tmp_path, "a")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    caplog.set_level(logging.WARNING, logger="crr.sync")
    try:
        for _ in range(60):
            with socket.create_connection(sa.address, timeout=5) as s:
                s.sendall(b"\x00\x00\x00\x05hello")
                s.settimeout(5)
                try:
                    while s.recv(4096):
                        pass
                except (ConnectionResetError, socket.timeout):
                    pass
        assert wait_for(lambda: len(sa.refused) >= 60, 10)
    finally:
        sa.stop()
        a.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "crr.sync" and r.levelno >= logging.WARNING]
    assert len(lines) <= 6, lines
    assert any("refused 55 more" in line for line in lines), lines


# -- malformed messages -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [
    {"t": "serves", "relations": [], "cursor": "abc"},
    {"t": "serves", "relations": [], "cursor": True},
    {"t": "serves", "relations": [], "cursor": -1},
    {"t": "serves", "relations": [], "cursor": MAX_CURSOR + 1},
    {"t": "serves", "relations": "r", "cursor": 1},
    {"t": "serves", "relations": [["r", "fp"]], "cursor": 1},
    {"t": "serves", "relations": [["r", "fp", "table"]], "cursor": 1},
    {"t": "serves", "relations": [[1, "fp", "replicated"]], "cursor": 1},
    {"t": "serves", "relations": []},
    {"t": "notice", "cursor": 1.5},
    {"t": "pull", "rid": 1, "relation": "r", "since": "0"},
    {"t": "pull", "rid": "1", "relation": "r", "since": 0},
    {"t": "pull", "rid": 1, "relation": None, "since": 0},
    {"t": "changes", "rid": 1, "data": "text"},
    {"t": "error", "rid": "x", "message": "m"},
    {"t": "error", "message": 5},
    {"t": "sql", "sql": "SELECT 1"},
    {"t": "whatever"},
])
def test_every_field_of_every_message_is_checked(bad):
    with pytest.raises(ProtocolError, match="malformed|unexpected"):
        check_message(bad, PEER_MESSAGES)


@pytest.mark.parametrize("liar", ["dialler", "listener"])
def test_malformed_message_drops_the_peer_with_one_line(tmp_path, caplog, liar):
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address]).start()
    lying, honest = (sb, sa) if liar == "dialler" else (sa, sb)
    caplog.set_level(logging.INFO)
    try:
        assert wait_for(lambda: "a" in sb.links and "b" in sa.links)
        lying._serves_message = lambda: {"t": "serves", "relations": [], "cursor": "abc"}
        lying.call(lambda: [link.close() for link in list(lying.links.values())])  # reconnect: serves is sent again
        assert wait_for(lambda: any("field 'cursor' must be an integer" in r and "connection closed" in r
                                    for r in honest.refused), 10)
    finally:
        sb.stop()
        sa.stop()
        a.close()
        b.close()
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]


# -- a relation whose merge fails -----------------------------------------------------------------------
def _fail_merges_of_r(site: crr.Site) -> threading.Event:
    """Make ``site`` refuse every changeset of relation r alone, as a NOT NULL failure, while the
    returned event is set (it is)."""
    broken = threading.Event()
    broken.set()
    merge = site.merge

    def failing_merge(cs, track=False):
        if broken.is_set() and [r.name for r in cs.relations] == ["r"]:
            raise duckdb.ConstraintException("Constraint Error: NOT NULL constraint failed: r.b")
        return merge(cs, track=track)

    site.merge = failing_merge
    return broken


def test_a_failing_relation_does_not_stall_the_others_and_is_retried(tmp_path):
    ddl = ("CREATE REPLICATED TABLE r (a INT, b VARCHAR)", "CREATE REPLICATED TABLE q (x INT)")
    a, b = _site(tmp_path, "a", ddl), _site(tmp_path, "b", ddl)
    broken = _fail_merges_of_r(b)
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address], pull_interval=0.2).start()
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        sa.execute("INSERT INTO q VALUES (7)")
        assert wait_for(lambda: rows(sb, "SELECT * FROM q") == [(7,)], 10)  # q is not held up by r

        def failing():
            return [f for f in sb.status()["failing"] if f["relation"] == "r" and f["peer"] == "a"]

        assert wait_for(lambda: failing() and "NOT NULL" in failing()[0]["error"], 10)
        stream = [s for p in sb.status()["peers"] for s in p["streams"] if s["relation"] == "r"][0]
        assert "NOT NULL" in stream["error"] and stream["behind"] is True  # a's changes of r wait
        assert any("changes of r from a not merged" in r for r in sb.refused)
        sa.execute("INSERT INTO q VALUES (8)")  # later writes of other relations keep arriving
        assert wait_for(lambda: rows(sb, "SELECT * FROM q ORDER BY x") == [(7,), (8,)], 10)
        broken.clear()  # the cause is fixed: the retry merges r, and the failure disappears from status
        assert wait_for(lambda: rows(sb, "SELECT * FROM r") == [(1, "x")], 20)
        assert wait_for(lambda: sb.status()["failing"] == [], 5)
        assert [s["behind"] for p in sb.status()["peers"] for s in p["streams"]] == [False, False]
    finally:
        sb.stop()
        sa.stop()
        a.close()
        b.close()


def test_a_failure_of_a_relation_no_longer_pulled_leaves_the_status(tmp_path):
    """A merge failure stayed in status()["failing"], retried at once, after its source dropped the
    relation (found by a probe of the command line)."""
    ddl = ("CREATE REPLICATED TABLE r (a INT, b VARCHAR)", "CREATE REPLICATED TABLE q (x INT)")
    a, b = _site(tmp_path, "a", ddl), _site(tmp_path, "b", ddl)
    _fail_merges_of_r(b)
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address], pull_interval=0.2).start()
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        assert wait_for(lambda: [f["relation"] for f in sb.status()["failing"]] == ["r"], 10)
        sa.execute("DROP TABLE r")  # announced: a no longer serves r
        sa.execute("INSERT INTO q VALUES (7)")
        assert wait_for(lambda: rows(sb, "SELECT * FROM q") == [(7,)], 10)
        assert wait_for(lambda: sb.status()["failing"] == [], 10), sb.status()["failing"]
    finally:
        sb.stop()
        sa.stop()
        a.close()
        b.close()


def test_retries_back_off(tmp_path):
    ddl = ("CREATE REPLICATED TABLE r (a INT, b VARCHAR)",)
    a, b = _site(tmp_path, "a", ddl), _site(tmp_path, "b", ddl)
    attempts: list[float] = []

    def failing_merge(cs, track=False):
        attempts.append(time.monotonic())
        raise crr.ChangesetError("broken on purpose")

    b.merge = failing_merge
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address], pull_interval=0.05,
                     retry_delays=(0.2, 0.8)).start()
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        assert wait_for(lambda: len(attempts) >= 4, 10)
        gaps = [y - x for x, y in zip(attempts, attempts[1:4])]
        assert gaps[0] >= 0.2 and gaps[1] >= 0.4 and gaps[2] >= 0.8, gaps  # not every 0.05 s pull
    finally:
        sb.stop()
        sa.stop()
        a.close()
        b.close()


def test_not_null_only_at_the_receiver_does_not_stall_other_relations(tmp_path):
    a = _site(tmp_path, "a", ("CREATE REPLICATED TABLE r (a INT, b VARCHAR)", "CREATE REPLICATED TABLE q (x INT)"))
    b = _site(tmp_path, "b", ("CREATE REPLICATED TABLE r (a INT, b VARCHAR NOT NULL)", "CREATE REPLICATED TABLE q (x INT)"))
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address]).start()
    try:
        sa.execute("INSERT INTO r VALUES (1, NULL)")
        sa.execute("INSERT INTO q VALUES (7)")
        assert wait_for(lambda: rows(sb, "SELECT * FROM q") == [(7,)], 10)

        def visible():  # whichever way the engine refuses r (a merge error or a schema difference)
            status = sb.status()
            return any(f["relation"] == "r" and f["peer"] == "a" for f in status["failing"]) or any(
                "serves r with another schema" in r for r in sb.refused)

        assert wait_for(visible, 10)
        assert rows(sb, "SELECT * FROM r") == []
    finally:
        sb.stop()
        sa.stop()
        a.close()
        b.close()


def test_a_control_path_that_is_not_a_socket_is_left_alone(tmp_path):
    site = crr.Site(site_id="x")
    taken = tmp_path / "notes.txt"
    taken.write_text("keep me")
    with pytest.raises(crr.CrrError, match="is not a socket"):
        SyncService(site, b"s" * 32, listen=("127.0.0.1", 0), control_path=str(taken)).start()
    assert taken.read_text() == "keep me"
    with pytest.raises(crr.CrrError, match="pull_interval"):
        SyncService(site, b"s" * 32, pull_interval=-1)
    # the secret: at least 16 bytes, as the command line asks (a short one was taken); text is its UTF-8
    for secret in (b"short", "short", None, 12345):
        with pytest.raises(crr.CrrError, match="at least 16 bytes"):
            SyncService(site, secret)  # type: ignore[arg-type]
    assert SyncService(site, "s" * 32).secret == b"s" * 32
    site.close()


def test_a_peer_speaking_another_protocol_is_named_so():
    """An HTTP server dialled as a peer was refused as 'frame of 1213486160 bytes exceeds the limit'."""
    from crr.sync.protocol import ProtocolError, read_header

    async def header(data: bytes) -> int:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        return await read_header(reader, 1 << 20)

    with pytest.raises(ProtocolError, match="first bytes read 'HTTP': is the peer a crr serve"):
        asyncio.run(header(b"HTTP/1.1 400 Bad Request\r\n"))
    with pytest.raises(ProtocolError, match="exceeds the limit of 1048576 bytes$"):
        asyncio.run(header(b"\xff\xff\xff\xff"))


def test_closing_a_link_with_a_request_given_up_logs_nothing(caplog):
    """A pending request whose waiter was gone when its connection closed logged asyncio's "Future
    exception was never retrieved" when the service stopped."""
    import gc

    from crr.sync.protocol import MemoryBudget
    from crr.sync.service import Link

    class Writer:
        def close(self) -> None:
            pass

    async def run() -> None:
        link = Link(reader=asyncio.StreamReader(), writer=Writer(), channel=None, peer="p", address="a",
                    outgoing=True, budget=MemoryBudget(1 << 20))
        link.pending[1] = asyncio.get_running_loop().create_future()
        link.close()

    with caplog.at_level("ERROR", logger="asyncio"):
        asyncio.run(run())
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
