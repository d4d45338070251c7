"""The positions/tickers example: positions keyed by id with a ``ticker`` field, tickers keyed by symbol.

Records to produce in rounds (new positions, positions moved to another ticker, deleted positions
and tickers), and the expected answers computed from the records (the model).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from tests.support.kafka import Record

TICKERS = ["AAPL", "MSFT", "BRK/B", "Zoë", "IBM", "NOPE"]  # "/" and non-ASCII go in URL paths
INDEX = {"indexes": [{"name": "by_ticker", "field": "ticker"}]}


def position(number: int, ticker: str, quantity: int) -> bytes:
    return json.dumps({"ticker": ticker, "quantity": quantity, "account": f"acct-{number % 7}"}).encode()


def ticker(symbol: str, price: float) -> bytes:
    return json.dumps({"name": f"{symbol} Inc.", "price": price}).encode()


def position_round(seed: int, count: int, ids: int, tickers: list[str] | None = None) -> list[Record]:
    """Positions created, moved between tickers (same id, other ticker) and deleted, reproducibly."""
    rng = random.Random(seed)
    symbols = tickers or TICKERS[:-1]  # the last ticker never holds a position
    records: list[Record] = []
    for _ in range(count):
        number = rng.randrange(ids)
        key = f"pos-{number:04d}".encode()
        if rng.randrange(6) == 0:
            records.append((key, None))
        else:
            records.append((key, position(number, rng.choice(symbols), rng.randrange(1, 500) + seed * 1000)))
    return records


def by_ticker(model: Mapping[bytes, bytes]) -> dict[str, list[tuple[str, Any]]]:
    """The index the model implies: ticker → ``[(position id, document)]`` in id order."""
    grouped: dict[str, list[tuple[str, Any]]] = {}
    for key in sorted(model):
        document = json.loads(model[key])
        if "ticker" not in document:
            continue
        grouped.setdefault(document["ticker"], []).append((key.decode(), document))
    return grouped
