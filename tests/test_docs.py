"""The documentation tree: its four parts, and every link between pages resolving."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.markdown import anchors, relative_links

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted({REPO / "README.md", REPO / "charts" / "statestore" / "README.md", *DOCS.rglob("*.md")})


def test_the_index_has_the_four_parts() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for part in ("## Tutorials", "## How-to guides", "## Reference", "## Explanation"):
        assert part in index
    linked = {(DOCS / target.split("#")[0]).resolve() for target in relative_links(DOCS / "README.md")}
    for folder in ("tutorial", "how-to", "reference", "explanation"):
        pages = set((DOCS / folder).glob("*.md"))
        assert pages, folder
        assert pages <= linked, sorted(str(p) for p in pages - linked)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    for target in relative_links(page):
        path, _, anchor = unquote(target).partition("#")
        destination = (page.parent / path).resolve() if path else page
        assert destination.exists(), f"{page.relative_to(REPO)} links to missing {target}"
        if anchor and destination.suffix == ".md":
            found = anchors(destination.read_text(encoding="utf-8"))
            assert anchor in found, f"{page.relative_to(REPO)} links to missing anchor {target}"


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\nSee [there](gone.md), [here](#title), <https://example.org>.\n```\n[no](x.md)\n```\n"
    )
    assert relative_links(page) == ["gone.md", "#title"]
    assert anchors(page.read_text()) == {"title"}


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


SPARK_PAGES = [DOCS / "tutorial" / "spark.md", DOCS / "reference" / "spark.md"]


@pytest.mark.parametrize("page", SPARK_PAGES, ids=[p.name for p in SPARK_PAGES])
def test_the_spark_pages_call_the_api_as_it_is(page: Path) -> None:
    """Every block compiles, and every call of a ``clients.spark`` function names parameters it has."""
    import clients.spark  # noqa: PLC0415  # needs pyspark, as the pages do

    calls = 0
    for block in python_blocks(page):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "clients.spark":
                assert all(hasattr(clients.spark, alias.name) for alias in node.names), block
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                function = getattr(clients.spark, node.func.id, None)
                if function is None or not callable(function):
                    continue
                parameters = inspect.signature(function).parameters
                named = {keyword.arg for keyword in node.keywords if keyword.arg}
                assert named <= set(parameters), (node.func.id, sorted(named - set(parameters)))
                calls += 1
    assert calls


def test_the_python_reference_names_methods_the_client_has() -> None:
    from clients import StatestoreClient  # noqa: PLC0415

    text = (DOCS / "reference" / "python.md").read_text(encoding="utf-8")
    methods = set(re.findall(r"^\| `(\w+)\(", text, re.MULTILINE))
    assert len(methods) >= 10
    assert sorted(m for m in methods if not callable(getattr(StatestoreClient, m, None))) == []
