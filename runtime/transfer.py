"""Host-built step metadata on the model's device, in one transfer.

A step's small index and parameter arrays (token ids, positions, logit rows, sampling
parameters...) are assembled as Python lists on the host. On the CPU they become tensors in
place; on an accelerator they are packed into one host buffer and sent with a single
non-blocking copy, instead of one blocking copy each.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import torch

_EMPTY_INTS = torch.empty(0, dtype=torch.int64)
_EMPTY_FLOATS = torch.empty(0, dtype=torch.float32)


def to_device(
    device: torch.device | str,
    ints: Sequence[Sequence[int]] = (),
    floats: Sequence[Sequence[float]] = (),
) -> list[torch.Tensor]:
    """An int64 tensor for each list in `ints`, then a float32 tensor for each in `floats`,
    all on `device`. Off the CPU they are consecutive slices of one buffer, in that order."""
    device = torch.device(device)
    if device.type == "cpu":  # most lists of a step are empty: those share one empty tensor
        return [torch.tensor(x, dtype=torch.int64) if x else _EMPTY_INTS for x in ints] + [
            torch.tensor(x, dtype=torch.float32) if x else _EMPTY_FLOATS for x in floats
        ]
    host_ints = torch.tensor(list(chain.from_iterable(ints)), dtype=torch.int64)
    host_floats = torch.tensor(list(chain.from_iterable(floats)), dtype=torch.float32)
    # int64 words first: both parts stay aligned to their element size in the one buffer
    packed = torch.cat([host_ints.view(torch.uint8), host_floats.view(torch.uint8)])
    # not pinned: CUDA stages a copy from pageable memory and returns without waiting for the
    # device, while pinning a new buffer (and the event that guards it) cost ~150 µs a step
    moved = packed.to(device, non_blocking=True)
    cut = host_ints.numel() * 8
    int_parts = moved[:cut].view(torch.int64).split([len(x) for x in ints])
    float_parts = moved[cut:].view(torch.float32).split([len(x) for x in floats])
    return [*int_parts, *float_parts]


def pinned_if(device: torch.device | str) -> bool:
    """Whether host buffers meant for `device` should be pinned (page-locked): on CUDA only."""
    return torch.device(device).type == "cuda"
