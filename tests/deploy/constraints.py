"""Read ``deploy/constraints.txt`` (the versions the images install) and check it against
``pyproject.toml``, offline: every requirement of the extras the images install is pinned to a
version it accepts, and nothing else is pinned for ``pyproject.toml``'s sake."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "statestore"
PYPROJECT_SOURCE = f"{PROJECT} (pyproject.toml)"
IMAGE_EXTRAS = ("server", "spark")
REGENERATE = "make constraints"
# The images' interpreter (python:3.11-slim, Linux, CPython): the pins that apply there are checked.
IMAGE_ENVIRONMENT = {
    "python_version": "3.11",
    "python_full_version": "3.11.9",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "implementation_name": "cpython",
    "os_name": "posix",
}

_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+?)\s*(?:;\s*(?P<marker>.+))?$")


@dataclasses.dataclass(frozen=True)
class Pin:
    """One line ``name==version ; marker`` and the names it is pinned for (uv's ``# via`` notes)."""

    name: str
    version: str
    marker: Marker | None
    via: frozenset[str]

    def applies(self, environment: Mapping[str, str] = IMAGE_ENVIRONMENT) -> bool:
        return self.marker is None or self.marker.evaluate(dict(environment))


def parse_constraints(text: str) -> list[Pin]:
    """The pins of a file written by ``uv pip compile`` (with its ``# via`` annotations)."""
    pins: list[Pin] = []
    current: dict[str, Any] | None = None
    vias: set[str] = set()

    def close() -> None:
        if current is not None:
            pins.append(Pin(via=frozenset(vias), **current))

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            close()
            match = _PIN.match(line)
            assert match, f"not a pinned requirement: {line!r}"
            marker = match.group("marker")
            current = {
                "name": canonicalize_name(match.group("name")),
                "version": match.group("version"),
                "marker": Marker(marker) if marker else None,
            }
            vias = set()
            continue
        note = line.lstrip("#").strip()
        if current is None or note == "via":
            continue
        note = note.removeprefix("via ").strip()
        vias.add(note if note == PYPROJECT_SOURCE else str(canonicalize_name(note)))
    close()
    return pins


def requirements_of(pyproject: Mapping[str, Any], extras: Iterable[str]) -> list[Requirement]:
    """The third-party requirements of the project's ``extras``, its own extras expanded."""
    optional: Mapping[str, list[str]] = pyproject["project"]["optional-dependencies"]
    found: list[Requirement] = [Requirement(r) for r in pyproject["project"].get("dependencies", [])]
    pending, seen = list(extras), set[str]()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in optional[extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == PROJECT:
                pending.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def problems(pyproject: Mapping[str, Any], constraints_text: str) -> list[str]:
    """Why the constraints no longer fit ``pyproject.toml`` (empty when they do)."""
    pins = parse_constraints(constraints_text)
    found: list[str] = []
    if f"#    {REGENERATE}" not in constraints_text:
        found.append(f"the header does not say how to regenerate the file (`{REGENERATE}`)")
    requirements = [
        r
        for r in requirements_of(pyproject, IMAGE_EXTRAS)
        if r.marker is None or r.marker.evaluate(dict(IMAGE_ENVIRONMENT))
    ]
    wanted = {canonicalize_name(r.name) for r in requirements}
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        applying = [p for p in pins if p.name == name and p.applies()]
        if len(applying) != 1:
            found.append(f"{name} ({requirement}) is pinned {len(applying)} times for the images")
        elif not requirement.specifier.contains(applying[0].version, prereleases=True):
            found.append(f"{name} is pinned to {applying[0].version}, pyproject.toml asks {requirement}")
    for pin in pins:
        if PYPROJECT_SOURCE in pin.via and pin.name not in wanted:
            found.append(f"{pin.name} is pinned for pyproject.toml, which no longer requires it")
        unknown = pin.via - {PYPROJECT_SOURCE} - {p.name for p in pins}
        if not pin.via or unknown:
            found.append(f"{pin.name} is pinned for {sorted(unknown) or 'nothing'}, which is not pinned")
    return found
