"""The buffer planner: live values never share bytes; dead ones do."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.model.plan import ALIGN, Interval, assign_offsets, lifetimes


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 10_000), st.integers(0, 20), st.integers(0, 6)),
        min_size=1,
        max_size=30,
    )
)
def test_values_alive_together_never_share_bytes(raw):
    needs = [Interval(f"v{k}", n, s, s + d) for k, (n, s, d) in enumerate(raw)]
    offsets, total = assign_offsets(needs)
    for k, a in enumerate(needs):
        assert offsets[a.name] % ALIGN == 0
        assert offsets[a.name] + a.nbytes <= total
        for b in needs[k + 1 :]:
            if a.start <= b.end and b.start <= a.end:
                ra = (offsets[a.name], offsets[a.name] + a.nbytes)
                rb = (offsets[b.name], offsets[b.name] + b.nbytes)
                assert not _overlap(ra, rb), (a, b, offsets)


def test_a_chain_reuses_two_buffers():
    # v0 -> v1 -> v2 -> v3: each dies when the next is written, so two buffers suffice.
    needs = [Interval(f"v{k}", 1000, k, k + 1) for k in range(4)]
    offsets, total = assign_offsets(needs)
    assert total == 2 * 1024
    assert offsets["v0"] == offsets["v2"] and offsets["v1"] == offsets["v3"]


def test_a_view_keeps_its_storage_alive():
    # v1 is written at step 0; its view r1 is read at step 5.
    spans = lifetimes({"v1": 0, "v2": 1}, {"v1": [1], "r1": [5], "v2": [2]}, {"r1": "v1"})
    assert spans == {"v1": (0, 5), "v2": (1, 2)}
