"""The ZAP handler's thread: pyzmq's `Authenticator` answering on a plain thread, no asyncio.

pyzmq's `ThreadAuthenticator` runs the same `Authenticator` inside an asyncio loop, and
importing it loads asyncio, ssl and `zmq.asyncio`: about 9 MiB of a node's memory (issue 21)
for a handler whose one decision is a dictionary lookup. Here the ZAP protocol itself is still
pyzmq's (`Authenticator.start/handle_zap_message/stop`); this module only supplies the thread:
a blocking poll over the ZAP socket and a stop pipe.

`handle_zap_message` is a coroutine because a credentials provider may be asynchronous. Ours
(`NodeSecurity.callback`) is not, so the coroutine finishes at its first step; one that
suspended would be a provider this thread cannot serve, and is refused loudly.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Coroutine
from typing import Any

import zmq
from zmq.auth.base import Authenticator

_STOP = b"STOP"
_pipe_ids = itertools.count()


def run_to_completion(step: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that never waits (a synchronous credentials provider) to its end."""
    try:
        step.send(None)
    except StopIteration:
        return
    step.close()
    raise RuntimeError("a ZAP credentials provider waited: it must answer synchronously")


class ZapThread(Authenticator):
    """An `Authenticator` served by its own thread until `stop()`."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], log: logging.Logger) -> None:
        super().__init__(context=context, log=log)
        self._endpoint = f"inproc://kvstore-zap-stop-{next(_pipe_ids)}"
        self._stop_pipe: zmq.Socket[bytes] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind the ZAP socket (before any server socket binds) and start answering."""
        super().start()
        self._stop_pipe = self.context.socket(zmq.PAIR)
        self._stop_pipe.linger = 0
        self._stop_pipe.bind(self._endpoint)
        listener = self.context.socket(zmq.PAIR)
        listener.linger = 0
        listener.connect(self._endpoint)
        self._thread = threading.Thread(target=self._serve, args=(listener,), name="kvstore-zap",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._stop_pipe is not None:
            self._stop_pipe.send(_STOP)
            if self._thread is not None:
                self._thread.join()
            self._stop_pipe.close()
            self._stop_pipe = None
            self._thread = None
        super().stop()

    def _serve(self, listener: zmq.Socket[bytes]) -> None:
        poller = zmq.Poller()
        poller.register(listener, zmq.POLLIN)
        poller.register(self.zap_socket, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if listener in ready:
                    return
                if self.zap_socket in ready:
                    request = self.zap_socket.recv_multipart()
                    try:
                        run_to_completion(self.handle_zap_message(request))
                    except Exception:
                        # A REP socket must answer before its next request: without a reply
                        # every later handshake would hang, so refuse this one and go on.
                        self.log.exception("ZAP request failed; refusing it")
                        self._send_zap_reply(request[1] if len(request) > 1 else b"", b"500",
                                             b"internal error")
        finally:
            listener.close()
