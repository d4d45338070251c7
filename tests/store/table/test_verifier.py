"""The verifier's pass logic (pure: a scripted target). Corruption found by a real pass over real
RocksDB files is tested in tests/faults/test_corruption.py."""

from __future__ import annotations

import pytest

from store.table.verifier import Verifier, VerifyStep


class ScriptedTarget:
    """Families of ``pages`` pages each; ``swap_at`` answers from another copy from that step on;
    ``gone_at`` has no copy to verify from that step on."""

    name = "scripted"
    column_families = ("default", "meta")

    def __init__(self, pages: int = 3, swap_at: int | None = None, gone_at: int | None = None) -> None:
        self.pages = pages
        self.swap_at = swap_at
        self.gone_at = gone_at
        self.asked: list[tuple[str, bytes | None]] = []

    def verify_step(self, family: str, start: bytes | None, max_entries: int) -> VerifyStep | None:
        step = len(self.asked)
        self.asked.append((family, start))
        if self.gone_at is not None and step >= self.gone_at:
            return None
        copy = "new" if self.swap_at is not None and step >= self.swap_at else "old"
        page = 0 if start is None else int(start)
        next_start = None if page + 1 == self.pages else str(page + 1).encode()
        return VerifyStep(copy, next_start, max_entries, 10)


def test_a_pass_reads_every_page_of_every_family_in_order_and_counts_once() -> None:
    target = ScriptedTarget(pages=3)
    verifier = Verifier(target, 3600, 1 << 30)
    assert verifier.verify_once()
    assert target.asked == [
        ("default", None),
        ("default", b"1"),
        ("default", b"2"),
        ("meta", None),
        ("meta", b"1"),
        ("meta", b"2"),
    ]
    assert verifier.passes == 1
    assert verifier.last_pass_ended is not None


@pytest.mark.parametrize(
    "target", [ScriptedTarget(swap_at=4), ScriptedTarget(gone_at=2)], ids=["swapped", "gone"]
)
def test_a_pass_over_a_copy_that_was_replaced_or_is_gone_does_not_count(target: ScriptedTarget) -> None:
    verifier = Verifier(target, 3600, 1 << 30)
    assert not verifier.verify_once()
    assert verifier.passes == 0
    assert len(target.asked) == (target.swap_at or target.gone_at or 0) + 1


def test_verification_needs_a_positive_interval_and_rate() -> None:
    with pytest.raises(ValueError, match="disable"):
        Verifier(ScriptedTarget(), 0, 1)
    with pytest.raises(ValueError, match="disable"):
        Verifier(ScriptedTarget(), 1, 0)
