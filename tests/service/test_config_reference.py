"""docs/reference/configuration.md is generated from the settings model, complete and current."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from service.config_reference import render, rows
from service.settings import Settings

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "configuration.md"


def keys(model: type[BaseModel], path: str = "") -> set[str]:
    """Every setting's dotted key, entries of lists marked ``[]``."""
    found: set[str] = set()
    for name, field in model.model_fields.items():
        key = f"{path}{name}"
        text = str(field.annotation)
        listed = text.startswith("list[")
        found.add(f"{key}[]" if listed else key)
        for module, sub in re.findall(r"(service\.\w*settings)\.(\w+)", text):
            found |= keys(
                getattr(__import__(module, fromlist=[sub]), sub),
                f"{key}{'[]' if listed else ''}.",
            )
    return found


def test_the_page_is_the_generated_one() -> None:
    # Regenerate with: python -m service.config_reference > docs/reference/configuration.md
    assert PAGE.read_text(encoding="utf-8") == render()


def test_every_setting_has_a_row_with_a_description() -> None:
    documented = {row[0].strip("`"): row for row in rows(Settings)}
    assert set(documented) == keys(Settings)
    assert len(documented) > 50
    assert [key for key, row in documented.items() if len(row[4]) < 10] == []


def test_environment_variables_follow_the_nesting() -> None:
    documented = {row[0].strip("`"): row[3].strip("`") for row in rows(Settings)}
    assert documented["http.port"] == "STATESTORE_HTTP__PORT"
    assert documented["engine.block_cache_bytes"] == "STATESTORE_ENGINE__BLOCK_CACHE_BYTES"
    assert documented["stores[]"] == "STATESTORE_STORES"
    # An entry of a list is set with the whole list, as JSON.
    assert documented["stores[].name"].strip() == ""
