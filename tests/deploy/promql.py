"""PromQL as Prometheus parses it: the metric selectors an expression reads."""

from __future__ import annotations

from typing import Any

import promql_parser


def selectors(expr: str) -> list[promql_parser.VectorSelector]:
    """Every vector selector of a PromQL expression (raises ValueError when it does not parse)."""
    found: list[promql_parser.VectorSelector] = []

    def walk(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        for child in ("lhs", "rhs", "expr", "vector_selector", "param"):
            value = getattr(node, child, None)
            if value is not None and not isinstance(value, str | int | float):
                walk(value)
        for argument in getattr(node, "args", None) or []:
            walk(argument)

    walk(promql_parser.parse(expr))
    return found
