"""Mutation fuzzing of changesets: mutated bodies with recomputed checksums never crash a merge.

The merges run in a child process (tests/fuzz_merge_child.py), so a segfault or abort fails the
test instead of killing the run. Every merge must succeed or raise ChangesetError; a sample of the
refused merges must leave the target site's APP tables and ``changes()`` exactly as they were.
Reproduce a failure with ``python -m tests.fuzz_merge_child one SEED INDEX out.bin`` (the seed and
index are in the failure message) and ``python -m tests.fuzz_merge_child merge out.bin``.
"""

from __future__ import annotations

from pathlib import Path

from tests.fuzz_merge_child import run_child

SEED = 20240229
COUNT = 2000  # mutations; about 25 s on an idle core
BUDGET_S = 30  # the child stops starting new mutations after this long


def _last_line(path: Path) -> str:
    lines = path.read_text().splitlines() if path.exists() else []
    return lines[-1] if lines else "(before the first merge)"


def _check(report: dict) -> None:
    failures = "\n\n".join(f"{f['input']}\n{f['error']}" for f in report["failures"][:5])
    assert not report["failures"], f"{len(report['failures'])} merges failed other than by ChangesetError:\n{failures}"
    assert report["refused"] > report["runs"] // 2 and report["merged"] > 0, report


def test_seeded_mutations_are_refused_cleanly_or_merged(tmp_path):
    progress = tmp_path / "progress.txt"
    try:
        report = run_child("random", str(SEED), str(COUNT), str(BUDGET_S), str(progress), timeout=BUDGET_S + 120)
    except AssertionError as e:
        raise AssertionError(f"{e}\nlast input merged: {_last_line(progress)}") from None
    assert report["runs"] >= 800, f"only {report['runs']} mutations ran within {BUDGET_S} s: {report}"
    _check(report)


def test_hypothesis_mutations_are_refused_cleanly_or_merged(tmp_path):
    progress = tmp_path / "progress.txt"
    try:
        report = run_child("hypothesis", "200", str(progress), timeout=180)
    except AssertionError as e:
        raise AssertionError(f"{e}\nlast input merged: {_last_line(progress)}") from None
    assert report["runs"] >= 200, report
    _check(report)
