"""docs/architecture.md names only code that exists: every file path and dotted module it mentions,
and the picture it shows is there with its source."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("store", "service", "clients", "wire", "bench", "tests")


def named_paths(text: str) -> set[str]:
    """Repository paths in backticks: ``store/table/engine.py``, ``service/local/`` (templates such
    as ``bench/NAME_bench.py`` left aside)."""
    return {
        match
        for match in re.findall(r"`([a-z_]+/[\w./]*)`", text)
        if match.split("/")[0] in (*PACKAGES, "docs", "charts", "deploy") and match.lower() == match
    }


def named_modules(text: str) -> set[str]:
    """Dotted module names in backticks (``store.kafka.consumer_process``), an attribute after
    them left aside (``store.tuning`` of ``store.tuning.RocksDBOptions``)."""
    spans = re.findall(r"`([^`]+)`", text)
    dotted = r"(?<![\w/.])((?:store|service|clients|wire)(?:\.[a-z_]+)+)"
    return {name for span in spans for name in re.findall(dotted, span)}


def module_exists(dotted: str) -> bool:
    """The longest importable prefix of ``dotted`` is a module, and what follows is a name in it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # a prefix is a module, not a package
            found = None
        if found is not None:
            module = importlib.import_module(name)
            rest = parts[cut:]
            target: object = module
            for attribute in rest:
                if not hasattr(target, attribute):
                    return False
                target = getattr(target, attribute)
            return True
    return False


def test_every_path_the_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    paths = named_paths(text)
    assert len(paths) > 40  # the page names the code it describes
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []


def test_every_module_the_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    modules = named_modules(text)
    assert "store.kafka.consumer_process" in modules
    assert sorted(m for m in modules if not module_exists(m)) == []


def test_the_picture_and_its_source_are_there() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "](architecture.svg)" in text
    svg = (ROOT / "docs" / "architecture.svg").read_text(encoding="utf-8")
    source = (ROOT / "docs" / "architecture.dot").read_text(encoding="utf-8")
    assert svg.lstrip().startswith(("<?xml", "<svg"))
    # The picture shows the rooms the page describes.
    for room in ("store/kafka/", "store/table/", "store/lifecycle/", "wire/", "spark/", "local/"):
        assert room in source


def test_the_checks_see_a_missing_module_and_path() -> None:
    assert named_paths("see `store/table/engine.py` and `nowhere/x.py`") == {"store/table/engine.py"}
    assert named_modules("`python -m store.kafka.x` and `store.Store`") == {"store.kafka.x"}
    assert not module_exists("store.kafka.no_such_module")
    assert not module_exists("store.tuning.NoSuchName")
    assert module_exists("store.tuning.RocksDBOptions")
