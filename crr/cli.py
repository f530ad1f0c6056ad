"""The ``crr`` command line (argparse, from the standard library: no extra dependency)."""

from __future__ import annotations

import argparse
import sys

from crr.errors import CrrError


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``crr`` console script."""
    parser = argparse.ArgumentParser(prog="crr", description="Replicated incremental view maintenance on DuckDB")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="replay the paper's Figure 1 / Table 1 scenario with six sites")
    demo.add_argument("--dir", help="folder for the six DuckDB files (default: a temporary folder)")
    demo.add_argument("--network", action="store_true",
                      help="run the six sites as crr serve processes on loopback, cutting and restoring links")
    try:
        from experiments.cli import add_parser as add_bench
    except ImportError:  # the bench extras (rich, matplotlib) are not installed
        add_bench = None
    if add_bench is not None:
        add_bench(sub)
    from sync.commands import add_parsers as add_sync
    add_sync(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "demo" and args.network:
            from sync.demo import run as network_demo
            return 0 if network_demo(args.dir) else 1
        if args.command == "demo":
            from crr.demo import run
            run(args.dir)
        elif args.command == "bench":
            from experiments.cli import run as bench
            return bench(args)
        else:
            from sync.commands import run as sync_command
            return sync_command(args)
    except CrrError as e:
        print(f"crr: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
