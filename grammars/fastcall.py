"""Calls of the grammar kernels without numba's per-call dispatch.

A numba dispatcher types every argument of every call to pick the compiled version; for the
kernels of lazydfa.py and pda.py, whose arguments were tuples of some 50 arrays, that took
5-7 µs a call, more than many calls do (they now take boxes of those arrays: grammars/boxes.py).
Their callers pass arguments of fixed types (arrays made by the same constructors, C-contiguous
and writable; Python ints and bools; boxes), so each
kernel is compiled for one signature: after a first call through the dispatcher, `call` goes
straight to that version's entry point (~2 µs) for as long as the kernel has that one version.
RADIXGEN_CHECK_KERNEL_TYPES=1 (the test suite sets it; CHECK) types the arguments and checks them
against that version's signature at the first call of a kernel on each new set of arrays (a new
grammar, or arrays grown).
"""

from __future__ import annotations

import os

_entries: dict = {}
CHECK = bool(os.environ.get("RADIXGEN_CHECK_KERNEL_TYPES"))
_checked: set = set()


def call(kernel, *args):
    """kernel(*args)."""
    entry = _entries.get(kernel)
    if entry is not None and len(kernel.overloads) == 1:
        if CHECK:
            _check(kernel, args)
        return entry(*args)
    out = kernel(*args)
    overloads = getattr(kernel, "overloads", None)
    if overloads is not None and len(overloads) == 1:
        _entries[kernel] = next(iter(overloads.values())).entry_point
    return out


def _check(kernel, args) -> None:
    from numba import typeof

    key = (kernel, *(id(a) for a in args[:3]))
    if key in _checked:
        return
    _checked.add(key)
    (signature,) = kernel.signatures
    got = tuple(typeof(a) for a in args)
    if got != tuple(signature):
        raise TypeError(f"{kernel.__name__}: called with {got}, compiled for {signature}")
