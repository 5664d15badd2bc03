"""The node's durable store: its data directory, an SQLite database, and a writer thread.

What is kept: every key-value the store holds with an infinite TTL, one row per key (its current
record; a key that turns finite or expires leaves the table). Finite-TTL keys are refreshed by
their owners and never written. The hash is not stored: it is recomputed when the rows are loaded,
so a row that changed on disk cannot keep the hash of what it used to be.

Threads: the node's event loop hands changes to `submit()` (a dict assignment per key, never a
wait on the disk) and gets a ticket; the writer thread takes everything submitted so far, writes
it as one transaction (group commit: many writers, one commit, one fsync) and reports the highest
ticket on disk through `on_durable`, which the node marshals back onto its loop. A change that
could not be written (disk full, read-only, I/O error) stays pending and is retried; the store
reports itself unhealthy until a retry succeeds. With durability batch, nobody waits for the
writer: it runs at a lower CPU priority than the event loop.

Why SQLite (WAL) rather than LMDB, and why multi-row statements: see docs/kvstore.md
("Durable store"). In short, the standard library has it, it detects corrupt and truncated files
by itself, and one multi-row INSERT per 1024 keys binds in C and then runs without the GIL,
where `executemany` hands the GIL back and forth per row and starves the writer behind a busy
event loop (measured: 50 us per row instead of 6). The writer runs no Python code per row
either: while it holds the GIL the event loop waits, so a batch is split and put into the
statements' parameters by C calls only (`_split`, `_row_params`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from itertools import compress, repeat, starmap
from operator import attrgetter, is_, is_not
from pathlib import Path
from typing import Final, Literal, cast

from kvstore import safefs, stats
from kvstore.value import TTL_INFINITY, Value

log = logging.getLogger("kvstore.storage")

Durability = Literal["sync", "batch", "off"]
DURABILITY_MODES: Final[tuple[str, ...]] = ("sync", "batch", "off")

DB_FILE: Final[str] = "kvstore.sqlite3"
LOCK_FILE: Final[str] = "LOCK"
# DESIGN (docs/compatibility.md, rule 4): a schema change is a migration in `_check` with a bump
# of this version (PRAGMA user_version), logged once when it runs. The bump is what makes an older
# release refuse the migrated store (0.4.0 refuses any version but 1) instead of misreading it;
# never change what the rows mean without it. tests/compat/test_corpus.py opens every release's
# recorded store with today's code.
SCHEMA_VERSION: Final[int] = 1
#: The migrations: MIGRATIONS[n] takes a store of schema n to n + 1 (SQL statements, run in one
#: transaction with the version bump). Empty while the schema is still the first one.
MIGRATIONS: dict[int, tuple[str, ...]] = {}
#: Rows per multi-row statement (5 parameters each; SQLite allows 32766 parameters). A power of
#: two: see `_chunks`.
ROWS_PER_STATEMENT: Final[int] = 1024
#: Rows handed to the caller per chunk when loading.
LOAD_CHUNK: Final[int] = 65536
#: How much lower than the event loop the writer of a durability=batch node runs (nice).
BATCH_WRITER_NICENESS: Final[int] = 10
#: How long the writer waits before retrying after a failed commit.
RETRY_AFTER_S: Final[float] = 1.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv ("
    " key TEXT PRIMARY KEY, version INTEGER NOT NULL, originator TEXT NOT NULL,"
    " value BLOB, ttl_version INTEGER NOT NULL) STRICT, WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
)

# on_durable(ticket, error): every change submitted with a ticket <= `ticket` is on disk
# (error None), or the commit that carried them failed (error: one line, they stay pending).
DurableCallback = Callable[[int, str | None], None]


class StorageError(Exception):
    """The data directory cannot be used (the message is one line and names the path)."""


class CorruptStateError(StorageError):
    """The database is unreadable: corrupt, truncated, not a database, or of another node."""


class DataDirLocked(StorageError):
    """Another process holds the data directory."""


def _lock_data_dir(data_dir: Path) -> int:
    """Hold an exclusive lock on the data directory for the life of the process."""
    path = data_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise DataDirLocked(
            f"data dir {data_dir} is in use by another kvmesh node (pid {holder})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class DurableStore:
    """The data directory of one node. `open()` (lock, check, load), `submit()`, `close()`."""

    def __init__(
        self,
        data_dir: str | Path,
        node_name: str,
        durability: Durability = "sync",
        *,
        discard_corrupt: bool = False,
    ) -> None:
        if durability not in ("sync", "batch"):
            raise ValueError(f"a DurableStore needs durability sync or batch, got {durability!r}")
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / DB_FILE
        self.node_name = node_name
        self.durability = durability
        self.discard_corrupt = discard_corrupt
        self.on_durable: DurableCallback | None = None
        self.counters: dict[str, int] = {
            stats.STORAGE_COMMITS: 0,
            stats.STORAGE_ROWS_WRITTEN: 0,
            stats.STORAGE_ROWS_DELETED: 0,
            stats.STORAGE_ERRORS: 0,
            stats.STORAGE_COMMIT_MS_LAST: 0,
            stats.STORAGE_COMMIT_MS_MAX: 0,
        }
        self.last_error: str | None = None
        self.discarded_to: Path | None = None  # where a corrupt database was moved aside
        self._lock_fd: int | None = None
        self._conn: sqlite3.Connection | None = None
        self._cond = threading.Condition()
        self._pending: dict[str, Value | None] = {}
        self._submitted = 0  # highest ticket handed out
        self._durable = 0  # highest ticket on disk
        self._stopping = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ open and load

    def open(self) -> None:
        """Lock the directory and check the database (creating it if there is none). A corrupt
        database raises CorruptStateError, or with `discard_corrupt` is moved aside, loudly."""
        try:
            safefs.private_dir(self.data_dir)
        except safefs.UnsafePathError as exc:
            raise StorageError(f"cannot use the data dir: {exc}") from exc
        except OSError as exc:
            raise StorageError(f"cannot create data dir {self.data_dir}: {exc.strerror} (give "
                               f"--data-dir DIR, or --ephemeral to keep nothing)") from exc
        self._lock_fd = _lock_data_dir(self.data_dir)
        try:
            self._guarded(self._connect_and_check)
        except CorruptStateError as exc:
            if not self.discard_corrupt:
                raise
            self.discard(str(exc))

    def rows(self) -> Iterator[list[tuple[str, Value]]]:
        """The stored rows in chunks, as records with an infinite TTL and no hash (the store
        computes it). CorruptStateError if a row cannot be read: see `discard`."""
        conn = self._conn
        assert conn is not None
        try:
            # Keys and records by two scans of the same index (the same order): the records
            # are then built by `starmap` in C, not by a Python loop unpacking every row.
            keys = conn.execute("SELECT key FROM kv ORDER BY key")
            records = conn.execute(
                "SELECT version, originator, value, ?, ttl_version FROM kv ORDER BY key",
                (TTL_INFINITY,),
            )
            while True:
                chunk_keys = [row[0] for row in keys.fetchmany(LOAD_CHUNK)]
                if not chunk_keys:
                    return
                chunk = list(starmap(Value, records.fetchmany(LOAD_CHUNK)))
                if len(chunk) != len(chunk_keys):
                    raise sqlite3.DatabaseError("the table changed while it was read")
                yield list(zip(chunk_keys, chunk, strict=True))
        except sqlite3.DatabaseError as exc:
            raise CorruptStateError(f"corrupt database {self.path}: {exc}") from exc

    def discard(self, why: str) -> None:
        """Move the database aside and start an empty one (`--discard-corrupt-state`)."""
        self._close_conn()
        stamp = time.strftime("%Y%m%dT%H%M%S")
        target = self.path.with_name(f"{DB_FILE}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                source.rename(f"{target}{suffix}")
        self.discarded_to = target
        log.warning(
            "DISCARDING CORRUPT STATE (--discard-corrupt-state): %s; moved to %s; starting EMPTY",
            why,
            target,
        )
        self._guarded(self._connect_and_check)

    def start(self) -> None:
        """Start the writer thread (after the rows were loaded)."""
        self._thread = threading.Thread(target=self._writer, name="kvstore-writer", daemon=True)
        self._thread.start()

    def _guarded(self, action: Callable[[], None]) -> None:
        try:
            action()
        except sqlite3.DatabaseError as exc:
            # "file is not a database", "database disk image is malformed", ...
            raise CorruptStateError(f"corrupt database {self.path}: {exc}") from exc

    def _connect_and_check(self) -> None:
        self._conn = self._connect()
        self._check()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        # sync: each commit is fsynced (the WAL), so an acknowledged write survives power loss.
        # batch: commits reach the OS at once but are fsynced only at checkpoints, so they
        # survive a crash of the process, not of the machine.
        conn.execute(f"PRAGMA synchronous={'FULL' if self.durability == 'sync' else 'NORMAL'}")
        conn.execute("PRAGMA cache_size=-65536")  # 64 MiB: a 1 M-key table's inner pages
        return conn

    def _check(self) -> None:
        conn = self._conn
        assert conn is not None
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if not 0 <= version <= SCHEMA_VERSION:
            raise CorruptStateError(
                f"{self.path}: schema version {version}, this kvmesh reads {SCHEMA_VERSION}"
                " (written by a newer release: run that release, or start this one on an"
                " empty data dir)"
            )
        problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise CorruptStateError(f"corrupt database {self.path}: {'; '.join(problems[:3])}")
        if 0 < version < SCHEMA_VERSION:
            self._migrate(version)
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        row = conn.execute("SELECT value FROM meta WHERE name = 'node'").fetchone()
        if row is None:
            conn.execute("INSERT INTO meta VALUES ('node', ?)", (self.node_name,))
        elif row[0] != self.node_name:
            raise CorruptStateError(
                f"{self.path} belongs to node {row[0]!r}, not {self.node_name!r}"
            )

    def _migrate(self, version: int) -> None:
        """Take a store of an older schema to this one, in one transaction (all or nothing:
        an interrupted migration leaves the old schema, and the next start runs it again)."""
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step]:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        log.warning("%s: migrated the store from schema %d to %d (a release that reads only "
                    "schema %d will refuse it from now on)", self.path, version, SCHEMA_VERSION,
                    version)

    # ------------------------------------------------------------------ writing

    @property
    def healthy(self) -> bool:
        return self.last_error is None

    @property
    def submitted(self) -> int:
        return self._submitted

    @property
    def durable(self) -> int:
        return self._durable

    def pending_rows(self) -> int:
        with self._cond:
            return len(self._pending)

    def submit(self, changes: dict[str, Value | None]) -> int:
        """Queue changes (key -> stored record with an infinite TTL, or None: the key leaves the
        table). Records must not be mutated afterwards (the store's records never are). Returns
        the ticket that `on_durable` reports once they are on disk; with no changes, the ticket
        of everything submitted before (a reply must not overtake an earlier write)."""
        with self._cond:
            if changes:
                self._pending.update(changes)
                self._submitted += 1
                self._cond.notify()
            return self._submitted

    def _writer(self) -> None:
        if self.durability == "batch":
            # Nobody waits for this writer (replies do not): when the node's threads and its
            # neighbours want more CPU than there is, the event loop goes first and the rows
            # wait. At equal priority the writer took the cores the flood needed (measured:
            # the durable flood at 0.6 of the memory-only one, 0.8 with the writer niced).
            _lower_priority(BATCH_WRITER_NICENESS)
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    return
                batch = self._pending
                ticket = self._submitted
                self._pending = {}
            try:
                error = self._write(batch)
            except Exception as exc:  # a bug: keep the writer (and every waiting reply) alive
                log.exception("writer failed on %s", self.path)
                self.counters[stats.STORAGE_ERRORS] += 1
                error = self.last_error = f"internal error writing {self.path}: {exc}"
            if error is not None:
                with self._cond:
                    # Newer changes of the same keys win over the failed ones.
                    batch.update(self._pending)
                    self._pending = batch
                    self._cond.notify_all()  # a flush() waiting learns of the failure
            else:
                with self._cond:
                    self._durable = ticket
                    self._cond.notify_all()  # flush() waits on it
            callback = self.on_durable
            if callback is not None:
                callback(ticket, error)
            if error is not None:
                with self._cond:
                    if self._stopping:
                        return
                    self._cond.wait(RETRY_AFTER_S)

    def _write(self, batch: dict[str, Value | None]) -> str | None:
        """One transaction; returns None on success or the error (one line)."""
        conn = self._conn
        assert conn is not None
        keys, records, deletes = _split(batch)
        statements: list[tuple[str, Sequence[object]]] = [
            (_upsert_statement(size), _row_params(keys[start:stop], records[start:stop], size))
            for start, stop, size in _chunks(len(keys))
        ]
        statements += [
            (f"DELETE FROM kv WHERE key IN ({','.join('?' * len(part))})", part)
            for part in (deletes[start : start + ROWS_PER_STATEMENT]
                         for start in range(0, len(deletes), ROWS_PER_STATEMENT))
        ]
        started = time.monotonic()
        try:
            if len(statements) == 1:
                # One statement is a transaction of its own: no BEGIN and COMMIT to run (each
                # sqlite3 call lets go of the GIL and has to win it back from the event loop).
                conn.execute(*statements[0])
            else:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement, params in statements:
                        conn.execute(statement, params)
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            error = _storage_error_text(exc, self.path)
            self.counters[stats.STORAGE_ERRORS] += 1
            if self.last_error != error:
                log.error("cannot write %s: %s (retrying)", self.path, error)
            self.last_error = error
            return error
        elapsed_ms = int((time.monotonic() - started) * 1000)
        counters = self.counters
        counters[stats.STORAGE_COMMITS] += 1
        counters[stats.STORAGE_ROWS_WRITTEN] += len(keys)
        counters[stats.STORAGE_ROWS_DELETED] += len(deletes)
        counters[stats.STORAGE_COMMIT_MS_LAST] = elapsed_ms
        counters[stats.STORAGE_COMMIT_MS_MAX] = max(
            counters[stats.STORAGE_COMMIT_MS_MAX], elapsed_ms
        )
        if self.last_error is not None:
            log.warning("writing %s works again", self.path)
        self.last_error = None
        return None

    # ------------------------------------------------------------------ shutdown

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything submitted is on disk (or a commit failed); True if it is."""
        with self._cond:
            target = self._submitted
            self._cond.wait_for(
                lambda: self._durable >= target or self.last_error is not None, timeout_s)
            return self._durable >= target

    def close(self) -> None:
        """Write what is pending (one attempt), stop the writer, release the directory."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self._conn is not None:
            # Fold the WAL into the database file: the next start reads one file.
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._close_conn()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _close_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def gauges(self) -> dict[str, int]:
        out = dict(self.counters)
        out[stats.STORAGE_PENDING_ROWS] = self.pending_rows()
        out[stats.STORAGE_HEALTHY] = int(self.healthy)
        return out


# The writer's work per row is done in C (see the module docstring): the rows of a batch are split
# and bound without a Python loop over them, while the event loop waits for the GIL.

_STATEMENTS: dict[int, str] = {}
_VERSION = attrgetter("version")
_ORIGINATOR = attrgetter("originator_id")
_VALUE = attrgetter("value")
_TTL_VERSION = attrgetter("ttl_version")


def _split(batch: dict[str, Value | None]) -> tuple[list[str], list[Value], list[str]]:
    """(keys written, their records, keys deleted). A Python loop over the rows only when the
    batch deletes some (keys that turned finite, a leaf's dropped keys: rare)."""
    keys = list(batch)
    records = list(batch.values())
    # `is_` by `map`: `None in records` would call the Thrift class's Python __eq__ per row.
    if not any(map(is_, records, repeat(None))):
        return keys, cast(list[Value], records), []
    kept = list(map(is_not, records, repeat(None)))
    deletes = [key for key, keep in zip(keys, kept, strict=True) if not keep]
    return list(compress(keys, kept)), cast(list[Value], list(compress(records, kept))), deletes


def _chunks(rows: int) -> Iterator[tuple[int, int, int]]:
    """(start, stop, statement size) per statement: ROWS_PER_STATEMENT rows each, the rest in
    a statement of the next power of two, padded by `_row_params`. So the connection's cache
    holds a dozen statements rather than up to 128 of any size (300 batches of 1 to 3000 rows
    grew the process by 44 MiB when each batch's rest had a statement of its own size)."""
    for start in range(0, rows, ROWS_PER_STATEMENT):
        stop = min(start + ROWS_PER_STATEMENT, rows)
        yield start, stop, 1 << (stop - start - 1).bit_length()


def _upsert_statement(rows: int) -> str:
    statement = _STATEMENTS.get(rows)
    if statement is None:
        statement = _STATEMENTS[rows] = (
            "INSERT OR REPLACE INTO kv VALUES " + ",".join(["(?,?,?,?,?)"] * rows)
        )
    return statement


def _row_params(keys: list[str], records: list[Value], size: int) -> list[object]:
    """The parameters of `_upsert_statement(size)`, row after row, each column put in place by
    one slice assignment. Short of `size` rows, the last row is repeated: writing the same row
    again within the statement changes nothing."""
    if len(keys) < size:
        pad = size - len(keys)
        keys = keys + keys[-1:] * pad
        records = records + records[-1:] * pad
    params: list[object] = [None] * (5 * size)
    params[0::5] = keys
    params[1::5] = list(map(_VERSION, records))
    params[2::5] = list(map(_ORIGINATOR, records))
    params[3::5] = list(map(_VALUE, records))
    params[4::5] = list(map(_TTL_VERSION, records))
    return params


def _lower_priority(niceness: int) -> None:
    """Raise the calling thread's nice value by `niceness` (on Linux it is per thread)."""
    if sys.platform != "linux":
        return
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread,
                       min(19, os.getpriority(os.PRIO_PROCESS, thread) + niceness))
    except OSError as exc:  # raising one's own nice value needs no privilege: not expected
        log.warning("cannot lower the writer's CPU priority: %s", exc)


def _storage_error_text(exc: sqlite3.Error, path: Path) -> str:
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL:
        return f"disk full writing {path}"
    if code is not None and code & 0xFF == sqlite3.SQLITE_READONLY:
        return f"read-only: cannot write {path}"
    if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc):
        return f"read-only: cannot write {path}"
    if code is not None and code & 0xFF == sqlite3.SQLITE_IOERR:
        name = getattr(exc, "sqlite_errorname", "SQLITE_IOERR")
        return f"I/O error writing {path} ({name})"
    return f"{exc} ({path})"

