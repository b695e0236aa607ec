"""Plays moto's ECS tasks for real: moto keeps ECS's state but runs no container, so this player runs each task
the backend starts as Docker would on Fargate, and reports its end through moto's own task model.

For each ``run_task`` it reads the task definition's image and the call's container overrides (command and
environment) exactly as moto stored them, starts that container (host network, so the task reaches moto on
127.0.0.1; ``CAP_SYS_ADMIN`` added, as the ``executor_namespaces`` profile asks of a task definition), moves the
task through ``PENDING`` → ``RUNNING`` → ``STOPPED`` with ``stopCode``, ``stoppedReason`` and the container's
``exitCode``/``reason`` as ECS writes them, and removes the container.

Two of moto's shortcuts are set right while the player is installed, so the backend sees ECS's real semantics:
``run_task`` answers ``PROVISIONING`` (moto: ``RUNNING`` at once), and ``stop_task`` only sets
``desiredStatus``; the task reaches ``STOPPED`` when its container has gone (SIGTERM, then SIGKILL after the
grace period), not at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

STOP_GRACE_S = 10
"""ECS's ``stopTimeout`` for the container (30 s by default on Fargate; shorter here)."""


@dataclass
class TaskPlayer:
    """Plays the tasks of one moto ECS backend in a Docker engine."""

    backend: Any
    docker: Any
    mounts: Mapping[str, Mapping[str, str]]
    credentials: Mapping[str, str]
    mode: str = "play"
    """``play``; ``hold`` (tasks stay ``PROVISIONING``: no capacity ever comes); ``interrupt`` (a spot
    interruption stops the task once it runs); ``drop-input`` (the input snapshot vanishes before the task runs)."""
    capabilities: Sequence[str] = ("SYS_ADMIN",)
    """Added to the container's default set (Fargate itself allows none of these)."""
    on_input: Callable[[Mapping[str, str]], None] = field(default=lambda _environment: None)
    played: list[Any] = field(default_factory=list)
    running: threading.Event = field(default_factory=threading.Event)
    """Set when a task's container has started."""
    changed: threading.Condition = field(default_factory=threading.Condition)
    threads: list[threading.Thread] = field(default_factory=list)

    def install(self, monkeypatch: Any) -> None:
        """Wrap the backend's ``run_task`` and ``stop_task`` (as ECS behaves; see the module's docstring)."""
        original_run = self.backend.run_task

        def run_task(*args: Any, **kwargs: Any) -> list[Any]:
            tasks = original_run(*args, **kwargs)
            for task in tasks:
                task.status = "PROVISIONING"
                self.played.append(task)
                if self.mode != "hold":
                    thread = threading.Thread(target=self.play, args=(task,), daemon=True)
                    self.threads.append(thread)
                    thread.start()
            return list(tasks)

        def stop_task(cluster_str: str, task_str: str, reason: str) -> Any:
            for task in self.played:
                if task.task_arn == task_str or task.task_arn.endswith(task_str.split("/")[-1]):
                    with self.changed:
                        task.desired_status = "STOPPED"
                        task.stopped_reason = reason
                        task.stop_code = "UserInitiated"
                        if task.status == "PROVISIONING":  # nothing runs yet: it stops at once
                            self.finish(task, exit_code=None)
                        self.changed.notify_all()
                    return task
            raise AssertionError(f"stop_task of a task this player does not know: {task_str}")

        monkeypatch.setattr(self.backend, "run_task", run_task)
        monkeypatch.setattr(self.backend, "stop_task", stop_task)

    def join(self) -> None:
        """Wait for every task's container to be gone."""
        for thread in self.threads:
            thread.join(timeout=120)

    def play(self, task: Any) -> None:
        """Run one task's container to its end."""
        from docker.errors import ImageNotFound

        container_definition = task.containers[0]
        overrides = overrides_of(task, container_definition.name)
        environment = {item["name"]: item["value"] for item in overrides.get("environment", [])}
        task.status = "PENDING"
        if self.mode == "drop-input":
            self.on_input(environment)
        try:
            container = self.docker.containers.create(
                container_definition.image,
                command=overrides.get("command") or container_definition.command,
                environment={**self.credentials, **environment},
                network_mode="host",
                init=True,  # the task definition's linuxParameters.initProcessEnabled, as docs/exec.md advises
                cap_add=list(self.capabilities),
                read_only=True,
                tmpfs={"/workspace": "mode=0755", "/run/berth": "mode=0755", "/tmp": "mode=1777"},
                volumes={source: dict(bind) for source, bind in self.mounts.items()},
                mem_limit=int(container_definition.memory) * 1024 * 1024,
                labels={"berth.test.ecs_task": task.id},
            )
        except ImageNotFound:
            reason = (
                f"CannotPullContainerError: pull image manifest has been retried 5 time(s): failed to resolve ref "
                f"docker.io/library/{container_definition.image}: not found"
            )
            with self.changed:
                task.stop_code = "TaskFailedToStart"
                task.stopped_reason = reason
                container_definition.reason = reason
                self.finish(task, exit_code=None)
            return
        container.start()
        task.status = "RUNNING"
        self.running.set()
        if self.mode == "interrupt":
            with self.changed:
                task.desired_status = "STOPPED"
                task.stop_code = "SpotInterruption"
                task.stopped_reason = "Your Spot Task was interrupted."
        ended = threading.Event()

        def wait() -> None:
            with contextlib.suppress(Exception):
                container.wait()
            ended.set()
            with self.changed:
                self.changed.notify_all()

        threading.Thread(target=wait, daemon=True).start()
        with self.changed:
            self.changed.wait_for(lambda: ended.is_set() or task.desired_status == "STOPPED")
        if not ended.is_set():
            container.stop(timeout=STOP_GRACE_S)
            ended.wait()
        container.reload()
        state = container.attrs["State"]
        if state.get("OOMKilled"):
            container_definition.reason = "OutOfMemoryError: Container killed due to memory usage"
        with self.changed:
            if task.desired_status != "STOPPED":
                task.stop_code = "EssentialContainerExited"
                task.stopped_reason = "Essential container in task exited"
            self.finish(task, exit_code=int(state["ExitCode"]))
        container.remove(force=True)

    def finish(self, task: Any, exit_code: int | None) -> None:
        """Mark the task ``STOPPED`` with its container's exit code."""
        container = task.containers[0]
        container.exitCode = exit_code
        container.last_status = "STOPPED"
        task.desired_status = "STOPPED"
        task.status = "STOPPED"


def overrides_of(task: Any, container_name: str) -> Mapping[str, Any]:
    """The task's container overrides for ``container_name`` (empty when the call gave none)."""
    overrides: Sequence[Mapping[str, Any]] = (task.overrides or {}).get("containerOverrides") or []
    return next((o for o in overrides if o.get("name") == container_name), {})
