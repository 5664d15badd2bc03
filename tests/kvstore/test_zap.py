"""The ZAP handler's thread (kvstore/zap.py), spoken to in the ZAP protocol (RFC 27) directly."""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator

import pytest
import zmq

from kvstore.zap import ZapThread, run_to_completion

GOOD = b"\x01" * 32
BAD = b"\x02" * 32
BROKEN = b"\x03" * 32


class Provider:
    def callback(self, domain: str, key: bytes) -> bool:
        if key == zmq.utils.z85.encode(BROKEN):
            raise RuntimeError("the key table is broken")
        return key == zmq.utils.z85.encode(GOOD)


@pytest.fixture
def zap() -> Iterator[zmq.Socket[bytes]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    handler = ZapThread(context, logging.getLogger("test.zap"))
    handler.start()
    handler.configure_curve_callback(domain="kv", credentials_provider=Provider())
    asker = context.socket(zmq.REQ)
    asker.linger = 0
    asker.rcvtimeo = 5000
    asker.connect("inproc://zeromq.zap.01")
    try:
        yield asker
    finally:
        asker.close()
        handler.stop()
        assert handler.zap_socket is None
        context.term()


def ask(asker: zmq.Socket[bytes], key: bytes, request_id: bytes) -> list[bytes]:
    asker.send_multipart([b"1.0", request_id, b"kv", b"127.0.0.1", b"", b"CURVE", key])
    return asker.recv_multipart()


def test_known_key_allowed_with_its_z85_user_id_unknown_refused(zap: zmq.Socket[bytes]) -> None:
    version, request_id, status, _text, user_id, _meta = ask(zap, GOOD, b"1")
    assert (version, request_id, status) == (b"1.0", b"1", b"200")
    assert user_id == zmq.utils.z85.encode(GOOD)
    assert ask(zap, BAD, b"2")[2:5] == [b"400", b"Unknown key", b""]


def test_a_failing_provider_is_refused_and_the_thread_keeps_answering(
        zap: zmq.Socket[bytes]) -> None:
    assert ask(zap, BROKEN, b"3")[1:3] == [b"3", b"500"]
    assert ask(zap, GOOD, b"4")[1:3] == [b"4", b"200"]


def test_a_provider_that_waits_is_refused_loudly() -> None:
    async def waits() -> None:
        await _Suspend()

    with pytest.raises(RuntimeError, match="synchronously"):
        run_to_completion(waits())


class _Suspend:
    def __await__(self) -> Generator[None, None, None]:
        yield None
