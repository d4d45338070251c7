"""librdkafka's reports as a store's log: each distinct problem once per interval, saying what to do,
whatever internal thread of the client reported it and however often."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from store.kafka.batch import KafkaErrorReport
from store.kafka.client import new_consumer
from store.kafka.log import KafkaLog

BOOTSTRAP = (
    "[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed:"
    " Connection refused (after 0ms in state CONNECT)"
)
COORDINATOR = (
    "[thrd:GroupCoordinator]: GroupCoordinator: 127.0.0.1:9092: Disconnected: connection reset by peer"
    " (after 2002ms in state UP, 3 identical error(s) suppressed)"
)
SSL = (
    "[thrd:ssl://kafka:9093/bootstrap]: ssl://kafka:9093/bootstrap: SSL handshake failed:"
    " certificate verify failed"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(record.levelno, record.getMessage()) for record in caplog.records]


@pytest.fixture
def kafka_log(caplog: pytest.LogCaptureFixture) -> tuple[KafkaLog, Clock]:
    caplog.set_level(logging.INFO, logger="test.kafka")
    clock = Clock()
    return KafkaLog("prices", logging.LoggerAdapter(logging.getLogger("test.kafka")), 60.0, clock), clock


def test_a_broker_down_is_one_line_a_minute_whoever_reports_it(
    kafka_log: tuple[KafkaLog, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    log, clock = kafka_log
    for _ in range(20):  # a second of librdkafka's reports with the broker down
        log.line(logging.ERROR, "FAIL", BOOTSTRAP)
        log.client_error(KafkaErrorReport(KafkaError._TRANSPORT, BOOTSTRAP.split("]: ", 1)[1], False, None))
        log.line(logging.INFO, "FAIL", COORDINATOR)
        log.client_error(KafkaErrorReport(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down", False, None))
        clock.now += 0.05
    [(level, line)] = lines(caplog)
    assert level == logging.WARNING
    assert line.startswith('store "prices": cannot reach the Kafka broker at 127.0.0.1:9092 (')
    assert "check that the broker runs and that kafka.bootstrap_servers names it" in line
    assert "reads go on from the last good copy" in line
    assert "GroupCoordinator" not in line
    assert "thrd:" not in line
    clock.now += 60
    log.line(logging.ERROR, "FAIL", BOOTSTRAP)
    assert len(lines(caplog)) == 2
    assert "79 more time(s) in the last 61s" in lines(caplog)[1][1]


def test_a_report_naming_no_broker_names_the_configured_ones(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.kafka")
    adapter = logging.LoggerAdapter(logging.getLogger("test.kafka"))
    log = KafkaLog("prices", adapter, brokers="kafka-0:9092,kafka-1:9092")
    log.client_error(KafkaErrorReport(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down", False, None))
    [(_level, line)] = lines(caplog)
    assert line.startswith('store "prices": cannot reach the Kafka broker at kafka-0:9092,kafka-1:9092 (')


def test_distinct_problems_each_get_their_line(
    kafka_log: tuple[KafkaLog, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    log, _clock = kafka_log
    log.line(logging.ERROR, "FAIL", BOOTSTRAP)
    log.line(logging.ERROR, "FAIL", SSL)
    log.line(logging.ERROR, "FAIL", SSL)
    log.line(logging.WARNING, "CONFWARN", "[thrd:app]: Configuration property x is deprecated")
    log.line(logging.WARNING, "CONFWARN", "[thrd:app]: Configuration property x is deprecated")
    log.client_error(KafkaErrorReport(KafkaError._FATAL, "fatal: producer fenced", True, None))
    found = lines(caplog)
    assert [level for level, _ in found] == [logging.WARNING, logging.ERROR, logging.WARNING, logging.ERROR]
    assert "security" in found[1][1]
    assert "at kafka:9093" in found[1][1]
    assert "check the kafka security settings" in found[1][1]
    assert "Kafka client: Configuration property x is deprecated; if this recurs" in found[2][1]
    assert "producer fenced" in found[3][1]


def test_the_client_hands_its_lines_to_the_logger_not_to_stderr(
    kafka_log: tuple[KafkaLog, Clock], caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """confluent-kafka calls the ``logger`` it is given as ``logger.log(level, "%s [%s] %s", ...)``."""
    log, _clock = kafka_log
    consumer = new_consumer("prices", {"bootstrap.servers": "127.0.0.1:1"}, lambda error: None, log)
    try:
        for _ in range(10):
            consumer.consume(10, 0.1)
    finally:
        consumer.close()
    assert "%3|" not in capfd.readouterr().err
    assert [line for _, line in lines(caplog) if "cannot reach the Kafka broker at 127.0.0.1:1 " in line]
