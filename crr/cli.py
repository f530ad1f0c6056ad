"""The ``crr`` command line (argparse, from the standard library: no extra dependency).

Every user error ends in one line on stderr, ``crr <command>: error: <what was wrong and what to do>``,
never a traceback. Exit codes: 0 success, 1 a runtime failure (a site that cannot be opened, an
address in use, a refused statement), 2 a usage error (a bad argument value, a missing file named on
the command line), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from crr.errors import CrrError

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(CrrError):
    """A command-line argument is wrong (bad value, missing file or folder); exits with code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line on stderr (as every other crr error) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``crr`` argument parser with every subcommand (each a :class:`_Parser` too)."""
    parser = _Parser(prog="crr", description="Replicated incremental view maintenance on DuckDB")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="replay the paper's Figure 1 / Table 1 scenario with six sites")
    demo.add_argument("--dir", help="folder for the six DuckDB files, created if missing; it must not hold the "
                                    "files of an earlier run (default: a temporary folder)")
    demo.add_argument("--network", action="store_true",
                      help="run the six sites as crr serve processes on loopback, cutting and restoring links")
    try:
        from crr.bench.cli import add_parser as add_bench
    except ImportError:  # the bench extras (rich, matplotlib) are not installed
        add_bench = None
    if add_bench is not None:
        add_bench(sub)
    from crr.sync.commands import add_parsers as add_sync
    add_sync(sub)
    return parser


def one_line(message: str) -> str:
    """An error message as one line: DuckDB's ``LINE n:`` context (often crr's own generated SQL, not the
    user's) and its caret line are dropped, the other lines joined."""
    lines = message.strip().splitlines()
    kept = []
    for i, line in enumerate(lines):
        text = line.strip()
        if not text or text.startswith("LINE ") or (set(text) <= {"^"} and i > 0):
            continue
        kept.append(text)
    return " ".join(kept) or message.strip()


def describe_os_error(e: OSError) -> str:
    """One line for an OSError: its reason and the file it concerns, without Python's repr noise."""
    reason = e.strerror or str(e) or type(e).__name__
    names = [n for n in (e.filename, e.filename2) if n is not None]
    return f"{reason}: {' -> '.join(map(str, names))}" if names else reason


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo" and args.network:
        from crr.sync.demo import run as network_demo
        return 0 if network_demo(args.dir) else EXIT_FAILURE
    if args.command == "demo":
        from crr.demo import run
        run(args.dir)
        return 0
    if args.command == "bench":
        from crr.bench.cli import run as bench
        return bench(args)
    from crr.sync.commands import run as sync_command
    return sync_command(args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``crr`` console script; returns the exit code (argparse exits 2 on bad syntax)."""
    args = build_parser().parse_args(argv)
    prog = f"crr {args.command}"

    def error(message: str) -> None:
        print(f"{prog}: error: {one_line(message)}", file=sys.stderr, flush=True)

    try:
        return _dispatch(args)
    except UsageError as e:
        error(str(e))
        return EXIT_USAGE
    except CrrError as e:
        error(str(e))
        return EXIT_FAILURE
    except BrokenPipeError:  # the reader of our output went away (crr sql ... | head): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    except OSError as e:  # a file or socket operation crr did not foresee: say which, without a traceback
        error(describe_os_error(e))
        return EXIT_FAILURE
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    # run the imported module's main, so that UsageError is the one class other modules raise
    from crr.cli import main as _main
    sys.exit(_main())
