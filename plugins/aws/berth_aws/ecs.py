"""What an ECS task's state means for a run: still starting, running, or ended, and how.

The inputs are ``run_task`` and ``describe_tasks`` responses as boto3 returns them (the ECS API's own shape), so
these functions are the whole mapping from ECS's vocabulary (``lastStatus``, ``stopCode``, ``stoppedReason``,
a container's ``exitCode`` and ``reason``) to the exec envelope's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

STARTING: Final = frozenset({"PROVISIONING", "PENDING", "ACTIVATING"})
"""``lastStatus`` values of a task whose containers have not started yet."""
STOPPED: Final = "STOPPED"
STOPPED_BY_OTHERS: Final = frozenset(
    {"UserInitiated", "ServiceSchedulerInitiated", "SpotInterruption", "TerminationNotice"}
)
"""``stopCode`` values of a task stopped from outside (when Berth did not stop it, the run was interrupted)."""


@dataclass(frozen=True, slots=True)
class TaskEnd:
    """How a stopped task ended, in the envelope's terms."""

    exit_code: int | None
    failure: str | None = None
    """The task never ran the program (image pull, resources, capacity)."""
    stopped: str | None = None
    """Something other than Berth stopped the task while the program ran."""
    out_of_memory: bool = False


def run_failure(response: Mapping[str, Any]) -> str | None:
    """Why ``run_task`` placed no task (ECS answers capacity problems in ``failures``, not as an error)."""
    failures: Sequence[Mapping[str, Any]] = response.get("failures") or []
    if response.get("tasks"):
        return None
    if not failures:
        return "ECS started no task and gave no reason"
    reasons = "; ".join(
        f"{failure.get('reason', 'unknown')}" + (f" ({failure['detail']})" if failure.get("detail") else "")
        for failure in failures
    )
    if any(_is_capacity(str(failure.get("reason", ""))) for failure in failures):
        return f"no capacity to start the task: {reasons}"
    return f"ECS did not start the task: {reasons}"


def _is_capacity(reason: str) -> bool:
    return reason.startswith("RESOURCE:") or "capacity" in reason.lower() or reason == "AGENT"


def container_of(task: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The task's container called ``name`` (the first one when none is)."""
    containers: Sequence[Mapping[str, Any]] = task.get("containers") or []
    for container in containers:
        if container.get("name") == name:
            return container
    return containers[0] if containers else {}


def end_of(task: Mapping[str, Any], container_name: str, *, stopped_by_berth: bool) -> TaskEnd:
    """The end of a ``STOPPED`` task. ``stopped_by_berth``: Berth asked ECS to stop it (its wall time ran out)."""
    container = container_of(task, container_name)
    exit_code = container.get("exitCode")
    stop_code = str(task.get("stopCode") or "")
    reason = str(task.get("stoppedReason") or "")
    container_reason = str(container.get("reason") or "")
    out_of_memory = "OutOfMemoryError" in container_reason
    if stop_code == "TaskFailedToStart" or (exit_code is None and not stopped_by_berth and not stop_code):
        return TaskEnd(None, failure=start_failure(reason, container_reason))
    if stop_code in STOPPED_BY_OTHERS and not stopped_by_berth:
        return TaskEnd(exit_code, stopped=f"{stop_code}: {reason or 'no reason given'}")
    return TaskEnd(exit_code, out_of_memory=out_of_memory)


def start_failure(reason: str, container_reason: str) -> str:
    """A sentence for a task that never ran its container."""
    detail = container_reason or reason or "no reason given"
    if "CannotPullContainer" in reason or "CannotPullContainer" in container_reason:
        return f"the task's image could not be pulled: {detail}"
    if "ResourceInitializationError" in reason or "ResourceInitializationError" in container_reason:
        return f"the task's resources could not be set up: {detail}"
    return f"the task failed to start: {detail}"
