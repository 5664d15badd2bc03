"""The chaos workload: writer threads setting keys on random nodes, every outcome logged.

Each writer (seeded) mixes: its own keys with an infinite TTL and rising versions; shared keys
that every writer competes for (random versions, so the merge rule decides); finite-TTL keys
(1.5-6 s), some refreshed TTL-only (higher ttl_version) while alive; and bulk sets of 30 keys.
A write is acknowledged when the node answers it without a no-merge reason; a timeout or an
error makes it uncertain (the node may have applied it). See `kvmesh.chaos.model`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping, Sequence

from kvmesh.chaos.model import Write, WriteLog
from kvstore import TTL_INFINITY, ClientCurve, KvStoreClient, KvStoreError, Value

__all__ = ["Writer", "monotonic_ms"]

SHARED_KEYS = 8
BULK_KEYS = 30
WRITE_TIMEOUT_S = 0.5


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Writer(threading.Thread):
    def __init__(self, name: str, urls: Sequence[str], log: WriteLog, seed: int,
                 pace_s: float = 0.03,
                 curves: Mapping[str, ClientCurve | None] | None = None) -> None:
        super().__init__(name=f"writer-{name}", daemon=True)
        self.writer = name
        self.urls = list(urls)
        self.curves = dict(curves or {})  # url -> the operator's keys for that node
        self.log = log
        self.rng = random.Random(seed)
        self.pace_s = pace_s
        self.stop_event = threading.Event()
        self._clients: dict[str, KvStoreClient] = {}
        self._ops = 0
        self._own_version = 0
        self._bulk_version = 0
        self._finite: dict[str, tuple[int, int, int]] = {}  # key -> (ttl_version, sent, ttl)
        self.acked = 0
        self.uncertain = 0

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.step()
                self.stop_event.wait(self.pace_s)
        finally:
            for client in self._clients.values():
                client.close()

    def stop(self) -> None:
        self.stop_event.set()

    def _client(self, url: str) -> KvStoreClient:
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = KvStoreClient(
                url, timeout_s=WRITE_TIMEOUT_S, curve=self.curves.get(url))
        return client

    def step(self) -> None:
        self._ops += 1
        roll = self.rng.random()
        now = monotonic_ms()
        if roll < 0.3:
            self._own_version += 1
            kv = {f"own/{self.writer}/{self.rng.randrange(20)}":
                  self._value(self._own_version, f"{self.writer}:{self._ops}".encode())}
        elif roll < 0.55:
            version = self.rng.randint(1, 3 + self._ops // 20)
            kv = {f"shared/{self.rng.randrange(SHARED_KEYS)}":
                  self._value(version, f"{self.writer}:{self._ops}".encode())}
        elif roll < 0.75:
            ttl = self.rng.randint(1500, 6000)
            key = f"ttl/{self.writer}/{self._ops}"
            kv = {key: self._value(1, b"t", ttl)}
            self._finite[key] = (0, now, ttl)
        elif roll < 0.9:
            alive = [k for k, (_v, sent, ttl) in self._finite.items() if sent + ttl - 800 > now]
            if not alive:
                return
            key = self.rng.choice(sorted(alive))
            ttl_version, _sent, _ttl = self._finite[key]
            ttl = self.rng.randint(1500, 6000)
            self._finite[key] = (ttl_version + 1, now, ttl)
            kv = {key: Value(version=1, originator_id=self.writer, value=None, ttl_ms=ttl,
                             ttl_version=ttl_version + 1)}
        else:
            self._bulk_version += 1
            kv = {f"bulk/{self.writer}/{i}": self._value(self._bulk_version, b"b" * 16)
                  for i in range(BULK_KEYS)}
        self._send(self.rng.choice(self.urls), kv)
        self._finite = {k: v for k, v in self._finite.items() if v[1] + v[2] > now}

    def _value(self, version: int, data: bytes, ttl: int = TTL_INFINITY) -> Value:
        return Value(version=version, originator_id=self.writer, value=data, ttl_ms=ttl,
                     ttl_version=0)

    def _send(self, url: str, kv: dict[str, Value]) -> None:
        # The client may fill in fields of what it sends: log copies of what we meant.
        intended = {k: Value(v.version, v.originator_id, v.value, v.ttl_ms, v.ttl_version)
                    for k, v in kv.items()}
        sent = monotonic_ms()
        token = id(intended)
        deadline = sent + int(WRITE_TIMEOUT_S * 1000) + 1000
        self.log.begin(token, (Write(k, v, sent, deadline, acked=False)
                               for k, v in intended.items()))
        try:
            refused = self._client(url).set(kv)
        except KvStoreError:
            done = monotonic_ms()
            self.uncertain += len(intended)
            self.log.extend((Write(k, v, sent, done, acked=False)
                             for k, v in intended.items()), token)
            return
        done = monotonic_ms()
        applied = [Write(k, v, sent, done, acked=True) for k, v in intended.items()
                   if k not in refused]
        self.acked += len(applied)
        self.log.extend(applied, token)
