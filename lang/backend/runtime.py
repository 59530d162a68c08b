"""`Runtime`: start a radixgen server in a subprocess (`runtime.launch_server` behind the
lifeline of `lang.backend.lifeline`), wait until it is healthy, and shut it down on
`shutdown()`, at interpreter exit, or when this process dies in any other way."""

from __future__ import annotations

import atexit
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from lang.backend.http import HttpClient
from lang.backend.runtime_endpoint import RuntimeEndpoint
from lang.errors import BackendError

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0  # how long a stopping server may take before it is killed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(
    model_path: str, port: int, host: str, lifeline_fd: int, **server_args: Any
) -> list[str]:
    """The launch command of a server that stops when `lifeline_fd` (the read end of a pipe)
    reads EOF; `foo_bar=value` becomes `--foo-bar value`, True a bare flag."""
    cmd = [sys.executable, "-m", "lang.backend.lifeline", str(lifeline_fd)]
    cmd += ["--model-path", model_path, "--host", host, "--port", str(port)]
    for key, value in server_args.items():
        if value is None or value is False:
            continue
        cmd.append("--" + key.replace("_", "-"))
        if value is not True:
            cmd.append(str(value))
    return cmd


class Runtime:
    """A server for this process's programs: `Runtime(model_path="smollm2", **server_args)`
    takes the server's CLI options as keyword arguments (`disable_radix_cache=True`,
    `schedule_policy="fcfs"`, ...). `endpoint` is its `RuntimeEndpoint`; the Runtime itself
    can be passed wherever a backend is expected."""

    def __init__(
        self,
        model_path: str = "smollm2",
        host: str = "127.0.0.1",
        port: int | None = None,
        log_level: str = "error",
        launch_timeout: float = 300.0,
        api_key: str | None = None,
        **server_args: Any,
    ):
        self.port = port or _free_port()
        self.url = f"http://{host}:{self.port}"
        # A pipe rather than PR_SET_PDEATHSIG: its EOF comes however this process dies, not
        # when the thread that started the server exits, and there is no preexec_fn to run.
        lifeline_read, self._lifeline = os.pipe()
        cmd = server_command(
            model_path,
            self.port,
            host,
            lifeline_read,
            log_level=log_level,
            api_key=api_key,
            **server_args,
        )
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (open for the server's life)
            "w+", prefix="radixgen-runtime-", suffix=".log", delete=False
        )
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self.process: subprocess.Popen | None = subprocess.Popen(
                cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, pass_fds=[lifeline_read]
            )
        except BaseException:
            os.close(self._lifeline)
            raise
        finally:
            os.close(lifeline_read)  # the server's copy is the only reader
        atexit.register(self.shutdown)
        self._wait_healthy(launch_timeout, api_key)
        self.endpoint = RuntimeEndpoint(self.url, api_key=api_key)

    def _wait_healthy(self, timeout: float, api_key: str | None) -> None:
        http = HttpClient(self.url, api_key, timeout=2.0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.output()
                self.shutdown()
                raise BackendError(f"the server exited while starting:\n{output[-4000:]}")
            try:
                http.get("/health")
                logger.info("server ready at %s", self.url)
                return
            except BackendError:
                time.sleep(0.5)
        self.shutdown()
        raise BackendError(f"the server did not become healthy within {timeout:.0f} s")

    def output(self) -> str:
        """What the server printed so far."""
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def shutdown(self) -> None:
        """Stop the server (idempotent)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        os.close(self._lifeline)
        self.log.close()
        os.unlink(self.log.name)

    def cache_prefix(self, prefix: str) -> None:
        self.endpoint.cache_prefix(prefix)

    def flush_cache(self) -> None:
        self.endpoint.flush_cache()

    def get_server_info(self) -> dict:
        return self.endpoint.get_server_info()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
