"""Log output: one line per record on stderr, as text (``time LEVEL logger: message``) or JSON.

A JSON line is one object: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, then
``store``, ``position`` and ``error`` where they are known, and any other field a caller passed
with ``extra=`` (for example the access log's ``method``, ``path`` and ``code``). ``store`` comes
from ``extra={"store": ...}``, else from the ``store "<name>"`` that store lines start with;
``position`` from ``extra``, else from the ``position <partition:offset,...>`` a line names;
``error`` from ``extra``, else from the exception being logged (its traceback in ``traceback``).
Fields without a value are left out.
"""

from __future__ import annotations

import datetime
import logging
import re
import sys
from typing import Any, Literal

import orjson

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

# Attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
_STORE_PREFIX = re.compile(r'^store "([^"]+)"')
_POSITION = re.compile(r"\bposition (\d+:\d+(?:,\d+:\d+)*)")
# Fields some libraries add that only make sense on a terminal.
_DROPPED = frozenset({"color_message"})


class JsonFormatter(logging.Formatter):
    """Formats each record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        extras = {
            k: v
            for k, v in record.__dict__.items()
            if k not in _STANDARD_ATTRIBUTES and k not in _DROPPED and v is not None
        }
        if "store" not in extras and (named := _STORE_PREFIX.match(message)):
            line["store"] = named.group(1)
        if "position" not in extras and (at := _POSITION.search(message)):
            line["position"] = at.group(1)
        line.update(extras)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            line.setdefault("error", f"{type(exc).__name__}: {exc}")
            line["traceback"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["traceback"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


def configure_logging(level: str, log_format: LogFormat = "text") -> None:
    """Send every log record at ``level`` or above to stderr, formatted as ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
