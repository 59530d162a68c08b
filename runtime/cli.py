"""The `radixgen` console script: `radixgen serve [options]`."""

from __future__ import annotations

import sys


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] != "serve":
        sys.exit("usage: radixgen serve [--model-path PATH] [--port N] ... (radixgen serve --help)")
    from runtime.launch_server import main as serve

    serve(sys.argv[2:])


if __name__ == "__main__":
    main()
