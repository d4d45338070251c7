"""``make setup`` on a stock Debian 12 / Ubuntu 24.04 machine: the distribution's ``python3`` first on
the PATH, no ``uv``, and a system Python marked externally managed (PEP 668).

Each test runs the repository's own Makefile in a scratch copy of the repository (the files git
tracks or would track, as they are in the working tree). The dependencies come from the uv cache
that ``make setup`` filled for the repository's own ``.venv`` (``UV_OFFLINE``): what is under test is
how the set-up bootstraps itself without touching the system Python, not PyPI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")
# The PATH of a stock machine: no /usr/local, no per-user tool directories.
STOCK_PATH = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
# Variables of the environment running the tests that would steer the scratch set-up elsewhere.
FOREIGN = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "UV_PYTHON")


def system_python(code: str) -> str:
    done = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


@pytest.fixture(scope="module")
def stdlib() -> Path:
    """The standard library of the distribution's python3; fails when the machine is not a stock one."""
    assert SYSTEM_PYTHON.exists(), f"{SYSTEM_PYTHON} is missing: install the distribution's python3"
    version = tuple(int(p) for p in system_python("import sys; print(*sys.version_info[:2])").split())
    assert version >= (3, 11), f"{SYSTEM_PYTHON} is Python {version}; statestore needs 3.11+"
    path = Path(system_python("import sysconfig; print(sysconfig.get_path('stdlib'))"))
    assert (path / "EXTERNALLY-MANAGED").exists(), f"{SYSTEM_PYTHON} is not marked externally managed"
    return path


def scratch_copy(destination: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():  # a file deleted in the working tree is still listed as tracked
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def stock_environment(*first: Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    environment["PATH"] = os.pathsep.join([*map(str, first), *STOCK_PATH])
    environment["UV_OFFLINE"] = "1"
    assert shutil.which("uv", path=environment["PATH"]) is None, "uv is on the stock PATH"
    return environment


def make_setup(checkout: Path, environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "setup"],
        cwd=checkout,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
        check=False,
    )


def system_installs() -> dict[str, list[str]]:
    """What the system Python and the user's site and bin directories hold."""
    probe = "import json, site; print(json.dumps([*site.getsitepackages(), site.getusersitepackages()]))"
    directories = json.loads(system_python(probe))
    directories += ["/usr/local/bin", str(Path.home() / ".local" / "bin")]
    return {d: sorted(os.listdir(d)) if os.path.isdir(d) else [] for d in directories}


def test_make_setup_with_the_system_python_and_no_uv(stdlib: Path, tmp_path: Path) -> None:
    checkout = scratch_copy(tmp_path / "statestore")
    environment = stock_environment()
    assert shutil.which("python3", path=environment["PATH"]) == str(SYSTEM_PYTHON)
    before = system_installs()

    done = make_setup(checkout, environment)

    assert done.returncode == 0, done.stdout
    venv = checkout / ".venv"
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sys, service.cli, store, clients, clients.spark; print(sys.prefix, sys.base_prefix)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    prefix, base_prefix = probe.stdout.split()
    assert Path(prefix) == venv
    assert Path(base_prefix) == Path(system_python("import sys; print(sys.base_prefix)"))
    # uv itself was bootstrapped into .venv, and the tools the Makefile runs are there.
    for tool in ("uv", "statestore", "ruff", "mypy", "pytest"):
        assert (venv / "bin" / tool).exists(), f".venv/bin/{tool} is missing"
    assert (venv / ".installed").exists()
    assert system_installs() == before, "make setup installed into the system Python"


def test_a_python_without_its_venv_module_is_named_with_what_to_install(stdlib: Path, tmp_path: Path) -> None:
    # Debian and Ubuntu ship ensurepip in python3-venv, apart from python3: the distribution's
    # interpreter and standard library, minus ensurepip, is python3 without that package.
    prefix = tmp_path / "python-without-venv"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(os.path.realpath(SYSTEM_PYTHON), prefix / "bin" / "python3")
    library = prefix / "lib" / stdlib.name
    library.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name != "ensurepip":
            (library / entry.name).symlink_to(entry)
    checkout = scratch_copy(tmp_path / "statestore")

    done = make_setup(checkout, stock_environment(prefix / "bin"))

    assert done.returncode != 0, done.stdout
    assert "apt-get install python3-venv" in done.stdout
    assert not (checkout / ".venv").exists(), "a half-made .venv would be taken for a finished one"
