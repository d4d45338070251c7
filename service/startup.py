"""The configuration checked against the machine before the service starts.

Mistakes that would otherwise surface later, and for good (a TLS listener that cannot start, a
Kafka consumer retried forever on a property librdkafka does not know, a store FAILED because its
directory cannot be written), stop ``statestore serve`` at once with one line that names the
setting: a :class:`~service.exceptions.ConfigError`.
"""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException
from pydantic import SecretStr

from service.exceptions import ConfigError
from service.settings import Settings, TlsSettings
from service.tls import server_context

_VOLUME_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def check_startup(settings: Settings) -> None:
    """Raise ``ConfigError`` for the first setting the service could not start or run with."""
    if settings.http.tls is not None:
        check_tls(settings.http.tls)
    check_kafka(settings)
    check_state_dir(settings.state_dir)


def check_tls(tls: TlsSettings) -> None:
    """The certificate chain and its key load, and belong together; the client CA bundle loads."""
    server_context(tls)


def check_kafka(settings: Settings) -> None:
    """librdkafka takes every ``kafka`` property and value (checked without connecting anywhere)."""
    config = settings.librdkafka_config()
    # No bootstrap servers: the client is built and closed without contacting any broker.
    check = {**config, "bootstrap.servers": "", "group.id": "statestore-config-check", "log_level": 0}
    try:
        Consumer(check).close()
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        reason = error.str() if isinstance(error, KafkaError) else str(exc)
        for value in settings.kafka.values():
            if isinstance(value, SecretStr) and value.get_secret_value():
                reason = reason.replace(value.get_secret_value(), "**********")
        raise ConfigError(f"kafka: {reason}; fix the kafka section (librdkafka consumer properties)") from exc


def check_state_dir(state_dir: Path) -> None:
    """``state_dir`` exists or can be made, and files can be created in it.

    A full volume is no configuration mistake: the stores wait for space (docs/how-to/operations.md).
    """
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=state_dir, prefix=".statestore-write-check-"):
            pass
    except OSError as exc:
        if exc.errno in _VOLUME_FULL:
            return
        raise ConfigError(
            f"state_dir: {state_dir} is not a directory the service can write"
            f" ({exc.strerror or exc}); give it a writable directory (the chart mounts a volume there)"
        ) from exc
