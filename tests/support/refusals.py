"""Refusals injected where RocksDB raises them (``Engine.write``), for tests of how the store
reacts to each kind of write error; everything else stays real."""

from __future__ import annotations

from typing import Any

import pytest

from store.table.engine import Engine
from store.table.volume import write_error


def refuse_writes(monkeypatch: pytest.MonkeyPatch, refusal: Exception, times: int | None) -> list[Engine]:
    """Refuse the next ``times`` writes of any engine (every write if ``None``) as RocksDB would
    with ``refusal``; returns the list of the engines refused, one entry per refusal."""
    refused: list[Engine] = []
    real_write = Engine.write

    def write(engine: Engine, batch: Any) -> None:
        if times is None or len(refused) < times:
            refused.append(engine)
            raise write_error(engine.path, refusal) from refusal
        real_write(engine, batch)

    monkeypatch.setattr(Engine, "write", write)
    return refused
