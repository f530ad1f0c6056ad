"""``crr bench``: the benchmark command line (subcommands paper, writes, merge, recompute, aggregate, sync, spark)."""

from __future__ import annotations

import argparse
import os

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from crr.bench import report

QUICK = {
    "paper": dict(sizes="2000,4000", batch=1000, repeat=2),
    "writes": dict(ops=30),
    "merge": dict(sizes="1000,10000", repeat=2),
    "recompute": dict(base=50000, deltas="1,100,1000", repeat=2),
    "spark": dict(sizes="10000", batch=10000, repeat=1),
    "sync": dict(writes=20, partition_rows=2000),
    "aggregate": dict(base=20000, groups=200, deltas="1,100", repeat=2),
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``crr bench`` and its subcommands."""
    bench = sub.add_parser("bench", help="benchmarks: crr against Gupta counting and recomputation")
    bs = bench.add_subparsers(dest="bench", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--quick", action="store_true", help="small sizes: finishes in under a minute")
        p.add_argument("--json", metavar="FILE", help="write raw results as JSON (its folder must exist)")
        p.add_argument("--plot", metavar="DIR", help="write PNG plots into DIR (created if missing)")

    p = bs.add_parser("paper", help="the paper's four experiments (section 9) vs Gupta counting on DuckDB")
    p.add_argument("--sizes", type=_int_list, default="10000,20000,30000,40000,50000,60000,70000,80000,90000,100000")
    p.add_argument("--batch", type=_positive_int, default=1000)
    p.add_argument("--repeat", type=_positive_int, default=10)
    _experiments_option(p)
    common(p)
    p = bs.add_parser("writes", help="single-row INSERT/UPDATE/DELETE latency vs plain DuckDB")
    p.add_argument("--ops", type=_positive_int, default=500)
    p.add_argument("--rows", type=_count, default=0, help="rows each table holds before timing (default 0)")
    common(p)
    p = bs.add_parser("merge", help="merge throughput of 1k/10k/100k-change changesets (replica + two views)")
    p.add_argument("--sizes", type=_int_list, default="1000,10000,100000")
    p.add_argument("--repeat", type=_positive_int, default=5)
    common(p)
    p = bs.add_parser("recompute", help="incremental maintenance vs full recomputation of a join view")
    p.add_argument("--base", type=_positive_int, default=1_000_000)
    p.add_argument("--deltas", type=_int_list, default="1,100,1000,10000,100000")
    p.add_argument("--repeat", type=_positive_int, default=3)
    common(p)
    p = bs.add_parser("aggregate", help="a GROUP BY view: crr vs counting (pg_ivm's scheme) vs recomputation")
    p.add_argument("--base", type=_positive_int, default=1_000_000)
    p.add_argument("--groups", type=_positive_int, default=10_000)
    p.add_argument("--deltas", type=_int_list, default="1,1000,100000")
    p.add_argument("--repeat", type=_positive_int, default=3)
    common(p)
    p = bs.add_parser("sync", help="write-to-peer latency, reconvergence after a partition, bytes on the wire")
    p.add_argument("--writes", type=_positive_int, default=200)
    p.add_argument("--partition-rows", type=_positive_int, default=10000)
    common(p)
    p = bs.add_parser("spark", help="the paper's experiments scaled up, with Gupta counting on PySpark")
    p.add_argument("--sizes", type=_int_list, default="1000000")
    p.add_argument("--batch", type=_positive_int, default=100000)
    p.add_argument("--repeat", type=_positive_int, default=3)
    _experiments_option(p)
    common(p)


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


def _positive_int(text: str, least: int = 1) -> int:
    """An argparse type: a whole number of at least 1 (``least``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least {least}")
    return value


def _count(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    return _positive_int(text, least=0)


def _int_list(text: str) -> str:
    """An argparse type: a comma-separated list of positive whole numbers (kept as text)."""
    parts = _names(text)
    if not parts:
        raise argparse.ArgumentTypeError("give at least one number, e.g. 1000,10000")
    for x in parts:
        _positive_int(x)
    return text


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


def run(args: argparse.Namespace) -> int:
    """Run one ``crr bench`` subcommand."""
    name = args.bench
    check_outputs(args.json, args.plot)
    if args.quick:
        for k, v in QUICK[name].items():
            setattr(args, k, v)
    params = {k: v for k, v in vars(args).items() if k not in ("command", "bench", "json", "plot")}
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=report.console, transient=True) as progress:
        task = progress.add_task(f"crr bench {name}", total=None)
        say = lambda text: progress.update(task, description=f"crr bench {name}: {text}")  # noqa: E731
        records, plots = _dispatch(name, args, say)
    if args.json:
        report.write_json(args.json, f"bench {name}", params, records)
        report.console.print(f"raw results written to {args.json}")
    if args.plot:
        for path in plots(args.plot):
            report.console.print(f"plot written to {path}")
    return 0


def _dispatch(name: str, args: argparse.Namespace, say):
    if name == "paper":
        from crr.bench import paper
        records = paper.run(_ints(args.sizes), args.batch, args.repeat, say, experiments=_experiments(args))
        report.paper_table(records)
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
        report.paper_table(records, baseline="gupta-spark")
        return records, lambda d: report.paper_plots(records, d)
    if name == "writes":
        from crr.bench import writes
        records = writes.run(args.ops, say, rows=args.rows)
        report.writes_table(records)
        return records, lambda d: []
    if name == "merge":
        from crr.bench import merge
        records = merge.run(_ints(args.sizes), args.repeat, say)
        report.simple_table("merge of one changeset into replica + pi_BC + join view", records,
                            [("changes", "n"), ("median s", "seconds"), ("rows/s", "rows_per_second"),
                             ("bytes", "changeset_bytes")])
        return records, lambda d: [report.xy_plot(records, d, "merge", "changes per changeset")]
    if name == "recompute":
        from crr.bench import recompute
        records = recompute.run(args.base, _ints(args.deltas), args.repeat, say)
        report.recompute_table(records, args.base)
        return records, lambda d: [report.xy_plot(records, d, "recompute", "delta rows")]
    if name == "aggregate":
        from crr.bench import aggregate
        records = aggregate.run(args.base, args.groups, _ints(args.deltas), args.repeat, say)
        report.aggregate_table(records)
        labelled = [dict(r, algorithm=f"{r['algorithm']} ({r['experiment'].split('-', 1)[1]})") for r in records]
        return records, lambda d: [report.xy_plot(labelled, d, "aggregate", "delta rows")]
    if name == "sync":
        from crr.bench import sync_bench
        records = sync_bench.run(args.writes, args.partition_rows, say)
        lat, heal = records
        report.console.print(f"write visible at the connected peer: median {lat['p50'] * 1e3:.1f} ms, "
                             f"p99 {lat['p99'] * 1e3:.1f} ms ({lat['n']} writes)")
        report.console.print(f"reconvergence after a partition of {heal['n']} changes: {heal['seconds']:.2f} s, "
                             f"{heal['bytes_per_tuple']:.0f} bytes on the wire per changed tuple")
        return records, lambda d: []
    raise ValueError(name)  # pragma: no cover - argparse restricts the choices

