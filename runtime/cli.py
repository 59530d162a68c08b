"""The `radixgen` console script: `radixgen serve [options]`."""

from __future__ import annotations

import sys

USAGE = """usage: radixgen serve [--model-path PATH] [--port N] ...

commands:
  serve      serve a model over HTTP (radixgen serve --help lists the options)

options:
  -h, --help     show this message
  --version      show the version
"""


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else None
    if command in ("-h", "--help"):
        print(USAGE, end="")
        return
    if command == "--version":
        from runtime.version import version

        print(f"radixgen {version()}")
        return
    if command != "serve":
        sys.stderr.write(USAGE)
        sys.exit(2)
    from runtime.launch_server import main as serve

    serve(sys.argv[2:])


if __name__ == "__main__":
    main()
