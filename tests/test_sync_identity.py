"""Site identity: each site's key pair, pinned peer keys, and what a peer that lies about its id gets."""

from __future__ import annotations

import asyncio
import json
import os
import stat

import pytest

import crr
from crr.sync import crypto, handshake
from crr.sync.service import SyncService
from tests.test_sync_service import SECRET, _site, rows, wait_for


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_keys_are_persisted_privately_and_peers_are_pinned(tmp_path):
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    sa = SyncService(a, SECRET, listen=("127.0.0.1", 0)).start()
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), peers=[sa.address]).start()
    try:
        sa.execute("INSERT INTO r VALUES (1, 'x')")
        assert wait_for(lambda: rows(sb, "SELECT * FROM r") == [(1, "x")])
        key_a, key_b = sa.public_key, sb.public_key
        assert key_a != key_b
        for db in ("a", "b"):
            assert _mode(str(tmp_path / f"{db}.duckdb.key")) == 0o600
            assert _mode(str(tmp_path / f"{db}.duckdb.peers.json")) == 0o600
        pins_b = json.loads((tmp_path / "b.duckdb.peers.json").read_text())["keys"]
        pins_a = json.loads((tmp_path / "a.duckdb.peers.json").read_text())["keys"]
        assert pins_b == {"a": key_a} and pins_a == {"b": key_b}
        assert sb.status()["peers"][0]["key"] == key_a
    finally:
        sb.stop()
        sa.stop()
    # the same site keeps its key across restarts
    again = SyncService(a, SECRET)
    assert again.public_key == key_a
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]  # atomic writes leave no debris
    a.close()
    b.close()


def test_in_memory_site_gets_an_ephemeral_key_and_writes_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s1, s2 = crr.Site(site_id="m1"), crr.Site(site_id="m2")
    for s in (s1, s2):
        s.execute("CREATE REPLICATED TABLE r (a INT, b VARCHAR)")
    x = SyncService(s1, SECRET, listen=("127.0.0.1", 0)).start()
    y = SyncService(s2, SECRET, listen=("127.0.0.1", 0), peers=[x.address]).start()
    try:
        x.execute("INSERT INTO r VALUES (1, 'x')")
        assert wait_for(lambda: rows(y, "SELECT * FROM r") == [(1, "x")])
        assert y.trust.get("m1") == bytes.fromhex(x.public_key)
        with crr.Site(site_id="m3") as m3, crr.Site(site_id="m3") as m3b:
            assert SyncService(m3, SECRET).public_key != SyncService(m3b, SECRET).public_key
        assert os.listdir(tmp_path) == []
    finally:
        y.stop()
        x.stop()
        s1.close()
        s2.close()


def test_key_file_readable_by_others_is_refused(tmp_path):
    a = _site(tmp_path, "a")
    try:
        SyncService(a, SECRET)  # creates the key
        os.chmod(tmp_path / "a.duckdb.key", 0o644)
        with pytest.raises(crr.CrrError, match="chmod 600"):
            SyncService(a, SECRET)
        (tmp_path / "a.duckdb.key").write_text("not a key")
        os.chmod(tmp_path / "a.duckdb.key", 0o600)
        with pytest.raises(crr.CrrError, match="not a usable private key"):
            SyncService(a, SECRET)
        (tmp_path / "a.duckdb.peers.json").write_text("{broken")
        os.remove(tmp_path / "a.duckdb.key")
        with pytest.raises(crr.CrrError, match="pinned peer keys"):
            SyncService(a, SECRET)
    finally:
        a.close()


def test_a_peer_claiming_a_known_site_id_is_refused(tmp_path):
    """b lets only a write r. m holds the secret and calls itself a: b must refuse it, not merge its rows."""
    a, b = _site(tmp_path, "a"), _site(tmp_path, "b")
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), allow={"a": {"r"}}).start()
    try:
        sa = SyncService(a, SECRET, peers=[sb.address]).start()
        sa.execute("INSERT INTO r VALUES (1, 'honest')")
        assert wait_for(lambda: rows(sb, "SELECT * FROM r") == [(1, "honest")])
        sa.stop()
        m = crr.Site(str(tmp_path / "m.duckdb"), site_id="a")  # another file, another key, the same site id
        m.execute("CREATE REPLICATED TABLE r (a INT, b VARCHAR)")
        m.execute("INSERT INTO r VALUES (66, 'forged')")
        sm = SyncService(m, SECRET, peers=[sb.address]).start()
        try:
            assert wait_for(lambda: any("pinned to key" in r and "'a'" in r for r in sb.refused), 10)
            assert wait_for(lambda: any("bound to another key" in r for r in sm.refused), 10)
        finally:
            sm.stop()
            m.close()
        # the real a comes back with the same key and a later write: it arrives, the forged row never did
        sa = SyncService(a, SECRET, peers=[sb.address]).start()
        sa.execute("INSERT INTO r VALUES (2, 'later')")
        assert wait_for(lambda: rows(sb, "SELECT * FROM r ORDER BY a") == [(1, "honest"), (2, "later")])
        sa.stop()
    finally:
        sb.stop()
        a.close()
        b.close()


def test_without_trust_on_first_use_only_given_keys_connect(tmp_path):
    a, b, c = _site(tmp_path, "a"), _site(tmp_path, "b"), _site(tmp_path, "c")
    key_a = SyncService(a, SECRET).public_key
    sb = SyncService(b, SECRET, listen=("127.0.0.1", 0), trusted_keys={"a": key_a}, trust_new_peers=False).start()
    sa = SyncService(a, SECRET, peers=[sb.address]).start()
    sc = SyncService(c, SECRET, peers=[sb.address]).start()
    try:
        sc.execute("INSERT INTO r VALUES (3, 'unknown')")
        assert wait_for(lambda: any("'c'" in r and "not known here" in r for r in sb.refused), 10)
        sa.execute("INSERT INTO r VALUES (1, 'known')")
        assert wait_for(lambda: rows(sb, "SELECT * FROM r") == [(1, "known")])
        assert "c" not in sb.links and sb.trust.get("c") is None
    finally:
        sc.stop()
        sa.stop()
        sb.stop()
        for s in (a, b, c):
            s.close()
    with crr.Site() as s, pytest.raises(crr.CrrError, match="Ed25519 public key"):
        SyncService(s, SECRET, trusted_keys={"a": "abcd"})


def _run_handshake(client_identity, server_trust=None, client_site="c", client_secret=SECRET):
    """One handshake over loopback; returns (client outcome, server outcome), each a Handshake or an error."""
    server_identity = crypto.Identity.ephemeral()

    async def main():
        results = {}

        async def serve(reader, writer):
            try:
                results["server"] = await handshake.server_handshake(reader, writer, SECRET, "s", server_identity,
                                                                     server_trust)
            except Exception as e:  # noqa: BLE001 - the test inspects it
                results["server"] = e
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        try:
            results["client"] = await asyncio.wait_for(
                handshake.client_handshake(reader, writer, client_secret, client_site, client_identity), 5)
        except Exception as e:  # noqa: BLE001
            results["client"] = e
        finally:
            writer.close()
        for _ in range(100):
            if "server" in results:
                break
            await asyncio.sleep(0.02)
        server.close()
        return results["client"], results["server"]

    return asyncio.run(main())


def test_handshake_proves_the_private_key_and_gives_session_keys_only_to_the_two_ends(monkeypatch):
    seen = []
    recv_plain = handshake.recv_plain

    async def recording(reader):
        message = await recv_plain(reader)
        seen.append(message)
        return message

    monkeypatch.setattr(handshake, "recv_plain", recording)
    ok_client, ok_server = _run_handshake(crypto.Identity.ephemeral())
    assert isinstance(ok_server, handshake.Handshake) and ok_server.site == "c"
    assert isinstance(ok_client, handshake.Handshake) and ok_client.site == "s"
    assert ok_server.channel.open(ok_client.channel.seal(b"hi")) == b"hi"
    # the session keys also depend on an ephemeral key exchange: knowing the secret and every plaintext
    # handshake value (as any member on the path would) is not enough to read the session
    hellos = {m["site"]: m for m in seen if m["t"] == "hello"}
    c, s = hellos["c"], hellos["s"]
    h = handshake.transcript_hash((c["site"], c["nonce"], c["key"], c["dh"]), (s["site"], s["nonce"], s["key"], s["dh"]))
    observer = crypto.Channel(SECRET, c["nonce"], s["nonce"], h, is_client=False)
    with pytest.raises(crypto.AuthError):
        observer.open(ok_client.channel.seal(b"secret"))
    # a client presenting a public key whose private key it does not hold
    liar = crypto.Identity.ephemeral()
    other = crypto.Identity.ephemeral()
    liar.sign = other.sign
    _, server = _run_handshake(liar)
    assert isinstance(server, crypto.AuthError) and "private key" in str(server)
    # a trust check that refuses: the client learns why, in one message
    def refuse(site, key):
        raise crypto.IdentityError("refused locally", remote="site id 'c' is bound to another key here")
    client, server = _run_handshake(crypto.Identity.ephemeral(), refuse)
    assert isinstance(server, crypto.IdentityError)
    assert isinstance(client, crypto.AuthError) and "bound to another key" in str(client)


def test_a_peer_with_another_secret_is_named_as_such_on_both_sides():
    """The side whose proof the other refused logged "the peer refused us: authentication failed",
    which read as if the other side were at fault (found by a probe of the command line)."""
    client, server = _run_handshake(crypto.Identity.ephemeral(), client_secret=b"another" * 8)
    assert isinstance(client, crypto.AuthError) and isinstance(server, crypto.AuthError)
    assert "refused this side's proof: authentication failed (the two sides hold different deployment secrets)" \
        in str(server), server
