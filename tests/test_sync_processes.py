"""Real `crr serve` processes on loopback: convergence, crr sql/status while serving, SIGKILL restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.test_sync_service import wait_for

CRR = [sys.executable, "-m", "crr.cli"]


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text("p" * 40)
    return str(path)


def crr_cmd(*args: str, secret: str | None = None, check: bool = True) -> str:
    extra = ["--secret-file", secret] if secret else []
    proc = subprocess.run([*CRR, *args, *extra], capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"crr {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def serve(db: str, secret: str, peers=(), site_id=None) -> tuple[subprocess.Popen, str, str]:
    """Start ``crr serve``; returns the process, its address and its site id (from its first line)."""
    args = [*CRR, "serve", "--db", db, "--listen", "127.0.0.1:0", "--secret-file", secret, "--pull-interval", "0.5"]
    for p in peers:
        args += ["--peer", p]
    if site_id:
        args += ["--site-id", site_id]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    assert line.startswith("serving site"), line
    words = line.split()  # serving site <id> on <host:port>
    return proc, words[-1], words[2]


def sql(db: str, statement: str, secret: str) -> list[list[str]]:
    out = crr_cmd("sql", "--db", db, statement, secret=secret)
    return [line.split("\t") for line in out.splitlines() if line]


def test_processes_converge_and_survive_sigkill(tmp_path, secret_file):
    a, b = str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb")
    for db, name in ((a, "a"), (b, "b")):
        crr_cmd("sql", "--db", db, "CREATE REPLICATED TABLE r (k INT PRIMARY KEY, v VARCHAR)")
    pa, addr_a, id_a = serve(a, secret_file)
    pb, _, id_b = serve(b, secret_file, peers=[addr_a])
    assert id_a != id_b
    try:
        sql(a, "INSERT INTO r VALUES (1, 'one')", secret_file)  # through the running server
        assert wait_for(lambda: sql(b, "SELECT * FROM r", secret_file) == [["1", "one"]], 30)
        status = json.loads(crr_cmd("status", "--db", b, secret=secret_file))
        assert status["relations"] == {"r": "replicated"} and status["site"] == id_b
        assert [p["site"] for p in status["peers"]] == [id_a]
        assert status["peers"][0]["streams"][0]["relation"] == "r"
        assert status["peers"][0]["key"] == json.loads(crr_cmd("status", "--db", a, secret=secret_file))["key"]
        assert os.stat(b + ".key").st_mode & 0o777 == 0o600  # b's key, kept across the restart below
        # b is killed while a keeps writing, then restarts and catches up: nothing lost or doubled
        for i in range(2, 40):
            sql(a, f"INSERT INTO r VALUES ({i}, 'v{i}')", secret_file)
            if i == 15:
                os.kill(pb.pid, signal.SIGKILL)
                pb.wait()
        pb, _, again = serve(b, secret_file, peers=[addr_a])
        assert again == id_b
        expected = sql(a, "SELECT count(*), count(DISTINCT k), sum(k) FROM r", secret_file)
        assert expected == [["39", "39", str(sum(range(1, 40)))]]
        assert wait_for(lambda: sql(b, "SELECT count(*), count(DISTINCT k), sum(k) FROM r", secret_file) == expected, 30)
        sql(b, "UPDATE r SET v = 'from b' WHERE k = 1", secret_file)
        assert wait_for(lambda: sql(a, "SELECT v FROM r WHERE k = 1", secret_file) == [["from b"]], 30)
    finally:
        for p in (pa, pb):
            p.send_signal(signal.SIGTERM)
        for p in (pa, pb):
            p.wait(30)
    # stopped cleanly: the files open directly again
    assert sql(b, "SELECT count(*) FROM r", secret_file) == [["39"]]


def test_control_channel_needs_the_secret(tmp_path, secret_file):
    a = str(tmp_path / "a.duckdb")
    crr_cmd("sql", "--db", a, "CREATE REPLICATED TABLE r (k INT)")
    pa, _, _ = serve(a, secret_file)
    try:
        wrong = tmp_path / "wrong"
        wrong.write_text("w" * 40)
        proc = subprocess.run([*CRR, "sql", "--db", a, "INSERT INTO r VALUES (1)", "--secret-file", str(wrong)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "secret" in proc.stderr
        assert sql(a, "SELECT count(*) FROM r", secret_file) == [["0"]]
    finally:
        pa.send_signal(signal.SIGTERM)
        pa.wait(30)
