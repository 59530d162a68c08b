"""Fault injection for tests of failure isolation.

With RADIXGEN_FAULT_INJECTION=<stage>[,<stage>...] set in the server's environment, every
request whose rid starts with "fault-" raises InjectedFault at that stage, so a test can prove
that one failing request ends alone while the server and the other requests carry on.
"""

from __future__ import annotations

import os

STAGES = ("admission", "grammar", "sampling", "detokenize")
RID_PREFIX = "fault-"
_ACTIVE = frozenset(s for s in os.environ.get("RADIXGEN_FAULT_INJECTION", "").split(",") if s)


class InjectedFault(RuntimeError):
    """The failure a test asked for."""


def inject(stage: str, rid: str) -> None:
    """Raise InjectedFault if faults are switched on for `stage` and `rid` is a test victim."""
    if stage in _ACTIVE and rid.startswith(RID_PREFIX):
        raise InjectedFault(f"injected fault at the {stage} stage")
