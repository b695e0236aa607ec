"""A bundle for the distributed fault tests.

* ``fault.work`` takes a moment and records every run in a ledger file outside Berth (``props.ledger`` in
  ``bundles.yaml``): one JSON line per run with the turn, the call id, the step, the process, a run id and when it
  began and ended. Its result names the run id, so a test can tell which run's result the turn's log holds.
* ``fault.crash`` kills its own process (``SIGKILL``) while the file ``props.poison_switch`` exists, after
  recording the attempt in the ledger: a turn calling it kills its worker at every attempt (a poison turn).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from berth import AgentSpec, BundleContext, BundleInfo, current_call, hookimpl, tool


class FaultProps(BaseModel):
    """Where the runs of the tools are recorded, how long ``fault.work`` takes, when ``fault.crash`` kills."""

    ledger: str = "fault-ledger.txt"
    """The ledger file (the fault tests name one in the test's folder)."""
    work_s: float = 0.15
    """How long one run of ``fault.work`` takes."""
    poison_switch: str = ""
    """A file: while it exists, ``fault.crash`` kills the process it runs in (empty: it never does)."""


def record(ledger: str, **run: Any) -> None:
    """Append one run to the ledger (one ``write`` of one line on a file opened for appending: lines written by
    several processes at once never interleave)."""
    call = current_call()
    line = json.dumps({"turn": call.turn_id, "call": call.call_id, "pid": os.getpid(), **run}) + "\n"
    with open(ledger, "a", encoding="utf-8") as file:
        file.write(line)


@hookimpl
def berth_bundle() -> BundleInfo:
    """Identify the bundle."""
    return BundleInfo(id="fault", version="1.0.0", props_model=FaultProps)


@hookimpl
def berth_agent(ctx: BundleContext) -> AgentSpec:
    """An agent that works through its steps."""
    return AgentSpec(instructions="Do the steps with fault.work, then answer.")


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    """``fault.work`` and ``fault.crash``, recording into this scope's ledger."""
    props = ctx.props
    assert isinstance(props, FaultProps)

    @tool
    def work(step: int) -> str:
        """Do step ``step`` of the job (slowly) and record that it ran."""
        run, began = secrets.token_hex(4), time.time()
        time.sleep(props.work_s)
        record(props.ledger, kind="work", step=step, run=run, t0=began, t1=time.time())
        return f"step {step} done (run {run})"

    @tool
    def crash() -> str:
        """Kill this process while the poison switch is on; otherwise do nothing."""
        if props.poison_switch and Path(props.poison_switch).exists():
            record(props.ledger, kind="crash", step=0, run=secrets.token_hex(4), t0=time.time(), t1=time.time())
            os.kill(os.getpid(), signal.SIGKILL)
        return "nothing to crash"

    return [work, crash]
