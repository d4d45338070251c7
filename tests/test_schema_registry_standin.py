"""The Schema Registry stand-in of the tests answers what confluent-kafka's serializers and
``SchemaRegistryClient`` ask, as the real registry does."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.schema_registry import SCHEMA_NOT_FOUND, SUBJECT_NOT_FOUND, schema_registry
from tests.support.serdes import protobuf_message_class

CUSTOMER_V1 = {
    "type": "record",
    "name": "Customer",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
CUSTOMER_V2 = {
    **CUSTOMER_V1,
    "fields": [*CUSTOMER_V1["fields"], {"name": "city", "type": ["null", "string"], "default": None}],
}


def test_avro_serializer_registers_versions_and_the_deserializer_reads_them_back() -> None:
    with schema_registry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        context = SerializationContext("customers", MessageField.VALUE)
        first = AvroSerializer(client, json.dumps(CUSTOMER_V1))({"id": 1, "name": "Ada"}, context)
        second = AvroSerializer(client, json.dumps(CUSTOMER_V2))(
            {"id": 2, "name": "Bo", "city": "Oslo"}, context
        )
        assert first[:5] == b"\x00\x00\x00\x00\x01"
        assert second[:5] == b"\x00\x00\x00\x00\x02"
        assert client.get_versions("customers-value") == [1, 2]
        latest = client.get_latest_version("customers-value")
        assert (latest.version, latest.schema_id) == (2, 2)
        assert json.loads(client.get_version("customers-value", 1).schema.schema_str) == CUSTOMER_V1
        reader = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
        assert reader(first, context) == {"id": 1, "name": "Ada"}
        assert reader(second, context) == {"id": 2, "name": "Bo", "city": "Oslo"}
        # Registering the same schema again gives the same id and no new version.
        assert registry.register("customers-value", json.dumps(CUSTOMER_V1)) == 1
        assert client.get_versions("customers-value") == [1, 2]


def test_protobuf_and_json_schema_serializers_round_trip() -> None:
    with schema_registry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        message = protobuf_message_class()
        context = SerializationContext("orders", MessageField.VALUE)
        framed = ProtobufSerializer(message, client, {"use.deprecated.format": False})(
            message(id=5, name="pen"), context
        )
        assert framed[0] == 0
        decoded = ProtobufDeserializer(message, {"use.deprecated.format": False})(framed, context)
        assert (decoded.id, decoded.name) == (5, "pen")
        assert client.get_latest_version("orders-value").schema.schema_type == "PROTOBUF"
        schema = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}})
        framed = JSONSerializer(schema, client)(
            {"id": 3}, SerializationContext("tickets", MessageField.VALUE)
        )
        assert JSONDeserializer(None, schema_registry_client=client)(
            framed, SerializationContext("tickets", MessageField.VALUE)
        ) == {"id": 3}


def test_errors_are_answered_as_the_registry_does() -> None:
    with schema_registry() as registry:
        client = SchemaRegistryClient({"url": registry.url, "max.retries": 0})
        with pytest.raises(SchemaRegistryError) as unknown_id:
            client.get_schema(99)
        assert (unknown_id.value.http_status_code, unknown_id.value.error_code) == (404, SCHEMA_NOT_FOUND)
        with pytest.raises(SchemaRegistryError) as unknown_subject:
            client.get_latest_version("nothing-value")
        assert unknown_subject.value.error_code == SUBJECT_NOT_FOUND
        registry.down()
        with pytest.raises(Exception, match=r"(?i)disconnect|closed|connection|protocol"):
            SchemaRegistryClient({"url": registry.url, "max.retries": 0}).get_schema(1)
        assert registry.calls["GET /schemas/ids/99"] == 1
