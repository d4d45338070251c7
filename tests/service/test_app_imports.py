"""The HTTP service loads only what serving needs: no Spark, no demo, no local broker or shards."""

from __future__ import annotations

import subprocess
import sys

PROBE = (
    "import sys\n"
    "import {module}\n"
    "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'"
    " or m.startswith(('clients.spark', 'service.local')))\n"
    "print(loaded[:5])\n"
)


def loaded_by(module: str, first: str = "") -> list[str]:
    """What importing ``module`` (after ``first``, if given) loads of Spark and ``service.local``,
    in a fresh process."""
    program = (f"import {first}\n" if first else "") + PROBE.format(module=module)
    run = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    return [line for line in run.stdout.splitlines() if line.startswith("[")]


def test_the_service_app_and_cli_import_no_spark_and_nothing_local() -> None:
    assert loaded_by("service.app") == ["[]"]
    assert loaded_by("service.cli") == ["[]"]


def test_the_probe_sees_spark_when_it_is_imported() -> None:
    # The control: the demo (which runs Spark) is what loads it.
    found = loaded_by("service.app", first="service.local.demo.spark, clients.spark")
    assert found != ["[]"]
    assert "clients.spark" in found[0]
