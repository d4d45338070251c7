"""One greedy client cannot take every slot of an instance: it gets its share, others get answers."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable

import httpx

from tests.service.conftest import Service, assert_problem

GREEDY, POLITE = "greedy-job-token", "dashboard-token"


def test_a_greedy_client_is_throttled_while_another_is_served(make_service: Callable[..., Service]) -> None:
    service = make_service(
        auth={
            "mode": "tokens",
            "tokens": [
                {"name": n, "sha256": hashlib.sha256(n.encode()).hexdigest(), "stores": ["*"]}
                for n in (GREEDY, POLITE)
            ],
        },
        limits={"max_concurrent_requests": 16, "max_concurrent_requests_per_client": 4},
    )
    stop = threading.Event()
    greedy_answers: Counter[str] = Counter()
    refusals: list[httpx.Response] = []
    lock = threading.Lock()

    def greedy() -> None:
        # Each request waits for a position the store never reaches: a slot held for a second.
        with httpx.Client(
            base_url=service.url, timeout=30, headers={"Authorization": f"Bearer {GREEDY}"}
        ) as c:
            while not stop.is_set():
                answer = c.get(
                    "/v1/stores/products/keys/p1", params={"min_position": "0:1000000", "timeout_ms": 1000}
                )
                slug = answer.json()["type"].rsplit(":", 1)[-1] if answer.status_code != 200 else "ok"
                with lock:
                    greedy_answers[slug] += 1
                if answer.status_code == 429:
                    refusals.append(answer)
                    time.sleep(0.01)

    threads = [threading.Thread(target=greedy) for _ in range(12)]
    for thread in threads:
        thread.start()
    polite_statuses: Counter[int] = Counter()
    try:
        # Bounded by a count, not a time: a slower machine takes longer, never fewer refusals.
        with httpx.Client(
            base_url=service.url, timeout=30, headers={"Authorization": f"Bearer {POLITE}"}
        ) as c:
            for _ in range(100_000):
                with lock:
                    refused = greedy_answers["client-too-many-requests"]
                if refused >= 20 and sum(polite_statuses.values()) >= 50:
                    break
                polite_statuses[c.get("/v1/stores/products/keys/p1").status_code] += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert greedy_answers["client-too-many-requests"] >= 20, greedy_answers
    assert set(polite_statuses) == {200}, polite_statuses
    assert sum(polite_statuses.values()) >= 50
    # Its admitted requests ran to their own timeout; none was refused by the instance's limit.
    assert set(greedy_answers) <= {"client-too-many-requests", "position-not-reached"}, greedy_answers
    # The greedy client's refusals are its own problem type, with a Retry-After.
    body = assert_problem(refusals[0], 429, "client-too-many-requests")
    assert refusals[0].headers["Retry-After"] == "1"
    assert "max_concurrent_requests_per_client" in body["detail"]
    # Each refusal is counted by its problem type.
    metrics = httpx.get(f"{service.url}/metrics").text
    counted = {
        line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("statestore_http_requests_refused_total{")
    }
    assert counted['type="client-too-many-requests"'] == greedy_answers["client-too-many-requests"]
    assert counted['type="too-many-requests"'] == 0
