"""The code stays readable as it grows: no function, method or closure in the packages and the
benchmarks above a cyclomatic complexity of 15."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("store", "service", "clients", "wire", "bench")
MAX_COMPLEXITY = 15


def functions(blocks: Sequence[Function | Class]) -> Iterator[Function]:
    """Every function of ``blocks``: methods of classes and closures of functions included."""
    for block in blocks:
        if isinstance(block, Class):
            yield from functions(block.methods)
            yield from functions(block.inner_classes)
        else:
            yield block
            yield from functions(block.closures)


def too_complex(source: str) -> dict[str, int]:
    return {
        f"{block.lineno} {block.fullname}": block.complexity
        for block in functions(cc_visit(source))
        if block.complexity > MAX_COMPLEXITY
    }


def test_no_function_is_too_complex_to_follow() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{where}": complexity
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for where, complexity in too_complex(path.read_text(encoding="utf-8")).items()
    }
    assert found == {}, f"split these (cyclomatic complexity above {MAX_COMPLEXITY}): {found}"


def test_the_check_sees_a_complex_function() -> None:
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(MAX_COMPLEXITY + 1))
    assert too_complex(f"def f(x):\n{branches}    return -1\n") == {"1 f": MAX_COMPLEXITY + 2}


def test_the_check_sees_a_complex_closure_and_method() -> None:
    branches = "".join(f"        if x == {i}:\n            return {i}\n" for i in range(MAX_COMPLEXITY + 1))
    closure = f"def outer():\n    def inner(x):\n{branches}        return -1\n    return inner\n"
    method = f"class C:\n    def m(self, x):\n{branches}        return -1\n"
    assert list(too_complex(closure).values()) == [MAX_COMPLEXITY + 2]
    assert too_complex(method) == {"2 C.m": MAX_COMPLEXITY + 2}
