"""An API process sweeps what hosts that died mid-run left: at its start, then every ``exec.sweep_interval_s``
(issue 40, item 4). The sweep itself, against a host really killed mid-run, is proven in
``tests/integration/exec/test_dead_host_leftovers.py``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from api_stack import api_stack

from berth.execution.reaping import OWNER_LOCK, claim_run_folder

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Done.</channel:answer>'


@pytest.mark.parametrize("storage_kind", ["embedded"], indirect=True)
async def test_an_api_process_removes_a_dead_hosts_run_folder_at_start_and_keeps_a_live_one(
    tmp_path: Path, storage_kind: str
) -> None:
    runs = tmp_path / "runs"
    dead = runs / "ex_dead_host"
    (dead / "work").mkdir(parents=True)
    (dead / OWNER_LOCK).write_text("4194304\n")  # its owner's flock went with its process
    live = runs / "ex_live_host"
    live.mkdir()
    owner = claim_run_folder(live)  # held by this process, as a running host holds its run's
    platform = {"exec": {"runs_root": str(runs), "uid_lock_dir": str(tmp_path / "uids"), "sweep_interval_s": 3600}}
    try:
        async with api_stack(tmp_path, [ANSWER], platform=platform) as stack:
            ready = (await stack.client.get("/readyz")).json()
            assert "exec sweep" in ready["checks"]["background"], ready
            sweep = stack.services.exec_sweep
            assert sweep is not None
            await asyncio.wait_for(sweep.wait_for_rounds(1), 30)
            assert not dead.exists()
            assert live.is_dir()
    finally:
        os.close(owner)
