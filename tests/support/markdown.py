"""Markdown as GitHub renders it: the anchors its headings get, and the relative links a page holds."""

from __future__ import annotations

import re
from pathlib import Path

_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
# [text](target) and ![alt](target), the target up to the first space or closing parenthesis.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in ``text`` (code blocks hold no headings); repeats get ``-1``, ``-2``."""
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        anchor = base = slug(heading)
        n = 0
        while anchor in found:
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


def relative_links(path: Path) -> list[str]:
    """The links of the page at ``path`` to files of the repository (not URLs, not code blocks)."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return [target for target in _LINK.findall(text) if not re.match(r"^[a-z]+:", target)]
