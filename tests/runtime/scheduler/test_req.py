"""A request's token bookkeeping."""

from hypothesis import given
from hypothesis import strategies as st

from runtime.sampling.params import SamplingParams
from runtime.scheduler.req import Req


@given(
    prompt=st.integers(1, 6),
    output=st.integers(0, 6),
    start=st.integers(0, 14),
    length=st.integers(0, 14),
)
def test_ids_between_is_a_slice_of_all_ids(prompt, output, start, length):
    req = Req("r", list(range(100, 100 + prompt)), SamplingParams())
    req.output_ids = list(range(200, 200 + output))
    assert req.ids_between(start, start + length) == req.all_ids[start : start + length]
