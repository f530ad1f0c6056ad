"""``crr serve``, ``crr sql`` and ``crr status``."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading

from crr.errors import CrrError


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def _allow(values: list[str] | None) -> dict[str, set[str]] | None:
    if not values:
        return None
    rules: dict[str, set[str]] = {}
    for v in values:
        site, _, rels = v.partition("=")
        rules.setdefault(site, set()).update(r.strip().lower() for r in rels.split(",") if r.strip())
    return rules


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register the sync commands."""
    p = sub.add_parser("serve", help="run a site as a long-lived process that syncs with its peers")
    p.add_argument("--db", required=True, help="the site's DuckDB file")
    p.add_argument("--listen", type=_hostport, default=("127.0.0.1", 0), help="HOST:PORT to accept peers on")
    p.add_argument("--peer", type=_hostport, action="append", default=[], help="a static peer HOST:PORT (repeatable)")
    p.add_argument("--secret-file", help="file with the deployment secret (else $CRR_SECRET)")
    p.add_argument("--site-id", help="site id when the file is new")
    p.add_argument("--allow", action="append", metavar="SITE=REL[,REL]",
                   help="only these peers may write these relations here (repeatable; default: every peer, every relation)")
    p.add_argument("--discover", action="store_true", help="find peers on the LAN with zeroconf (_crr._tcp.local.)")
    p.add_argument("--pull-interval", type=float, default=2.0, help="seconds between periodic pulls")
    p.add_argument("--log-level", default="INFO")
    p = sub.add_parser("sql", help="run one statement against a site (through crr serve if it is running)")
    p.add_argument("--db", required=True)
    p.add_argument("--secret-file")
    p.add_argument("statement", nargs="?", help="the statement (omit for an interactive shell)")
    p = sub.add_parser("status", help="relations, views, peers, cursors and how far behind each stream is")
    p.add_argument("--db", required=True)
    p.add_argument("--secret-file")


def run(args: argparse.Namespace) -> int:
    """Run one of the sync commands."""
    if args.command == "serve":
        return _serve(args)
    if args.command == "sql":
        return _sql(args)
    return _status(args)


def _serve(args: argparse.Namespace) -> int:
    from crr.site import Site
    from sync.control import socket_path
    from sync.crypto import load_secret
    from sync.service import SyncService
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    secret = load_secret(args.secret_file)
    site = Site(args.db, site_id=args.site_id)
    service = SyncService(site, secret, listen=args.listen, peers=args.peer, allow=_allow(args.allow),
                          control_path=socket_path(args.db), pull_interval=args.pull_interval).start()
    discovery = None
    if args.discover:
        from sync.discovery import Discovery
        discovery = Discovery(site.site_id, service.address, service.add_peer).start()
    host, port = service.address
    print(f"serving site {site.site_id} on {host}:{port}", flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    if discovery:
        discovery.stop()
    service.stop()
    site.close()
    return 0


def _secret(args: argparse.Namespace) -> bytes:
    from sync.crypto import load_secret
    return load_secret(args.secret_file)


def _print_rows(rows: list) -> None:
    for row in rows:
        print("\t".join("NULL" if v is None else str(v) for v in row))


def _sql(args: argparse.Namespace) -> int:
    from sync.control import request, server_running
    statements = [args.statement] if args.statement else None
    remote = server_running(args.db)
    site = None
    if not remote:
        from crr.site import Site
        site = Site(args.db)
    secret = _secret(args) if remote else b""

    def one(sql: str) -> None:
        if remote:
            _print_rows(request(args.db, secret, {"t": "sql", "sql": sql})["rows"])
        else:
            _print_rows(site.execute(sql))

    try:
        if statements:
            for s in statements:
                one(s)
            return 0
        print("crr sql: one statement per line; an empty line or Ctrl-D ends", file=sys.stderr)
        for line in sys.stdin:
            if not line.strip():
                break
            try:
                one(line.strip())
            except CrrError as e:
                print(f"error: {e}", file=sys.stderr)
        return 0
    finally:
        if site is not None:
            site.close()


def _status(args: argparse.Namespace) -> int:
    from sync.control import request, server_running
    if server_running(args.db):
        status = request(args.db, _secret(args), {"t": "status"})["status"]
    else:
        from crr.site import Site
        with Site(args.db) as site:
            status = {"site": site.site_id, "cursor": site.cursor, "relations": site.relations(),
                      "peers": [], "serving": False, "cursors": [list(map(str, c)) for c in site.peer_cursors()]}
    print(json.dumps(status, indent=2, default=str))
    return 0
