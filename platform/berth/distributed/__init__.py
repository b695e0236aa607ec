"""Distributed mode (SPEC §8): API processes and turn workers sharing PostgreSQL, Redis and an artifact store.

* :mod:`berth.distributed.connections` — the resolved connection settings of ``platform.storage`` (secrets
  revealed once, masked in every log and error);
* :mod:`berth.distributed.queue` — the turn queue: a Redis stream read by a consumer group;
* :mod:`berth.distributed.control` — live events and cancels sent from an API process to the turn's worker;
* :mod:`berth.distributed.worker` — ``berth worker``: claims queued turns and runs them.
"""
