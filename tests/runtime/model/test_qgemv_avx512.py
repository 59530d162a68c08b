"""The AVX-512 VNNI products (runtime/model/qgemv_avx512.c) against the AVX2 ones and the dense
product: the same integers summed in another order, so equal to float rounding, at every row
count of a pass of 16 and past it, and at shapes whose groups do not fill the last block."""

import os

import pytest
import torch

from runtime.model import qgemv
from runtime.model.quantization import quantize

pytestmark = pytest.mark.skipif(
    qgemv.load() is None or not qgemv.avx512_vnni(), reason="no AVX-512 VNNI CPU or C compiler"
)


@pytest.fixture
def lib():
    lib = qgemv.load()
    yield lib
    qgemv.use_avx512(lib, not os.environ.get("RADIXGEN_NO_AVX512"))  # the process default


def products(lib, matmul, x):
    qgemv.use_avx512(lib, False)
    avx2 = matmul(x)
    lib.set_avx512(1, 1)  # every row count on the VNNI kernels, whatever AVX512_ROWS says
    return avx2, matmul(x)


@pytest.mark.parametrize("kind", ["int4", "int8"])
# k: 1, 3, 8, 9 and 18 groups of 32 (blocks of 8 groups: empty, partial and full ones)
@pytest.mark.parametrize("n, k", [(5, 32), (37, 96), (16, 256), (33, 288), (64, 576)])
def test_avx512_products_equal_the_avx2_ones(kind, n, k, lib):
    torch.manual_seed(n + k)
    w = quantize(torch.randn(n, k), kind)
    matmul, dense = qgemv.NativeMatmul(lib, w), w.dequantize()
    for rows in [*range(1, 18), 33]:
        x = torch.randn(rows, k) * torch.rand(rows, 1) * 10  # rows of unlike scales
        avx2, avx512 = products(lib, matmul, x)
        scale = avx2.abs().max()
        assert (avx512 - avx2).abs().max() <= 2e-6 * scale, (rows, kind)
        assert (avx512 - x @ dense.T).abs().max() <= 1e-3 * scale, (rows, kind)  # int16 rounding


def test_avx512_products_of_zero_and_extreme_rows(lib):
    # zero groups (scale 0) and the int16 extremes: the int32 sums of a block must not wrap
    w = quantize(torch.randn(48, 320), "int8")
    w.q.view(-1)[::2] = -128  # the widest codes
    matmul = qgemv.NativeMatmul(lib, w)
    x = torch.randn(6, 320)
    x[1] = 0
    x[2, :32] = 0
    x[3] = 1e6
    x[4] = -torch.ones(320)
    avx2, avx512 = products(lib, matmul, x)
    assert torch.allclose(avx512, avx2, rtol=1e-5, atol=1e-5 * float(avx2.abs().max()))
    assert not avx512.isnan().any()
