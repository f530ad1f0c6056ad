"""A Spark site's storage: Parquet tables under one folder, committed atomically by a manifest switch.

Layout under ``path``::

    CURRENT                       name of the committed manifest (replaced by an atomic rename)
    manifests/manifest-<n>.json   commit n: the site's metadata and, per table, its schema and parts
    data/<table>/<n>-<k>/         one part: a folder of Parquet files written by commit n

A table is the union of its parts. A transaction writes new parts as it goes (Spark jobs, nothing
collected to the driver) and lists them in a new manifest; ``commit`` fsyncs the new files and the
manifest, then renames ``CURRENT.tmp`` over ``CURRENT``. A process killed before that rename leaves
the previous manifest in force and its new parts unreferenced; opening the store deletes them. So
a reader sees the state before a commit or after it, never between. Parts are never rewritten in
place: replacing a table (compaction, a recomputed APP table) writes a new part and drops the old
ones from the manifest. The files of dropped parts stay for :data:`RETAIN_COMMITS` more commits, so a
DataFrame a caller got from an earlier state can still be read for a while; opening the store
deletes them.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import json
import os
import shutil
import threading
from typing import IO, Any

import pyarrow.parquet as pq

from crr.errors import SiteError

STORE_VERSION = 2  # 2: the APP tables of views and remote tables carry counts (crr.spark.membership)
READABLE_VERSIONS = (1, 2)  # a version-1 site is upgraded when it is opened (SparkSite)
RETAIN_COMMITS = 4  # commits for which the files of a dropped part stay readable
MAX_PARTS = 16  # a table with more parts than this is compacted into one by the next commit that appends


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: str) -> None:
    for dirpath, _, files in os.walk(folder):
        for f in files:
            _fsync_path(os.path.join(dirpath, f))
        _fsync_path(dirpath)


def table_folder(key: str) -> str:
    """The folder name of a table: a hash of its key, so no relation name reaches the file system."""
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _hold(path: str) -> IO[bytes]:
    """Lock the site folder ``path`` for this Store (``LOCK``, an exclusive flock held while the file is
    open, in this process or another). Two stores on one folder each commit from their own manifest:
    the second's commit replaced the first's, whose committed rows were then collected as garbage."""
    held = open(os.path.join(path, "LOCK"), "ab")
    for attempt in range(2):
        try:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return held
        except BlockingIOError:
            gc.collect()  # a SparkSite dropped without close() lets go when collected
    held.close()
    raise SiteError(f"the Spark site at {path} is open in another SparkSite (in this process or another); use "
                    "that one, or close() it first")


class Store:
    """The committed state of a Spark site's folder (see the module docstring)."""

    def __init__(self, spark: Any, path: str) -> None:
        self.spark = spark
        self.path = os.path.abspath(path)
        try:
            os.makedirs(os.path.join(self.path, "manifests"), exist_ok=True)
            os.makedirs(os.path.join(self.path, "data"), exist_ok=True)
        except OSError as e:  # a file in the way, no permission, a full disk
            raise SiteError(f"cannot use {self.path} as a Spark site's folder ({e.strerror or e}); give the "
                            "path of a folder this process may write, or of one to create") from None
        self._lock = _hold(self.path)
        try:
            self.manifest = self._load()
            self._collect_garbage()
        except BaseException:
            self._lock.close()
            raise

    def close(self) -> None:
        """Let another SparkSite open the folder."""
        self._lock.close()

    # -- reading ------------------------------------------------------------------------------------
    def _load(self) -> dict:
        current = os.path.join(self.path, "CURRENT")
        if not os.path.exists(current):
            return {"version": STORE_VERSION, "commit": 0, "meta": {}, "tables": {}, "garbage": []}
        with open(current) as f:
            name = f.read().strip()
        try:
            with open(os.path.join(self.path, "manifests", name)) as f:
                manifest = json.load(f)
        except (OSError, ValueError) as e:
            raise SiteError(f"the Spark site at {self.path} has a damaged manifest ({name}: {e}); "
                            "restore the folder from a backup") from None
        if manifest.get("version") not in READABLE_VERSIONS:
            raise SiteError(f"the Spark site at {self.path} has storage version {manifest.get('version')}, "
                            f"this crr reads versions {READABLE_VERSIONS[0]} to {STORE_VERSION}; open it with the "
                            "crr that wrote it")
        return manifest

    @property
    def version(self) -> int:
        """The storage version of the committed state (a commit writes :data:`STORE_VERSION`)."""
        return int(self.manifest["version"])

    @property
    def meta(self) -> dict:
        """The committed site metadata (catalog, counters, site id)."""
        return self.manifest["meta"]

    def has(self, key: str) -> bool:
        """Whether table ``key`` exists in the committed state."""
        return key in self.manifest["tables"]

    def read(self, key: str, tables: dict | None = None):
        """Table ``key`` as a DataFrame (the union of its parts) in ``tables`` (default: committed)."""
        entry = (tables if tables is not None else self.manifest["tables"])[key]
        paths = [os.path.join(self.path, "data", p) for p in entry["parts"]]
        if not paths:
            return self.spark.createDataFrame([], entry["schema"])
        return self.spark.read.schema(entry["schema"]).parquet(*paths)

    def transaction(self) -> "Transaction":
        """Start a transaction on the committed state."""
        return Transaction(self)

    def _collect_garbage(self) -> None:
        """Delete parts no committed manifest references (left by a killed or failed commit) and old manifests."""
        self.manifest["garbage"] = []
        live = {p for t in self.manifest["tables"].values() for p in t["parts"]}
        data = os.path.join(self.path, "data")
        for table in os.listdir(data):
            folder = os.path.join(data, table)
            for part in os.listdir(folder):
                if f"{table}/{part}" not in live:
                    shutil.rmtree(os.path.join(folder, part), ignore_errors=True)
            if not os.listdir(folder):
                os.rmdir(folder)
        keep = f"manifest-{self.manifest['commit']:08d}.json"
        for name in os.listdir(os.path.join(self.path, "manifests")):
            if name != keep:
                os.remove(os.path.join(self.path, "manifests", name))


class Transaction:
    """New parts and table changes, invisible to readers of the store until :meth:`commit`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.commit_no = store.manifest["commit"] + 1
        self.tables = json.loads(json.dumps(store.manifest["tables"]))
        self.meta = json.loads(json.dumps(store.manifest["meta"]))
        self._written: list[str] = []
        self._parts = 0
        self._lock = threading.Lock()  # parts may be written by several threads at once
        self._reads: dict[str, tuple[str, list[str], Any]] = {}  # key -> (schema, parts, DataFrame)
        self.done = False

    def has(self, key: str) -> bool:
        """Whether table ``key`` exists in this transaction's state."""
        return key in self.tables

    def empty(self, key: str) -> bool:
        """Whether table ``key`` holds no rows in this transaction's state (an empty part is never listed)."""
        return not self.tables[key]["parts"]

    def read(self, key: str):
        """Table ``key`` as this transaction sees it (committed parts and its own). A table read again
        while its parts are the same is the same DataFrame: a read lists and opens its Parquet files
        (about 25 ms a read here), and a batch reads most tables several times."""
        entry = self.tables[key]
        schema, parts = entry["schema"], list(entry["parts"])
        with self._lock:
            hit = self._reads.get(key)
            if hit is not None and hit[0] == schema and hit[1] == parts:
                return hit[2]
        df = self.store.read(key, {key: {"schema": schema, "parts": parts}})
        with self._lock:
            self._reads[key] = (schema, parts, df)
        return df

    def create(self, key: str, schema: str) -> None:
        """Create an empty table with a Spark DDL schema (``"id BINARY, c0 INT"``)."""
        self.tables[key] = {"schema": schema, "parts": []}

    def drop(self, key: str) -> None:
        """Drop a table (its files go once the commit is in force)."""
        self.tables.pop(key, None)

    def _write(self, key: str, df) -> tuple[str, Any, int]:
        """Write a part (one Spark job); return its name, the part read back, and its row count (from
        the Parquet footers, so counting costs no job)."""
        with self._lock:
            self._parts += 1
            rel = f"{table_folder(key)}/{self.commit_no:08d}-{self._parts:04d}"
        path = os.path.join(self.store.path, "data", rel)
        with self._lock:
            self._written.append(path)
        # the manifest makes commits atomic, so each part skips the committer's rename pass and marker
        (df.write.mode("errorifexists").option("mapreduce.fileoutputcommitter.algorithm.version", "2")
         .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false").parquet(path))
        rows = sum(pq.read_metadata(os.path.join(path, f)).num_rows for f in os.listdir(path) if f.endswith(".parquet"))
        schema = self.tables[key]["schema"]
        if rows == 0:  # nothing to keep: an empty part is never listed
            shutil.rmtree(path, ignore_errors=True)
            with self._lock:
                self._written.remove(path)
            return rel, self.store.spark.createDataFrame([], schema), 0
        return rel, self.store.spark.read.schema(schema).parquet(path), rows

    def append(self, key: str, df, compact=None) -> tuple[Any, int]:
        """Write ``df``'s rows as a new part of ``key``; return the part read back and its row count.

        An empty part is not kept. A table past :data:`MAX_PARTS` parts is compacted into one first:
        its rows, or ``compact(rows)`` when given (a table of versions keeps only the current ones).
        """
        if len(self.tables[key]["parts"]) >= MAX_PARTS:
            rows = self.read(key)
            self.replace(key, compact(rows) if compact is not None else rows)
        rel, part, rows = self._write(key, df)
        if rows:
            self.tables[key]["parts"].append(rel)
        return part, rows

    def replace(self, key: str, df) -> tuple[Any, int]:
        """Make ``df`` the whole content of ``key`` (one new part); return it read back and its row count."""
        rel, part, rows = self._write(key, df)
        self.tables[key]["parts"] = [rel] if rows else []
        return part, rows

    def commit(self) -> None:
        """Make the transaction durable and visible: fsync its parts, write the manifest, switch CURRENT."""
        store = self.store
        for path in self._written:
            if os.path.exists(path):
                _fsync_tree(path)
        live = {p for t in self.tables.values() for p in t["parts"]}
        dropped = [[self.commit_no, p] for t in store.manifest["tables"].values() for p in t["parts"] if p not in live]
        garbage = store.manifest.get("garbage", []) + dropped
        expired = [p for n, p in garbage if n <= self.commit_no - RETAIN_COMMITS]
        manifest = {"version": STORE_VERSION, "commit": self.commit_no, "meta": self.meta, "tables": self.tables,
                    "garbage": [[n, p] for n, p in garbage if n > self.commit_no - RETAIN_COMMITS]}
        name = f"manifest-{self.commit_no:08d}.json"
        target = os.path.join(store.path, "manifests", name)
        with open(target + ".tmp", "w") as f:
            json.dump(manifest, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(target + ".tmp", target)
        current = os.path.join(store.path, "CURRENT")
        with open(current + ".tmp", "w") as f:
            f.write(name)
            f.flush()
            os.fsync(f.fileno())
        os.replace(current + ".tmp", current)  # the commit point
        _fsync_path(store.path)
        store.manifest = manifest
        self.done = True
        for part in expired:
            shutil.rmtree(os.path.join(store.path, "data", part), ignore_errors=True)
        old = os.path.join(store.path, "manifests", f"manifest-{self.commit_no - 1:08d}.json")
        if os.path.exists(old):
            os.remove(old)

    def abort(self) -> None:
        """Forget the transaction and delete the parts it wrote."""
        if self.done:
            return
        for path in self._written:
            shutil.rmtree(path, ignore_errors=True)
        self.done = True
