"""``crr sql`` as a tool: statements piped into its shell, parameters, JSON output, Ctrl-C, and what
``crr serve`` refuses to take over (each found by a probe of the command line)."""

from __future__ import annotations

import json
import select
import subprocess
import time
from pathlib import Path

import duckdb

from crr.sync import commands
from crr.sync.commands import shell_statements
from tests.test_cli_errors import (CRR, FAILURE, USAGE, _start_serve, assert_interrupted, crr, interruptible_shell,
                                   refused, stop_serve)


def test_shell_statements_span_lines_and_skip_blank_and_comment_lines():
    text = ("INSERT INTO r VALUES (1, 'a')\n\n   \nINSERT INTO r VALUES (2, 'b')\n-- a comment\n"
            "CREATE REPLICATED TABLE t (\n  k INT, -- the key (\n  v VARCHAR\n)\n"
            "INSERT INTO t VALUES (1, 'it''s\ntwo lines')\nSELECT \"a(b\" FROM t\n/* open\nclosed */ SELECT 1\nSELECT (1\n")
    assert list(shell_statements(text.splitlines(keepends=True))) == [
        "INSERT INTO r VALUES (1, 'a')", "INSERT INTO r VALUES (2, 'b')",
        "CREATE REPLICATED TABLE t (\n  k INT, -- the key (\n  v VARCHAR\n)",
        "INSERT INTO t VALUES (1, 'it''s\ntwo lines')", 'SELECT "a(b" FROM t', "/* open\nclosed */ SELECT 1",
        "SELECT (1"]  # left open at the end: run as it is, so crr says what is wrong


def test_shell_statements_know_dollar_quotes_escapes_and_nested_comments():
    """A ``(`` inside ``$$...$$`` and the escaped quote of ``E'\\''`` left the statement open, so the
    next line was joined to it and both failed; DuckDB nests ``/* */`` comments (found by a probe)."""
    text = ("SELECT $$a(b$$\nSELECT $t$x'(y$t$\nSELECT E'\\'' AS q\nSELECT e'x\\'y(', 'a\\'\n"
            "SELECT /* a /* b */\n still a comment */ 1\nSELECT $1\nSELECT 2\n")
    assert list(shell_statements(text.splitlines(keepends=True))) == [
        "SELECT $$a(b$$", "SELECT $t$x'(y$t$", "SELECT E'\\'' AS q", "SELECT e'x\\'y(', 'a\\'",
        "SELECT /* a /* b */\n still a comment */ 1", "SELECT $1", "SELECT 2"]
    # a line of only a block comment is skipped as a -- line is (it ran as a statement of none)
    assert list(shell_statements(["/* note */\n", "SELECT 1\n", "  /* two\n", "lines */ -- and this\n", ";\n"])) == [
        "SELECT 1"]
    con = duckdb.connect()  # each is one statement DuckDB runs as such
    assert con.execute("SELECT E'\\'' AS q").fetchall() == [("'",)]
    assert con.execute("SELECT /* a /* b */\n still a comment */ 1").fetchall() == [(1,)]


def test_a_statement_of_many_lines_is_read_in_linear_time(monkeypatch):
    """Each line read the whole statement again: 20000 lines took minutes (found by a probe). Not a
    timing: a scanner that reads more than each line once fails the count below."""
    lines = ["SELECT count(*) FROM (VALUES\n", *(f"({i}),\n" for i in range(20000)), "(0)) t(x)\n"]
    read = []
    feed = commands._OpenSql.feed

    def counted(self, text):
        read.append(len(text))
        return feed(self, text)
    monkeypatch.setattr(commands._OpenSql, "feed", counted)
    assert [s.count("\n") for s in shell_statements(lines)] == [20001]
    assert sum(read) == sum(len(line) for line in lines)


def test_crr_ddl_after_a_comment_creates_the_site_and_a_closed_stdin_is_no_input(tmp_path: Path):
    """``crr sql "/* x */ CREATE REPLICATED TABLE ..."`` said there was no site file to open, and ``crr
    sql`` with its standard input closed raised TypeError (found by a probe)."""
    db = str(tmp_path / "a.duckdb")
    assert crr("sql", "--db", db, "/* note */ -- and more\n CREATE REPLICATED TABLE t (a INT)").returncode == 0
    assert crr("sql", "--db", db, "SELECT count(*) FROM t").stdout.split() == ["0"]
    proc = subprocess.run(f"{' '.join(CRR)} sql --db {db} <&-", shell=True, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc


def test_a_blank_line_in_piped_statements_does_not_end_them(tmp_path: Path):
    """A blank line ended the shell: the statements after it were silently never run."""
    db = str(tmp_path / "a.duckdb")
    proc = crr("sql", "--db", db, stdin="CREATE REPLICATED TABLE r (k INT PRIMARY KEY, v VARCHAR)\n\n"
                                        "INSERT INTO r VALUES (1, 'a')\n\n-- the next spans lines\n"
                                        "INSERT INTO r VALUES (\n  3, 'c')\nSELECT k FROM r ORDER BY k\n")
    assert proc.returncode == 0 and proc.stdout.split() == ["1", "1", "1", "3"], proc  # two counts, two rows
    # a statement cut where nothing is open is run as it is, and crr says what it lacks
    refused(crr("sql", "--db", db, "INSERT INTO r"), FAILURE, "INSERT INTO r needs its rows")


def test_parameters_and_json_output(tmp_path: Path):
    db = str(tmp_path / "a.duckdb")
    assert crr("sql", "--db", db, "CREATE REPLICATED TABLE r (k INT, v VARCHAR, b BLOB, d DECIMAL(5,2))").returncode == 0
    proc = crr("sql", "--db", db, "--params", '[1, "NULL", null, "1.50"]', "INSERT INTO r VALUES (?, ?, ?, ?)")
    assert proc.returncode == 0, proc
    proc = crr("sql", "--db", db, "--params", '{"v": "tab\\there"}', "INSERT INTO r VALUES (2, $v, '\\x00A'::BLOB, NULL)")
    assert proc.returncode == 0, proc
    out = crr("sql", "--db", db, "--format", "json", "SELECT k, v, b, d FROM r ORDER BY k").stdout
    assert [json.loads(line) for line in out.splitlines()] == [[1, "NULL", None, "1.50"], [2, "tab\there", "0041", None]]
    # TSV: a tab, line break or backslash inside a value is escaped, so each row is one line of its fields
    assert crr("sql", "--db", db, "--params", '["a\\\\b\\nc\\r"]', "INSERT INTO r (k, v) VALUES (3, ?)").returncode == 0
    out = crr("sql", "--db", db, "SELECT k, v, d FROM r WHERE k > 1 ORDER BY k").stdout
    assert out.splitlines() == ["2\ttab\\there\tNULL", "3\ta\\\\b\\nc\\r\tNULL"]
    assert crr("sql", "--db", db, "SELECT b FROM r WHERE k = 2").stdout == "0041\n"  # as JSON has it, not b'\x00A'
    # NULLs and bytes inside LIST, STRUCT and tuple values too (they came out as Python's None and b'...')
    out = crr("sql", "--db", db, "SELECT [NULL, 'a'], {'k': b, 'n': NULL}, [1, NULL]::INTEGER[2] FROM r WHERE k = 2").stdout
    assert out == "[NULL, a]\t{'k': 0041, 'n': NULL}\t(1, NULL)\n"
    refused(crr("sql", "--db", db, "--params", "[1,", "SELECT ?"), USAGE, "--params", "not JSON")
    refused(crr("sql", "--db", db, "--params", "5", "SELECT ?"), USAGE, "--params", "JSON array")
    refused(crr("sql", "--db", db, "--params", "[1]", stdin="SELECT 1\n"), USAGE, "--params goes with a statement")


def test_ctrl_c_during_a_query_is_interrupted_not_a_traceback(tmp_path: Path):
    """Ctrl-C while DuckDB ran a long query ended in a RuntimeError traceback, and only once the
    query had run to its end."""
    proc = interruptible_shell(str(tmp_path / "a.duckdb"), "--create")
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("SELECT 41 + 1\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and proc.stdout.readline() == "42\n"  # the site is open: the next statement runs at once
        # hours of work: Ctrl-C must stop it (the shell waited for the statement to end, then said
        # "interrupted"; assert_interrupted gives it 60 s)
        proc.stdin.write("SELECT count(*) FROM range(300000000000000)\n")
        proc.stdin.flush()
        time.sleep(1.5)
        assert proc.poll() is None
    finally:
        assert_interrupted(proc)  # the RuntimeError's traceback failed this


def test_serve_does_not_turn_a_plain_duckdb_file_into_a_site(tmp_path: Path):
    plain = str(tmp_path / "plain.duckdb")
    con = duckdb.connect(plain)
    con.execute("CREATE TABLE mine (a INT)")
    con.close()
    secret = tmp_path / "secret"
    secret.write_text("ab" * 32)
    refused(crr("serve", "--db", plain, "--secret-file", str(secret), "--listen", "127.0.0.1:0"), USAGE,
            "not a crr site", "--create")
    con = duckdb.connect(plain)
    assert con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = '_crr'").fetchall() == [(0,)]
    con.close()


def test_a_query_whose_client_left_is_interrupted_at_the_serve(tmp_path: Path):
    """A crr sql client stopped (Ctrl-C) while its statement ran through crr serve left the statement
    running, holding the site, so the next statement (and every merge) waited for it, minutes here."""
    db, secret = str(tmp_path / "a.duckdb"), tmp_path / "secret"
    secret.write_text("s" * 40)
    assert crr("sql", "--db", db, "CREATE REPLICATED TABLE t (a INT)").returncode == 0
    serve = _start_serve(db, str(secret))
    try:
        client = subprocess.Popen([*CRR, "sql", "--db", db, "--secret-file", str(secret),
                                   "SELECT count(*) FROM range(30000000000000)"],  # far longer than a minute
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(3)  # connected, and running the statement
        assert client.poll() is None
        client.kill()
        client.wait()
        after = crr("sql", "--db", db, "--secret-file", str(secret), "SELECT 42", timeout=60)
        assert after.returncode == 0 and after.stdout == "42\n", after
    finally:
        stop_serve(serve)


def test_ctrl_c_says_interrupted_only_when_nothing_was_written():
    """Ctrl-C in crr sql (crr.sync.commands._interruptible): DuckDB drops an interrupt that comes
    between a statement's queries, and the shell then said "interrupted" although the statement went
    on and committed; a cut-short join could also lose the statement's outcome. Now it asks until the
    statement ends, and says interrupted only when nothing was written."""
    import _thread
    import threading

    import crr
    from crr.sync.commands import _interruptible
    site = crr.Site(site_id="a")
    site.execute("CREATE REPLICATED TABLE r (k BIGINT, v BIGINT)")
    site.execute("CREATE MATERIALIZED VIEW p AS SELECT v % 1000 AS g FROM r")
    n = 200_000
    started = time.perf_counter()
    site.execute(f"INSERT INTO r SELECT i, i FROM range({n}) t(i)")
    full = time.perf_counter() - started
    seen = set()
    for step, fraction in enumerate([0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 3.0], start=1):
        before = site.execute("SELECT count(*) FROM r")[0][0]
        timer = threading.Timer(full * fraction, _thread.interrupt_main)
        timer.start()
        try:
            _interruptible(site, f"INSERT INTO r SELECT {step * n} + i, i FROM range({n}) t(i)", None)
            outcome = "done"
        except KeyboardInterrupt:
            outcome = "interrupted"
        try:
            timer.join()
            time.sleep(0.05)
        except KeyboardInterrupt:
            pass  # a Ctrl-C after the statement ended: the shell would have ended there
        written = site.execute("SELECT count(*) FROM r")[0][0] - before
        assert written == (0 if outcome == "interrupted" else n), (fraction, outcome, written)
        seen.add(outcome)
    assert "interrupted" in seen
    assert site.execute("SELECT count(*) FROM p") == [(1000,)]


def test_ctrl_c_while_the_statement_thread_starts_is_never_said_of_a_statement_that_committed(monkeypatch):
    """Ctrl-C can come at any bytecode of the shell's main thread, also while ``_interruptible`` starts
    the statement's thread (the suite's machine, loaded, once took the timer's Ctrl-C there: "interrupted"
    was said, and the thread went on and committed). Ctrl-C just before the thread starts, or just after,
    must end with the statement not run, interrupted, or done, and said so."""
    import threading

    import crr
    from crr.sync.commands import _interruptible
    site = crr.Site(site_id="a")
    site.execute("CREATE REPLICATED TABLE r (k BIGINT, v BIGINT)")
    n = 300_000
    start = threading.Thread.start

    def ctrl_c_after_start(self):
        start(self)
        raise KeyboardInterrupt

    def ctrl_c_before_start(self):
        raise KeyboardInterrupt

    for step, patched in enumerate([ctrl_c_after_start, ctrl_c_before_start, ctrl_c_after_start], start=1):
        before = site.execute("SELECT count(*) FROM r")[0][0]
        monkeypatch.setattr(threading.Thread, "start", patched)
        try:
            _interruptible(site, f"INSERT INTO r SELECT {step * n} + i, i FROM range({n}) t(i)", None)
            outcome = "done"
        except KeyboardInterrupt:
            outcome = "interrupted"
        finally:
            monkeypatch.setattr(threading.Thread, "start", start)
        # (a statement the shell left running holds the site until it ends: this count waits for it)
        written = site.execute("SELECT count(*) FROM r")[0][0] - before
        assert written == (0 if outcome == "interrupted" else n), (patched.__name__, outcome, written)
    site.close()
