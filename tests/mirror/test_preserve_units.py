"""The offset-preserving mirror's sans-IO parts: per-partition positions and the resume plan."""

from __future__ import annotations

import zlib

from mirror.positions import COPYING, HALTED, RESYNC, Positions
from mirror.resume import TargetEnd, batch_differs, plan_resume

TP = ("t", 0)


def test_only_the_next_batch_is_sent_and_outcomes_release_in_order():
    pos = Positions()
    pos.track(TP)
    assert pos.needs_resync() == [TP]
    pos.resynced(TP, 100)
    assert pos.state(TP) == COPYING
    assert pos.accept(TP, 50, 100, 1, 50) is None  # stale: before the seek
    gen, start = pos.accept(TP, 100, 150, 2, 50)
    assert not start
    assert pos.accept(TP, 150, 200, 2, 50) == (gen, False)
    assert pos.accept(TP, 300, 350, 2, 50) is None  # not the next one
    assert pos.inflight_bytes == 100 and len(pos) == 2
    acked = pos.outcome(TP, gen, 100, True)
    assert acked is not None and acked.position == 150
    assert pos.outcome(TP, gen, 150, True).position == 200
    assert pos.inflight_bytes == 0


def test_a_failed_append_resyncs_and_the_pipeline_behind_it_is_ignored():
    pos = Positions()
    pos.resynced(TP, 0)
    gen, _ = pos.accept(TP, 0, 10, 1, 10)
    pos.accept(TP, 10, 20, 1, 10)
    assert pos.outcome(TP, gen, 0, False) is None
    assert pos.state(TP) == RESYNC and pos.inflight_bytes == 0
    assert pos.outcome(TP, gen, 10, True) is None  # the old generation's answer is ignored
    assert pos.accept(TP, 20, 30, 1, 10) is None  # nothing is sent while resyncing
    pos.resynced(TP, 10)
    new_gen, _ = pos.accept(TP, 10, 20, 1, 10)
    assert new_gen != gen


def test_the_start_flag_goes_with_the_first_append_only():
    pos = Positions()
    pos.resynced(TP, 500, start_at_expect=True)
    assert pos.accept(TP, 500, 600, 1, 100)[1] is True
    assert pos.accept(TP, 600, 700, 1, 100)[1] is False


def test_a_halted_partition_sends_nothing_and_stays_halted():
    pos = Positions()
    pos.resynced(TP, 0)
    pos.accept(TP, 0, 10, 1, 10)
    pos.halt(TP, "diverged")
    assert pos.state(TP) == HALTED and pos.inflight_bytes == 0
    pos.resynced(TP, 0)
    assert pos.state(TP) == HALTED
    assert pos.accept(TP, 0, 10, 1, 10) is None
    pos.forget(TP)
    assert pos.state(TP) == RESYNC


def target(start=0, end=0, last=-1, last_len=-1, crc=-1):
    return TargetEnd(start, end, last, last_len, crc)


def test_a_never_written_target_starts_at_the_sources_start():
    assert plan_resume(target(), 0, 1000) == (0, False, False, False, None)
    plan = plan_resume(target(), 400, 1000)
    assert (plan.position, plan.start_flag, plan.diverged) == (400, True, None)
    assert plan_resume(target(), 400, 1000, start="latest").position == 1000


def test_a_non_empty_target_resumes_at_its_end_after_checking_its_last_batch():
    plan = plan_resume(target(0, 300, 200, 100, 7), 0, 1000)
    assert (plan.position, plan.verify_last, plan.diverged) == (300, True, None)
    # the source deleted that batch already: only the boundary can be checked
    plan = plan_resume(target(0, 300, 200, 100, 7), 250, 1000)
    assert (plan.verify_last, plan.check_boundary) == (False, True)


def test_targets_outside_the_source_diverge():
    assert "retention on the source" in plan_resume(target(0, 300, 200, 100, 7), 400, 1000).diverged
    assert "holds bytes the source" in plan_resume(target(0, 1300, 1200, 100, 7), 0, 1000).diverged
    emptied = target(500, 500)  # emptied by the target's own retention, source moved past it
    assert plan_resume(emptied, 800, 1000).diverged is not None
    skipped = plan_resume(emptied, 800, 1000, on_gap="skip")
    assert (skipped.position, skipped.start_flag, skipped.diverged) == (800, True, None)


def test_the_last_batch_is_compared_by_length_and_crc_of_all_its_bytes():
    batch = b"0123456789"
    t = target(0, 110, 100, len(batch), zlib.crc32(batch))
    assert batch_differs(t, batch) is None
    assert "differs" in batch_differs(t, b"0123456788")
    assert "no batch of the source" in batch_differs(t, None)


def test_preserve_is_the_default_mode_and_compression_needs_produce():
    import pytest

    from mirror.config import parse_config
    from mirror.errors import MirrorConfigError

    base = {"source": {"zk_connect": "h:1/live"}, "target": {"zk_connect": "h:1/analysis"}, "mirror": {"topics": ["t"]}}
    assert parse_config(base).mode == "preserve"
    assert parse_config({**base, "mirror": {"topics": ["t"], "mode": "produce"}}).mode == "produce"
    zstd = {**base, "mirror": {"topics": ["t"], "compression": "zstd"}}
    assert parse_config(zstd).mode == "produce"  # compression re-encodes: not a copy
    with pytest.raises(MirrorConfigError) as info:
        parse_config({**base, "mirror": {"topics": ["t"], "compression": "zstd", "mode": "preserve"}})
    assert info.value.key == "mirror.compression"
    with pytest.raises(MirrorConfigError):
        parse_config({**base, "mirror": {"topics": ["t"], "mode": "exact"}})
