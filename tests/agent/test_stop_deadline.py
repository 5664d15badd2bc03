"""An agent told to stop is gone within its deadline, even when a thread of it hangs."""

from __future__ import annotations

import subprocess
import sys

HANGS = """
import logging, threading, time
from kvmesh.agent.agent import StopDeadline
logging.basicConfig()
StopDeadline(0.3).arm()
threading.Event().wait(60)  # a thread that never returns: the stop hangs
"""

ENDS = """
from kvmesh.agent.agent import StopDeadline
StopDeadline(30).arm()  # the process ends well before: the deadline does not hold it up
"""


def test_a_stop_that_hangs_ends_the_process_at_the_deadline() -> None:
    done = subprocess.run([sys.executable, "-c", HANGS], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 1
    assert "did not stop within 0.3 s: exiting" in done.stderr


def test_a_process_that_ends_in_time_is_not_held_up() -> None:
    done = subprocess.run([sys.executable, "-c", ENDS], capture_output=True, text=True,
                          timeout=10)
    assert done.returncode == 0, done.stderr


# The main thread holds `stop`'s lock (as inside `stop.wait()`) when SIGTERM arrives: the
# handler must not need it. Before, the handler called `stop.set()` and waited for itself.
HELD = """
import os, signal, threading
from kvmesh.agent.agent import SignalStop
stop, on_signal = threading.Event(), SignalStop(deadline_s=1)
signal.signal(signal.SIGTERM, on_signal.handle)
with stop._cond:  # what Event.wait holds around its waits
    os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, with the lock held
    assert on_signal.requested()
print("asked to stop")
threading.Event().wait(60)  # a stop that hangs: the armed alarm ends the process
"""


def test_a_signal_while_the_main_thread_holds_a_lock_stops_and_the_alarm_ends_it() -> None:
    done = subprocess.run([sys.executable, "-c", HELD], capture_output=True, text=True,
                          timeout=30)
    assert "asked to stop" in done.stdout, done.stderr
    assert done.returncode == -14  # SIGALRM, after the 2 s deadline
