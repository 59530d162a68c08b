"""Process-wide settings of the DSL (the default backend)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class GlobalConfig:
    """`default_backend` serves programs run without `backend=`."""

    default_backend: Any = None
    # run_batch fills the prefix cache with a program's constant traced prefix first
    enable_precache_with_tracing: bool = True


global_config = GlobalConfig()
