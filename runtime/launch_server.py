"""python -m runtime.launch_server --model-path smollm2 --port 30000"""

from __future__ import annotations

import argparse

from runtime.server_args import ServerArgs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="radixgen serve",
        description="Serve a model over HTTP (native /generate and OpenAI-compatible /v1).",
    )
    ServerArgs.add_cli_args(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    from runtime.server.launcher import launch_server

    args = ServerArgs.from_cli(build_parser().parse_args(argv))
    launch_server(args)


if __name__ == "__main__":
    main()
