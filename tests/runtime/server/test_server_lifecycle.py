"""Shutdown paths: SIGTERM and Ctrl-C stop every process and remove the sockets (exit code 0);
a crashed child takes the server down instead of leaving it hanging (exit code 1)."""

import os
import re
import signal
import subprocess
import time

import pytest

from tests.runtime.server_helpers import ServerProcess


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def ipc_dir(server: ServerProcess) -> str:
    return re.search(r"ipc sockets in (\S+)", server.output()).group(1)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def wait_exit(proc, timeout=30) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return proc.returncode
        time.sleep(0.2)
    raise AssertionError("server did not exit")


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)  # SIGINT takes the same path: out of `make test` for time
def test_signal_stops_everything_and_removes_sockets(sig):
    server = ServerProcess("--model-path", "smollm2", "--max-total-tokens", "1024")
    try:
        kids = children(server.proc.pid)
        sockets = ipc_dir(server)
        assert os.path.isdir(sockets)
        server.proc.send_signal(sig)
        assert wait_exit(server.proc) == 0  # a stop, not a crash
        assert "process died" not in server.output()
        time.sleep(0.5)
        assert not os.path.exists(sockets)
        for kid in kids:
            assert (
                not os.path.exists(f"/proc/{kid}")
                or "zombie" in read(f"/proc/{kid}/status").lower()
            )
    finally:
        server.stop()


def test_crashed_scheduler_takes_the_server_down():
    server = ServerProcess("--model-path", "smollm2", "--max-total-tokens", "1024")
    try:
        scheduler = [
            k for k in children(server.proc.pid) if "spawn_main" in read(f"/proc/{k}/cmdline")
        ]
        assert scheduler
        for k in scheduler:
            os.kill(k, signal.SIGKILL)
        assert wait_exit(server.proc) == 1  # a supervisor can tell a crash from a stop
        assert "process died" in server.output()
    finally:
        server.stop()


def test_children_exit_when_the_server_is_killed():
    server = ServerProcess("--model-path", "smollm2", "--max-total-tokens", "1024")
    try:
        kids = [k for k in children(server.proc.pid) if "spawn_main" in read(f"/proc/{k}/cmdline")]
        assert len(kids) == 2  # scheduler and detokenizer
        server.proc.kill()
        server.proc.wait()
        deadline = time.time() + 15
        while time.time() < deadline and any(os.path.exists(f"/proc/{k}") for k in kids):
            time.sleep(0.3)
        assert not any(os.path.exists(f"/proc/{k}") for k in kids)
    finally:
        server.stop()
