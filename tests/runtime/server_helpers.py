"""Start a real server subprocess for tests and wait until it serves."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, *extra_args: str, timeout: float = 180, env: dict | None = None):
        """`env`: extra environment variables for the server, on top of this process's."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
        cmd = [sys.executable, "-m", "runtime.launch_server", "--port", str(self.port), *extra_args]
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (the server's lifetime; no file left)
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"server did not start:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


class SharedServer:
    """A server that many tests (or benchmark cases) share, with the API key its requests need.
    `up()` starts it, and starts it again once it died, or, when marked `suspect`, once it no
    longer generates: a request that takes it down then costs one restart, not every later
    test."""

    def __init__(self, *args: str, env: dict | None = None, api_key: str | None = None):
        self.args = args + (("--api-key", api_key) if api_key else ())
        self.env = env
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.process: ServerProcess | None = None
        self.first_info: dict | None = None  # /get_server_info after the first start
        self.suspect = False
        self.restarts = 0

    @property
    def url(self) -> str:
        return self.process.url

    def post(self, path: str, body, timeout: float = 60, **kw) -> httpx.Response:
        """POST a JSON body (lone surrogates go out as JSON escapes) or raw bytes."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **self.headers, **kw.pop("headers", {})}
        return httpx.post(self.url + path, content=content, headers=headers, timeout=timeout, **kw)

    def stats(self) -> dict:
        r = httpx.get(f"{self.url}/get_server_info", headers=self.headers, timeout=10)
        return r.json().get("stats", {})

    def answers(self) -> bool:
        """The process runs, and /health and a one-token /generate both succeed."""
        if self.process is None or self.process.proc.poll() is not None:
            return False
        try:
            health = httpx.get(f"{self.url}/health", timeout=10)
            gen = self.post("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 1}})
        except httpx.HTTPError:
            return False
        return health.status_code == 200 and gen.status_code == 200 and "text" in gen.json()

    def up(self) -> SharedServer:
        """This server, started (again) if it is not running or, when suspect, not answering."""
        running = self.process is not None and self.process.proc.poll() is None
        healthy = running and (not self.suspect or self.answers())
        self.suspect = False
        if healthy:
            return self
        if self.process is not None:
            self.restarts += 1
        self.stop()
        self.process = ServerProcess(*self.args, env=self.env)
        if self.first_info is None:
            r = httpx.get(f"{self.url}/get_server_info", headers=self.headers, timeout=10)
            self.first_info = r.json()
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


def post_raw(
    port: int, path: str, pieces, headers: dict | None = None, chunked: bool = False
) -> int | None:
    """POST a body given as byte pieces, the way a client that reads early answers does: stop
    sending as soon as the server answers (a 413 before the body is read). `chunked` sends it
    without a Content-Length. Returns the status code, None if the server closed without one."""
    pieces = list(pieces)
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if chunked:
        head.append("Transfer-Encoding: chunked")
        pieces = [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p] + [b"0\r\n\r\n"]
    else:
        head.append(f"Content-Length: {sum(len(p) for p in pieces)}")
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        pending, rest = memoryview(b""), iter(pieces)
        try:
            while True:
                readable, writable, _ = select.select([sock], [sock], [], 60)
                if readable or not writable:
                    break  # the server answered (or stalled): stop sending
                if not pending:
                    piece = next(rest, None)
                    if piece is None:
                        break
                    pending = memoryview(piece)
                pending = pending[sock.send(pending) :]
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed its side; what it said before that may still be readable
        answer = b""
        try:
            while b"\r\n" not in answer and (got := sock.recv(4096)):
                answer += got
        except (ConnectionResetError, TimeoutError):
            pass
    first = answer.split(b"\r\n", 1)[0].split()
    return int(first[1]) if len(first) >= 2 and first[1].isdigit() else None
