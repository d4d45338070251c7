"""statestore on one machine, for development and demos: never part of a served deployment.

``service.local.broker`` starts the embedded Kafka-protocol broker (Tansu, ``statestore broker``),
``service.local.shards`` runs a store as N ``statestore serve`` processes on loopback, and
``service.local.demo`` is ``statestore demo`` (the only code of ``service`` that runs Spark). The HTTP
service (``service.app``) imports none of them; ``service.cli`` imports them only for those commands.
"""
