"""Admission: the limits ``gateway.yaml`` sets on what callers may ask of the host (SPEC §2.4).

* :mod:`berth.gateway.rate` — request rates per tenant (GCRA: a token bucket kept as one timestamp);
* :mod:`berth.gateway.counters` — where rates and turn leases are counted, and the in-process counters;
* :mod:`berth.gateway.redis_counters` — the same counters in Redis, shared by every worker (Lua scripts);
* :mod:`berth.gateway.slots` — this worker's turn slots and the queue in front of them (backpressure).

The API applies them (:mod:`berth.turns.admission`); nothing here knows about HTTP.
"""
