"""``crr serve`` (of a DuckDB site, or with ``--spark`` of a Spark site), ``crr sql`` and ``crr status``.

Arguments are checked before anything is opened: a bad ``--listen``, ``--peer``, ``--allow``,
``--pull-interval`` or ``--log-level`` is refused by the parser; a missing or unreadable
``--secret-file``, a ``--db`` in a folder that does not exist, a ``--db`` that is not a DuckDB database
(or, for ``crr sql`` and ``crr status``, no crr site), a ``--key-file`` or ``--trust-file`` that is a
folder or lies in a folder that does not exist, and a ``<db>.sock`` that is not a socket are refused with
:class:`crr.cli.UsageError` before any file is created.

Output to a reader that went away (``crr sql ... | head``) is not an error: the command ends with 0.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import math
import os
import re
import signal
import socket
import stat
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from crr.cli import UsageError, describe_os_error, one_line
from crr.errors import CrrError, SiteError
from crr.sql.parse import fold_identifier, holds_no_statement
from crr.sql.statements import creates_relation

if TYPE_CHECKING:
    from crr.site import Site

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
NEW_SECRET = "python3 -c 'import secrets; print(secrets.token_hex(32))' > FILE"
# the longest Unix socket path the kernel accepts (sun_path is 108 bytes on Linux, 104 on macOS/BSD)
MAX_SOCKET_PATH = 107 if sys.platform.startswith("linux") else 103


# -- argument types (argparse turns ArgumentTypeError into "crr serve: error: argument --x: ...") --------
def _hostport(text: str, lowest: int) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # [::1]:7700
        host = host[1:-1]
    if not sep or not host or not port:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (e.g. 127.0.0.1:7700), got {text!r}")
    if not port.isdigit() or not lowest <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"the port must be a number from {lowest} to 65535, got {port!r} in {text!r}")
    return host, int(port)


def listen_address(text: str) -> tuple[str, int]:
    """``--listen HOST:PORT``; port 0 picks any free port."""
    return _hostport(text, 0)


def peer_address(text: str) -> tuple[str, int]:
    """``--peer HOST:PORT`` of a peer's listening address (port 1-65535)."""
    return _hostport(text, 1)


def allow_rule(text: str) -> tuple[str, set[str]]:
    """One ``--allow SITE=REL[,REL...]``: a peer site id and the relations it may write here."""
    site, sep, rels = text.partition("=")
    names = [fold_identifier(r.strip()) for r in rels.split(",")]  # as DuckDB and the catalog fold names
    if not sep or not site.strip() or not any(names):
        raise argparse.ArgumentTypeError(
            f"expected SITE=REL[,REL...] (a peer's site id, then the relations it may write here, "
            f"e.g. s1=orders,items), got {text!r}")
    if "" in names[:-1]:
        raise argparse.ArgumentTypeError(f"empty relation name in {text!r}; expected SITE=REL[,REL...]")
    return site.strip(), {n for n in names if n}


def pin_rule(text: str) -> tuple[str, str]:
    """One ``--pin SITE=HEXKEY``: a peer site id and the public key (64 hex digits) it must prove."""
    site, sep, key = text.partition("=")
    key = key.strip().lower()
    if not sep or not site.strip() or len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise argparse.ArgumentTypeError(
            f"expected SITE=HEXKEY (a peer's site id, then its 64-hex-digit public key as `crr status` shows it), "
            f"got {text!r}")
    return site.strip(), key


def positive_seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def spark_conf(text: str) -> tuple[str, str]:
    """``--spark-conf KEY=VALUE``."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (a Spark setting, e.g. spark.executor.memory=4g), "
                                         f"not {text!r}")
    return key.strip(), value


def spark_site_folder(path: str) -> bool:
    """Whether ``path`` is the folder of a Spark site (:mod:`crr.spark.store`'s layout: its
    ``CURRENT`` manifest pointer and ``manifests`` folder), read without starting Spark."""
    return os.path.isfile(os.path.join(path, "CURRENT")) and os.path.isdir(os.path.join(path, "manifests"))


def site_id_arg(text: str) -> str:
    """A site id: not empty, no surrounding or inner whitespace."""
    if not text.strip() or text.strip() != text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"a site id must be a non-empty word without spaces, got {text!r}")
    return text


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register the sync commands."""
    p = sub.add_parser("serve", help="run a site as a long-lived process that syncs with its peers")
    p.add_argument("--db", required=True, help="the site's DuckDB file, or with --spark its folder (created if "
                   "missing; the folder it lies in must exist)")
    p.add_argument("--listen", type=listen_address, default=("127.0.0.1", 0), metavar="HOST:PORT",
                   help="address to accept peers on (default 127.0.0.1:0: loopback, any free port)")
    p.add_argument("--peer", type=peer_address, action="append", default=[], metavar="HOST:PORT",
                   help="a static peer's listening address (repeatable)")
    p.add_argument("--secret-file", metavar="FILE", help="file with the deployment secret, at least 16 bytes "
                   "(else $CRR_SECRET)")
    p.add_argument("--site-id", type=site_id_arg, help="site id when the file is new (default: generated)")
    p.add_argument("--allow", type=allow_rule, action="append", metavar="SITE=REL[,REL...]",
                   help="only these peers may write these relations here (repeatable; default: every peer, "
                        "every relation)")
    p.add_argument("--discover", action="store_true", help="find peers on the LAN with zeroconf (_crr._tcp.local.)")
    p.add_argument("--pull-interval", type=positive_seconds, default=2.0, metavar="SECONDS",
                   help="seconds between periodic pulls (default 2)")
    p.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO", help="default INFO")
    p.add_argument("--key-file", metavar="FILE", help="this site's key pair (default: <db>.key, created if missing)")
    p.add_argument("--trust-file", metavar="FILE",
                   help="where peers' keys are pinned on first contact (default: <db>.peers.json)")
    p.add_argument("--pin", type=pin_rule, action="append", default=[], metavar="SITE=HEXKEY",
                   help="require this key of a peer site (repeatable)")
    p.add_argument("--no-trust-on-first-use", action="store_true",
                   help="refuse every peer whose key is not pinned yet (with --pin or in the trust file)")
    p.add_argument("--spark", metavar="MASTER",
                   help="serve a Spark site: --db is then its folder (created if missing), and MASTER the Spark "
                        "master URL (local[2], spark://host:7077, yarn, ...)")
    p.add_argument("--spark-conf", type=spark_conf, action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting of the served Spark site's session, e.g. spark.executor.memory=4g "
                        "(repeatable; with --spark)")
    p = sub.add_parser("sql", help="run one statement against a site (through crr serve if it is running)")
    p.add_argument("--db", required=True, help="the site's DuckDB file; CREATE REPLICATED/REMOTE TABLE, CREATE "
                   "REMOTE SOURCE and CREATE MATERIALIZED VIEW create it if missing")
    p.add_argument("--create", action="store_true", help="create the site file if it does not exist")
    p.add_argument("--secret-file", metavar="FILE",
                   help="deployment secret (else $CRR_SECRET); needed only while crr serve holds the site")
    p.add_argument("--params", type=_json_params, metavar="JSON",
                   help="the statement's parameters: a JSON array for ? or $1, an object for $name")
    p.add_argument("--format", choices=("tsv", "json"), default="tsv",
                   help="rows as tab-separated text (NULL for a NULL; a backslash, tab or line break inside a value "
                        "escaped as \\\\, \\t, \\n, \\r; the default), or as JSON Lines (one "
                        "array per row: null, numbers, strings; bytes as hex, other values as their text)")
    p.add_argument("statement", nargs="?", help="the statement (omit for a shell reading one statement per line)")
    p = sub.add_parser("status", help="relations, views, peers, cursors and whether each stream is behind")
    p.add_argument("--db", required=True, help="the site's DuckDB file")
    p.add_argument("--create", action="store_true", help="create the site file if it does not exist")
    p.add_argument("--secret-file", metavar="FILE",
                   help="deployment secret (else $CRR_SECRET); needed only while crr serve holds the site")


class _OutputClosed(Exception):
    """The reader of standard output went away (``crr sql ... | head``); not an error of ours."""


def _out(text: str) -> None:
    """Print a line to standard output; a closed pipe raises :class:`_OutputClosed`."""
    try:
        print(text)
    except BrokenPipeError:
        raise _OutputClosed from None


def quiet_libraries() -> None:
    """Keep library chatter out of the user's terminal and the serve's log: sqlglot logs a warning for
    every statement it parses as a generic command (``EXPLAIN ...``) and INFO lines while transpiling."""
    logging.getLogger("sqlglot").setLevel(logging.ERROR)


def run(args: argparse.Namespace) -> int:
    """Run one of the sync commands."""
    quiet_libraries()
    if args.command == "serve":
        return _serve(args)
    try:
        code = _sql(args) if args.command == "sql" else _status(args)
        try:
            sys.stdout.flush()  # here, not at exit, so that a closed pipe is seen
        except BrokenPipeError:
            raise _OutputClosed from None
        return code
    except _OutputClosed:
        # nobody reads the rest: send it (and the interpreter's last flush) to /dev/null, and end normally
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0


# -- checks shared by the commands --------------------------------------------------------------------
def load_secret(path: str | None) -> bytes:
    """The deployment secret from ``--secret-file`` (checked: exists, readable, long enough) or $CRR_SECRET."""
    from crr.sync.crypto import MIN_SECRET_BYTES, load_secret as from_file_or_env
    if path is None:
        return from_file_or_env(None)
    if not os.path.exists(path):
        raise UsageError(f"--secret-file {path} does not exist; give the file holding the deployment secret "
                         f"(make one with: {NEW_SECRET})")
    if os.path.isdir(path):
        raise UsageError(f"--secret-file {path} is a folder; give the file holding the deployment secret")
    try:
        with open(path, "rb") as f:
            size = len(f.read().strip())
    except OSError as e:
        raise UsageError(f"cannot read --secret-file {path}: {e.strerror}") from None
    if size < MIN_SECRET_BYTES:
        raise UsageError(f"--secret-file {path} holds {size} bytes{' (it is empty)' if not size else ''}; the "
                         f"deployment secret needs at least {MIN_SECRET_BYTES}, the same on every peer (make one with: {NEW_SECRET})")
    return from_file_or_env(path)


def check_db_path(db: str) -> None:
    """Refuse a ``--db`` that is a folder or lies in a folder that does not exist."""
    if db == ":memory:":
        return
    if not db:
        raise UsageError("--db needs the path of the site's DuckDB file")
    if os.path.isdir(db):
        if spark_site_folder(db):
            raise UsageError(f"--db {db} is a Spark site's folder: serve it with crr serve --db {db} --spark MASTER, "
                             "then crr sql and crr status reach it through that serve (or open it in Python with "
                             "crr.spark.SparkSite)")
        raise UsageError(f"--db {db} is a folder; give the site's DuckDB file, e.g. {os.path.join(db, 'site.duckdb')}")
    if os.path.exists(db) and not os.path.isfile(db):  # a FIFO or a device: DuckDB would block or fail on it
        raise UsageError(f"--db {db} is not a regular file; give the site's DuckDB file")
    folder = os.path.dirname(os.path.abspath(db))
    if not os.path.isdir(folder):
        raise UsageError(f"the folder {os.path.dirname(db) or folder} of --db {db} does not exist; create it first")


def check_file_option(path: str, option: str, *, default: bool = False, written: bool = True) -> None:
    """Refuse a file ``option`` (``--key-file``, ``--trust-file``) that crr could not use: a folder or
    other non-file, a file in a folder that does not exist, an unreadable file, or (``written``: crr will
    create or rewrite it) a folder this user cannot write in. ``default``: the path was not given but
    derived from ``--db``."""
    what = f"{path} (the default {option})" if default else f"{option} {path}"
    if os.path.isdir(path):
        raise UsageError(f"{what} is a folder; give a file path, e.g. {option} {os.path.join(path, 'FILE')}")
    exists = os.path.exists(path)
    if exists and not os.path.isfile(path):
        raise UsageError(f"{what} is not a regular file; give a file path with {option} FILE")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"the folder {os.path.dirname(path) or folder} of {what} does not exist; create it first")
    if exists and not os.access(path, os.R_OK):
        raise UsageError(f"cannot read {what}: permission denied; fix its owner or mode, or give another {option}")
    if (written or not exists) and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {what}: this user may not create files in {folder}; make the folder "
                         f"writable, or give another {option}")


def check_socket_path(db: str, fix: str = "move the site file to a shorter path") -> None:
    """Refuse a ``--db`` whose control socket path (``<db>.sock``) is too long for a Unix socket, or is taken
    by a folder or a file that is not a socket (a stale socket is fine: crr serve replaces it)."""
    from crr.sync.control import socket_path
    path = socket_path(db)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise UsageError(f"the control socket {path} would be longer than the {MAX_SOCKET_PATH} bytes a Unix "
                         f"socket path may have; {fix}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a folder, where crr serve puts its control socket; remove or rename it")
    if os.path.lexists(path) and not stat.S_ISSOCK(os.lstat(path).st_mode):
        raise UsageError(f"{path} exists and is not a socket, where crr serve puts its control socket; remove or "
                         "rename it")


def site_state(db: str) -> str:
    """``"missing"``, ``"site"`` (a crr site file) or ``"plain"`` (a DuckDB database that is no crr site)."""
    import duckdb

    from crr.catalog import SCHEMA
    if db == ":memory:":
        return "site"
    if not os.path.exists(db):
        return "missing"
    try:
        con = duckdb.connect(db, read_only=True)
    except duckdb.Error as e:
        if "not a valid duckdb database" in str(e).lower():  # a wrong file given as --db: a usage error
            empty = " (the file is empty)" if os.path.getsize(db) == 0 else ""
            raise UsageError(f"--db {db} is not a valid DuckDB database file{empty}; check the path (crr does "
                             "not overwrite a file that is no database)") from None
        raise _explained(db, SiteError(f"cannot open site database {db}: {str(e).strip()}")) from None
    try:
        found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = 'meta'",
                            [SCHEMA]).fetchone()[0]
    finally:
        con.close()
    return "site" if found else "plain"


def require_site(db: str, create: bool, how: str = "give --create") -> str:
    """Refuse to open ``db`` unless it is a crr site or ``create`` says to make one; returns its
    :func:`site_state`."""
    check_db_path(db)
    state = site_state(db)  # refuses a file that is no DuckDB database, even with ``create``
    if create:
        return state
    if state == "missing":
        raise UsageError(f"no site file {db}; check the path, or {how} to make a new site there")
    if state == "plain":
        raise UsageError(f"{db} is a DuckDB database but not a crr site; {how} to turn it into one")
    return state


def _catalog_table_names(con: Any) -> set[str]:
    """The tables of schema ``_crr`` on the DuckDB connection ``con``."""
    from crr.catalog import SCHEMA
    return {name for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = ?",
                                            [SCHEMA]).fetchall()}


def catalog_tables(db: str) -> set[str] | None:
    """The tables of schema ``_crr`` in the DuckDB file ``db`` (read only), None when it has no such
    schema: what a plain DuckDB file holds there before crr opens it as a site."""
    import duckdb

    from crr.catalog import SCHEMA
    con = duckdb.connect(db, read_only=True)
    try:
        if not con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = ?", [SCHEMA]).fetchone()[0]:
            return None
        return _catalog_table_names(con)
    finally:
        con.close()


def drop_catalog(db: str, before: set[str] | None) -> None:
    """Take out of the DuckDB file ``db`` the crr catalog that opening it as a site added: the tables of
    schema ``_crr`` not in ``before`` (:func:`catalog_tables`), and the schema if it had none."""
    import duckdb

    from crr.catalog import SCHEMA
    from crr.types import quote_ident
    con = duckdb.connect(db)
    try:
        if before is None:
            con.execute(f"DROP SCHEMA IF EXISTS {quote_ident(SCHEMA)} CASCADE")
            return
        for name in sorted(_catalog_table_names(con) - before):
            con.execute(f"DROP TABLE {quote_ident(SCHEMA)}.{quote_ident(name)}")
    finally:
        con.close()


def _explained(db: str, e: SiteError) -> SiteError:
    """``e``, or a clearer error if it is DuckDB's refusal of a file another process holds."""
    from crr.sync.control import server_running
    if "lock" not in str(e).lower():
        return e
    held = "crr serve is running for it" if server_running(db) else "another process holds it open"
    return SiteError(f"cannot open {db}: {held}; stop that process, or reach a running crr serve with "
                     "crr sql / crr status")


def open_site(db: str, site_id: str | None = None) -> "Site":
    """Open ``db`` as a Site; a lock held by another process is explained."""
    from crr.site import Site
    try:
        return Site(db, site_id=site_id)
    except SiteError as e:
        raise _explained(db, e) from None


# -- crr serve ----------------------------------------------------------------------------------------
def _bind_problem(host: str, port: int, e: OSError) -> str:
    """What a failure to listen on ``host:port`` means, and what to do."""
    where = f"--listen {host}:{port}"
    if e.errno == errno.EADDRINUSE:
        return (f"cannot listen on {where}: the address is already in use (another crr serve?); "
                "pick another port, or port 0 for any free one")
    if e.errno == errno.EADDRNOTAVAIL:
        return (f"cannot listen on {where}: {host} is not an address of this machine; use 127.0.0.1, 0.0.0.0 "
                "or one of its own addresses")
    if e.errno == errno.EACCES:
        return f"cannot listen on {where}: permission denied (ports below 1024 need privileges); pick a higher port"
    return f"cannot listen on {where}: {e.strerror or e}"


def check_listen(host: str, port: int) -> None:
    """Bind (and release) every address ``host:port`` resolves to, as the server will, to refuse early."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):  # socket.gaierror, or a name IDNA cannot encode
        raise CrrError(f"cannot listen on --listen {host}:{port}: unknown host {host!r}; give an IP address or "
                       "a name of this machine") from None
    for family, kind, proto, _, addr in infos:
        s = socket.socket(family, kind, proto)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(addr)
        except OSError as e:
            raise CrrError(_bind_problem(host, port, e)) from None
        finally:
            s.close()


def _serve(args: argparse.Namespace) -> int:
    from crr.sync.control import socket_path
    from crr.sync.service import SyncService
    secret = load_secret(args.secret_file)
    if args.spark_conf and not args.spark:
        raise UsageError("--spark-conf sets the session of a served Spark site; give --spark MASTER too")
    if args.spark:
        check_spark_folder(args.db)
    else:
        check_db_path(args.db)
    check_socket_path(args.db)
    if args.db != ":memory:" or args.key_file:
        check_file_option(args.key_file or os.path.abspath(args.db) + ".key", "--key-file",
                          default=not args.key_file, written=False)
    if args.db != ":memory:" or args.trust_file:  # pins are written on first contact unless that is off
        check_file_option(args.trust_file or os.path.abspath(args.db) + ".peers.json", "--trust-file",
                          default=not args.trust_file, written=not args.no_trust_on_first_use)
    # a file that is no DuckDB database, or one another process holds, is refused here
    if not args.spark and site_state(args.db) == "plain":
        raise UsageError(f"{args.db} is a DuckDB database but not a crr site; crr serve does not turn it into "
                         f"one: make it a site with crr sql --db {args.db} --create first, or give another --db")
    check_listen(*args.listen)
    allow: dict[str, set[str]] | None = None
    for site_id, rels in args.allow or []:
        allow = allow or {}
        allow.setdefault(site_id, set()).update(rels)
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spark = start_spark(args.spark, args.spark_conf) if args.spark else None
    try:
        site = open_spark_site(spark, args.db, args.site_id) if spark is not None else open_site(args.db, args.site_id)
    except BaseException:
        if spark is not None:
            spark.stop()
        raise
    service = discovery = None
    try:
        try:
            service = SyncService(site, secret, listen=args.listen, peers=args.peer, allow=allow,
                                  control_path=socket_path(args.db), pull_interval=args.pull_interval,
                                  key_file=args.key_file, trust_file=args.trust_file, trusted_keys=dict(args.pin),
                                  trust_new_peers=not args.no_trust_on_first_use).start()
        except OSError as e:
            if "attempting to bind" in str(e):  # the address was taken between the check and the start
                raise CrrError(_bind_problem(*args.listen, e)) from None
            raise CrrError(f"cannot start serving {args.db}: {describe_os_error(e)}") from None
        if args.discover:
            from crr.sync.discovery import Discovery
            try:
                discovery = Discovery(site.site_id, service.address, service.add_peer).start()
            except OSError as e:
                raise CrrError(f"cannot start LAN discovery (--discover): {e.strerror or e}; "
                               "give peers with --peer instead") from None
        host, port = service.address
        print(f"serving site {site.site_id} on {host}:{port}", flush=True)
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        done.wait()
    finally:
        if discovery:
            discovery.stop()
        if service:
            service.stop()
        site.close()
        if spark is not None:
            spark.stop()
    return 0


def check_spark_folder(db: str) -> None:
    """Refuse a ``--db`` that cannot be a Spark site's folder: a file, or a path in a folder that does
    not exist (the folder itself is created)."""
    if not db or db == ":memory:":
        raise UsageError("--db with --spark needs the path of the Spark site's folder (created if missing)")
    if os.path.exists(db) and not os.path.isdir(db):
        raise UsageError(f"--db {db} is a file; with --spark give the Spark site's folder (a DuckDB site is "
                         "served without --spark)")
    parent = os.path.dirname(os.path.abspath(db))
    if not os.path.isdir(parent):
        raise UsageError(f"the folder {os.path.dirname(db) or parent} of --db {db} does not exist; create it first")


def start_spark(master: str, conf: list[tuple[str, str]]) -> Any:
    """A SparkSession on ``master`` with ``conf`` (``--spark``, ``--spark-conf``); one that cannot start
    (no pyspark, no Java, a master that does not answer) is a CrrError saying what to do."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise CrrError("--spark needs pyspark: pip install 'crr[spark]' (and a Java 17 runtime)") from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("crr serve").config("spark.ui.showConsoleProgress", "false")
    for key, value in conf:
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # noqa: BLE001 - Java missing, a master URL Spark cannot use, ...
        raise CrrError(f"cannot start Spark on master {master}: {one_line(str(e))}; check --spark (and that "
                       "java is on the PATH)") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def open_spark_site(spark: Any, folder: str, site_id: str | None) -> Any:
    """Open (or create) the Spark site in ``folder``."""
    from crr.spark import SparkSite
    return SparkSite(spark, folder, site_id=site_id)


# -- crr sql and crr status ---------------------------------------------------------------------------
def _request(db: str, secret: bytes, message: dict[str, Any]) -> dict[str, Any]:
    """One control request to the crr serve holding ``db``; a refused secret is explained."""
    from crr.sync.control import request
    from crr.sync.crypto import AuthError
    try:
        return request(db, secret, message)
    except AuthError as e:
        raise AuthError(f"the crr serve holding {db} refused the control connection ({e}); give the "
                        "--secret-file (or CRR_SECRET) that it runs with") from None
    except (ConnectionError, FileNotFoundError) as e:
        raise CrrError(f"lost the connection to the crr serve holding {db} ({e.strerror or e}); "
                       "is it still running?") from None


def _json_params(text: str) -> list | dict:
    """``--params``: a JSON array or object."""
    try:
        params = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}); give an array such as '[1, \"x\"]'") from None
    if not isinstance(params, (list, dict)):
        raise argparse.ArgumentTypeError("give a JSON array (for ? or $1) or an object (for $name)")
    return params


def _json_value(v: Any) -> Any:
    """A result value as JSON: numbers, strings, null, lists and objects as they are, a NaN or infinity and
    any other value (dates, decimals) as its text, bytes as hex (the same locally and through a serve,
    which sends such values as their text)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    return str(v)


_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _tsv_value(v: Any) -> str:
    r"""A value as one TSV field: NULL for a NULL; a backslash, tab, newline or carriage return inside
    it escaped as PostgreSQL's text format does (``\\``, ``\t``, ``\n``, ``\r``), so a row stays one
    line of as many fields as it has columns; bytes as hex, as ``--format json`` has them (not Python's
    ``b'...'``)."""
    return _text(v).translate(_TSV_ESCAPES)


def _text(v: Any) -> str:
    """A value's text for a TSV field: NULL, bytes as hex, and LIST, ARRAY, STRUCT and MAP values as
    DuckDB writes them (``[1, NULL]``, ``(1, a)``, ``{'k': 00ff}``), at any depth, not as Python's
    reprs (``None``, ``b'...'``)."""
    if v is None:
        return "NULL"
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if isinstance(v, list):
        return "[" + ", ".join(_text(x) for x in v) + "]"
    if isinstance(v, tuple):
        return "(" + ", ".join(_text(x) for x in v) + ")"
    if isinstance(v, dict):
        return "{" + ", ".join(f"'{_text(k)}': {_text(x)}" for k, x in v.items()) + "}"
    return str(v)


def _print_rows(rows: list | None, fmt: str = "tsv") -> None:
    for row in rows or []:
        if fmt == "json":
            _out(json.dumps([_json_value(v) for v in row], ensure_ascii=False))
        else:
            _out("\t".join(_tsv_value(v) for v in row))


class _LocalSite:
    """Opens the site file at first use; a missing file is created only by --create or crr DDL."""

    def __init__(self, db: str, create: bool) -> None:
        self.db, self.create = db, create
        self.site: Site | None = None

    def execute(self, sql: str, params: list | dict | None = None) -> list:
        """Run one statement, opening (or, for crr DDL, creating) the site first."""
        created = adopted = False
        before: set[str] | None = None
        if self.site is None:
            ddl = creates_relation(sql)
            state = require_site(self.db, self.create or ddl,
                                 how="give --create (or start with CREATE REPLICATED TABLE ...)")
            created = self.db != ":memory:" and state == "missing"
            adopted = state == "plain"  # crr DDL turns a plain DuckDB file into a site
            before = catalog_tables(self.db) if adopted and not self.create else None
            self.site = open_site(self.db)
        try:
            return _interruptible(self.site, sql, params)
        except BaseException as e:
            if created and not self.create:  # a failed CREATE leaves no new site file behind
                self.close()
                for path in (self.db, self.db + ".wal"):
                    if os.path.exists(path):
                        os.unlink(path)
            elif adopted and not self.create:  # ... and a plain DuckDB file plain
                self.close()
                drop_catalog(self.db, before)
            if isinstance(e, RuntimeError) and "interrupted" in str(e).lower():
                # Ctrl-C during a query: DuckDB stops it and raises RuntimeError('Query interrupted')
                raise KeyboardInterrupt from None
            raise

    def close(self) -> None:
        """Close the site if it was opened."""
        if self.site is not None:
            self.site.close()
            self.site = None


def _interruptible(site: Site, sql: str, params: list | dict | None) -> list:
    """``site.execute(sql, params)`` in a thread of its own, so that Ctrl-C reaches this (the main)
    thread while DuckDB runs the statement, and stops it (``Site.interrupt``): Python takes a signal
    only between bytecodes, which a thread waiting inside DuckDB does not run until the statement ends.

    Ctrl-C may come at any bytecode, also while the thread is starting (``Thread.start`` waits for it):
    the thread runs the statement only if it claims it first (``phase``), so a Ctrl-C that comes
    before either ends with the statement never run, and one after it with the statement interrupted
    or done, never with "interrupted" said of a statement that went on and committed."""
    outcome: dict[str, Any] = {}
    done = threading.Event()  # not Thread.is_alive: a join that Ctrl-C cut short may report the thread ended
    claim = threading.Lock()
    phase = ["pending"]  # -> "running" (the thread claimed the statement) or "cancelled" (Ctrl-C did first)

    def run() -> None:
        try:
            with claim:
                if phase[0] == "cancelled":
                    return
                phase[0] = "running"
            outcome["rows"] = site.execute(sql, params)
        except BaseException as e:  # handed to the main thread
            outcome["error"] = e
        finally:
            done.set()
    try:
        threading.Thread(target=run, name="crr-sql-statement", daemon=True).start()
        while not done.wait(0.1):
            pass
    except KeyboardInterrupt:
        with claim:
            if phase[0] == "pending":  # the thread never ran the statement (nor will it)
                phase[0] = "cancelled"
                raise
        # DuckDB drops an interrupt that comes while none of the statement's queries runs (between
        # them): ask again until the statement ends, interrupted (nothing changed) or done
        while not done.is_set():
            site.interrupt()
            done.wait(0.1)
        if "error" in outcome and "was interrupted" in str(outcome["error"]):
            raise KeyboardInterrupt from None
        # it had ended (its error, or its result, which is committed and shown: not "interrupted")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["rows"]


def shell_statements(lines: Iterable[str]) -> Iterator[str]:
    """The statements of ``crr sql``'s input: one per line, a line that ends inside parentheses, a quoted
    string or identifier, or a ``/*`` comment continuing on the next; blank and comment-only lines are
    skipped (an empty line once ended the input, silently dropping what followed), and what is left
    open at the end of the input is run as it is (crr then says what is wrong with it). Each line is
    read once (:class:`_OpenSql`): a statement of many lines took time quadratic in their number."""
    pending: list[str] = []
    scanner = _OpenSql()
    for line in lines:
        pending.append(line)
        if not scanner.feed(line):
            statement, pending, scanner = "".join(pending).strip(), [], _OpenSql()
            if not holds_no_statement(statement):  # not only spaces, comments and semicolons
                yield statement
    rest = "".join(pending).strip()
    if rest:
        yield rest


_DOLLAR_QUOTE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _word_at(text: str, i: int) -> bool:
    """Whether ``text[i]`` is a character of a name (``E'...'`` and ``$tag$`` start only after none)."""
    return i >= 0 and (text[i].isalnum() or text[i] == "_")


class _OpenSql:
    """Whether SQL text, fed a piece at a time, ends inside parentheses, a quoted string (``'...'``,
    ``E'...'`` with backslash escapes, ``$$...$$`` or ``$tag$...$tag$``), a quoted identifier or a
    ``/*`` comment (DuckDB nests them): the lexical rules of DuckDB's SQL that decide where a
    statement of ``crr sql``'s shell ends."""

    def __init__(self) -> None:
        self.depth = 0  # open parentheses
        self.closing: str | None = None  # what ends the quoted string or identifier we are in
        self.escapes = False  # inside an E'...' string: a backslash escapes the next character
        self.comments = 0  # open /* comments

    def feed(self, text: str) -> bool:
        """Read ``text`` (the next line, with its newline); return whether the SQL read so far is open."""
        i, n = 0, len(text)
        while i < n:
            if self.closing is not None:
                i = self._in_quotes(text, i)
            elif self.comments:
                j, k = text.find("*/", i), text.find("/*", i)
                if k != -1 and (j == -1 or k < j):
                    self.comments, i = self.comments + 1, k + 2
                elif j != -1:
                    self.comments, i = self.comments - 1, j + 2
                else:
                    i = n
            else:
                i = self._outside(text, i)
        return bool(self.depth > 0 or self.closing is not None or self.comments)

    def _in_quotes(self, text: str, i: int) -> int:
        closing = self.closing
        assert closing is not None
        while i < len(text):
            if self.escapes and text[i] == "\\":
                i += 2
                continue
            if text.startswith(closing, i):
                if len(closing) == 1 and text.startswith(closing, i + 1):  # a doubled quote is the quote itself
                    i += 2
                    continue
                self.closing, self.escapes = None, False
                return i + len(closing)
            i += 1
        return i

    def _outside(self, text: str, i: int) -> int:
        c = text[i]
        if c in "'\"":
            self.closing = c
            self.escapes = c == "'" and i > 0 and text[i - 1] in "eE" and not _word_at(text, i - 2)
            return i + 1
        if c == "$" and not _word_at(text, i - 1):
            quote = _DOLLAR_QUOTE.match(text, i)
            if quote:
                self.closing = quote.group(0)
                return quote.end()
        if text.startswith("--", i):
            j = text.find("\n", i)
            return len(text) if j == -1 else j + 1
        if text.startswith("/*", i):
            self.comments = 1
            return i + 2
        self.depth += (c == "(") - (c == ")")
        return i + 1


def _sql(args: argparse.Namespace) -> int:
    from crr.sync.control import server_running
    if args.statement is not None and holds_no_statement(args.statement):
        raise UsageError("the statement is empty (spaces, comments or semicolons only); give one SQL statement, "
                         "or none for a shell")
    if args.params is not None and args.statement is None:
        raise UsageError("--params goes with a statement given on the command line, not with the shell")
    secret = load_secret(args.secret_file) if args.secret_file else None
    remote = server_running(args.db)
    if remote:
        secret = secret if secret is not None else load_secret(None)
    else:
        check_db_path(args.db)
    local = _LocalSite(args.db, args.create)

    def one(sql: str, params: list | dict | None = None) -> None:
        if remote:
            _print_rows(_request(args.db, secret, {"t": "sql", "sql": sql, "params": params})["rows"], args.format)
        else:
            _print_rows(local.execute(sql, params), args.format)

    try:
        if args.statement is not None:
            one(args.statement, args.params)
            return 0
        print("crr sql: one statement per line (continued while a parenthesis, quote or /* comment is open); "
              "Ctrl-D ends",
              file=sys.stderr)
        failed = False
        for statement in shell_statements(sys.stdin or ()):  # (closed: no statements)
            try:
                one(statement)
            except CrrError as e:
                failed = True
                print(f"crr sql: error: {one_line(str(e))}", file=sys.stderr)
        return 1 if failed else 0
    finally:
        local.close()


def _local_key(db: str) -> str | None:
    """The public key (hex) in ``<db>.key``, where crr serve keeps it by default, if it is there and usable."""
    from crr.sync.crypto import Identity
    path = os.path.abspath(db) + ".key"
    if db == ":memory:" or not os.path.isfile(path):
        return None
    try:
        return Identity.load_or_create(path).public.hex()
    except CrrError:
        return None


def status_document(status: dict[str, Any], serving: bool) -> dict[str, Any]:
    """``crr status``'s JSON, with the same keys whether a crr serve answered it (``serving``) or the site
    file was read here; what only a serve knows is null or empty here."""
    doc: dict[str, Any] = {"site": status.get("site"), "key": status.get("key"), "cursor": status.get("cursor"),
                           "serving": serving, "listening": status.get("listening"),
                           "relations": status.get("relations", []), "peers": status.get("peers", []),
                           "unreachable": status.get("unreachable", []), "cursors": status.get("cursors", []),
                           "failing": status.get("failing", []), "memory": status.get("memory"),
                           "refused": status.get("refused", [])}
    doc.update((k, v) for k, v in status.items() if k not in doc)  # anything a newer serve adds
    return doc


def _status(args: argparse.Namespace) -> int:
    from crr.sync.control import server_running
    secret = load_secret(args.secret_file) if args.secret_file else None
    status: dict[str, Any]
    if server_running(args.db):
        answer = _request(args.db, secret if secret is not None else load_secret(None), {"t": "status"})["status"]
        status = status_document(answer, serving=True)
    else:
        require_site(args.db, args.create)
        site = open_site(args.db)
        try:
            status = status_document({"site": site.site_id, "key": _local_key(args.db), "cursor": site.cursor,
                                      "relations": site.relations(),
                                      "cursors": [list(map(str, c)) for c in site.peer_cursors()]}, serving=False)
        finally:
            site.close()
    _out(json.dumps(status, indent=2, default=str))
    return 0
