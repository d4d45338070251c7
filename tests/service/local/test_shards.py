"""Where a local sharded service puts its shards' ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.local import shards
from service.local.shards import LocalShardsError, free_port_block


@pytest.fixture
def ephemeral(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ip_local_port_range"
    monkeypatch.setattr(shards, "EPHEMERAL_PORTS_FILE", path)
    return path


def test_the_shards_ports_are_outside_the_range_the_kernel_hands_out(ephemeral: Path) -> None:
    ephemeral.write_text("20000\t60999\n")
    bases = {free_port_block("127.0.0.1", 4) for _ in range(50)}
    for base in bases:
        assert base % 10 == 0
        assert base + 3 < 20_000 or base >= 61_000
        assert 10_000 <= base <= 65_535 - 3
    assert len(bases) > 1  # chosen at random: two services rarely pick the same block


def test_without_the_kernel_s_word_linux_s_default_range_is_left_alone(ephemeral: Path) -> None:
    assert shards.ephemeral_ports() == (32768, 60999)  # no such file
    ephemeral.write_text("not ports")
    assert shards.ephemeral_ports() == (32768, 60999)


def test_a_machine_whose_every_port_is_ephemeral_says_so(ephemeral: Path) -> None:
    ephemeral.write_text("1024 65535")
    with pytest.raises(LocalShardsError, match="outside the ephemeral range 1024-65535"):
        free_port_block("127.0.0.1", 2)
