"""``kill -9`` of the service while it restores (on a fast machine: just after) a store of keys
written through the Schema Registry under three key schema versions: after the restart every natural
key answers its latest write across the schema ids, as computed from the topic (the entries that
decide it are written with the rows)."""

from __future__ import annotations

import json
import random
import struct
import time

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from service.local.broker import LocalBroker, free_port
from store import Position
from tests.faults.conftest import ServiceFactory
from tests.store.table.test_winners import Written, model_of
from tests.support.kafka import create_topic, end_of, make_producer, produce_timed
from tests.support.schema_registry import schema_registry

pytestmark = pytest.mark.slow

KEYS = 2_000
RECORDS = 60_000


def test_kill_9_while_restoring_natural_keys_then_every_key_answers_its_latest_write(
    own_broker: LocalBroker, start_service: ServiceFactory
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "customers", partitions=3)
    rng = random.Random(9)
    with schema_registry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        context = SerializationContext("customers", MessageField.KEY)
        versions = [AvroSerializer(client, json.dumps({"type": "long", "doc": f"v{v}"})) for v in range(3)]
        ids = [struct.unpack(">I", serializer(0, context)[1:5])[0] for serializer in versions]
        planned = []
        for n in range(RECORDS):
            natural, version = rng.randrange(KEYS), rng.randrange(3)
            value = None if rng.randrange(6) == 0 else b"%d@%d" % (natural, n)
            planned.append((natural, version, value, 1_700_000_000_000 + rng.randrange(100_000)))
        messages = produce_timed(
            make_producer(servers), "customers", [(versions[v](k, context), x, t) for k, v, x, t in planned]
        )
        written: list[Written] = [
            (natural, ids[version], at, value, message.partition() or 0, message.offset() or 0)
            for (natural, version, value, at), message in zip(planned, messages, strict=True)
        ]
        end = Position(end_of(messages))
        model = {struct.unpack(">q", key)[0]: value.decode() for key, value in model_of(written).items()}

        stores = [{"name": "customers", "topic": "customers", "key_format": "avro", "value_format": "string"}]
        env = {"STATESTORE_SCHEMA_REGISTRY__URL": registry.url}
        port = free_port()
        service = start_service(servers, stores, env=env, port=port)
        service.wait_for(
            lambda: service.info("customers")["records_applied_total"] > RECORDS // 6, 60, "a part restored"
        )
        service.kill()
        service = start_service(servers, stores, env=env, port=port)
        service.wait_ready()
        deadline = time.monotonic() + 60
        while not Position.parse(service.info("customers")["position"]).reaches(end):
            assert time.monotonic() < deadline, service.info("customers")
            time.sleep(0.1)
        keys = [str(n) for n in range(KEYS)]
        values = service.client.post("/v1/stores/customers/keys:batchGet", json={"keys": keys}).json()[
            "values"
        ]
        assert {n: value for n, value in enumerate(values) if value is not None} == model
