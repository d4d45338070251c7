"""Producers' serializers for the format tests: Kafka's primitive key serializers as Java writes
them, and Protobuf message classes built from descriptors (no generated code to check in)."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def protobuf_message_class(name: str = "Order", package: str = "shop") -> Any:
    """A proto3 message class ``package.name`` with ``int64 id = 1; string name = 2``."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package}/{name.lower()}.proto", package=package, syntax="proto3"
    )
    message = proto.message_type.add(name=name)
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="id", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    message.field.add(name="name", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
