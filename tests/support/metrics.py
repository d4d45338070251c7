"""What a service exports on ``/metrics``, read back with Prometheus' own text parser."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.scenes import scene_stores, serve_scene


def exported_names(text: str) -> set[str]:
    """The names a query can use: every sample's name, and a histogram's or summary's own name."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
        if family.type in {"histogram", "summary"}:
            names.add(family.name)
    return names


def scrape_every_family() -> str:
    """A ``/metrics`` scrape in which every family has samples: stores READY and restoring, each
    with its memory and broker contact, and HTTP requests answered."""
    with serve_scene(scene_stores()) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/v1/stores/products/keys/p-0001").status_code == 200
        response = client.get("/metrics")
        assert response.status_code == 200
        return response.text
