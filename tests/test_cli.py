"""The crr command line."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_and_converges(tmp_path):
    out = subprocess.run([sys.executable, "-m", "crr.cli", "demo", "--dir", str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    last = out.split("Step 5")[1]
    assert "s0.r0    <a1, b1, c1>\n" in last and "s5.r5    <a1, b1, c1>\n" in last
    assert "a3" not in last  # the concurrent insert lost to the insert+delete everywhere
    assert len(list(tmp_path.glob("s*.duckdb"))) == 6
    aggregate = out.split("Step 6")[1]  # the cloud site's aggregate view, before and after more changes
    assert "s5.per_b (b, pairs, a_values, first_c): <b1, 1, 1, c1>\n" in aggregate
    assert aggregate.rstrip().endswith("<b1, 1, 1, c3>, <b3, 1, 1, c4>\n  equal to the query run over s5's inputs: yes")
    assert "equal to the query run over s5's inputs: NO" not in aggregate


def test_cli_reports_errors_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "crr.cli", "nonsense"], capture_output=True, text=True)
    assert proc.returncode != 0 and "invalid choice" in proc.stderr


def test_network_demo_runs_six_processes_and_converges(tmp_path):
    folder = tmp_path / "not" / "yet"  # --dir need not exist (it was a FileNotFoundError traceback)
    proc = subprocess.run([sys.executable, "-m", "crr.cli", "demo", "--network", "--dir", str(folder)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("serving on 127.0.0.1:") == 6
    assert "All sites converged." in proc.stdout
    final = proc.stdout.split("Step 3")[1]
    shown = final.split("converged everywhere")[1]
    assert "s5.r5    <a1, b1, c1>\n" in shown and "<a3" not in shown
    assert len(list(folder.glob("s*.duckdb"))) == 6
