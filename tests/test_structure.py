"""The code stays readable as it grows: no function in the packages above a cyclomatic complexity of 20."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("store", "service", "clients")
MAX_COMPLEXITY = 20


def test_no_function_is_too_complex_to_follow() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{block.lineno} {block.fullname}": block.complexity
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for block in cc_visit(path.read_text(encoding="utf-8"))
        if block.complexity > MAX_COMPLEXITY
    }
    assert found == {}, f"split these (cyclomatic complexity above {MAX_COMPLEXITY}): {found}"


def test_the_check_sees_a_complex_function() -> None:
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(MAX_COMPLEXITY + 1))
    blocks = cc_visit(f"def f(x):\n{branches}    return -1\n")
    assert [b.complexity for b in blocks] == [MAX_COMPLEXITY + 2]
