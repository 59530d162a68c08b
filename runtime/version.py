"""The installed version of radixgen."""

from __future__ import annotations

from importlib import metadata


def version() -> str:
    try:
        return metadata.version("radixgen")
    except metadata.PackageNotFoundError:
        return "unknown"
