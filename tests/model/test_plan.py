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


def test_aligned_buffers_start_on_a_cache_line_and_copy_only_when_they_must():
    import numpy as np

    from tuner.model.plan import BASE_ALIGN, aligned_copy, aligned_empty

    for n in (1, 63, 4097):
        assert aligned_empty(n).ctypes.data % BASE_ALIGN == 0 and aligned_empty(n).nbytes == n
    data = np.arange(37, dtype=np.float32)
    odd = np.frombuffer(aligned_empty(4 * 37 + 4), np.uint8)[4:].view(np.float32)
    odd[...] = data  # a float32 array 4 bytes past a cache line
    copy = aligned_copy(odd)
    assert copy.ctypes.data % BASE_ALIGN == 0 and np.array_equal(copy, data)
    assert aligned_copy(copy) is copy


def test_a_module_s_arena_constants_and_outputs_start_on_cache_lines(rng):
    """Kernels read constants (an int8 matmul's weight panels, a table) with full-width
    vector loads: on a misaligned array each crosses two cache lines. Measured on Zen 4
    before: four copies of one int8 MobileNetV2 in one process ran 2.7 to 3.9 ms, by where
    their weights had landed; aligned, 2.3 to 2.7."""
    import numpy as np

    import tuner
    from tuner.model.plan import BASE_ALIGN

    from .conftest import residual_block

    mod = tuner.compile_model(residual_block(rng, batch=1))
    (plan,) = mod.plans
    assert plan.arena.ctypes.data % BASE_ALIGN == 0
    consts = [v.data for v in plan.values.values() if v.data is not None]
    assert consts and all(np.asarray(c).ctypes.data % BASE_ALIGN == 0 for c in consts)
    (y,) = mod.run({"x": rng.standard_normal((1, 3, 7, 7)).astype(np.float32)})
    assert y.ctypes.data % BASE_ALIGN == 0
