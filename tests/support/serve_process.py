"""``statestore serve`` as its own process, configured the way a test says (file or variables)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent


def without_statestore_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without any ``STATESTORE_...`` variable of the environment running the tests."""
    return {k: v for k, v in environ.items() if not k.upper().startswith("STATESTORE_")}


@contextlib.contextmanager
def serving(
    argv: Sequence[str], environment: Mapping[str, str], cwd: Path, url: str, timeout: float = 120
) -> Iterator[Path]:
    """Run ``argv`` (a ``statestore serve`` command line) until ``url``/readyz answers 200; yield its log.

    The process is stopped with SIGTERM (as a container stop) when the block ends.
    """
    log = cwd / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(environment), stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + timeout
        while not _ready(url):
            assert process.poll() is None, f"{argv} exited with {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{argv} not ready after {timeout} s:\n{log.read_text()}"
            time.sleep(0.2)
        yield log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def statestore_command() -> str:
    """The ``statestore`` command of the environment running the tests."""
    return str(BIN / "statestore") if (BIN / "statestore").exists() else os.fspath("statestore")
