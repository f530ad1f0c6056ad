"""Paths on the crr command line: refused before anything is created or run, with the option named.

Key and trust files of ``crr serve``, the control socket ``<db>.sock`` (a symbolic link to a site file
reaches its serve; a regular file in the socket's place is refused), ``crr bench``'s ``--json`` and
``--plot``; and what the user sees: ``crr status``'s keys with and without a serve, no sqlglot log
lines, and a reader that goes away (``crr sql ... | head``) is not an error.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

import crr
from crr.cli import UsageError, main
from crr.sync.control import socket_path
from crr.sync.crypto import Identity, IdentityError, TrustStore
from tests.test_cli_errors import (CRR, USAGE, _start_serve, crr as run_crr, refused, secret_file, serve_args,
                                   stop_serve)

__all__ = ["secret_file"]  # the fixture, shared with test_cli_errors

root = pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")


# -- crr serve: --key-file and --trust-file ---------------------------------------------------------------
def test_key_file_that_is_a_folder_is_not_told_to_chmod(tmp_path: Path) -> None:
    """Identity.load_or_create on a folder (mode 0755, like /tmp) advised `chmod 600 <folder>`."""
    tmp_path.chmod(0o755)
    with pytest.raises(IdentityError) as e:
        Identity.load_or_create(str(tmp_path))
    assert "is a folder" in str(e.value) and "chmod" not in str(e.value)


def test_serve_key_file_is_a_folder(tmp_path: Path, secret_file: str) -> None:
    """crr serve --key-file /tmp printed the advice `chmod 600 /tmp` (exit 1), after creating the site file."""
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    line = refused(run_crr(*serve_args(tmp_path, secret_file, "--key-file", str(folder))), USAGE,
                   "--key-file", str(folder), "is a folder")
    assert "chmod" not in line
    assert not (tmp_path / "a.duckdb").exists()


@pytest.mark.parametrize("option", ["--key-file", "--trust-file"])
def test_serve_file_option_in_a_missing_folder(tmp_path: Path, secret_file: str, option: str) -> None:
    """A --trust-file in a folder that does not exist was accepted, and pins were never saved; a --key-file
    there failed only after the site file was created."""
    path = tmp_path / "nodir" / "file"
    refused(run_crr(*serve_args(tmp_path, secret_file, option, str(path))), USAGE, option, "nodir",
            "does not exist")
    assert not (tmp_path / "a.duckdb").exists()


def test_trust_store_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    """TrustStore accepted a path where it could never save a pin."""
    with pytest.raises(IdentityError, match="does not exist"):
        TrustStore(str(tmp_path / "nodir" / "peers.json"))
    with pytest.raises(IdentityError, match="is a folder"):
        TrustStore(str(tmp_path))
    assert TrustStore(str(tmp_path / "peers.json")).keys == {}  # a new file in an existing folder is fine


def test_file_option_in_a_folder_this_user_cannot_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pins (--trust-file) are rewritten, a missing key (--key-file) is created: both need a writable
    folder; an existing key file does not, nor does a trust file with trust on first use off."""
    from crr.sync.commands import check_file_option
    folder = str(tmp_path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if os.fspath(p) == folder else real_access(p, mode))
    with pytest.raises(UsageError, match="--trust-file .*writable"):
        check_file_option(str(tmp_path / "p.json"), "--trust-file")
    with pytest.raises(UsageError, match="--key-file .*writable"):
        check_file_option(str(tmp_path / "k.key"), "--key-file", written=False)
    (tmp_path / "k.key").write_text("")
    check_file_option(str(tmp_path / "k.key"), "--key-file", written=False)
    check_file_option(str(tmp_path / "k.key"), "--trust-file", written=False)


@root
def test_serve_trust_file_in_a_read_only_folder(tmp_path: Path, secret_file: str) -> None:
    """Pins would be written on first contact: a folder this user cannot write in is refused at startup."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        refused(run_crr(*serve_args(tmp_path, secret_file, "--trust-file", str(folder / "p.json"))), USAGE,
                "--trust-file", "writable")
    finally:
        folder.chmod(0o700)


# -- the control socket ---------------------------------------------------------------------------------
def test_socket_path_of_a_symlink_is_its_targets(tmp_path: Path) -> None:
    """`crr sql --db link.duckdb` looked for link.duckdb.sock, not the socket of the serve of x.duckdb."""
    target = tmp_path / "x.duckdb"
    target.write_bytes(b"")
    (tmp_path / "link.duckdb").symlink_to(target)
    linked_folder = tmp_path / "linked"
    linked_folder.symlink_to(tmp_path)
    expected = os.path.realpath(target) + ".sock"
    assert socket_path(str(tmp_path / "link.duckdb")) == expected
    assert socket_path(str(linked_folder / "x.duckdb")) == expected
    assert socket_path(str(target)) == expected


def test_control_socket_path_taken_by_a_file(tmp_path: Path, secret_file: str) -> None:
    """A regular file at <db>.sock was refused only after the site and key files were created and the
    serve logged that it was listening."""
    (tmp_path / "a.duckdb.sock").write_text("")
    proc = run_crr(*serve_args(tmp_path, secret_file))
    refused(proc, USAGE, "a.duckdb.sock", "not a socket")
    assert "listening" not in proc.stderr
    assert not (tmp_path / "a.duckdb").exists() and not (tmp_path / "a.duckdb.key").exists()


# -- crr status, locally and through a serve; a symbolic link reaches the serve ---------------------------
def test_status_has_the_same_keys_with_and_without_a_serve(tmp_path: Path, secret_file: str) -> None:
    """Through a serve, status had "listening" but no "serving"; locally "serving" but no "listening" and
    none of the serve's other keys. A symbolic link to the site file did not reach its serve."""
    import json
    db = tmp_path / "x.duckdb"
    (tmp_path / "link.duckdb").symlink_to(db)
    made = run_crr("sql", "--db", str(db), "CREATE REPLICATED TABLE t (a INT)")
    assert made.returncode == 0, made.stderr
    local = run_crr("status", "--db", str(db))
    assert local.returncode == 0, local.stderr
    here = json.loads(local.stdout)
    assert here["serving"] is False and here["listening"] is None
    proc = _start_serve(str(db), secret_file)
    try:
        for path in (db, tmp_path / "link.duckdb"):
            remote = run_crr("status", "--db", str(path), "--secret-file", secret_file)
            assert remote.returncode == 0, (path, remote.stderr)
            there = json.loads(remote.stdout)
            assert there["serving"] is True and there["listening"].startswith("127.0.0.1:")
            assert list(there) == list(here)
        ok = run_crr("sql", "--db", str(tmp_path / "link.duckdb"), "--secret-file", secret_file,
                     "SELECT count(*) FROM t")
        assert ok.returncode == 0 and ok.stdout == "0\n", ok.stderr
    finally:
        stop_serve(proc)
    assert here["key"] is None  # no serve had made a key yet
    after = json.loads(run_crr("status", "--db", str(db)).stdout)
    assert after["serving"] is False and after["key"] == there["key"]  # read from <db>.key, where serve put it


# -- what the user sees ---------------------------------------------------------------------------------
def test_sql_explain_writes_no_sqlglot_log(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           caplog: pytest.LogCaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`crr sql "EXPLAIN ..."` printed sqlglot's "unsupported syntax. Falling back to parsing as a 'Command'"
    warning on stderr."""
    monkeypatch.setattr(logging.getLogger("sqlglot"), "level", logging.NOTSET)  # as in a fresh process
    db = str(tmp_path / "x.duckdb")
    site = crr.Site(db)
    site.execute("CREATE REPLICATED TABLE r (a INT)")
    site.close()
    caplog.set_level(logging.DEBUG)
    assert main(["sql", "--db", db, "EXPLAIN SELECT * FROM r"]) == 0
    out, err = capsys.readouterr()
    assert "physical_plan" in out
    assert "sqlglot" not in err and "Falling back" not in err, err
    assert [r.getMessage() for r in caplog.records if r.name.startswith("sqlglot")] == []


def test_sql_into_a_pipe_closed_early_exits_0(tmp_path: Path) -> None:
    """`crr sql ... | head -1` exited 1, although a reader that goes away is no error of crr's."""
    db = str(tmp_path / "a.duckdb")
    proc = subprocess.Popen([*CRR, "sql", "--db", db, "--create", "SELECT * FROM range(300000)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout.readline() == b"0\n"
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and err == "", (proc.returncode, err)


def test_sql_short_output_into_a_closed_pipe_exits_0(tmp_path: Path) -> None:
    """Output small enough to sit in the buffer until exit hit the closed pipe in the interpreter's last
    flush ("Exception ignored ... BrokenPipeError", exit 120)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before crr writes anything
    try:
        proc = subprocess.run([*CRR, "sql", "--db", str(tmp_path / "a.duckdb"), "--create", "SELECT 42"],
                              stdout=write, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=60)
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == b"", (proc.returncode, proc.stderr)


# -- crr bench --json / --plot ----------------------------------------------------------------------------
def _bench_must_not_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import crr.bench.cli as bench
    ran: list[str] = []
    monkeypatch.setattr(bench, "_dispatch", lambda name, args, say: ran.append(name) or ([], lambda d: []))
    return ran


@pytest.mark.parametrize("option, make, words", [
    ("--plot", "file", ["--plot", "is a file", "folder"]),
    ("--json", "folder", ["--json", "is a folder"]),
    ("--json", "missing", ["--json", "nodir", "does not exist"]),
    ("--plot", "below-file", ["--plot", "cannot create", "is a file"]),
])
def test_bench_outputs_are_checked_before_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], option: str, make: str,
                                                  words: list[str]) -> None:
    """--plot FILE failed with "File exists" and --json FOLDER with "Is a directory", both after the whole
    benchmark ran; --json in a missing folder silently created it."""
    ran = _bench_must_not_run(monkeypatch)
    file = tmp_path / "f.png"
    file.write_text("x")
    path = {"file": file, "folder": tmp_path, "missing": tmp_path / "nodir" / "out.json",
            "below-file": file / "plots"}[make]
    assert main(["bench", "merge", "--quick", option, str(path)]) == USAGE
    err = capsys.readouterr().err
    assert err.startswith("crr bench: error:") and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, (w, err)
    assert ran == []
    assert not (tmp_path / "nodir").exists()


def test_bench_outputs_that_will_do_are_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--plot DIR is created with its parents; --json may overwrite a file (guard)."""
    from crr.bench.cli import check_outputs
    (tmp_path / "old.json").write_text("{}")
    check_outputs(str(tmp_path / "old.json"), str(tmp_path / "new" / "plots"))
    check_outputs(str(tmp_path / "r.json"), str(tmp_path))
    with pytest.raises(UsageError):
        check_outputs("", None)
    ran = _bench_must_not_run(monkeypatch)
    assert main(["bench", "merge", "--quick", "--json", str(tmp_path / "r.json"), "--plot",
                 str(tmp_path / "new" / "plots")]) == 0
    assert ran == ["merge"] and (tmp_path / "r.json").exists()
