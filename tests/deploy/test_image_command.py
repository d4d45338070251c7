"""The service image's own command, run with no configuration file: the variables docs/how-to/deployment.md
shows configure it.

No Docker engine runs here, so the command line the image runs (its ENTRYPOINT and CMD) and the
variables it sets (its ENV) are read from the Dockerfile, and run as they are, with the variables
a ``docker run -e ...`` would add: the broker, the stores, and a free port and state dir.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import httpx

from service.local.broker import LocalBroker, free_port
from tests.deploy.manifests import DOCKERFILE, ROOT, dockerfile_instructions
from tests.deploy.test_commands import dockerfile_commands
from tests.support.kafka import close_producer, make_producer
from tests.support.serve_process import BIN, serving, without_statestore_variables


def image_environment() -> dict[str, str]:
    """The variables the runtime image sets (ENV), ``PATH`` aside."""
    instructions = dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))
    variables: dict[str, str] = {}
    for instruction in instructions:
        if instruction.stage == "runtime" and instruction.keyword == "ENV":
            for word in shlex.split(instruction.arguments):
                name, _, value = word.partition("=")
                variables[name] = value
    variables.pop("PATH")
    return variables


def documented_variables() -> dict[str, str]:
    """The ``-e NAME=VALUE`` of the ``docker run`` that docs/how-to/deployment.md shows for the image."""
    text = (ROOT / "docs" / "how-to" / "deployment.md").read_text(encoding="utf-8")
    [command] = [
        block for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL) if "docker run -p" in block
    ]
    words = shlex.split(re.sub(r"\\\n", " ", command))
    return dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "-e")


def test_the_image_serves_from_variables_alone(
    broker: LocalBroker, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic()
    producer = make_producer(broker.bootstrap_servers, partitioner="murmur2_random")
    producer.produce(topic, key=b"p-1", value=json.dumps({"name": "Pen"}).encode())
    close_producer(producer)
    argv = dockerfile_commands()["Dockerfile:runtime"]
    assert argv == ["statestore", "serve"], "the image must need no file"
    assert not any(a.startswith("--config") for a in argv)
    port = free_port()
    # What the documented `docker run -e ...` adds: the broker and the stores (here the test's
    # broker and topic); then a free port, and a state dir of the test's own as a volume would be.
    documented = documented_variables()
    assert set(documented) == {"STATESTORE_KAFKA__BOOTSTRAP_SERVERS", "STATESTORE_STORES"}
    stores = json.loads(documented["STATESTORE_STORES"])
    assert [store["name"] for store in stores] == ["products"]
    environment = {
        **without_statestore_variables(os.environ),
        **image_environment(),
        "STATESTORE_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "STATESTORE_STORES": json.dumps([{**store, "topic": topic} for store in stores]),
        "STATESTORE_HTTP__PORT": str(port),
        "STATESTORE_STATE_DIR": str(tmp_path / "volume"),
    }
    assert environment["STATESTORE_HTTP__HOST"] == "0.0.0.0"
    url = f"http://127.0.0.1:{port}"
    with serving([str(BIN / argv[0]), *argv[1:]], environment, tmp_path, url) as log:
        answer = httpx.get(f"{url}/v1/stores/products/keys/p-1", timeout=10)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"name": "Pen"}
    output = log.read_text()
    assert "1 store(s) from the environment" in output, output
    assert "0.0.0.0" in output
    assert (tmp_path / "volume").is_dir()
