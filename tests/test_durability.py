"""Reopening file-backed sites, and crashes (SIGKILL) that must lose no committed write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import duckdb
import pyarrow as pa
import pytest

import crr
from tests.conftest import app, aug, sync


def test_reopen_restores_everything_and_keeps_working(tmp_path):
    path = tmp_path / "site.duckdb"
    with crr.Site(path) as s:
        site_id = s.site_id
        s.execute("CREATE REPLICATED TABLE r (a INT, b INT, PRIMARY KEY (a))")
        s.execute("CREATE MATERIALIZED VIEW v AS SELECT x.a, y.b FROM r x JOIN r y ON x.b = y.a")
        s.execute("INSERT INTO r VALUES (1, 2), (2, 3)")
        before = {rel: (app(s, rel), aug(s, rel)) for rel in ("r", "v")}, s.cursor
    with crr.Site(path) as s:
        assert s.site_id == site_id
        assert ({rel: (app(s, rel), aug(s, rel)) for rel in ("r", "v")}, s.cursor) == before
        s.execute("UPDATE r SET b = 1 WHERE a = 2")
        assert s.execute("SELECT * FROM v ORDER BY ALL") == [(1, 1), (2, 2)]
        fresh = crr.Site(site_id="other")
        fresh.execute("CREATE REPLICATED TABLE r (a INT, b INT, PRIMARY KEY (a))")
        sync(s, fresh)
        assert app(fresh, "r") == app(s, "r")
    with pytest.raises(crr.SiteError, match="belongs to site"):
        crr.Site(path, site_id="someone-else")

def test_a_file_is_one_open_sites_at_a_time(tmp_path):
    """A second Site on an open file would count its own sequence numbers: two writes with the same
    one, and a peer syncing by cursor would skip one of them. So it is refused until the first is
    closed (or gone), and the writes of the first reach a peer whole."""
    path = tmp_path / "one.duckdb"
    first = crr.Site(path, site_id="one")
    first.execute("CREATE REPLICATED TABLE r (a INT PRIMARY KEY)")
    first.execute("INSERT INTO r VALUES (1)")
    one = first.cursor
    with pytest.raises(crr.SiteError, match="already open in this process"):
        crr.Site(path)
    with pytest.raises(crr.SiteError, match="already open in this process"):
        crr.Site(tmp_path / "." / "one.duckdb")   # the same file by another spelling
    os.link(path, tmp_path / "hard.duckdb")   # ... by a hard link, or by its new name after a rename
    with pytest.raises(crr.SiteError, match="already open in this process"):
        crr.Site(tmp_path / "hard.duckdb")   # (a second DuckDB instance: one Site's writes were lost)
    os.unlink(tmp_path / "hard.duckdb")
    first.execute("INSERT INTO r VALUES (2)")
    two = first.cursor
    assert two == one + 1
    crr.Site(tmp_path / "other.duckdb").close()    # other files and in-memory sites are not held
    crr.Site(), crr.Site(), crr.Site(":memory:"), crr.Site(":memory:")
    named = crr.Site(":memory:shared")   # DuckDB shares a named in-memory database within the process
    with pytest.raises(crr.SiteError, match="already open in this process"):
        crr.Site(":memory:shared")
    named.close()
    first.close()
    with crr.Site(path) as again:
        again.execute("INSERT INTO r VALUES (3)")
        assert again.cursor > two
        peer = crr.Site(site_id="peer")
        peer.execute("CREATE REPLICATED TABLE r (a INT PRIMARY KEY)")
        peer.merge(again.changes(since=two))
        assert peer.execute("SELECT a FROM r") == [(3,)]
    dropped = crr.Site(path)
    dropped.execute("INSERT INTO r VALUES (4)")
    dropped.execute("CREATE MATERIALIZED VIEW v AS SELECT a FROM r")
    del dropped                                      # garbage-collected without close(): not held
    crr.Site(path).close()



CHILD = textwrap.dedent("""
    import sys, crr
    s = crr.Site(sys.argv[1], site_id="crash")
    if not s.relations():
        s.execute("CREATE REPLICATED TABLE r (a INT)")
        s.execute("CREATE MATERIALIZED VIEW v AS SELECT a FROM r WHERE a % 2 = 0")
    i = 0
    while True:
        s.execute("INSERT INTO r VALUES (?)", [i])
        print(i, s.cursor, flush=True)   # printed only after the commit returned
        i += 1
""")


def test_sigkill_during_writes_loses_no_committed_write(tmp_path):
    path = str(tmp_path / "crash.duckdb")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE, text=True)
    committed, cursor = -1, 0
    for line in proc.stdout:
        committed, cursor = map(int, line.split())
        if committed >= 30:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with crr.Site(path) as s:
        rows = [a for (a,) in s.execute("SELECT a FROM r ORDER BY a")]
        assert rows[: committed + 1] == list(range(committed + 1))
        assert rows == list(range(len(rows)))  # no half-written statement
        assert s.execute("SELECT a FROM v ORDER BY a") == [(a,) for a in rows if a % 2 == 0]
        assert s.execute("SELECT count(*) FROM _crr.\"r$t\"") == [(len(rows),)]
        # writes do not store the sequence number in _crr.meta: it is recovered from the AUG rows,
        # so cursors handed out before the crash stay valid and new changes come after them
        assert s.cursor >= cursor
        assert committed in s.changes(since=cursor - 1).relation("r").tuples.column("c0").to_pylist()
        s.execute("INSERT INTO r VALUES (-1)")
        assert s.cursor > cursor and s.changes(since=cursor).relation("r").tuples.num_rows >= 1


@pytest.mark.parametrize("damage, words", [
    ("DROP TABLE main.r", "the APP table of r is missing"),  # a view over r could not even be compiled
    ("UPDATE _crr.meta SET v = 'abc' WHERE k = 'version'", "damaged"),
    ("DELETE FROM _crr.meta WHERE k = 'seq'", "damaged"),
    ("UPDATE _crr.relations SET columns = '[' WHERE name = 'r'", "damaged"),
    ("UPDATE _crr.relations SET kind = 'weird' WHERE name = 'r'", "damaged"),
    ('DROP TABLE _crr."r$t"', "damaged"),
])
def test_a_file_changed_outside_crr_is_refused_at_open_with_a_site_error(tmp_path, damage: str, words: str):
    """Tables or catalog rows changed by plain DuckDB made Site() raise ValueError, KeyError,
    JSONDecodeError or DuckDB's own errors (a dropped APP table: crr's internal DESCRIBE of a view)."""
    import duckdb
    path = str(tmp_path / "t.duckdb")
    site = crr.Site(path, site_id="a")
    site.execute("CREATE REPLICATED TABLE r (k INT)")
    site.execute("CREATE MATERIALIZED VIEW v AS SELECT k FROM r WHERE k > 1")
    site.close()
    con = duckdb.connect(path)
    con.execute(damage)
    con.close()
    with pytest.raises(crr.SiteError, match=words) as e:
        crr.Site(path)
    assert "rebuild the site" in str(e.value)
    crr.Site(str(tmp_path / "other.duckdb")).close()  # nothing is left half-open


class _FailingCommit:
    """A connection whose COMMIT fails as DuckDB's does on a full disk: the transaction has ended
    (rolled back) when the error is raised."""

    def __init__(self, con) -> None:
        self.con = con

    def commit(self) -> None:
        self.con.rollback()
        raise duckdb.IOException('Could not write file "site.duckdb.wal": No space left on device')

    def __getattr__(self, name: str):
        return getattr(self.con, name)


def test_a_failed_commit_is_a_crr_error_and_gives_its_sequence_number_to_the_next_write(tmp_path):
    """A COMMIT that failed (a full disk) raised DuckDB's "cannot rollback - no transaction is active"
    from crr's rollback, which skipped forgetting the transaction's Arrow registrations (the next
    insert_many then failed: "_crr_bulk does not exist") and kept the sequence number it had taken. A
    cursor handed out after it skipped that number, which the next write took once the site reopened:
    a peer syncing by that cursor never got the write."""
    a = crr.Site(tmp_path / "a.duckdb", site_id="a")
    peer = crr.Site(site_id="peer")
    a.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
    a.execute("CREATE MATERIALIZED VIEW p AS SELECT v FROM r")
    peer.execute("CREATE REMOTE TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
    a.execute("INSERT INTO r VALUES (1, 'one')")
    cursor = sync(a, peer)
    rows = pa.table({"k": [2, 3], "v": ["two", "three"]})
    a._con = _FailingCommit(a._con)  # type: ignore[assignment]
    try:
        with pytest.raises(crr.CrrError, match="No space left on device"):
            a.insert_many("r", rows)  # the site's first insert_many: it registers the Arrow slot
    finally:
        a._con = a._con.con
    assert a.cursor == cursor and a.changes(since=cursor).cursor == cursor
    assert a.insert_many("r", rows) == 2
    assert a.cursor == cursor + 1
    sync(a, peer, since=cursor)
    assert app(peer, "r") == app(a, "r") == [(1, "one"), (2, "two"), (3, "three")]
    assert a.execute("SELECT * FROM p ORDER BY v") == [("one",), ("three",), ("two",)]


def test_a_damaged_block_is_a_site_error_saying_what_to_do(tmp_path):
    """Bytes overwritten inside the file: changes() and a batch UPDATE raised DuckDB's own
    "Corrupt database file" error (they ran outside the translation of DuckDB's errors), and where it
    was translated the message did not say what to do."""
    import shutil
    good = tmp_path / "good.duckdb"
    with crr.Site(good, site_id="g") as s:
        s.execute("CREATE REPLICATED TABLE r (k INTEGER PRIMARY KEY, v VARCHAR)")
        s.insert_many("r", [(i, "x" * 50 + str(i)) for i in range(50000)])
    damaged = 0
    for offset in range(262144, os.path.getsize(good), 262144):
        path = tmp_path / f"c{offset}.duckdb"
        shutil.copy(good, path)
        with open(path, "r+b") as f:
            f.seek(offset + 5000)
            f.write(b"\xff" * 64)
        try:
            s = crr.Site(path)
        except crr.SiteError:
            continue
        try:
            for step in (lambda: s.changes(), lambda: s.execute("UPDATE r SET v = 'b' WHERE k % 7 = 0")):
                try:
                    step()
                except crr.SiteError as e:
                    assert "restore it from a backup" in str(e)
                    damaged += 1
        finally:
            s.close()
    assert damaged  # some block of the table's rows was read


def test_two_threads_opening_one_file_at_once_get_one_site(tmp_path):
    """The check that a file is not open and the claim of it were apart, the open between them: two
    threads opening one file at once both got a Site, each counting its own sequence numbers (a peer
    syncing by cursor then skipped a write). Now one of them is refused."""
    import threading
    path = tmp_path / "race.duckdb"
    crr.Site(path, site_id="race").close()
    for _ in range(3):
        start, out = threading.Barrier(2), []

        def open_it():
            start.wait()
            try:
                out.append(crr.Site(path))
            except crr.SiteError as e:
                out.append(e)
        threads = [threading.Thread(target=open_it) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sites = [x for x in out if isinstance(x, crr.Site)]
        assert len(sites) == 1 and "already open in this process" in str(next(x for x in out if x not in sites))
        sites[0].close()


def _file_tables(path) -> dict:
    con = duckdb.connect(str(path))
    try:
        names = con.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall()
        return {(s, t): (con.execute(f'DESCRIBE "{s}"."{t}"').fetchall(),
                         con.execute(f'SELECT * FROM "{s}"."{t}" ORDER BY ALL').fetchall()) for s, t in names}
    finally:
        con.close()


@pytest.mark.parametrize("version", ["99", "too old"])
def test_a_file_of_a_layout_not_this_crrs_or_of_another_site_is_refused_unchanged(tmp_path, version):
    """The catalog's DDL ran (and committed) before the version was read: a newer crr's file, whose
    layout dropped a column, got it back although the open was refused (so did a file too old to
    upgrade, which lacked the column)."""
    from crr.upgrade import OLDEST_UPGRADABLE
    stored = version if version != "too old" else str(OLDEST_UPGRADABLE - 1)
    path = tmp_path / "other.duckdb"
    with crr.Site(path, site_id="a") as s:
        s.execute("CREATE REPLICATED TABLE r (k INT)")
        s.execute("INSERT INTO r VALUES (1)")
    con = duckdb.connect(str(path))
    con.execute("UPDATE _crr.meta SET v = ? WHERE k = 'version'", [stored])
    con.execute("ALTER TABLE _crr.relations DROP COLUMN orphans")  # a layout without it
    con.close()
    before = _file_tables(path)
    said = (f"newer crr .storage version {stored}.; upgrade crr" if version == "99"
            else f"storage version {stored}, older than this crr's")
    for site_id, words in ((None, said), ("a", said), ("b", "belongs to site 'a', not 'b'")):
        with pytest.raises(crr.SiteError, match=words):
            crr.Site(path, site_id=site_id)
        assert _file_tables(path) == before


def test_files_duckdb_will_not_open_get_errors_saying_what_to_do(tmp_path):
    """DuckDB's own text alone said nothing of what to do; and a SQLite file made DuckDB try to
    download its SQLite extension (a file without DuckDB's mark is refused before DuckDB reads it)."""
    import sqlite3
    sqlite3.connect(tmp_path / "app.sqlite").execute("CREATE TABLE t (a INT)").connection.commit()
    (tmp_path / "notes.txt").write_text("not a database\n" * 1000)
    for path, words in ((tmp_path / "no" / "such" / "folder.duckdb", "its folder must exist"),
                        (tmp_path / "notes.txt", "not a DuckDB database; give a crr site file"),
                        (tmp_path / "app.sqlite", "not a DuckDB database; give a crr site file")):
        with pytest.raises(crr.SiteError, match=words):
            crr.Site(path)
    assert not (tmp_path / "no").exists()


def test_a_file_cut_short_is_said_to_be_damaged(tmp_path):
    """A read past the end of a truncated file was a bare 'DuckDB error: IO Error: Could not read
    enough bytes'; it is a damaged file, with what to do about it."""
    path = tmp_path / "whole.duckdb"
    with crr.Site(path, site_id="w") as s:
        s.execute("CREATE REPLICATED TABLE r (k INT, v VARCHAR)")
        s.execute("CREATE MATERIALIZED VIEW w AS SELECT v FROM r WHERE k > 3")
        s.insert_many("r", pa.table({"k": list(range(20000)), "v": ["x" * 30 + str(i) for i in range(20000)]}))
    cut = tmp_path / "cut.duckdb"
    cut.write_bytes(path.read_bytes()[:-4096])
    with crr.Site(cut) as s:  # it opens: its last block holds rows, read by changes()
        with pytest.raises(crr.SiteError, match="damaged.*restore it from a backup"):
            s.changes()
