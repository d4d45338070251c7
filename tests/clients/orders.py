"""Orders of tickers, joined to the positions/tickers example (client side only: no server imports)."""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

POSITION_SCHEMA = "ticker string, quantity long, account string"
SYMBOLS = ["AAPL", "MSFT", "BRK/B", "Zoë", "IBM", "NOPE", "GHOST"]  # NOPE: no positions, GHOST: no ticker


def orders(spark: SparkSession, rows: int = 300) -> tuple[DataFrame, pd.DataFrame]:
    frame = pd.DataFrame(
        {
            "order_id": range(rows),
            "symbol": [None if i % 41 == 0 else SYMBOLS[i % len(SYMBOLS)] for i in range(rows)],
        }
    )
    return spark.createDataFrame(frame).repartition(2), frame


def positions_frame(table: dict[str, Any]) -> pd.DataFrame:
    """The positions of a store table as the columns a ``prefix="pos_"`` index join adds."""
    rows = [(k, v["ticker"], v["quantity"], v["account"]) for k, v in table.items() if "ticker" in v]
    return pd.DataFrame(rows, columns=["pos_key", "pos_ticker", "pos_quantity", "pos_account"])


def sorted_rows(frame: pd.DataFrame, by: list[str]) -> list[tuple[object, ...]]:
    frame = frame.sort_values(by, na_position="first").reset_index(drop=True)
    return [tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False)]
