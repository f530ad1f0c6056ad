"""Printing, JSON and plots of benchmark results.

Tables and progress use ``rich`` (a well-kept terminal library: aligned tables, live progress
without hand-written ANSI codes); plots use ``matplotlib`` (Agg backend, PNG files).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections import defaultdict

from rich.console import Console
from rich.table import Table

console = Console(width=None if sys.stdout.isatty() else 150)


def machine() -> dict:
    """What the numbers were measured on."""
    import duckdb
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "duckdb": duckdb.__version__, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_json(path: str, command: str, params: dict, records: list[dict]) -> None:
    """Write the run as JSON (schema in the README)."""
    with open(path, "w") as f:
        json.dump({"command": command, "params": params, "machine": machine(), "results": records}, f, indent=2)


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.2f}"


def paper_table(records: list[dict], baseline: str = "gupta-duckdb") -> None:
    """One row per (experiment, n): every algorithm's time, crr/baseline ratios and state sizes."""
    by = defaultdict(dict)
    for r in records:
        by[(r["experiment"], r["n"])][r["algorithm"]] = r
    algos = sorted({r["algorithm"] for r in records}, key=lambda a: (a != "crr", a))
    t = Table(title=f"crr vs {', '.join(a for a in algos if a != 'crr')} (median seconds; state in MB)")
    for col in ["experiment", "N", *[f"{a} s" for a in algos], f"crr/{baseline}", "crr state", f"{baseline} state",
                "extra state"]:
        t.add_column(col, justify="right" if col not in ("experiment",) else "left")
    for (exp, n), cell in sorted(by.items()):
        crr, base = cell.get("crr"), cell.get(baseline)
        ratio = f"{crr['seconds'] / base['seconds']:.2f}" if crr and base and base["seconds"] else "-"
        extra = (crr["state_bytes"] - base["state_bytes"]) if crr and base else None
        t.add_row(exp, str(n), *[f"{cell[a]['seconds']:.3f}" if a in cell else "-" for a in algos], ratio,
                  _mb(crr and crr["state_bytes"]), _mb(base and base["state_bytes"]), _mb(extra))
    console.print(t)


def simple_table(title: str, records: list[dict], columns: list[tuple[str, str]]) -> None:
    """A table of records with the given (header, key) columns."""
    t = Table(title=title)
    for header, _ in columns:
        t.add_column(header, justify="right")
    for r in records:
        row = []
        for _, key in columns:
            v = r.get(key, "-")
            row.append(f"{v:.4f}" if isinstance(v, float) else str(v))
        t.add_row(*row)
    console.print(t)


def paper_plots(records: list[dict], folder: str) -> list[str]:
    """The paper's Figures 3-6: time vs N and extra memory vs N, all algorithms on one chart."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    paths = []
    by = defaultdict(lambda: defaultdict(list))
    for r in sorted(records, key=lambda r: r["n"]):
        by[r["experiment"]][r["algorithm"]].append(r)
    for exp, algos in by.items():
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        for algo, rs in algos.items():
            ax1.errorbar([r["n"] for r in rs], [r["seconds"] for r in rs],
                         yerr=[[r["seconds"] - r.get("seconds_min", r["seconds"]) for r in rs],
                               [r.get("seconds_max", r["seconds"]) - r["seconds"] for r in rs]],
                         marker="o", capsize=3, label=algo)
        ax1.set_xlabel("N (updates)")
        ax1.set_ylabel("seconds (median, min-max)")
        ax1.set_title(f"{exp}: time")
        ax1.legend()
        base = {r["n"]: r["state_bytes"] for r in algos.get("gupta-duckdb", [])}
        crr = algos.get("crr", [])
        if base and crr:
            ax2.plot([r["n"] for r in crr], [(r["state_bytes"] - base.get(r["n"], 0)) / 1e6 for r in crr],
                     marker="o", label="crr - gupta-duckdb")
            ax2.plot([r["n"] for r in crr], [r["state_bytes"] / 1e6 for r in crr], marker=".", ls="--", label="crr total")
            ax2.plot(sorted(base), [base[n] / 1e6 for n in sorted(base)], marker=".", ls="--", label="gupta total")
        ax2.set_xlabel("N (updates)")
        ax2.set_ylabel("MB")
        ax2.set_title(f"{exp}: view state")
        ax2.legend()
        fig.tight_layout()
        path = os.path.join(folder, f"{exp}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def xy_plot(records: list[dict], folder: str, name: str, xlabel: str, log: bool = True) -> str:
    """Seconds vs n for each algorithm on one chart."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    by = defaultdict(list)
    for r in sorted(records, key=lambda r: r["n"]):
        by[r["algorithm"]].append(r)
    for algo, rs in by.items():
        ax.plot([r["n"] for r in rs], [r["seconds"] for r in rs], marker="o", label=algo)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds (median)")
    ax.legend()
    fig.tight_layout()
    path = os.path.join(folder, f"{name}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
