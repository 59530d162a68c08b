"""`sgl.Runtime` serves programs and stops its server, also when the process that made it is
killed. The shared test server is a Runtime (see conftest.py); the first test stops it, so
this is the file pytest runs last (a later test would start it again), and the launcher's
server below starts only after that: one server at a time.

The launcher is a Python process that makes a Runtime with an API key on a thread that ends
at once; its server serves the API-key tests, then the launcher is killed with SIGKILL."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest

import lang as sgl

API_KEY = "lang-test-key"
GONE_WITHIN_S = 30.0


@sgl.function
def hello(s):
    s += sgl.user("Say hi.") + sgl.assistant(sgl.gen("answer"))


@sgl.function
def hello_and_mood(s):
    s += sgl.user("Say hi.") + sgl.assistant(sgl.gen("answer", max_tokens=4))
    s += sgl.user("Is your mood good or bad?")
    s += sgl.assistant(sgl.select("mood", ["good", "bad"]))


def port_answers(url: str) -> bool:
    address = urlparse(url)
    try:
        with socket.create_connection((address.hostname, address.port), 2):
            return True
    except OSError:
        return False


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_runtime_serves_and_shuts_down(runtime):
    assert runtime.get_server_info()["server_args"]["model_path"] == "smollm2"
    state = hello.run(backend=runtime, max_new_tokens=2)
    assert state.get_meta_info("answer")["completion_tokens"] <= 2
    runtime.shutdown()
    assert runtime.process is None
    assert not port_answers(runtime.url)
    runtime.shutdown()  # a second call does nothing


LAUNCHER = textwrap.dedent(
    """
    import json, sys, threading
    import lang as sgl

    made = {}
    def make():
        made["runtime"] = sgl.Runtime(model_path="smollm2", log_level="warning", api_key=sys.argv[1])
    thread = threading.Thread(target=make)
    thread.start()
    thread.join()  # the thread that started the server has ended
    runtime = made["runtime"]
    print(json.dumps({"url": runtime.url, "pid": runtime.process.pid}), flush=True)
    sys.stdin.read()  # until the test kills us
    """
)


@dataclass
class Launcher:
    process: subprocess.Popen
    url: str
    server_pid: int


@pytest.fixture(scope="module")
def launcher():
    if sys.platform != "linux":
        pytest.skip("reads /proc")
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, API_KEY],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    line = process.stdout.readline()
    if not line:
        process.kill()
        pytest.fail(f"the launcher exited ({process.wait()}) without starting a server")
    started = json.loads(line)
    yield Launcher(process, started["url"], started["pid"])
    process.kill()
    process.wait()
    deadline = time.monotonic() + GONE_WITHIN_S
    while running(started["pid"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    if running(started["pid"]):  # never leave a server behind, even when the test failed
        os.kill(started["pid"], signal.SIGKILL)


def test_api_key_is_required_and_sufficient(launcher):
    endpoint = sgl.RuntimeEndpoint(launcher.url, api_key=API_KEY)
    state = hello_and_mood.run(backend=endpoint, temperature=0)
    assert 1 <= state.get_meta_info("answer")["completion_tokens"] <= 4
    assert state["mood"] in ("good", "bad")

    for key in (None, "wrong-key"):
        start = time.monotonic()
        with pytest.raises(sgl.AuthenticationError, match="401.*API key"):
            sgl.RuntimeEndpoint(launcher.url, api_key=key)
        assert time.monotonic() - start < 10  # refused at once, no hang


def test_api_key_through_the_openai_backend(launcher):
    keyed = sgl.OpenAI("smollm2", base_url=launcher.url + "/v1", api_key=API_KEY)
    state = hello.run(backend=keyed, max_new_tokens=2, temperature=0)
    assert 1 <= state.get_meta_info("answer")["completion_tokens"] <= 2

    wrong = sgl.OpenAI("smollm2", base_url=launcher.url + "/v1", api_key="wrong-key")
    with pytest.raises(sgl.AuthenticationError, match="401"):
        hello.run(backend=wrong, max_new_tokens=2)


def test_server_stops_when_its_launcher_is_killed(launcher):
    """Runs last in this file: it kills the launcher the tests above share."""
    server_children = children_of(launcher.server_pid)
    assert running(launcher.server_pid) and port_answers(launcher.url)
    launcher.process.send_signal(signal.SIGKILL)
    launcher.process.wait()
    deadline = time.monotonic() + GONE_WITHIN_S
    processes = [launcher.server_pid, *server_children]
    while time.monotonic() < deadline and (
        port_answers(launcher.url) or any(map(running, processes))
    ):
        time.sleep(0.5)
    assert not port_answers(launcher.url)
    assert not [pid for pid in processes if running(pid)]
