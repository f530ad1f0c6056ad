"""User errors on the crr command line: one clear line on stderr, no traceback, a consistent exit code.

Exit codes: 2 for a usage error (a bad argument value, a missing file or folder named on the command
line), 1 for a runtime failure (a site that cannot be opened, an address in use). Commands run as
subprocesses, as a user runs them, each bounded in time; servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

CRR = [sys.executable, "-m", "crr.cli"]
USAGE, FAILURE = 2, 1


def crr(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``crr args...``; a command that does not end in ``timeout`` seconds fails the test."""
    try:
        return subprocess.run([*CRR, *args], capture_output=True, text=True, timeout=timeout,
                              input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"crr {' '.join(args)} did not end within {timeout} s (it should have refused its arguments)")


def refused(proc: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """Assert a clean refusal: exit ``code``, no traceback, an error line naming each of ``words``."""
    err = proc.stderr
    assert "Traceback" not in err, err
    assert proc.returncode == code, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # argparse's own errors too: it showed its usage block above them
    line = lines[0]
    assert line.startswith("crr ") and "error:" in line, err
    for w in words:
        assert w.lower() in line.lower(), (w, err)
    return line


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    path = tmp_path / "secret"
    path.write_text("s" * 40)
    return str(path)


def serve_args(tmp_path: Path, secret: str, *extra: str) -> list[str]:
    return ["serve", "--db", str(tmp_path / "a.duckdb"), "--secret-file", secret, "--listen", "127.0.0.1:0", *extra]


# -- crr serve: the secret ------------------------------------------------------------------------------
def test_serve_secret_file_missing(tmp_path: Path) -> None:
    """Was a FileNotFoundError traceback."""
    missing = str(tmp_path / "no-such-secret")
    refused(crr(*serve_args(tmp_path, missing)), USAGE, "--secret-file", missing, "does not exist")
    assert not (tmp_path / "a.duckdb").exists()


def test_serve_secret_file_is_a_folder(tmp_path: Path) -> None:
    """Was an IsADirectoryError traceback."""
    refused(crr(*serve_args(tmp_path, str(tmp_path))), USAGE, "--secret-file", "is a folder")


def test_serve_secret_file_empty(tmp_path: Path) -> None:
    """Was a generic 'no usable secret' message that did not say the file given is empty."""
    empty = tmp_path / "empty"
    empty.write_text("")
    refused(crr(*serve_args(tmp_path, str(empty))), USAGE, str(empty), "empty", "at least 16")


def test_sql_secret_file_missing_is_refused_even_for_a_local_site(tmp_path: Path) -> None:
    """A mistyped --secret-file was silently ignored when no server ran."""
    db = str(tmp_path / "a.duckdb")
    refused(crr("sql", "--db", db, "--secret-file", str(tmp_path / "nope"), "CREATE REPLICATED TABLE t (a INT)"),
            USAGE, "--secret-file", "does not exist")
    assert not os.path.exists(db)


# -- crr serve: addresses -------------------------------------------------------------------------------
def test_listen_port_out_of_range(tmp_path: Path, secret_file: str) -> None:
    """--listen 127.0.0.1:99999 was an OverflowError traceback from bind()."""
    args = serve_args(tmp_path, secret_file)
    args[args.index("127.0.0.1:0")] = "127.0.0.1:99999"
    refused(crr(*args), USAGE, "--listen", "0 to 65535", "99999")
    assert not (tmp_path / "a.duckdb").exists()


def test_listen_negative_port(tmp_path: Path, secret_file: str) -> None:
    """A negative port got 'expected HOST:PORT', which did not say what was wrong with it."""
    args = serve_args(tmp_path, secret_file)
    args[args.index("127.0.0.1:0")] = "127.0.0.1:-5"
    refused(crr(*args), USAGE, "--listen", "0 to 65535", "-5")


def test_peer_port_zero(tmp_path: Path, secret_file: str) -> None:
    """--peer host:0 was accepted and dialled forever."""
    refused(crr(*serve_args(tmp_path, secret_file, "--peer", "127.0.0.1:0")), USAGE, "--peer", "1 to 65535")


@pytest.mark.parametrize("bad", ["nocolon", ":7700", "127.0.0.1:", "127.0.0.1:port"])
def test_peer_malformed(tmp_path: Path, secret_file: str, bad: str) -> None:
    """Malformed --peer values are refused at parse time with the expected form (guard)."""
    refused(crr(*serve_args(tmp_path, secret_file, "--peer", bad)), USAGE, "--peer", "HOST:PORT" if
            bad in ("nocolon", ":7700", "127.0.0.1:") else "65535")


def test_listen_address_in_use(tmp_path: Path, secret_file: str) -> None:
    """An address in use was an OSError traceback from asyncio, after creating the site file."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = serve_args(tmp_path, secret_file)
        args[args.index("127.0.0.1:0")] = f"127.0.0.1:{port}"
        refused(crr(*args), FAILURE, f"127.0.0.1:{port}", "already in use")
    assert not (tmp_path / "a.duckdb").exists()


def test_listen_address_not_assignable(tmp_path: Path, secret_file: str) -> None:
    """An address that is not this machine's (TEST-NET-1) was an OSError traceback."""
    args = serve_args(tmp_path, secret_file)
    args[args.index("127.0.0.1:0")] = "192.0.2.1:7700"
    refused(crr(*args), FAILURE, "192.0.2.1", "not an address of this machine")


def test_listen_unknown_host(tmp_path: Path, secret_file: str) -> None:
    """A host name that does not resolve was a socket.gaierror traceback."""
    args = serve_args(tmp_path, secret_file)
    args[args.index("127.0.0.1:0")] = "no-such-host.invalid:7700"
    refused(crr(*args), FAILURE, "unknown host", "no-such-host.invalid")


def test_socket_path_too_long(tmp_path: Path, secret_file: str) -> None:
    """A --db whose control socket path exceeds the Unix limit was an 'AF_UNIX path too long' traceback."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    args = serve_args(tmp_path, secret_file)
    args[args.index("--db") + 1] = str(deep / "a.duckdb")
    refused(crr(*args), USAGE, "control socket", "shorter path")


def test_control_socket_path_taken_by_a_folder(tmp_path: Path, secret_file: str) -> None:
    """A folder at <db>.sock was an IsADirectoryError traceback (after the server began listening)."""
    (tmp_path / "a.duckdb.sock").mkdir()
    refused(crr(*serve_args(tmp_path, secret_file)), USAGE, "a.duckdb.sock", "is a folder")


# -- crr serve: other options ---------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["garbage", "s1=", "=r", "s1=r,,s"])
def test_allow_is_validated(tmp_path: Path, secret_file: str, bad: str) -> None:
    """--allow garbage was accepted, and then every peer's writes were refused."""
    refused(crr(*serve_args(tmp_path, secret_file, "--allow", bad)), USAGE, "--allow", "SITE=REL[,REL...]")


def test_allow_folds_names_as_duckdb_does() -> None:
    """--allow's relation names fold ASCII letters only, as the catalog does: "Étab" and "étab" are
    two relations (Python's lower made them one, found by a review)."""
    from crr.sync.commands import allow_rule
    assert allow_rule("s1=Étab, ORDERS") == ("s1", {"Étab", "orders"})


@pytest.mark.parametrize("bad", ["-1", "0", "nan", "inf", "soon"])
def test_pull_interval_is_validated(tmp_path: Path, secret_file: str, bad: str) -> None:
    """A negative, zero or infinite --pull-interval was accepted (a negative one spun the loop)."""
    refused(crr(*serve_args(tmp_path, secret_file, "--pull-interval", bad)), USAGE, "--pull-interval", "positive")


def test_log_level_is_validated(tmp_path: Path, secret_file: str) -> None:
    """An unknown --log-level was silently taken as INFO."""
    refused(crr(*serve_args(tmp_path, secret_file, "--log-level", "loud")), USAGE, "--log-level", "WARNING")


def test_empty_site_id(tmp_path: Path, secret_file: str) -> None:
    """--site-id '' on a new file said the new file 'belongs to site site-...'."""
    refused(crr(*serve_args(tmp_path, secret_file, "--site-id", "")), USAGE, "--site-id", "non-empty")


# -- --db paths -----------------------------------------------------------------------------------------
def test_serve_db_in_missing_folder(tmp_path: Path, secret_file: str) -> None:
    """A --db in a folder that does not exist got DuckDB's IO error, not what to do."""
    args = serve_args(tmp_path, secret_file)
    args[args.index("--db") + 1] = str(tmp_path / "nodir" / "a.duckdb")
    refused(crr(*args), USAGE, "nodir", "does not exist", "create it first")


def test_db_is_a_folder(tmp_path: Path, secret_file: str) -> None:
    """A folder given as --db got DuckDB's 'Could not read from file' error."""
    args = serve_args(tmp_path, secret_file)
    args[args.index("--db") + 1] = str(tmp_path)
    refused(crr(*args), USAGE, "--db", "is a folder")
    refused(crr("status", "--db", str(tmp_path)), USAGE, "is a folder")


@pytest.mark.parametrize("content", ["hello\n", ""])
def test_db_not_a_duckdb_file(tmp_path: Path, secret_file: str, content: str) -> None:
    """A file that is not a DuckDB database (or an empty one) is refused as a usage error, like a plain
    DuckDB file (it was exit 1, "cannot open site database"), and left unchanged."""
    bad = tmp_path / "notes.txt"
    bad.write_text(content)
    for args in (["status", "--db", str(bad)], ["sql", "--db", str(bad), "SELECT 1"],
                 ["sql", "--db", str(bad), "--create", "SELECT 1"],
                 ["serve", "--db", str(bad), "--secret-file", secret_file, "--listen", "127.0.0.1:0"]):
        refused(crr(*args), USAGE, "--db", "not a valid DuckDB database", *(["empty"] if not content else []))
    assert bad.read_text() == content
    assert not (tmp_path / "notes.txt.key").exists()


def test_db_of_another_storage_version(tmp_path: Path) -> None:
    """A site file of another storage version is refused with what to do (guard)."""
    for version, words in (("1", ("storage version 1", "fresh site")), ("99", ("newer crr", "upgrade"))):
        path = tmp_path / f"v{version}.duckdb"
        con = duckdb.connect(str(path))
        con.execute("CREATE SCHEMA _crr; CREATE TABLE _crr.meta (k VARCHAR, v VARCHAR)")
        con.execute("INSERT INTO _crr.meta VALUES ('site_id', 's'), ('version', ?), ('seq', '0'), ('hlc', '0')",
                    [version])
        con.close()
        refused(crr("status", "--db", str(path)), FAILURE, *words)


# -- crr status / crr sql on a mistyped path ------------------------------------------------------------
def test_status_does_not_create_a_site(tmp_path: Path) -> None:
    """crr status on a mistyped path silently created a new, empty site file."""
    db = tmp_path / "typo.duckdb"
    refused(crr("status", "--db", str(db)), USAGE, "no site file", str(db), "--create")
    assert not db.exists()


def test_status_create_makes_a_site(tmp_path: Path) -> None:
    """crr status --create makes the site (the way to ask for it)."""
    db = tmp_path / "new.duckdb"
    proc = crr("status", "--db", str(db), "--create")
    assert proc.returncode == 0, proc.stderr
    assert '"serving": false' in proc.stdout and db.exists()


def test_sql_query_does_not_create_a_site(tmp_path: Path) -> None:
    """crr sql 'SELECT ...' on a mistyped path silently created a new site file."""
    db = tmp_path / "typo.duckdb"
    refused(crr("sql", "--db", str(db), "SELECT 1"), USAGE, "no site file", "--create")
    assert not db.exists()
    proc = crr("sql", "--db", str(db), "--create", "SELECT 41 + 1")
    assert proc.returncode == 0 and proc.stdout == "42\n", proc.stderr
    assert db.exists()


def test_sql_ddl_creates_a_site_and_a_failed_ddl_leaves_no_file(tmp_path: Path) -> None:
    """crr DDL creates the site file; a CREATE that fails used to leave an empty site file behind."""
    db = tmp_path / "new.duckdb"
    refused(crr("sql", "--db", str(db), "CREATE REPLICATED TABLE t (a no_such_type)"), FAILURE, "no_such_type")
    assert not db.exists()
    proc = crr("sql", "--db", str(db), "CREATE REPLICATED TABLE t (a INT)")
    assert proc.returncode == 0, proc.stderr
    proc = crr("sql", "--db", str(db), "INSERT INTO t VALUES (7)")
    assert proc.returncode == 0, proc.stderr
    assert crr("sql", "--db", str(db), "SELECT a FROM t").stdout == "7\n"


def test_sql_error_is_one_line(tmp_path: Path) -> None:
    """DuckDB's multi-line errors quoted crr's generated SQL (LINE 2: ... _crr_src ...) to the user."""
    db = str(tmp_path / "a.duckdb")
    assert crr("sql", "--db", db, "CREATE REPLICATED TABLE t (a INT)").returncode == 0
    line = refused(crr("sql", "--db", db, "INSERT INTO t VALUES ('x')"), FAILURE, "could not convert", "'x'")
    assert "_crr" not in line and "LINE" not in line
    refused(crr("sql", "--db", db, "SELECT * FROM nosuchtable"), FAILURE, "nosuchtable", "does not exist")


def test_plain_duckdb_file_is_not_turned_into_a_site(tmp_path: Path) -> None:
    """crr status on an ordinary DuckDB database wrote crr's catalog into it."""
    db = tmp_path / "plain.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE x (a INT)")
    con.close()
    refused(crr("status", "--db", str(db)), USAGE, "not a crr site", "--create")
    refused(crr("sql", "--db", str(db), "SELECT * FROM x"), USAGE, "not a crr site")
    con = duckdb.connect(str(db), read_only=True)
    schemas = {r[0] for r in con.execute("SELECT schema_name FROM duckdb_schemas()").fetchall()}
    con.close()
    assert "_crr" not in schemas


def test_a_failed_crr_ddl_leaves_a_plain_duckdb_file_plain(tmp_path: Path) -> None:
    """crr DDL turns a plain DuckDB file into a site; a CREATE that failed left crr's catalog in it, so
    that crr took the file for a site from then on (found by a probe). A schema ``_crr`` of the file's
    own keeps its tables; a CREATE that works adopts the file."""
    def schema(db: Path) -> set[tuple[str, str]]:
        con = duckdb.connect(str(db), read_only=True)
        try:
            return set(con.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall())
        finally:
            con.close()
    plain, own = tmp_path / "plain.duckdb", tmp_path / "own.duckdb"
    for db, setup in ((plain, "CREATE TABLE x (a INT)"), (own, "CREATE SCHEMA _crr; CREATE TABLE _crr.notes (a INT)")):
        con = duckdb.connect(str(db))
        con.execute(setup)
        con.close()
        was = schema(db)
        refused(crr("sql", "--db", str(db), "CREATE REPLICATED TABLE t (x no_such_type)"), FAILURE, "no_such_type")
        assert schema(db) == was
        refused(crr("sql", "--db", str(db), "SELECT 1"), USAGE, "not a crr site")
    proc = crr("sql", "--db", str(plain), "CREATE REPLICATED TABLE t (x INT)")
    assert proc.returncode == 0, proc.stderr
    assert crr("sql", "--db", str(plain), "SELECT count(*) FROM x").stdout == "0\n"


def test_sql_empty_statement(tmp_path: Path) -> None:
    """An empty statement argument started the interactive shell instead of saying it is empty; one of
    only comments or semicolons was "expected one SQL statement, got 0", exit 1 (found by a probe)."""
    for empty in ("  ", "-- c", "/* c */", ";", " ; -- c\n"):
        refused(crr("sql", "--db", str(tmp_path / "a.duckdb"), empty), USAGE, "statement is empty")


def test_sql_shell_exit_code_reports_failed_statements(tmp_path: Path) -> None:
    """Statements piped into the shell: a failure was printed but the exit code was 0."""
    db = str(tmp_path / "a.duckdb")
    proc = crr("sql", "--db", db, stdin="CREATE REPLICATED TABLE t (a INT)\nSELECT nosuch FROM t\nSELECT 5\n")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == FAILURE and "nosuch" in proc.stderr and proc.stdout == "5\n", proc


def interruptible_shell(db: str, *extra: str) -> subprocess.Popen:
    """A crr sql shell on ``db`` (pipes for its three streams) that Ctrl-C (SIGINT) interrupts."""
    # A process started in the background by a non-interactive shell ignores SIGINT, and its children
    # inherit that (Python then never raises KeyboardInterrupt): the shell gets Ctrl-C's default
    # disposition here, as it has in a terminal, whatever started the test run.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([*CRR, "sql", "--db", db, *extra], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_sql_shell_interrupted(tmp_path: Path) -> None:
    """Ctrl-C in the crr sql shell ended in a KeyboardInterrupt traceback."""
    proc = interruptible_shell(str(tmp_path / "a.duckdb"))
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        assert ready and "one statement per line" in proc.stderr.readline()  # the shell is reading
    finally:
        assert_interrupted(proc)


def assert_interrupted(proc: subprocess.Popen) -> None:
    """Send Ctrl-C (SIGINT) to ``proc`` (if it still runs) and check it ends as interrupted: exit 130,
    one line saying so, no traceback."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not [w for w in ("Traceback", "KeyboardInterrupt", "RuntimeError") if w in err], err
    assert proc.returncode == 130 and "interrupted" in err


# -- a running crr serve ---------------------------------------------------------------------------------
def _start_serve(db: str, secret: str) -> subprocess.Popen:
    """A crr serve on 127.0.0.1, waited for (at most 60 s) until it prints its address."""
    proc = subprocess.Popen([*CRR, "serve", "--db", db, "--secret-file", secret, "--listen", "127.0.0.1:0",
                             "--log-level", "ERROR"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("serving"):
        proc.kill()
        proc.wait()
        pytest.fail(f"crr serve did not start: {line!r}")
    return proc


def test_second_serve_and_wrong_secret_are_explained(tmp_path: Path, secret_file: str) -> None:
    """A second crr serve on a held file got DuckDB's lock error; a wrong secret blamed 'the peer'."""
    db = str(tmp_path / "a.duckdb")
    assert crr("sql", "--db", db, "CREATE REPLICATED TABLE t (a INT)").returncode == 0
    proc = _start_serve(db, secret_file)
    try:
        refused(crr("serve", "--db", db, "--secret-file", secret_file, "--listen", "127.0.0.1:0"), FAILURE,
                "crr serve is running for it")
        wrong = tmp_path / "wrong"
        wrong.write_text("w" * 40)
        refused(crr("sql", "--db", db, "--secret-file", str(wrong), "SELECT 1"), FAILURE, "refused", "--secret-file")
        ok = crr("sql", "--db", db, "--secret-file", secret_file, "SELECT count(*) FROM t")
        assert ok.returncode == 0 and ok.stdout == "0\n", ok.stderr
    finally:
        stop_serve(proc)


def stop_serve(proc: subprocess.Popen) -> None:
    """Stop a crr serve started by a test (SIGTERM, then SIGKILL after 30 s)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- crr demo ---------------------------------------------------------------------------------------------
def test_demo_dir_is_a_file(tmp_path: Path) -> None:
    """crr demo --dir on an existing file was a FileExistsError traceback."""
    f = tmp_path / "file"
    f.write_text("x")
    refused(crr("demo", "--dir", str(f)), USAGE, "--dir", "is a file")


@pytest.mark.parametrize("network", [False, True])
def test_demo_dir_cannot_be_created(tmp_path: Path, network: bool) -> None:
    """A --dir that cannot be created (below a file) was a traceback, with and without --network."""
    f = tmp_path / "file"
    f.write_text("x")
    refused(crr("demo", *(["--network"] if network else []), "--dir", str(f / "sub")), USAGE,
            "cannot create --dir", "sub")


def test_demo_dir_holding_site_files_is_refused(tmp_path: Path) -> None:
    """crr demo --dir reused (and wrote into) site files left in the folder."""
    (tmp_path / "s0.duckdb").write_bytes(b"")
    refused(crr("demo", "--dir", str(tmp_path)), USAGE, "already holds", "s0.duckdb")
    assert (tmp_path / "s0.duckdb").read_bytes() == b""


def test_help_texts_name_the_new_options() -> None:
    """--help shows the forms the parser now enforces."""
    assert "--create" in crr("sql", "--help").stdout and "--create" in crr("status", "--help").stdout
    text = crr("serve", "--help").stdout
    assert "SITE=REL[,REL...]" in text and "HOST:PORT" in text and "SECONDS" in text


@pytest.mark.parametrize("args", [["paper", "--sizes", "abc"], ["paper", "--batch", "0"], ["recompute", "--deltas", "1,x"]])
def test_bench_arguments_are_validated(args):
    proc = subprocess.run([sys.executable, "-m", "crr.cli", "bench", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: argument" in proc.stderr


@pytest.mark.parametrize("pin", ["garbage", "s1=abc", "=" + "a" * 64, "s1=" + "g" * 64])
def test_pin_is_validated(tmp_path, secret_file, pin):
    refused(crr(*serve_args(tmp_path, secret_file, "--pin", pin)), USAGE, "SITE=HEXKEY")


def test_serve_keeps_its_key_where_told(tmp_path, secret_file):
    """--key-file and --trust-file reach the sync service: the key appears at the given path (mode 0600)."""
    key = tmp_path / "keys" / "site.key"
    key.parent.mkdir()
    proc = subprocess.Popen([*CRR, *serve_args(tmp_path, secret_file, "--key-file", str(key), "--trust-file",
                                                str(tmp_path / "pins.json"), "--no-trust-on-first-use",
                                                "--pin", "other=" + "ab" * 32)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):  # up to 30 s for the server to start
            if key.exists() or proc.poll() is not None:
                break
            select.select([], [], [], 0.1)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert key.exists() and (key.stat().st_mode & 0o777) == 0o600
        assert not (tmp_path / "a.duckdb.key").exists()
    finally:
        proc.terminate()
        proc.wait(30)
