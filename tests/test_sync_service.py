"""The sync service in-process: convergence, notices, authentication, authorisation, bad input."""

from __future__ import annotations

import os
import shutil
import socket
import time

import pytest

import crr
from crr.sync.protocol import PROTOCOL_VERSION, encode, frame
from crr.sync.service import SyncService

SECRET = b"s" * 32


def wait_for(predicate, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _site(tmp_path, name, ddl=("CREATE REPLICATED TABLE r (a INT, b VARCHAR)",)):
    s = crr.Site(str(tmp_path / f"{name}.duckdb"), site_id=name)
    for stmt in ddl:
        s.execute(stmt)
    return s


def rows(service, sql):
    return service.call(lambda: service.site.execute(sql))


def _chain(*sites):
    """Start a sync service per site, each dialling the one before it."""
    services = []
    for site in sites:
        peers = [services[-1].address] if services else []
        services.append(SyncService(site, SECRET, listen=("127.0.0.1", 0), peers=peers).start())
    return services


def _shutdown(services, sites):
    for service in reversed(services):
        service.stop()
    for site in sites:
        site.close()


def test_two_sites_converge_and_views_follow(tmp_path):
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    v = _site(tmp_path, "v", ("CREATE REMOTE TABLE r (a INT, b VARCHAR)",
                              "CREATE MATERIALIZED VIEW w AS SELECT b FROM r WHERE a > 0"))
    sa, sb, sv = services = _chain(a, b, v)
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x'), (2, 'y')")
        sb.execute("INSERT INTO r VALUES (3, 'z')")
        assert wait_for(lambda: rows(sb, "SELECT count(*) FROM r") == [(3,)])
        sb.execute("DELETE FROM r WHERE a = 2")  # b deletes a row it got from a
        expected = [(1, "x"), (3, "z")]
        assert wait_for(lambda: rows(sa, "SELECT * FROM r ORDER BY a") == expected)
        assert wait_for(lambda: rows(sb, "SELECT * FROM r ORDER BY a") == expected)
        assert wait_for(lambda: rows(sv, "SELECT * FROM w ORDER BY b") == [("x",), ("z",)])
        status = sb.status()
        assert {p["site"] for p in status["peers"]} == {"a", "v"}
        assert all(s["behind"] is False for p in status["peers"] for s in p["streams"])
    finally:
        _shutdown(services, (a, b, v))


def _restore(tmp_path, copy: str) -> tuple[crr.Site, crr.Site]:
    """Site a's file replaced by an older copy of it (kept), and both sites opened again."""
    shutil.copy(tmp_path / copy, tmp_path / "a.duckdb")
    return crr.Site(str(tmp_path / "a.duckdb")), crr.Site(str(tmp_path / "b.duckdb"))


def test_a_site_restored_from_an_older_copy_of_its_file_still_sends_its_new_rows(tmp_path):
    """A peer resumes from the cursor it last merged, past the numbers of the rows a restored site lost
    with its file. The restored site numbered its new rows again from the copy's last number, so a
    peer skipped the ones numbered up to its cursor: all of them while the site's numbers stayed below
    it (it then asked for changes past the site's last one and got none), the first ones when the site
    had written more often than that before the two met. A site's first transaction after it opens
    now takes a number from the wall clock (crr.clock.seq_floor), above every number its earlier life
    handed out; and a cursor past a site's last change (restored, and nothing written since) gets the
    full state."""
    a = _site(tmp_path, "a")
    a.execute("INSERT INTO r VALUES (1, 'kept')")
    a.close()
    shutil.copy(tmp_path / "a.duckdb", tmp_path / "a.old")
    a = crr.Site(str(tmp_path / "a.duckdb"))
    for i in range(2, 5):
        a.execute(f"INSERT INTO r VALUES ({i}, 'lost with the file')")
    b = _site(tmp_path, "b")
    services = _chain(a, b)
    try:
        assert wait_for(lambda: rows(services[1], "SELECT count(*) FROM r") == [(4,)])
    finally:
        _shutdown(services, (a, b))
    a, b = _restore(tmp_path, "a.old")
    recorded = b.peer_cursor("a", "r")
    assert a.cursor < recorded
    for i in range(5, 9):  # more transactions than b's cursor is ahead of the copy's last number
        a.execute(f"INSERT INTO r VALUES ({i}, 'written before the two meet')")
    services = _chain(a, b)
    expected = [(k,) for k in range(1, 9)]
    try:
        assert wait_for(lambda: rows(services[1], "SELECT a FROM r ORDER BY a") == expected)
        assert wait_for(lambda: rows(services[0], "SELECT a FROM r ORDER BY a") == expected)
    finally:
        _shutdown(services, (a, b))
    a, b = _restore(tmp_path, "a.old")  # restored again, and nothing written before the two meet
    assert a.cursor < b.peer_cursor("a", "r")
    services = _chain(a, b)
    try:
        assert wait_for(lambda: rows(services[0], "SELECT a FROM r ORDER BY a") == expected)
        services[0].execute("INSERT INTO r VALUES (9, 'after the restore')")
        expected.append((9,))
        assert wait_for(lambda: rows(services[1], "SELECT a FROM r ORDER BY a") == expected)
        assert not services[1].status()["failing"]  # b asked past a's last change, and got the full state
    finally:
        _shutdown(services, (a, b))


def test_a_site_restored_from_one_backup_then_another_sends_what_only_the_second_holds(tmp_path):
    """A site restored from an older backup X wrote, and a peer merged past the numbers of the rows X
    lacks; restored then from a newer backup Y, whose rows written between X and Y the peer never
    got, the site numbered them below the peer's cursor (which came from X's branch), so they never
    reached it (found by a probe). Each opening that changes something is recorded
    (``_crr.openings``): a cursor this copy never handed out gets the full state."""
    a = _site(tmp_path, "a")
    b = _site(tmp_path, "b", ("CREATE REMOTE TABLE r (a INT, b VARCHAR)",))
    services = _chain(a, b)
    try:
        services[0].execute("INSERT INTO r VALUES (1, 'one')")
        assert wait_for(lambda: rows(services[1], "SELECT count(*) FROM r") == [(1,)])
    finally:
        _shutdown(services, (a, b))
    shutil.copy(tmp_path / "a.duckdb", tmp_path / "x")
    a = crr.Site(str(tmp_path / "a.duckdb"))
    a.execute("INSERT INTO r VALUES (2, 'only in the newer backup')")  # b is away
    a.close()
    shutil.copy(tmp_path / "a.duckdb", tmp_path / "y")
    for copy, row in (("x", 3), ("y", 4)):
        a, b = _restore(tmp_path, copy)
        a.execute(f"INSERT INTO r VALUES ({row}, 'after the restore')")
        services = _chain(a, b)
        try:
            assert wait_for(lambda: (row,) in rows(services[1], "SELECT a FROM r")), copy
        finally:
            _shutdown(services, (a, b))
    b = crr.Site(str(tmp_path / "b.duckdb"))
    assert b.execute("SELECT a FROM r ORDER BY a") == [(1,), (2,), (3,), (4,)]
    b.close()


def test_a_view_site_with_sources_follows_and_passes_on_only_its_views(tmp_path):
    a = _site(tmp_path, "a")
    v = _site(tmp_path, "v", ("CREATE REMOTE SOURCE r (a INT, b VARCHAR)",
                              "CREATE MATERIALIZED VIEW w AS SELECT b FROM r WHERE a > 0"))
    far = _site(tmp_path, "far", ("CREATE REMOTE TABLE w (b VARCHAR)", "CREATE REMOTE TABLE r (a INT, b VARCHAR)"))
    sa, sv, sf = services = _chain(a, v, far)
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x'), (2, 'y'), (0, 'hidden')")
        sa.execute("DELETE FROM r WHERE a = 2")
        assert wait_for(lambda: rows(sv, "SELECT * FROM w ORDER BY b") == [("x",)])
        assert wait_for(lambda: rows(sf, "SELECT * FROM w ORDER BY b") == [("x",)])
        assert "r" not in [r[0] for r in sv.call(sv._serves_message)["relations"]]
        # a later write reaches far through v: far has pulled from v since, and still has no r
        sa.execute("INSERT INTO r VALUES (3, 'z')")
        assert wait_for(lambda: rows(sf, "SELECT * FROM w ORDER BY b") == [("x",), ("z",)])
        assert rows(sf, "SELECT count(*) FROM r") == [(0,)]  # v keeps no copy of r to pass on
    finally:
        _shutdown(services, (a, v, far))


def test_stopping_a_service_with_connected_peers_logs_no_error(tmp_path, caplog):
    """stop() cancels the handlers of accepted connections; Python 3.11's asyncio logs a cancelled
    handler as "Exception in callback ... CancelledError" unless the handler ends normally."""
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    sa, sb = _chain(a, b)
    try:
        sb.execute("INSERT INTO r VALUES (1, 'x')")
        assert wait_for(lambda: rows(sa, "SELECT count(*) FROM r") == [(1,)])
        with caplog.at_level("ERROR", logger="asyncio"):
            sa.stop()  # b's link into a is open: a's handler of it is waiting for a frame
        assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]
    finally:
        _shutdown([sb], (a, b))


def test_stopping_a_service_with_an_open_control_connection_logs_no_error(tmp_path, caplog):
    """The same for a control connection (``crr sql`` / ``crr status`` while serving): stop() cancels
    its handler while it waits for the next request."""
    import asyncio
    import threading

    from crr.sync import handshake

    a = _site(tmp_path, "a")
    path = str(tmp_path / "a.sock")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0), control_path=path).start()
    connected, done = threading.Event(), threading.Event()

    async def idle_client() -> None:
        reader, writer = await asyncio.open_unix_connection(path)
        await handshake.client_handshake(reader, writer, SECRET, "control")
        connected.set()
        await asyncio.to_thread(done.wait, 10)
        writer.close()

    client = threading.Thread(target=lambda: asyncio.run(idle_client()))
    client.start()
    try:
        assert connected.wait(10)
        with caplog.at_level("ERROR", logger="asyncio"):
            sa.stop()  # the control handler is waiting for a request
        assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]
    finally:
        done.set()
        client.join(10)
        a.close()


def test_wrong_secret_is_refused_and_changes_nothing(tmp_path):
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, b"x" * 32, listen=("127.0.0.1", 0), peers=[sa.address]).start()
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        assert wait_for(lambda: sa.refused and sb.refused, 10)
        assert rows(sb, "SELECT * FROM r") == []  # no connection was ever authenticated to carry it
        assert sa.links == {} and sb.links == {}
        assert any("secret" in r or "authentication" in r for r in sa.refused + sb.refused)
    finally:
        sb.stop()
        sa.stop()
        a.close()
        b.close()


def test_peer_may_only_write_allowed_relations(tmp_path):
    a = _site(tmp_path, "a", ("CREATE REPLICATED TABLE r (a INT, b VARCHAR)", "CREATE REPLICATED TABLE q (x INT)"))
    b = _site(tmp_path, "b", ("CREATE REPLICATED TABLE r (a INT, b VARCHAR)", "CREATE REPLICATED TABLE q (x INT)"))
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address], allow={"a": {"q"}}).start()
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        sa.execute("INSERT INTO q VALUES (7)")
        assert wait_for(lambda: rows(sb, "SELECT * FROM q") == [(7,)])
        # a later write of q arrives, so b has pulled from a after r was written (b pulls r before q
        # when it may: r was declared first): r did not come with it
        sa.execute("INSERT INTO q VALUES (8)")
        assert wait_for(lambda: rows(sb, "SELECT * FROM q ORDER BY x") == [(7,), (8,)])
        assert rows(sb, "SELECT * FROM r") == []  # a may not write r at b
        sb.execute("INSERT INTO r VALUES (2, 'y')")
        assert wait_for(lambda: rows(sa, "SELECT * FROM r ORDER BY a") == [(1, "x"), (2, "y")])
    finally:
        sb.stop()
        sa.stop()
        a.close()
        b.close()


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x05hello",                       # not msgpack
    frame(b"\xff" * 10),                           # undecodable body
    b"\xff\xff\xff\xff",                           # oversized frame header
    frame(encode({"t": "hello", "v": 99, "site": "x", "nonce": b"n" * 16})),  # wrong version
    frame(encode({"t": "hello", "v": 1, "site": "x", "nonce": b"n" * 16})),  # the version before site keys
    frame(encode({"t": "hello", "v": PROTOCOL_VERSION, "site": "x", "nonce": b"n" * 16, "key": b"k" * 32,
                  "dh": b"d" * 32})) + frame(encode({"t": "auth", "proof": b"0" * 32, "sig": b"s" * 64})),  # no secret
    frame(encode({"t": "hello", "v": PROTOCOL_VERSION, "site": "x", "nonce": b"n" * 16, "key": b"short",
                  "dh": b"d" * 32})),  # malformed key
])
def test_garbage_is_refused_and_server_keeps_serving(tmp_path, garbage):
    a = _site(tmp_path, "a")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        before = sa.call(lambda: (a.cursor, a.execute("SELECT * FROM r")))
        with socket.create_connection(sa.address, timeout=5) as s:
            s.sendall(garbage)
            s.settimeout(5)
            try:
                while s.recv(4096):
                    pass
            except (ConnectionResetError, socket.timeout):
                pass
        assert wait_for(lambda: len(sa.refused) >= 1, 5)
        assert sa.call(lambda: (a.cursor, a.execute("SELECT * FROM r"))) == before
        b = _site(tmp_path, "b")
        sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address]).start()
        try:
            assert wait_for(lambda: rows(sb, "SELECT * FROM r") == [(1, "x")])
        finally:
            sb.stop()
            b.close()
    finally:
        sa.stop()
        a.close()


def test_schema_mismatch_is_logged_and_not_pulled(tmp_path):
    a = _site(tmp_path, "a")
    b = _site(tmp_path, "b", ("CREATE REPLICATED TABLE r (a BIGINT, b VARCHAR)",))
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address]).start()
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        assert wait_for(lambda: any("another schema" in r for r in sb.refused))
        assert rows(sb, "SELECT * FROM r") == []
    finally:
        sb.stop()
        sa.stop()
        a.close()
        b.close()


def test_discovery_on_loopback(tmp_path):
    from crr.sync.discovery import Discovery
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0)).start()
    da = Discovery("a", sa.address, sa.add_peer, interfaces=["127.0.0.1"]).start()
    db = Discovery("b", sb.address, sb.add_peer, interfaces=["127.0.0.1"]).start()
    try:
        sa.execute("INSERT INTO r VALUES (5, 'found')")
        assert wait_for(lambda: rows(sb, "SELECT * FROM r") == [(5, "found")], 30)
    finally:
        da.stop()
        db.stop()
        sb.stop()
        sa.stop()
        a.close()
        b.close()


def test_a_relation_created_after_peers_connected_syncs(tmp_path):
    """Peers learn each other's relations at connect time; a CREATE (or DROP and CREATE with another
    schema) afterwards is announced, through the service or on the site object, and the new relation
    syncs without a reconnect (it synced only after a restart before)."""
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    sa, sb = services = _chain(a, b)
    try:
        assert wait_for(lambda: sa.status()["peers"] and sb.status()["peers"])
        for service in (sa, sb):
            service.execute("CREATE REPLICATED TABLE late (k INT PRIMARY KEY, v VARCHAR)")
        sa.execute("INSERT INTO late VALUES (1, 'x')")
        sb.execute("INSERT INTO late VALUES (2, 'y')")
        expected = [(1, "x"), (2, "y")]
        assert wait_for(lambda: rows(sa, "SELECT * FROM late ORDER BY k") == expected, 10)
        assert wait_for(lambda: rows(sb, "SELECT * FROM late ORDER BY k") == expected, 10)
        # the same declared on the site objects, which the service only sees at its periodic pull
        for service in (sa, sb):
            service.call(lambda s=service: s.site.execute("CREATE REPLICATED TABLE later (k INT)"))
        sa.execute("INSERT INTO later VALUES (7)")
        assert wait_for(lambda: rows(sb, "SELECT * FROM later") == [(7,)], 10)
        status = sb.status()
        assert {s["relation"] for p in status["peers"] for s in p["streams"]} >= {"r", "late", "later"}
    finally:
        _shutdown(services, (a, b))


def _closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_peer_is_logged_once_and_shown_in_status(tmp_path, caplog):
    """A --peer that never answers gave no feedback at all: nothing logged at INFO, nothing in status."""
    a = _site(tmp_path, "a")
    port = _closed_port()
    with caplog.at_level("INFO", logger="crr.sync"):
        sa = SyncService(a, SECRET, listen=("127.0.0.1", 0), peers=[("127.0.0.1", port)]).start()
        try:
            address = f"127.0.0.1:{port}"
            assert wait_for(lambda: [u["address"] for u in sa.status()["unreachable"]] == [address], 10)
            time.sleep(1.0)  # several more dials
            status = sa.status()
            assert status["serving"] is True and status["unreachable"][0]["error"]
        finally:
            _shutdown([sa], (a,))
    warned = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warned) == 1 and address in warned[0].getMessage()


def test_a_peer_address_that_is_the_site_itself_is_given_up(tmp_path):
    """Dialling one's own listening address redialled five times a second, a handshake each time."""
    a = _site(tmp_path, "a")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    try:
        sa.add_peer(*sa.address)
        time.sleep(3.0)
        assert len(sa.refused) <= 1, sa.refused  # the accepting side's one "connected to itself"
        assert not sa.status()["peers"]
    finally:
        _shutdown([sa], (a,))


def test_a_second_service_does_not_take_a_live_control_socket(tmp_path):
    """Two services on one control socket path (two in-memory serves in one folder): the second
    unlinked the first's socket as stale and took it over."""
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    path = str(tmp_path / "c.sock")
    sa = SyncService(a, SECRET, control_path=path).start()
    try:
        with pytest.raises(crr.CrrError, match="another crr serve answers"):
            SyncService(b, SECRET, control_path=path).start()
        assert os.path.exists(path)
    finally:
        _shutdown([sa], (a, b))
    sb = SyncService(b, SECRET, control_path=path).start()  # a socket left by a stopped server is taken
    sb.stop()


def test_results_through_a_serve_are_the_sites_own(tmp_path):
    """crr sql through a running serve answered MAP values with 'undecodable message' (msgpack refused
    their integer keys), turned tuples (ARRAY and unnamed STRUCT values) into lists, and prefixed
    errors with their class name instead of raising that class."""
    from crr.sync import control

    a = _site(tmp_path, "a")
    db = str(tmp_path / "a.duckdb")
    sa = SyncService(a, SECRET, control_path=control.socket_path(db)).start()
    try:
        query = ("SELECT MAP {1: 'a', 2: 'b'} AS m, [1, 2]::INTEGER[2] AS arr, (1, 'x') AS tup, [3, 4] AS lst, "
                 "{'k': (5, 6)} AS st, 7::HUGEINT AS h")
        remote = control.request(db, SECRET, {"t": "sql", "sql": query})["rows"]
        local = rows(sa, query)
        assert remote == local  # rows are tuples, as Site.execute gives them
        assert isinstance(remote[0][1], tuple) and isinstance(remote[0][3], list)
        with pytest.raises(crr.SqlError) as e:
            control.request(db, SECRET, {"t": "sql", "sql": "SELEC 1"})
        assert not str(e.value).startswith("SqlError")
    finally:
        _shutdown([sa], (a,))


def test_integers_beyond_64_bits_go_through_a_serve_both_ways(tmp_path):
    """A HUGEINT beyond 64 bits (a SUM over big values) dropped the control channel ("OverflowError:
    Integer value out of range" in the serve's log, and the client told the statement may or may not
    have run), and such an integer as a parameter failed in the client with msgpack's traceback."""
    from crr.sync import control

    a = _site(tmp_path, "a", ("CREATE REPLICATED TABLE r (k INT PRIMARY KEY, x HUGEINT)",))
    db = str(tmp_path / "a.duckdb")
    sa = SyncService(a, SECRET, control_path=control.socket_path(db)).start()
    big, low = 12345678901234567890123, -(1 << 63) - 1
    try:
        control.request(db, SECRET, {"t": "sql", "sql": "INSERT INTO r VALUES (1, ?), (2, ?)", "params": [big, low]})
        query = "SELECT x, [x], (x, 1), MAP {x: 'k'} FROM r ORDER BY k"
        remote = control.request(db, SECRET, {"t": "sql", "sql": query})["rows"]
        assert remote == rows(sa, query) == [(big, [big], (big, 1), {big: "k"}), (low, [low], (low, 1), {low: "k"})]
        assert control.request(db, SECRET, {"t": "sql", "sql": "SELECT ?::UBIGINT",
                                            "params": [(1 << 64) - 1]})["rows"] == [((1 << 64) - 1,)]
    finally:
        _shutdown([sa], (a,))


def test_an_aggregate_view_is_not_served_and_its_name_keeps_the_link(tmp_path, caplog):
    """An aggregate view's rows are never replicated: its site does not offer it to peers (it was offered
    under its hidden columns), and a peer holding a remote table of that name and those columns stays
    connected and syncs the rest (the refused pull closed the connection, and the peer redialled in a loop)."""
    a = _site(tmp_path, "a", ("CREATE REPLICATED TABLE r (a INT, b VARCHAR)",
                              "CREATE MATERIALIZED VIEW v AS SELECT b, count(*) AS n FROM r GROUP BY b"))
    hidden = ", ".join(f'"{c.name}" {c.type}' for c in a.relation("v").columns)
    b = _site(tmp_path, "b", ("CREATE REPLICATED TABLE r (a INT, b VARCHAR)", f"CREATE REMOTE TABLE v ({hidden})"))
    assert "v" not in [r[0] for r in SyncService(a, SECRET)._serves_message()["relations"]]
    sa, sb = services = _chain(a, b)
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x'), (2, 'x')")
        assert wait_for(lambda: rows(sb, "SELECT count(*) FROM r") == [(2,)])
        assert rows(sa, "SELECT * FROM v") == [("x", 2)]
        time.sleep(1.0)
        assert [p["site"] for p in sb.status()["peers"]] == ["a"]
        assert "connection closed" not in caplog.text
    finally:
        _shutdown(services, (a, b))


def _long_query(service: SyncService):
    """A statement of hours run through ``service`` on a thread of its own, started half a second
    ago; the thread, and a dict that gets the CrrError's text it ends with."""
    import threading
    outcome: dict = {}

    def run() -> None:
        try:
            service.execute("SELECT count(*) FROM range(300000000000000)")
        except crr.CrrError as e:
            outcome["error"] = str(e)
    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.5)
    return worker, outcome


def test_status_answers_while_a_statement_runs(tmp_path):
    """status() waited for the site, which a running statement holds (and SyncService.execute ran the
    statement on the service's own thread, stopping every connection with it, and gave up after 120
    s): crr status hung behind a long query. It reads committed state now, on a connection of its own."""
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    sa, sb = services = _chain(a, b)
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        assert wait_for(lambda: rows(sb, "SELECT count(*) FROM r") == [(1,)])
        worker, outcome = _long_query(sb)
        status = sb.status()
        assert worker.is_alive()  # answered while the statement runs
        assert status["site"] == "b" and [p["site"] for p in status["peers"]] == ["a"]
        assert [c[:3] for c in status["cursors"]] == [["a", "r", str(a.cursor)]]
        b.interrupt()
        worker.join(60)
        assert not worker.is_alive() and "interrupted" in outcome["error"]
    finally:
        _shutdown(services, (a, b))


def test_stop_interrupts_a_running_statement_and_its_caller_hears_so(tmp_path):
    """SyncService.execute's caller waited for ever when the service stopped while its statement ran
    (the loop closed with the statement's task pending), and the statement outlived the service on
    the site. stop() now interrupts it; the caller gets the interruption."""
    a = _site(tmp_path, "a")
    sa = SyncService(a, SECRET).start()
    worker, outcome = _long_query(sa)
    sa.stop()
    worker.join(30)
    assert not worker.is_alive() and "interrupted" in outcome["error"]
    a.execute("INSERT INTO r VALUES (1, 'x')")  # the site goes on
    assert a.execute("SELECT * FROM r") == [(1, "x")]
    a.close()


def test_addresses_are_host_port_pairs(tmp_path):
    """``listen="127.0.0.1:7740"`` (the CLI's form) was read letter by letter and failed at start()
    binding ('0.0.0.1', 2); a peer's likewise (found by a README check)."""
    site = _site(tmp_path, "a")
    try:
        for kwargs in ({"listen": "127.0.0.1:7740"}, {"listen": ("127.0.0.1", "7740")}, {"listen": ("h", 70000)},
                       {"peers": ["127.0.0.1:7740"]}, {"peers": ("127.0.0.1", 7740)}, {"peers": [("127.0.0.1", 0)]}):
            with pytest.raises(crr.CrrError, match=r"\(host, port\) pair") as refused:
                SyncService(site, SECRET, **kwargs)
            assert "Traceback" not in str(refused.value) and "\n" not in str(refused.value)
        service = SyncService(site, SECRET, listen=["127.0.0.1", 0], peers=(("127.0.0.1", 9),))  # a tuple of pairs
        assert service.listen == ("127.0.0.1", 0) and service.static_peers == [("127.0.0.1", 9)]
    finally:
        site.close()
