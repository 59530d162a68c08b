import numpy as np
import pytest
from numba import njit

from grammars import fastcall


@njit(cache=False)
def _total(a, k):
    return a[:k].sum()


def test_calls_go_to_the_one_compiled_version_and_a_wrong_type_is_caught():
    a = np.arange(10, dtype=np.int64)
    assert fastcall.call(_total, a, 4) == 6  # through the dispatcher: compiles the version
    assert _total in fastcall._entries
    b = np.arange(5, dtype=np.int64)
    assert fastcall.call(_total, b, 5) == 10  # its entry point
    wrong = np.arange(5, dtype=np.float64)
    with pytest.raises(TypeError, match="compiled for"):  # RADIXGEN_CHECK_KERNEL_TYPES=1
        fastcall.call(_total, wrong, 5)
