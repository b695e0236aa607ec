"""Distributed mode's own processes (SPEC §8): turn workers sharing PostgreSQL, Redis and an artifact store with the
API processes.

* :mod:`berth.distributed.worker` — ``berth worker``: claims queued turns and runs them;
* :mod:`berth.distributed.execution` — one claimed turn, run to its end (or given back to the queue);
* :mod:`berth.distributed.health` — a worker's health port (``/healthz``, ``/readyz``, ``/metrics``).

What API processes and workers share — the turn queue (:mod:`berth.turns.queue`), the control channel
(:mod:`berth.turns.control`), the Redis event logs (:mod:`berth.turns.redis_events`) and the operators' turn tools
(:mod:`berth.turns.admin`) — belongs to the turn service, which both sides call; the resolved connection settings are
:mod:`berth.host.connections`.
"""
