"""The host's exec sweep: what hosts that died mid-run left behind, removed at start and then periodically.

A host killed mid-run (SIGKILL, OOM killer) leaves its run's folder under the runs root, and with the docker
backend a container that goes on running past its wall time. Every API process and worker runs this sweep as a
supervised background task: once at start, then every ``exec.sweep_interval_s``. Each round removes the run
folders whose owner is gone (:mod:`berth.execution.reaping`) and asks every configured profile's backend that
can (:class:`~berth.execution.sandbox.Reaping`) to remove its own leftovers: the docker backend its
``berth.exec_id`` containers past their deadline, the local backend its empty run cgroups.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from berth.config.models.assembly import ExecConfig
from berth.execution.profiles import ExecProfileError, Execution
from berth.execution.reaping import reap_stale_run_folders
from berth.execution.sandbox import Reaping

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweepRound:
    """What one round removed: run folders, and backend leftovers per profile."""

    folders: int
    leftovers: dict[str, int]


@dataclass
class ExecSweep:
    """Removes dead hosts' run folders and backend leftovers, once at start then every ``interval_s``."""

    execution: Execution
    config: Callable[[], ExecConfig]
    """The platform's ``exec`` settings (the profiles whose backends are asked), read at every round."""
    rounds: int = 0
    _failing: dict[str, str] = field(default_factory=dict, repr=False)
    _round_ended: asyncio.Condition | None = field(default=None, repr=False)
    _stopping: asyncio.Event | None = field(default=None, repr=False)

    async def sweep_once(self) -> SweepRound:
        """One round: the run folders, then each profile's backend (one that fails is logged and skipped)."""
        folders = await asyncio.to_thread(reap_stale_run_folders, self.execution.service.root)
        config = self.config()
        leftovers: dict[str, int] = {}
        seen: set[int] = set()
        for name in sorted(config.profiles):
            try:
                backend, _ = self.execution.backend(config, name)
            except ExecProfileError:
                continue  # its backend is not installed: nothing of it to sweep
            except Exception as error:  # a profile whose backend cannot be built here is the runs' error, not ours
                log.debug("exec sweep: profile '%s' skipped: %s", name, error)
                continue
            if id(backend) in seen or not isinstance(backend, Reaping):
                continue
            seen.add(id(backend))
            try:
                leftovers[name] = await asyncio.to_thread(backend.reap_stale)
            except Exception as error:  # an engine that is down: the next round tries again
                reason = f"{type(error).__name__}: {error}"
                if self._failing.get(name) != reason:  # once per reason, not every round
                    log.warning("exec sweep: profile '%s' (%s) could not be swept: %s", name, backend.name, reason)
                self._failing[name] = reason
            else:
                self._failing.pop(name, None)
        self.rounds += 1
        self._round_ended = self._round_ended or asyncio.Condition()
        async with self._round_ended:
            self._round_ended.notify_all()
        return SweepRound(len(folders), leftovers)

    async def wait_for_rounds(self, rounds: int) -> None:
        """Return once ``rounds`` rounds have ended (for tests and operators watching the sweep)."""
        self._round_ended = self._round_ended or asyncio.Condition()
        async with self._round_ended:
            await self._round_ended.wait_for(lambda: self.rounds >= rounds)

    async def run(self) -> None:
        """Sweep now, then every ``exec.sweep_interval_s`` until :meth:`stop` (a supervised background task)."""
        self._stopping = self._stopping or asyncio.Event()
        while not self._stopping.is_set():
            await self.sweep_once()
            try:
                await asyncio.wait_for(self._stopping.wait(), self.config().sweep_interval_s)
            except TimeoutError:
                continue

    def stop(self) -> None:
        """End :meth:`run` after its current round."""
        self._stopping = self._stopping or asyncio.Event()
        self._stopping.set()
