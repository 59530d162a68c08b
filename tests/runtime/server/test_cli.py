"""The command line: bad options end with exit code 2 and one line naming the option (no
traceback, before any model loads); --help shows defaults; --version; a port in use is found
before the model loads."""

import os
import socket
import subprocess
import sys

import pytest

# without TRITON_INTERPRET (the kernel tests set it), which would let triton run on the CPU
ENV = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"HF_HUB_OFFLINE": "1"}


def serve(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runtime.launch_server", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--max-total-tokens", "5"], "--max-total-tokens"),
        (["--log-level", "verbose"], "--log-level"),
        (["--device", "tpu"], "--device"),
        (["--model-path", "/no/such/model"], "/no/such/model"),
        (["--attention-backend", "triton", "--device", "cpu"], "--attention-backend"),
        (["--mem-fraction", "1.5"], "--mem-fraction"),
        (["--chunked-prefill-size", "0"], "--chunked-prefill-size"),
        (["--port", "70000"], "--port"),
        (["--json-whitespace", "lots"], "--json-whitespace"),
        (["--cpu-threads", "0"], "--cpu-threads"),
        (["--header-read-timeout", "0"], "--header-read-timeout"),
        (["--quantization", "int5"], "--quantization"),
        (["--kv-cache-dtype", "int8"], "--kv-cache-dtype"),
        (["--cuda-graph-max-bs", "0"], "--cuda-graph-max-bs"),
        (["--chat-template", "/no/such/template.jinja"], "--chat-template"),
        (["--tokenizer-path", "/no/such/tokenizer"], "--tokenizer-path"),
    ],
)
def test_bad_options_exit_2_with_one_clear_line(args, flag):
    done = serve(*args)
    assert done.returncode == 2, done.stderr
    assert flag in done.stderr and "Traceback" not in done.stderr


def test_help_shows_defaults_and_version_prints():
    done = serve("--help")
    assert done.returncode == 0
    assert "--grammar-compile-timeout" in done.stdout and "(default: 10.0)" in done.stdout
    assert serve("--version").stdout.startswith("radixgen ")


def test_console_script_help_and_unknown_command():
    script = [sys.executable, "-c", "from runtime.cli import main; main()"]
    ok = subprocess.run([*script, "--help"], capture_output=True, text=True, env=ENV)
    assert ok.returncode == 0 and "radixgen serve" in ok.stdout
    bad = subprocess.run([*script, "fly"], capture_output=True, text=True, env=ENV)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_a_port_in_use_is_found_before_the_model_loads():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve("--port", str(port), timeout=60)
    assert done.returncode == 2
    assert f"--port {port}" in done.stderr and "Traceback" not in done.stderr
    assert "ready on" not in done.stderr


def test_switches_given_as_engine_keywords_must_be_booleans():
    from runtime.server_args import ServerArgs

    for value in ("nope", 1, None, float("nan")):  # a flag never gives these; a keyword can
        with pytest.raises(ValueError, match="enable_deterministic_inference must be True or"):
            ServerArgs(enable_deterministic_inference=value)
    with pytest.raises(ValueError, match="disable_radix_cache"):
        ServerArgs(disable_radix_cache="false")
    assert ServerArgs(enable_deterministic_inference=True).enable_deterministic_inference
