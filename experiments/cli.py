"""``crr bench``: the benchmark command line (subcommands paper, writes, merge, recompute, aggregate, sync, spark)."""

from __future__ import annotations

import argparse
import os

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from crr.bench import report

INT32_MAX = 2**31 - 1  # the generated tables' keys are INTEGER (int32): no run may make more keys than this
MAX_ROWS = 100_000_000  # rows one option may have a run generate (in memory, as Python lists, then Arrow)
MAX_OPS = 1_000_000  # statements or writes timed one at a time
MAX_REPEAT = 1_000

DEFAULTS = {  # each option's value when neither it nor --quick is given
    "paper": dict(sizes="10000,20000,30000,40000,50000,60000,70000,80000,90000,100000", batch=1000, repeat=10),
    "writes": dict(ops=500, rows=0),
    "merge": dict(sizes="1000,10000,100000", repeat=5),
    "recompute": dict(base=1_000_000, deltas="1,100,1000,10000,100000", repeat=3),
    "aggregate": dict(base=1_000_000, groups=10_000, deltas="1,1000,100000", repeat=3),
    "sync": dict(writes=200, partition_rows=10000),
    "spark": dict(sizes="1000000", batch=100000, repeat=3),
}
QUICK = {  # --quick's values of the options not given explicitly
    "paper": dict(sizes="2000,4000", batch=1000, repeat=2),
    "writes": dict(ops=30),
    "merge": dict(sizes="1000,10000", repeat=2),
    "recompute": dict(base=50000, deltas="1,100,1000", repeat=2),
    "spark": dict(sizes="10000", batch=10000, repeat=1),
    "sync": dict(writes=20, partition_rows=2000),
    "aggregate": dict(base=20000, groups=200, deltas="1,100", repeat=2),
}
NO_PLOTS = ("writes", "sync")  # subcommands whose results are a printed summary and --json only


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``crr bench`` and its subcommands."""
    bench = sub.add_parser("bench", help="benchmarks: crr against Gupta counting and recomputation")
    bs = bench.add_subparsers(dest="bench", required=True)

    def common(p: argparse.ArgumentParser, name: str) -> None:
        p.add_argument("--quick", action="store_true",
                       help="small sizes (each option's --quick value above): finishes in under a minute; "
                       "an option given explicitly keeps its value")
        p.add_argument("--json", metavar="FILE", help="write raw results as JSON (its folder must exist)")
        if name in NO_PLOTS:  # refused in run(), with a message saying why
            p.add_argument("--plot", metavar="DIR", help=argparse.SUPPRESS)
        else:
            p.add_argument("--plot", metavar="DIR", help="write PNG plots into DIR (created if missing)")

    def option(p: argparse.ArgumentParser, name: str, flag: str, kind, what: str) -> None:
        """An option whose default is None (so run() tells a given value from --quick's or the default)."""
        dest = flag[2:].replace("-", "_")
        quick = QUICK[name].get(dest)
        p.add_argument(flag, type=kind, default=None, metavar="N,N,..." if kind.__name__ == "int_list" else "N",
                       help=f"{what} (default {_shown(DEFAULTS[name][dest])}"
                            + (f"; --quick: {quick})" if quick is not None else ")"))

    p = bs.add_parser("paper", help="the paper's four experiments (section 9) vs Gupta counting on DuckDB")
    _paper_options(p, "paper", option)
    common(p, "paper")
    p = bs.add_parser("writes", help="single-row INSERT/UPDATE/DELETE latency vs plain DuckDB",
                      description="Single-row INSERT/UPDATE/DELETE latency vs plain DuckDB: prints a table; "
                      "draws no plots (--plot is refused).")
    option(p, "writes", "--ops", _bounded(MAX_OPS),
           f"statements of each kind timed, one per transaction; at most {MAX_OPS}")
    option(p, "writes", "--rows", _bounded(MAX_ROWS, least=0),
           f"rows each table holds before timing, at most {MAX_ROWS}")
    common(p, "writes")
    p = bs.add_parser("merge", help="merge throughput of 1k/10k/100k-change changesets (replica + two views)")
    option(p, "merge", "--sizes", _int_list(MAX_ROWS), f"comma-separated changeset sizes (inserts into one table), "
           f"each at most {MAX_ROWS}, their sum at most {INT32_MAX}")
    option(p, "merge", "--repeat", _bounded(MAX_REPEAT), REPEAT_HELP)
    common(p, "merge")
    p = bs.add_parser("recompute", help="incremental maintenance vs full recomputation of a join view")
    option(p, "recompute", "--base", _bounded(MAX_ROWS), f"rows R1 holds before the deltas, at most {MAX_ROWS}")
    option(p, "recompute", "--deltas", _int_list(MAX_ROWS), f"comma-separated delta sizes (new R1 rows per "
           f"measurement), each at most {MAX_ROWS}; --base + --repeat x their sum at most {INT32_MAX} (R1's keys "
           "are INTEGER)")
    option(p, "recompute", "--repeat", _bounded(MAX_REPEAT), REPEAT_HELP)
    common(p, "recompute")
    p = bs.add_parser("aggregate", help="a GROUP BY view: crr vs counting (pg_ivm's scheme) vs recomputation")
    option(p, "aggregate", "--base", _bounded(MAX_ROWS), f"rows R holds before the deltas, at most {MAX_ROWS}")
    option(p, "aggregate", "--groups", _bounded(MAX_ROWS), f"groups the rows fall in (values of g), at most {MAX_ROWS}")
    option(p, "aggregate", "--deltas", _int_list(MAX_ROWS), "comma-separated delta sizes (rows inserted, then "
           f"deleted, per measurement), each at most {MAX_ROWS}")
    option(p, "aggregate", "--repeat", _bounded(MAX_REPEAT), REPEAT_HELP)
    common(p, "aggregate")
    p = bs.add_parser("sync", help="write-to-peer latency, reconvergence after a partition, bytes on the wire",
                      description="Write-to-peer latency, reconvergence after a partition, bytes on the wire: "
                      "prints a summary; draws no plots (--plot is refused).")
    option(p, "sync", "--writes", _bounded(MAX_OPS),
           f"single-row writes timed until the peer sees each, at most {MAX_OPS}")
    option(p, "sync", "--partition-rows", _bounded(MAX_ROWS), f"rows written during the partition, at most {MAX_ROWS}")
    common(p, "sync")
    p = bs.add_parser("spark", help="the paper's experiments scaled up, with Gupta counting on PySpark")
    _paper_options(p, "spark", option)
    common(p, "spark")


def _shown(default: object) -> str:
    """A default as --help shows it: a long list by its first two items and its last."""
    items = str(default).split(",")
    return ",".join([*items[:2], "...", items[-1]]) if len(items) > 4 else str(default)


REPEAT_HELP = f"repetitions of each measurement, the median reported; at most {MAX_REPEAT}"


def _paper_options(p: argparse.ArgumentParser, name: str, option) -> None:
    """--sizes, --batch, --repeat and --experiments of ``paper`` and ``spark``."""
    option(p, name, "--sizes", _int_list(MAX_ROWS), "comma-separated N: time and state are reported after the "
           f"first N inserts (and deletes) of the stream; each a multiple of --batch, at most {MAX_ROWS}")
    option(p, name, "--batch", _bounded(MAX_ROWS), f"rows in each changeset (batch) of the stream, at most {MAX_ROWS}")
    option(p, name, "--repeat", _bounded(MAX_REPEAT), REPEAT_HELP)
    _experiments_option(p)


def _experiments_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiments", type=_experiment_list, default=None,
                   help="comma-separated subset of project-insert, project-delete, join-insert, join-delete "
                   "(default: all); a view's inserts always run, its deletes only when its delete experiment is named")


def _experiment_list(text: str) -> str:
    """An argparse type: a comma-separated list of the paper's experiment names (kept as text)."""
    from crr.bench.data import EXPERIMENTS
    names = _names(text)
    if not names:
        raise argparse.ArgumentTypeError("name at least one experiment, e.g. project-insert")
    for name in names:
        if name not in EXPERIMENTS:
            raise argparse.ArgumentTypeError(f"{name!r} is not an experiment; choose from {', '.join(EXPERIMENTS)}")
    return text


def _whole(text: str, least: int, most: int) -> int:
    """``text`` as a whole number from ``least`` to ``most``, else an argparse type error saying which bound."""
    try:
        value = int(text)
    except ValueError:
        digits = str(text).strip().lstrip("+")
        if digits.isdigit():  # longer than Python converts: certainly above the bound
            raise argparse.ArgumentTypeError(f"{digits[:12]}... is too large: give at most {most}") from None
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least {least}")
    if value > most:
        raise argparse.ArgumentTypeError(f"{text.strip()} is too large: give at most {most}")
    return value


def _bounded(most: int, least: int = 1):
    """An argparse type: a whole number from ``least`` to ``most``."""
    def whole(text: str) -> int:
        return _whole(text, least, most)
    return whole


def _int_list(most: int):
    """An argparse type: a comma-separated list of whole numbers from 1 to ``most`` (kept as text)."""
    def int_list(text: str) -> str:
        parts = _names(text)
        if not parts:
            raise argparse.ArgumentTypeError("give at least one number, e.g. 1000,10000")
        for x in parts:
            _whole(x, 1, most)
        return text
    return int_list


def _names(text: str) -> tuple[str, ...]:
    """The stripped, non-empty items of a comma-separated list."""
    return tuple(x.strip() for x in str(text).split(",") if x.strip())


def _experiments(args: argparse.Namespace) -> tuple[str, ...]:
    from crr.bench.data import EXPERIMENTS
    return _names(args.experiments) if args.experiments else EXPERIMENTS


def _ints(text: str) -> list[int]:
    return [int(x) for x in _names(text)]


def check_outputs(json_path: str | None, plot_dir: str | None) -> None:
    """Refuse, before anything runs, a ``--json FILE`` or ``--plot DIR`` the results could not be written to,
    so that a long benchmark does not end in a failure to save it."""
    from crr.cli import UsageError
    if json_path is not None:
        if not json_path or json_path.endswith(os.sep):
            raise UsageError(f"--json {json_path!r} is not a file name; give the file for the results, e.g. "
                             "--json results.json")
        if os.path.isdir(json_path):
            raise UsageError(f"--json {json_path} is a folder; give a file path, e.g. "
                             f"--json {os.path.join(json_path, 'results.json')}")
        if os.path.exists(json_path) and not os.path.isfile(json_path):
            raise UsageError(f"--json {json_path} is not a regular file; give a file path")
        folder = os.path.dirname(os.path.abspath(json_path))
        if not os.path.isdir(folder):
            raise UsageError(f"the folder {os.path.dirname(json_path) or folder} of --json {json_path} does not "
                             "exist; create it first")
        exists = os.path.exists(json_path)
        if not (os.access(json_path, os.W_OK) if exists else os.access(folder, os.W_OK | os.X_OK)):
            raise UsageError(f"cannot write --json {json_path}: permission denied; give a path this user may write")
    if plot_dir is not None:
        if not plot_dir:
            raise UsageError("--plot '' is not a folder name; give the folder for the PNG plots, e.g. --plot plots")
        if os.path.exists(plot_dir) and not os.path.isdir(plot_dir):
            raise UsageError(f"--plot {plot_dir} is a file; give a folder for the PNG plots (created if missing)")
        ancestor = os.path.abspath(plot_dir)  # the folder is created with its parents: the nearest existing one
        while not os.path.exists(ancestor):
            ancestor = os.path.dirname(ancestor)
        if not os.path.isdir(ancestor):
            raise UsageError(f"cannot create --plot {plot_dir}: {ancestor} is a file, not a folder")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise UsageError(f"cannot {'write into' if ancestor == os.path.abspath(plot_dir) else 'create'} "
                             f"--plot {plot_dir}: this user may not write in {ancestor}")


def resolve_options(args: argparse.Namespace) -> None:
    """Fill in the options not given: --quick's value if --quick, else the default (an explicit value wins);
    then refuse, before anything runs, values that only together are wrong."""
    from crr.cli import UsageError
    name = args.bench
    for dest, default in DEFAULTS[name].items():
        if getattr(args, dest) is None:
            setattr(args, dest, QUICK[name].get(dest, default) if args.quick else default)
    if name in ("paper", "spark"):
        off = [str(n) for n in _ints(args.sizes) if n % args.batch]
        if off:
            raise UsageError(f"--sizes {', '.join(off)} {'is not a multiple' if len(off) == 1 else 'are not multiples'}"
                             f" of --batch {args.batch}: results are taken after whole batches; give sizes that "
                             f"are multiples of {args.batch}, or a --batch that divides every size")
    if name == "merge" and sum(_ints(args.sizes)) > INT32_MAX:
        raise UsageError(f"--sizes add up to more than {INT32_MAX}: every changeset's rows are inserted into one "
                         "table with INTEGER keys; give smaller sizes")
    if name == "recompute" and args.base + args.repeat * sum(_ints(args.deltas)) > INT32_MAX:
        raise UsageError(f"--base + --repeat x the sum of --deltas is more than {INT32_MAX}: R1's keys are INTEGER; "
                         "give a smaller --base, --deltas or --repeat")


def run(args: argparse.Namespace) -> int:
    """Run one ``crr bench`` subcommand: the results are saved (--json, --plot) before the tables are printed,
    so a reader that leaves early (``| head``) loses nothing."""
    from crr.cli import UsageError
    name = args.bench
    if args.plot is not None and name in NO_PLOTS:
        raise UsageError(f"--plot: the {name} benchmark draws no plots (its results are the printed "
                         f"{'table' if name == 'writes' else 'summary'} and --json FILE); drop --plot")
    check_outputs(args.json, args.plot)
    resolve_options(args)
    params = {k: v for k, v in vars(args).items() if k not in ("command", "bench", "json", "plot")}
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=report.get_console(), transient=True) as progress:
        task = progress.add_task(f"crr bench {name}", total=None)
        say = lambda text: progress.update(task, description=f"crr bench {name}: {text}")  # noqa: E731
        records, plots = _dispatch(name, args, say)
    if args.json:
        report.write_json(args.json, f"bench {name}", params, records)
    paths = plots(args.plot) if args.plot else []
    if records:
        _show(name, args, records)
    if args.json:
        report.get_console().print(f"raw results written to {args.json}")
    for path in paths:
        report.get_console().print(f"plot written to {path}")
    return 0


def _dispatch(name: str, args: argparse.Namespace, say):
    """Run the benchmark; return its records and a function writing its plots into a folder (None: it has none)."""
    if name == "paper":
        from crr.bench import paper
        records = paper.run(_ints(args.sizes), args.batch, args.repeat, say, experiments=_experiments(args))
        return records, lambda d: report.paper_plots(records, d)
    if name == "spark":
        from crr.bench import paper
        from crr.bench import gupta_spark
        ours = not gupta_spark.session_started()  # a session the caller started (main() in a test) stays up
        try:
            records = paper.run(_ints(args.sizes), args.batch, args.repeat, say,
                                algorithms=("crr", "gupta-duckdb", "gupta-spark", "crr-spark"),
                                experiments=_experiments(args))
        finally:
            if ours:
                gupta_spark.stop_spark()
        return records, lambda d: report.paper_plots(records, d)
    if name == "writes":
        from crr.bench import writes
        return writes.run(args.ops, say, rows=args.rows), None
    if name == "merge":
        from crr.bench import merge
        records = merge.run(_ints(args.sizes), args.repeat, say)
        return records, lambda d: [report.xy_plot(records, d, "merge", "changes per changeset")]
    if name == "recompute":
        from crr.bench import recompute
        records = recompute.run(args.base, _ints(args.deltas), args.repeat, say)
        return records, lambda d: [report.xy_plot(records, d, "recompute", "delta rows")]
    if name == "aggregate":
        from crr.bench import aggregate
        records = aggregate.run(args.base, args.groups, _ints(args.deltas), args.repeat, say)
        labelled = [dict(r, algorithm=f"{r['algorithm']} ({r['experiment'].split('-', 1)[1]})") for r in records]
        return records, lambda d: [report.xy_plot(labelled, d, "aggregate", "delta rows")]
    if name == "sync":
        from crr.bench import sync_bench
        return sync_bench.run(args.writes, args.partition_rows, say), None
    raise ValueError(name)  # pragma: no cover - argparse restricts the choices


def _show(name: str, args: argparse.Namespace, records: list[dict]) -> None:
    """Print a benchmark's records as its table (sync: two summary lines)."""
    if name in ("paper", "spark"):
        report.paper_table(records, baseline="gupta-spark" if name == "spark" else "gupta-duckdb")
    elif name == "writes":
        report.writes_table(records)
    elif name == "merge":
        report.simple_table("merge of one changeset into replica + pi_BC + join view", records,
                            [("changes", "n"), ("median s", "seconds"), ("rows/s", "rows_per_second"),
                             ("bytes", "changeset_bytes")])
    elif name == "recompute":
        report.recompute_table(records, args.base)
    elif name == "aggregate":
        report.aggregate_table(records)
    elif name == "sync":
        lat, heal = records
        report.get_console().print(f"write visible at the connected peer: median {lat['p50'] * 1e3:.1f} ms, "
                             f"p99 {lat['p99'] * 1e3:.1f} ms ({lat['n']} writes)")
        report.get_console().print(f"reconvergence after a partition of {heal['n']} changes: {heal['seconds']:.2f} s, "
                             f"{heal['bytes_per_tuple']:.0f} bytes on the wire per changed tuple")
