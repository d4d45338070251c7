"""The Kafka client's own reports (librdkafka's log lines, client errors) as a store's log lines.

With the broker down, librdkafka reports each failed connection attempt, about twenty a second,
once as a log line and once more as a client error, naming its internal threads
(``GroupCoordinator``, although no group is ever joined). A store logs each distinct problem once
per interval instead, saying what it means for reads and what to do, and how often it recurred
since it was last logged. Every Kafka client of a store (its consumer, in this process or in a
child process, its admin client, its restore workers) is given a ``logger`` that lands here, so
nothing of librdkafka's reaches stderr raw.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from store.kafka.batch import KafkaErrorReport

INTERVAL_SECONDS = 60.0

# librdkafka's prefix naming its thread, e.g. "[thrd:GroupCoordinator]: ".
_THREAD = re.compile(r"^\[thrd:[^\]]*\]:\s*")
# Its internal broker handles, which name no broker an operator knows.
_HANDLE = re.compile(r"^(?:GroupCoordinator|\S+/(?:bootstrap|\d+)):\s*")
_ADDRESS = re.compile(r"(?:ipv[46]#)?((?:\[[0-9a-fA-F:]+\]|[\w.-]+):\d{1,5})\b")
_VOLATILE = re.compile(r"\s*\((?:after \d+ms in state \w+)?(?:, )?(?:\d+ identical error\(s\) suppressed)?\)")
_NUMBER = re.compile(r"\d+")
_UNREACHABLE = (
    "connect to",
    "connection refused",
    "disconnected",
    "connection reset",
    "failed to resolve",
    "brokers are down",
    "timed out",
    "receive failed",
    "send failed",
    "no route to host",
)
_SECURITY = ("ssl", "sasl", "authentication", "certificate", "handshake")


@dataclasses.dataclass(slots=True)
class _Seen:
    logged_at: float
    since: int = 0  # times seen since it was last logged


class OncePerInterval:
    """Logs a message once per ``interval`` seconds for each distinct problem (its ``key``), with
    how often the problem recurred since it was last logged. Callable from any thread."""

    def __init__(
        self,
        log: logging.LoggerAdapter[logging.Logger],
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._interval = interval
        self._clock = clock
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()

    def log(self, level: int, key: str, message: str) -> bool:
        """Log ``message`` unless ``key`` was logged less than ``interval`` ago; whether it was."""
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.logged_at < self._interval:
                seen.since += 1
                return False
            self._seen[key] = _Seen(now)
        if seen is not None and seen.since:
            message += f" ({seen.since} more time(s) in the last {now - seen.logged_at:.0f}s)"
        self._log.log(level, "%s", message)
        return True


def _problem(text: str, brokers: str | None = None) -> tuple[str, str, str, int | None]:
    """``(key, what it is, what to do, level)`` of one report (``level`` ``None``: as reported);
    reports of the same problem share a key. ``brokers``: the configured bootstrap servers, named
    when the report names no broker (``1/1 brokers are down``)."""
    text = _THREAD.sub("", text)
    address = _ADDRESS.search(text)
    text = _HANDLE.sub("", text).strip()
    lowered = text.lower()
    named = address.group(1) if address else brokers
    where = f" at {named}" if named else ""
    if any(marker in lowered for marker in _SECURITY):
        return (
            "security",
            f"the Kafka broker{where} refused the connection's security ({_VOLATILE.sub('', text)})",
            "check the kafka security settings (certificates, SASL credentials) against the broker's",
            logging.ERROR,
        )
    if any(marker in lowered for marker in _UNREACHABLE):
        return (
            "unreachable",
            f"cannot reach the Kafka broker{where} ({_VOLATILE.sub('', text)})",
            "reads go on from the last good copy, staler each second, until it is back; check that"
            " the broker runs and that kafka.bootstrap_servers names it",
            logging.WARNING,
        )
    plain = _VOLATILE.sub("", text)
    return _NUMBER.sub("#", plain), f"Kafka client: {plain}", "if this recurs, report it with this line", None


class KafkaLog:
    """One store's Kafka client reports, logged once per distinct problem per ``interval`` seconds.

    Callable from any thread (librdkafka calls back from the polling thread; a child process's
    reports arrive on the store's materializer thread).
    """

    def __init__(
        self,
        store: str,
        log: logging.LoggerAdapter[logging.Logger],
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        brokers: str | None = None,
    ) -> None:
        self._store = store
        self._brokers = brokers
        self._once = OncePerInterval(log, interval, clock)

    def line(self, level: int, facility: str, text: str) -> None:
        """A log line of librdkafka (``level``: a ``logging`` level; ``facility``: e.g. ``FAIL``)."""
        self._report(level, text)

    def client_error(self, report: KafkaErrorReport) -> None:
        """An error the client reported for itself (fatal ones are errors)."""
        self._report(logging.ERROR if report.fatal else logging.WARNING, report.text)

    def log(self, level: int, _format: str, facility: str, _client: str, text: str, *_rest: Any) -> None:
        """The ``logger`` interface confluent-kafka calls (``logger.log(level, "%s [%s] %s", ...)``)."""
        self.line(level, facility, text)

    def _report(self, reported: int, text: str) -> None:
        key, what, advice, level = _problem(text, self._brokers)
        self._once.log(level or reported, key, f'store "{self._store}": {what}; {advice}')
