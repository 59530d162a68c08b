"""A lifeline from a process to the server it launched, so that the server never outlives it.

The launcher keeps the write end of a pipe open and never writes to it; the server watches
the read end. The kernel closes the write end when the launcher dies, however it dies
(SIGKILL included), and the read then returns EOF: the server stops itself as on SIGTERM.

    python -m lang.backend.lifeline FD [server options]   # runs runtime.launch_server
"""

from __future__ import annotations

import logging
import os
import runpy
import signal
import sys
import threading
import time

from lang.backend.runtime import STOP_TIMEOUT_S

logger = logging.getLogger(__name__)


def watch(fd: int) -> threading.Thread:
    """Stop this process once `fd` reads EOF: SIGTERM, then SIGKILL after STOP_TIMEOUT_S."""
    thread = threading.Thread(target=_stop_on_eof, args=(fd,), name="lifeline", daemon=True)
    thread.start()
    return thread


def _stop_on_eof(fd: int) -> None:
    while os.read(fd, 4096):  # nobody writes: only EOF ends the read
        pass
    logger.warning("the process that launched this server is gone; stopping the server")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(STOP_TIMEOUT_S)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> None:
    """`FD [server options]`: watch FD, then serve as `python -m runtime.launch_server` would
    (run by name: lang imports no runtime module, it only starts the server's process)."""
    argv = sys.argv[1:] if argv is None else argv
    watch(int(argv[0]))
    sys.argv = [sys.argv[0], *argv[1:]]
    runpy.run_module("runtime.launch_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
