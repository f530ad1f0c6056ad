"""README, stop 63: single-row INSERTs giving an int for a DOUBLE column, Python's text against the rows
statement, alternating in one process: ``.venv/bin/python docs/measurements/stop63_insert_int_for_double.py``."""
import statistics
import tempfile
import time

import crr
import crr.site_dml as sd

real = sd.param_texts
site = crr.Site(f"{tempfile.mkdtemp()}/s.db", site_id="s")
site.execute("CREATE REPLICATED TABLE readings (k INTEGER PRIMARY KEY, sensor VARCHAR, value DOUBLE)")
times: dict[bool, list[float]] = {True: [], False: []}
for i in range(500):
    python = i % 2 == 0
    sd.param_texts = real if python else (lambda *a: None)
    start = time.perf_counter()
    site.execute("INSERT INTO readings VALUES (?, ?, ?)", [i, "s1", 20 + i % 7])
    times[python].append(time.perf_counter() - start)
for python in (True, False):
    print("python texts" if python else "rows statement", f"median {statistics.median(times[python][50:]) * 1e3:.2f} ms")
