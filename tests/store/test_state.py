"""The store's lifecycle: every state change goes through one checked transition."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import StoreConfig, StoreState
from store.exceptions import InvalidTransitionError
from store.lifecycle.copies import Copies

CREATED, RESTORING, READY, REBUILDING, STOPPED, FAILED = (
    StoreState.CREATED,
    StoreState.RESTORING,
    StoreState.READY,
    StoreState.REBUILDING,
    StoreState.STOPPED,
    StoreState.FAILED,
)

# As StoreState's docstring draws it.
DOCUMENTED = {
    CREATED: {RESTORING, REBUILDING, FAILED, STOPPED},
    RESTORING: {READY, REBUILDING, FAILED, STOPPED},
    READY: {RESTORING, REBUILDING, FAILED, STOPPED},
    REBUILDING: {READY, REBUILDING, FAILED, STOPPED},
    FAILED: {STOPPED},
    STOPPED: set(),
}


def copies(tmp_path: Path) -> Copies:
    return Copies(StoreConfig("s", "t", {"bootstrap.servers": "unused:9092"}, tmp_path))


def test_the_lifecycle_allows_exactly_the_documented_transitions() -> None:
    for state in StoreState:
        assert {other for other in StoreState if state.can_become(other)} == DOCUMENTED[state], state


def test_an_illegal_transition_raises_and_changes_nothing(tmp_path: Path) -> None:
    store = copies(tmp_path)
    with pytest.raises(InvalidTransitionError, match='store "s" cannot go from CREATED to READY'):
        store.transition(READY)
    assert store.state is CREATED
    store.transition(RESTORING)
    store.transition(READY)
    with pytest.raises(InvalidTransitionError, match="from READY to CREATED"):
        store.transition(CREATED)
    assert store.state is READY


def test_a_failed_start_is_failed_with_its_reason_until_stopped(tmp_path: Path) -> None:
    store = copies(tmp_path)
    store.fail("the directory is locked")
    assert (store.state, store.failure) == (FAILED, "the directory is locked")
    with pytest.raises(InvalidTransitionError):
        store.transition(RESTORING)
    assert store.close() is not None
    assert store.state is STOPPED


def test_stopped_is_final_and_later_requests_change_nothing(tmp_path: Path) -> None:
    store = copies(tmp_path)
    store.transition(RESTORING)
    assert store.close() == {}
    # A materializer finishing its last step after the stop.
    store.transition(READY)
    assert store.state is STOPPED
    assert store.close() is None
