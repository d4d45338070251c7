"""The problem catalogue is the one list of problem types: the docs' table says the same."""

from __future__ import annotations

import re

from tests.support.stores import REPO
from wire.problems import CATALOGUE


def test_the_http_api_doc_lists_every_problem_type_with_its_status_and_no_other() -> None:
    text = (REPO / "docs" / "http-api.md").read_text(encoding="utf-8")
    table = text[text.index("## Problem types") :]
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (\d{3})\b", table, re.M))
    assert rows == {slug: str(problem.status) for slug, problem in CATALOGUE.items()}
