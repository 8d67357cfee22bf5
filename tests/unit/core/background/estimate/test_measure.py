"""The sampled costs an estimate reports, from timed chunks (no server)."""

from __future__ import annotations

from migronaut_core.background.estimate.measure import _Chunk, _costs


def test_one_chunk_that_met_a_stall_does_not_move_the_costs_but_widens_the_range() -> None:
    steady = [_Chunk(100, 0.0002, 0.004) for _ in range(9)]
    calm = _costs(steady, 0, [100], [90], [300])
    stalled = _costs([*steady, _Chunk(100, 0.0002, 0.2)], 0, [100], [90], [300])
    assert calm.write_ms == stalled.write_ms == 0.04
    assert calm.transform_ms == stalled.transform_ms == 0.002
    assert stalled.relative_error > calm.relative_error
    assert stalled.documents == 1_000
