"""The demo's dataset: the invoice example of KIP-99, generated deterministically from a seed.

Two dimension tables, kept as compacted topics and served by statestore:

- ``products``: ``P00001`` … ``{"name", "category", "unit_price"}``; a few products are
  discontinued, i.e. deleted from the table by a tombstone written after their record;
- ``customers``: ``C00001`` … ``{"name", "country", "tier"}``.

One fact stream, ``purchases``: ``{"purchase_id", "ts", "product_id", "customer_id", "quantity"}``.
Product popularity is skewed (a few best sellers, a long tail), and a small share of purchases
name a product or customer the tables do not hold (unknown ids, discontinued products), so the
join's match rate is realistic rather than 100 %.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

SEED = 99
PRODUCT_COUNT = 2_000
CUSTOMER_COUNT = 5_000
DISCONTINUED_PRODUCTS = 25
UNKNOWN_PRODUCT_SHARE = 0.004  # purchases naming a product id the catalog never had
UNKNOWN_CUSTOMER_SHARE = 0.003  # purchases by customers not (yet) in the customer table

PRODUCTS_TOPIC = "products"
CUSTOMERS_TOPIC = "customers"
PURCHASES_TOPIC = "purchases"

PRODUCT_SCHEMA = "name string, category string, unit_price double"
CUSTOMER_SCHEMA = "name string, country string, tier string"

_CATEGORIES: dict[str, tuple[tuple[str, ...], float]] = {
    # category: (nouns, typical unit price)
    "office": (("Stapler", "Notebook", "Desk Lamp", "Fountain Pen", "Binder", "Whiteboard"), 18.0),
    "kitchen": (("Kettle", "Chef Knife", "Skillet", "Coffee Grinder", "Cutting Board", "Teapot"), 45.0),
    "garden": (("Hose Reel", "Pruner", "Planter", "Watering Can", "Rake", "Bird Feeder"), 30.0),
    "electronics": (("Headphones", "Charger", "Webcam", "Keyboard", "Speaker", "Monitor Arm"), 80.0),
    "outdoor": (("Tent", "Backpack", "Headlamp", "Sleeping Bag", "Camping Stove", "Trekking Poles"), 95.0),
    "home": (("Throw Blanket", "Wall Clock", "Vase", "Doormat", "Candle Set", "Bookend"), 25.0),
}
_ADJECTIVES = (
    "Classic", "Compact", "Deluxe", "Ergonomic", "Everyday", "Heritage", "Lightweight", "Modern",
    "Nordic", "Premium", "Rugged", "Smart", "Travel", "Vintage",
)  # fmt: skip
_MATERIALS = ("Bamboo", "Ceramic", "Copper", "Linen", "Oak", "Recycled", "Steel", "Walnut", "Wool")
_FIRST_NAMES = (
    "Ada", "Amara", "Bruno", "Chen", "Dalia", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jonas", "Kai",
    "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tomas", "Uma", "Viktor", "Yara",
)  # fmt: skip
_LAST_NAMES = (
    "Almeida", "Berg", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito", "Jansen",
    "Kowalski", "Laurent", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Schmidt", "Tanaka", "Weber",
)  # fmt: skip
_COUNTRIES = (("DE", 22), ("FR", 18), ("NL", 10), ("ES", 12), ("IT", 12), ("SE", 6), ("PL", 9), ("GB", 11))
_TIERS = (("bronze", 55), ("silver", 28), ("gold", 13), ("platinum", 4))
_FIRST_PURCHASE = datetime(2024, 1, 1, tzinfo=UTC)


def product_id(number: int) -> str:
    return f"P{number:05d}"


def customer_id(number: int) -> str:
    return f"C{number:05d}"


@dataclasses.dataclass(frozen=True)
class Dataset:
    """The demo tables as they are written to their topics (every value a JSON-ready dict).

    ``discontinued`` products appear in ``products`` and are then deleted by a tombstone, so the
    served table holds ``products`` minus ``discontinued``.
    """

    products: dict[str, dict[str, Any]]
    discontinued: list[str]
    customers: dict[str, dict[str, Any]]
    purchase_count: int
    seed: int = SEED

    def live_products(self) -> set[str]:
        """Product ids the served table holds (discontinued ones removed)."""
        return set(self.products) - set(self.discontinued)

    def purchases(self) -> Iterator[dict[str, Any]]:
        """The purchases, generated lazily and always in the same order for the same seed."""
        return _purchases(self)


def _weighted(rng: random.Random, choices: tuple[tuple[str, int], ...]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def _products(rng: random.Random, count: int) -> dict[str, dict[str, Any]]:
    products: dict[str, dict[str, Any]] = {}
    categories = list(_CATEGORIES)
    for number in range(1, count + 1):
        category = rng.choice(categories)
        nouns, typical_price = _CATEGORIES[category]
        name = f"{rng.choice(_ADJECTIVES)} {rng.choice(_MATERIALS)} {rng.choice(nouns)}"
        price = round(typical_price * rng.lognormvariate(0, 0.45), 2)
        products[product_id(number)] = {
            "name": name,
            "category": category,
            "unit_price": max(price, 0.99),
        }
    return products


def _customers(rng: random.Random, count: int) -> dict[str, dict[str, Any]]:
    return {
        customer_id(number): {
            "name": f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}",
            "country": _weighted(rng, _COUNTRIES),
            "tier": _weighted(rng, _TIERS),
        }
        for number in range(1, count + 1)
    }


def build_dataset(
    purchases: int,
    *,
    products: int = PRODUCT_COUNT,
    customers: int = CUSTOMER_COUNT,
    discontinued: int = DISCONTINUED_PRODUCTS,
    seed: int = SEED,
) -> Dataset:
    """The demo dataset: ``products`` and ``customers`` tables and ``purchases`` facts."""
    if purchases < 1:
        raise ValueError(f"the demo needs at least one purchase, got {purchases}")
    rng = random.Random(seed)
    product_table = _products(rng, products)
    customer_table = _customers(rng, customers)
    # Discontinued products are spread over the catalog, popular ones included.
    gone = sorted(rng.sample(sorted(product_table), min(discontinued, products)))
    return Dataset(product_table, gone, customer_table, purchases, seed)


def _purchases(dataset: Dataset) -> Iterator[dict[str, Any]]:
    rng = random.Random(dataset.seed + 1)
    product_ids = sorted(dataset.products)
    # Zipf-like popularity: the k-th product is bought about 1/(k+10) as often as the others.
    order = product_ids[:]
    rng.shuffle(order)
    cumulative = list(itertools.accumulate(1.0 / (rank + 10) for rank in range(len(order))))
    customer_count = len(dataset.customers)
    unknown_products = len(product_ids) + 9000
    for number in range(1, dataset.purchase_count + 1):
        if rng.random() < UNKNOWN_PRODUCT_SHARE:
            product = product_id(rng.randint(unknown_products, unknown_products + 999))
        else:
            product = order[bisect.bisect(cumulative, rng.random() * cumulative[-1])]
        if rng.random() < UNKNOWN_CUSTOMER_SHARE:
            customer = customer_id(rng.randint(customer_count + 50_000, customer_count + 59_999))
        else:
            customer = customer_id(rng.randint(1, customer_count))
        yield {
            "purchase_id": f"PU{number:08d}",
            "ts": (_FIRST_PURCHASE + timedelta(seconds=number * 37)).isoformat(),
            "product_id": product,
            "customer_id": customer,
            "quantity": rng.choice((1, 1, 1, 1, 2, 2, 3, 4, 5, 10)),
        }
