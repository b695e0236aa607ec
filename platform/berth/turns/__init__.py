"""The turn service: the application layer that the HTTP API, ``berth worker`` and ``berth chat`` all call.

It starts, runs, follows, cancels and ends turns (:mod:`~berth.turns.services`), keeps their event logs in the process
(:mod:`~berth.turns.event_log`) or in Redis (:mod:`~berth.turns.redis_events`), admits them
(:mod:`~berth.turns.admission`), knows who is calling (:mod:`~berth.turns.callers`), and reports readiness and metrics
(:mod:`~berth.turns.readiness`, :mod:`~berth.turns.metrics`). Distributed mode's shared Redis structures live here
too, because API processes and workers both use them: the turn queue (:mod:`~berth.turns.queue`), the control
channel (:mod:`~berth.turns.control`) and the operators' turn tools (:mod:`~berth.turns.admin`).

Nothing here knows HTTP beyond the status a :class:`~berth.turns.errors.ServiceError` maps to; nothing here imports
:mod:`berth.api`, :mod:`berth.distributed` or :mod:`berth.cli` (``tests/unit/test_layers.py``).
"""
