"""The AVX2 kernels of qgemv.c (and the AVX-512 VNNI products of qgemv_avx512.c), compiled
once with gcc into the cache folder, via ctypes.

`load()` returns None (and the caller uses torch's kernels) when the CPU has no AVX2/FMA, no C
compiler is found, or RADIXGEN_NO_NATIVE_KERNELS is set. The VNNI products run where the CPU
has avx512_vnni, unless RADIXGEN_NO_AVX512 is set (or `use_avx512(lib, False)` is called).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile

import torch

from runtime.model.loader import cache_root

logger = logging.getLogger(__name__)

_SOURCES = [
    os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    for name in ("qgemv.c", "qgemv_rows.c", "qgemv_avx512.c", "qgemv_bf16.c")
]
_HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qgemv.h")
_FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC"]
_P, _I64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int


GROUP = 32  # values per int4 group
# The fewest rows of a product that the AVX-512 VNNI kernels take (fewer go to the AVX2 ones).
# int8 (SmolLM2's LM head: 28 MB of codes, streamed from memory) measured on par at 1 and 16
# rows on a Zen 4 EPYC and up to 1.7x slower at 4-8: full batches only.
AVX512_ROWS = {"int4": 1, "int8": 16}


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """[rows, cols] codes in [0, 15] -> [rows, cols // 2] bytes in the GGUF group layout."""
    g = codes.view(codes.shape[0], -1, 2, GROUP // 2)
    return (g[:, :, 0] | (g[:, :, 1] << 4)).reshape(codes.shape[0], -1)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    g = packed.view(packed.shape[0], -1, GROUP // 2)
    return torch.stack([g & 15, g >> 4], dim=2).view(packed.shape[0], -1)


@functools.cache
def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return set()


@functools.cache
def load() -> ctypes.CDLL | None:
    if os.environ.get("RADIXGEN_NO_NATIVE_KERNELS") or not {"avx2", "fma"} <= cpu_flags():
        return None
    compiler = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if compiler is None:
        logger.info("no C compiler: quantized weights run on torch's kernels")
        return None
    digest = hashlib.sha1(" ".join(_FLAGS).encode())
    for source in (*_SOURCES, _HEADER):
        with open(source, "rb") as f:
            digest.update(f.read())
    digest = digest.hexdigest()[:12]
    path = os.path.join(cache_root(), "kernels", f"qgemv-{digest}.so")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
        os.close(fd)
        try:
            subprocess.run(
                [compiler, *_FLAGS, *_SOURCES, "-o", tmp, "-lm"],
                check=True,
                capture_output=True,
                timeout=120,
            )
            os.replace(tmp, path)
        except (OSError, subprocess.SubprocessError) as exc:
            os.unlink(tmp)
            logger.warning("could not build %s (%s): using torch's kernels", _SOURCES, exc)
            return None
    lib = ctypes.CDLL(path)
    lib.int4_dequantize.argtypes = [_P, _P, _P, _I64, _I64, _P, _INT]
    lib.int8_dequantize.argtypes = [_P, _P, _P, _INT, _I64, _I64, _P, _INT]
    lib.rms_norm.argtypes = [_P, _I64, _P, _I64, _I64, ctypes.c_float, _P, _INT]
    lib.rotary_inplace.argtypes = [_P, _I64, _I64, _I64, _I64, _P, _P, _P, _INT]
    lib.decode_attention.argtypes = [_P, _I64, _P, _P, _I64, _P, _I64, _P, _I64, _I64, _I64]
    lib.decode_attention.argtypes += [_I64, ctypes.c_float, _P, _INT, _INT]
    lib.int4_linear.argtypes = [_P, _P, _P, _I64, _I64, _P, _I64, _P, _INT]
    lib.int8_linear.argtypes = [_P, _P, _P, _INT, _I64, _I64, _P, _I64, _P, _INT]
    lib.write_kv.argtypes = [_P, _I64, _I64, _I64, _I64, _P, _I64, _P, _INT, _INT]
    lib.silu_mul.argtypes = [_P, _I64, _I64, _P, _INT]
    lib.decode_step.argtypes = [_P, _P, _I64, _P, _P, _P, _I64, _P, _INT]
    lib.tiles_linear.argtypes = [_P, _I64, _I64, _P, _I64, _P, _INT]
    lib.argmax_rows.argtypes = [_P, _I64, _I64, _P, _I64, _P, _INT]
    lib.set_avx512.argtypes = [_INT, _INT]
    use_avx512(lib, avx512_wanted())
    return lib


def avx512_wanted() -> bool:
    """Whether the VNNI products run: the CPU has them and RADIXGEN_NO_AVX512 is not set."""
    return avx512_vnni() and not os.environ.get("RADIXGEN_NO_AVX512")


def avx512_vnni() -> bool:
    """Whether this CPU runs the AVX-512 VNNI products (qgemv_avx512.c)."""
    return {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= cpu_flags()


def use_avx512(lib: ctypes.CDLL, on: bool, invariant: bool = False) -> None:
    """Products of AVX512_ROWS or more rows on the VNNI kernels (on), or all on the AVX2 ones;
    for the whole process. Only on a CPU with avx512_vnni. `invariant` (batch-invariant
    decode): each weight kind on one kernel at every row count (int8, whose VNNI kernel takes
    only full batches, on the AVX2 one), since the two sum in another order."""
    on = on and avx512_vnni()
    int8_rows = AVX512_ROWS["int8"] if on and not invariant else 0
    lib.set_avx512(AVX512_ROWS["int4"] if on else 0, int8_rows)


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _rows_ok(x: torch.Tensor) -> bool:
    # float32 rows whose last dim is contiguous: what rms_norm and rotary_inplace take
    return x.dtype == torch.float32 and x.dim() == 2 and x.stride(1) == 1 and x.device.type == "cpu"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
    """RMSNorm of float32 rows [n, dim] in one call, or None when the kernel does not apply."""
    lib = load()
    if lib is None or not _rows_ok(x) or weight.dtype != torch.float32:
        return None
    out = torch.empty(x.shape)
    lib.rms_norm(
        _ptr(x), x.stride(0), _ptr(weight), x.shape[0], x.shape[1], eps, _ptr(out),
        torch.get_num_threads(),
    )  # fmt: skip
    return out


def rotary_inplace(
    qk: torch.Tensor, heads: int, dim: int, positions: torch.Tensor, cos, sin
) -> bool:
    """Rotate the first `heads` heads of each row of `qk` [n, >= heads * dim] in place; False
    when the kernel does not apply."""
    lib = load()
    if lib is None or not _rows_ok(qk) or positions.dtype != torch.int64:
        return False
    if not (positions.is_contiguous() and cos.is_contiguous() and cos.dtype == torch.float32):
        return False
    lib.rotary_inplace(
        _ptr(qk), qk.stride(0), qk.shape[0], heads, dim, _ptr(positions), _ptr(cos), _ptr(sin),
        torch.get_num_threads(),
    )  # fmt: skip
    return True


NATIVE_KV_DTYPES = (torch.float32, torch.bfloat16)  # the pools the native kernels read


def kv_bf16(pool: torch.Tensor) -> int:
    """The kernels' flag for a pool's dtype: 1 for bf16, 0 for float32."""
    return int(pool.dtype == torch.bfloat16)


def write_kv(pool: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> bool:
    """pool[:, slots] = rows (rounded to bf16 for a bf16 pool) for a head-major float32 or bf16
    pool [kv_heads, pool slots, dim] and float32 rows [tokens, kv_heads, dim] with contiguous
    heads; False, untouched, where that does not apply."""
    lib = load()
    if (
        lib is None
        or rows.dtype != torch.float32
        or pool.dtype not in NATIVE_KV_DTYPES
        or rows.device.type != "cpu"
        or not pool.is_contiguous()
        or rows.stride(2) != 1
        or rows.stride(1) != rows.shape[2]
        or slots.dtype != torch.int64
        or not slots.is_contiguous()
    ):
        return False
    tokens, kv_heads, dim = rows.shape
    lib.write_kv(
        _ptr(rows), rows.stride(0), tokens, kv_heads, dim, _ptr(slots), pool.shape[1], _ptr(pool),
        kv_bf16(pool), torch.get_num_threads(),
    )  # fmt: skip
    return True


def argmax_rows(x: torch.Tensor, rows: list[int]) -> list[int] | None:
    """For each of `rows`, the index of the largest value of that row of float32 `x` [N, V]
    (the first of equal ones, NaN ignored: torch's argmax after NaN is set to -inf), read in
    place in one call; None where the kernel does not apply."""
    lib = load()
    if lib is None or not _rows_ok(x) or x.shape[1] >= 1 << 31:
        return None
    picked = torch.tensor(rows, dtype=torch.int64)
    out = torch.empty(len(rows), dtype=torch.int64)
    threads = torch.get_num_threads()
    lib.argmax_rows(_ptr(x), x.stride(0), x.shape[1], _ptr(picked), len(rows), _ptr(out), threads)
    return out.tolist()


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor | None:
    """silu(gate) * up of float32 rows [n, 2 * inter] in one call, or None."""
    lib = load()
    if lib is None or not (_rows_ok(gate_up) and gate_up.is_contiguous()):
        return None
    rows, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(rows, inter)
    lib.silu_mul(_ptr(gate_up), rows, inter, _ptr(out), torch.get_num_threads())
    return out


def decode_attention_runs(query_dtype: torch.dtype | None, pool: torch.Tensor) -> bool:
    """Whether decode_attention runs queries of `query_dtype` over a K or V pool like `pool`
    (float32 queries on the CPU, a float32 or bf16 pool, a head_dim that is a multiple of 8)."""
    return (
        query_dtype == torch.float32
        and pool.device.type == "cpu"
        and pool.dtype in NATIVE_KV_DTYPES
        and pool.shape[-1] % 8 == 0
        and load() is not None
    )


def decode_attention(
    q: torch.Tensor,
    k_heads: torch.Tensor,
    v_heads: torch.Tensor,
    slots: torch.Tensor,
    lens: torch.Tensor,
) -> torch.Tensor | None:
    """One query per request over its cached K/V read in place from the head-major pool
    ([kv_heads, pool slots, dim], float32 or bf16); q [batch, heads, dim] float32. None when
    the kernel does not apply (another dtype or device, a head_dim not a multiple of 8)."""
    batch, heads, dim = q.shape
    if (
        not decode_attention_runs(q.dtype, k_heads)
        or q.device.type != "cpu"
        or v_heads.dtype != k_heads.dtype
        or q.stride(2) != 1
        or q.stride(1) != dim
        or not (k_heads.is_contiguous() and v_heads.is_contiguous())
    ):
        return None
    slots = slots.to(torch.int64).contiguous()
    lens = lens.to(torch.int64).contiguous()
    out = torch.empty(batch, heads, dim)
    load().decode_attention(
        _ptr(q), q.stride(0), _ptr(k_heads), _ptr(v_heads), k_heads.shape[1],
        _ptr(slots), slots.shape[1], _ptr(lens), batch, heads, k_heads.shape[0], dim,
        dim**-0.5, _ptr(out), torch.get_num_threads(), kv_bf16(k_heads),
    )  # fmt: skip
    return out


class NativeMatmul:
    """x @ W.T over a QuantizedTensor's own codes (int4 and int8: groups of 32 of each row;
    int8 scales may be per half group, `split`)."""

    def __init__(self, lib: ctypes.CDLL, w):
        self.lib, self.kind = lib, w.kind
        self.n, self.k = w.rows, w.cols
        self.q = w.q.contiguous()  # the codes themselves (int4: two a byte, GGUF's layout)
        self.scale = w.scale.to(torch.float32).contiguous()
        self.split = int(w.split)
        # w = q * d + m with d = scale; int4: m = zero - 8 * scale; int8: m = zero (or none)
        if w.zero is None:
            self.m = None
        else:
            m = w.zero - 8 * w.scale if w.kind == "int4" else w.zero
            self.m = m.to(torch.float32).contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or not x.is_contiguous():
            x = x.to(torch.float32).contiguous()
        rows = x.shape[0]
        y = torch.empty(rows, self.n)
        threads = torch.get_num_threads()
        if self.kind == "int4":
            self.lib.int4_linear(
                self.q.data_ptr(), self.scale.data_ptr(), self.m.data_ptr(), self.n, self.k,
                x.data_ptr(), rows, y.data_ptr(), threads,
            )  # fmt: skip
        else:
            self.lib.int8_linear(
                self.q.data_ptr(), self.scale.data_ptr(), _ptr(self.m), self.split, self.n,
                self.k, x.data_ptr(), rows, y.data_ptr(), threads,
            )  # fmt: skip
        return y

    def dequantize(self) -> torch.Tensor:
        """The float32 weight [n, k]."""
        out = torch.empty(self.n, self.k)
        threads = torch.get_num_threads()
        if self.kind == "int4":
            self.lib.int4_dequantize(
                _ptr(self.q), _ptr(self.scale), _ptr(self.m), self.n, self.k, _ptr(out), threads
            )
        else:
            self.lib.int8_dequantize(
                _ptr(self.q), _ptr(self.scale), _ptr(self.m), self.split, self.n, self.k,
                _ptr(out), threads,
            )  # fmt: skip
        return out


def bf16_tiles(w: torch.Tensor) -> torch.Tensor:
    """A [n, k] weight as bf16 tiles (qgemv.c `tiles_linear`: AMX B tiles, which are also the
    pairs of qgemv_bf16.c's dot products): n a multiple of 16, k of 32."""
    n, k = w.shape
    tiles = w.to(torch.bfloat16).view(n // 16, 16, k // 32, 16, 2).permute(0, 2, 3, 1, 4)
    return tiles.contiguous()


def tiles_linear(tiles: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x [rows, k] float32 @ W.T [k, n] on bf16 tiles (x rounded to bf16, fp32 sums), on AMX
    where granted, else on AVX-512 BF16 dot products."""
    n, k = tiles.shape[0] * 16, tiles.shape[1] * 32
    x = x.to(torch.float32).contiguous()
    y = torch.empty(x.shape[0], n)
    load().tiles_linear(_ptr(tiles), n, k, _ptr(x), x.shape[0], _ptr(y), torch.get_num_threads())
    return y
