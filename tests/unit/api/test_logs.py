"""Structured logs: one JSON object per line, with the bound ids, and secrets masked."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from berth.config.secrets import Secret
from berth.logs import bound, configure_logging


def test_records_are_json_with_the_bound_ids_and_no_secret() -> None:
    stream = io.StringIO()
    handler = configure_logging("INFO", stream=stream)
    try:
        secret = Secret("token", "s3cr3t-value-998877").reveal()
        log = logging.getLogger("berth.test.logs")

        async def turn() -> None:
            with bound(tenant="acme", project="support", conversation="c_1", turn="turn_1", bundle="hello"):
                await asyncio.sleep(0)
                log.info("calling a tool with %s", secret)

        asyncio.run(turn())
        log.warning("outside any turn")
    finally:
        logging.getLogger().removeHandler(handler)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (first["tenant"], first["project"], first["conversation"], first["turn"], first["bundle"]) == (
        "acme",
        "support",
        "c_1",
        "turn_1",
        "hello",
    )
    assert first["message"] == "calling a tool with ***"
    assert first["level"] == "info"
    assert first["ts"].endswith("Z")
    assert "turn" not in second
