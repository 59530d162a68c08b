"""`sgl.Runtime` serves programs and stops its server. The shared test server is a Runtime
(see conftest.py); this test stops it, so it lives in the file pytest runs last (a later test
would start it again)."""

import socket
from urllib.parse import urlparse

import pytest

import lang as sgl


@sgl.function
def hello(s):
    s += sgl.user("Say hi.") + sgl.assistant(sgl.gen("answer"))


def test_runtime_serves_and_shuts_down(runtime):
    assert runtime.get_server_info()["server_args"]["model_path"] == "smollm2"
    state = hello.run(backend=runtime, max_new_tokens=2)
    assert state.get_meta_info("answer")["completion_tokens"] <= 2
    address = urlparse(runtime.url)
    runtime.shutdown()
    assert runtime.process is None
    with pytest.raises(OSError), socket.create_connection((address.hostname, address.port), 2):
        pass
    runtime.shutdown()  # a second call does nothing
