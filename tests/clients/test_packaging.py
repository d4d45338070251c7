"""The clients stay installable on an executor: nothing of the server side gets imported."""

from __future__ import annotations

import subprocess
import sys

SERVER_SIDE = ("store", "service", "rocksdict", "fastapi", "confluent_kafka", "uvicorn", "pydantic", "orjson")


def test_clients_import_nothing_of_the_server_side() -> None:
    probe = (
        "import sys, clients, clients.spark, clients.lookup\n"
        f"loaded = sorted(m for m in {SERVER_SIDE!r} if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == ""


def test_clients_import_of_ours_only_clients_and_wire() -> None:
    """The shared vocabulary (``wire``) comes with them; nothing else of ours."""
    probe = (
        "import sys, clients, clients.spark, clients.lookup\n"
        "ours = ('clients', 'wire', 'store', 'service', 'bench')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ours}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "['clients', 'wire']"
