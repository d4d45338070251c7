"""Soak: a real ``statestore serve`` answering concurrent point gets, batch gets and scans over
loopback HTTP while its topic takes a steady write rate, for ``--seconds``.

Reports requests per second by kind, 5xx answers, positions that went back on a connection, and the
service process's RSS over the run (the curve, and its growth after the first third).

    python -m bench soak --seconds 600 --readers 3 --write-rate 1000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from service.local.broker import LocalBroker, free_port
from tests.faults.soak import SoakResult, seed, soak
from tests.support.kafka import create_topic, make_producer

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, timeout=5) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"the service exited with code {process.returncode}")
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    raise SystemExit(f"the service was not ready within {timeout} s")


def report(result: SoakResult, points: int = 10) -> None:
    seconds = result.seconds
    written = result.records_written
    print(f"ran {seconds:.0f} s; {written} records written ({written / seconds:.0f}/s)")
    kinds = sorted({kind for kind, _ in result.answers})
    for kind in kinds:
        count = sum(n for (k, _), n in result.answers.items() if k == kind)
        statuses = {status: n for (k, status), n in result.answers.items() if k == kind}
        print(f"  {kind:6} {count:8d} requests ({count / seconds:7.0f}/s)  statuses {statuses}")
    print(f"5xx answers: {result.server_errors}; transport errors: {len(result.errors)}")
    print(f"positions that went back on a connection: {len(result.regressions)}")
    step = max(1, len(result.rss) // points)
    curve = result.rss[::step] + ([result.rss[-1]] if (len(result.rss) - 1) % step else [])
    print(
        "RSS of the service (MiB) at seconds: " + ", ".join(f"{t:.0f}s {rss / MIB:.0f}" for t, rss in curve)
    )
    warm = [rss for t, rss in result.rss if t >= seconds / 3]
    growth = (warm[-1] - warm[0]) / MIB
    print(f"RSS growth after the first third: {growth:+.1f} MiB (max {max(warm) / MIB:.0f} MiB)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--readers", type=int, default=3, help="concurrent HTTP connections")
    parser.add_argument("--write-rate", type=int, default=1_000, help="records per second")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, LocalBroker(log_path=Path(tmp) / "tansu.log") as broker:
        servers = broker.bootstrap_servers
        create_topic(servers, "soak", partitions=3)
        producer = make_producer(servers)
        seed(producer, "soak")
        port = free_port()
        config = Path(tmp) / "statestore.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "kafka": {"bootstrap_servers": servers},
                    "state_dir": str(Path(tmp) / "state"),
                    "http": {"host": "127.0.0.1", "port": port},
                    "stores": [{"name": "soak", "topic": "soak", "value_format": "json"}],
                }
            )
        )
        log = open(Path(tmp) / "service.log", "wb")  # noqa: SIM115 (closed after the process)
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--config", str(config)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url, process)
            result = soak(
                url,
                "soak",
                producer,
                "soak",
                pid=process.pid,
                seconds=args.seconds,
                readers=args.readers,
                write_rate=args.write_rate,
                sample_every=max(1.0, args.seconds / 100),
            )
        finally:
            process.terminate()
            process.wait(timeout=60)
            log.close()
    report(result)
    return 0 if result.server_errors == 0 and not result.regressions and not result.errors else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
