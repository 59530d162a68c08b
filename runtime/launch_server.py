"""python -m runtime.launch_server --model-path smollm2 --port 30000"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys

from runtime.server_args import ServerArgs
from runtime.version import version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="radixgen serve",
        description="Serve a model over HTTP (native /generate and OpenAI-compatible /v1).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"radixgen {version()}")
    ServerArgs.add_cli_args(parser)
    return parser


def check_environment(args: ServerArgs) -> None:
    """What would otherwise fail after the model loads (or with a traceback), checked first:
    ValueError / OSError with a message naming the option."""
    import torch

    from runtime.model.loader import read_chat_template, resolve_model_path, resolve_tokenizer_path

    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        raise ValueError("--device cuda: no CUDA device is available on this machine")
    on_cpu = args.device == "cpu" or (args.device == "auto" and not cuda)
    if args.attention_backend == "triton" and on_cpu and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            "--attention-backend triton needs a CUDA device "
            "(or TRITON_INTERPRET=1 to interpret the kernels on the CPU, slowly)"
        )
    folder = resolve_model_path(args.model_path)  # converts a GGUF once; names a missing model
    from runtime.model.config import ModelConfig
    from runtime.model.loader import gguf_file
    from runtime.model.parallel import check_shapes
    from runtime.model.runner import pick_quantization

    device = "cpu" if on_cpu else "cuda"
    pick_quantization(args.quantization, device, gguf_file(args.model_path), args.tp_size)
    check_shapes(ModelConfig.from_folder(folder), args.tp_size)
    if device == "cuda" and args.tp_size // args.nnodes > torch.cuda.device_count():
        raise ValueError(
            f"--tp-size {args.tp_size}: {args.tp_size // args.nnodes} ranks on this node, "
            f"but it has {torch.cuda.device_count()} CUDA devices"
        )
    if args.tokenizer_path is not None:
        resolve_tokenizer_path(args.tokenizer_path)
    if args.chat_template is not None:
        read_chat_template(args.chat_template)
    if args.node_rank > 0:  # serves no HTTP
        return
    with socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((args.host, args.port))
        except OSError as exc:
            raise ValueError(
                f"--host {args.host} --port {args.port}: cannot listen there ({exc.strerror})"
            ) from None


def _as_flag(message: str) -> str:
    """ServerArgs names an option by its field ("max_total_tokens ..."): say --max-total-tokens."""
    field = message.split(" ", 1)[0]
    if field in {f.name for f in dataclasses.fields(ServerArgs)}:
        return "--" + field.replace("_", "-") + message[len(field) :]
    return message


def main(argv: list[str] | None = None) -> None:
    """Parse, check, serve; exits 2 on a bad option, 1 when a server process crashed."""
    parser = build_parser()
    namespace = parser.parse_args(argv)
    try:
        args = ServerArgs.from_cli(namespace)
        check_environment(args)
    except (ValueError, OSError) as exc:
        parser.exit(2, f"{parser.prog}: error: {_as_flag(str(exc))}\n")
    from runtime.server.launcher import launch_server

    sys.exit(launch_server(args))


if __name__ == "__main__":
    main()
