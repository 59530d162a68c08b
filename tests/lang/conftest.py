"""One real server (started through `sgl.Runtime`) shared by every DSL test that needs a
model; a test that shuts it down gets it started again for the next one. Setting
LANG_TEST_SERVER_URL points the tests at a server that is already running instead."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The test server often shares a small machine with other work: one intra-op thread keeps
# its forward steps from stalling on descheduled worker threads (the server inherits this).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

import lang as sgl  # noqa: E402

EXTERNAL_URL = os.environ.get("LANG_TEST_SERVER_URL")


class LangServer:
    """The shared `sgl.Runtime`, (re)started on demand."""

    def __init__(self):
        self.runtime: sgl.Runtime | None = None
        self.external: sgl.RuntimeEndpoint | None = None

    def up(self) -> sgl.Runtime:
        process = self.runtime.process if self.runtime else None
        if process is None or process.poll() is not None:
            self.runtime = sgl.Runtime(model_path="smollm2", log_level="warning")
        return self.runtime

    def endpoint(self) -> sgl.RuntimeEndpoint:
        if EXTERNAL_URL:
            self.external = self.external or sgl.RuntimeEndpoint(EXTERNAL_URL)
            return self.external
        return self.up().endpoint

    def stop(self) -> None:
        if self.runtime is not None:
            self.runtime.shutdown()


@pytest.fixture(scope="session")
def lang_server():
    server = LangServer()
    yield server
    server.stop()


@pytest.fixture
def backend(lang_server) -> sgl.RuntimeEndpoint:
    """The server's endpoint, also the default backend of the test's programs."""
    endpoint = lang_server.endpoint()
    sgl.set_default_backend(endpoint)
    yield endpoint
    sgl.set_default_backend(None)


@pytest.fixture
def runtime(lang_server) -> sgl.Runtime:
    """The shared server's `sgl.Runtime` (not available with LANG_TEST_SERVER_URL)."""
    if EXTERNAL_URL:
        pytest.skip("LANG_TEST_SERVER_URL is set: no Runtime of our own")
    return lang_server.up()
