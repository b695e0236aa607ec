"""Test support for the fargate backend against moto (used by this project's tests and by ``bench/exec.py``).

moto keeps ECS's state but runs no container. :class:`TaskPlayer` plays each task the backend starts as Fargate
would, in a Docker engine, and reports its end through moto's own task model: for each ``run_task`` it reads the
task definition's image and the call's container overrides (command and environment) exactly as moto stored them,
starts that container in a network of the task's own (:class:`berth_aws.task_network.TaskNetwork`: only ``lo``,
on which moto's endpoint alone is reachable, as a Fargate task in a subnet with only the S3 and Secrets Manager
endpoints reaches those alone), with an init process as ``initProcessEnabled`` gives and Docker's default
capabilities (Fargate's: ``capabilities`` adds others, as an ECS-on-EC2 task definition may), moves the task
through ``PENDING`` → ``RUNNING`` → ``STOPPED`` with ``stopCode``, ``stoppedReason`` and the container's
``exitCode``/``reason`` as ECS writes them, and removes the container and its network.

Two of moto's shortcuts are set right while the player is installed, so the backend sees ECS's real semantics:
``run_task`` answers ``PROVISIONING`` (moto: ``RUNNING`` at once), and ``stop_task`` only sets
``desiredStatus``; the task reaches ``STOPPED`` when its container has gone (SIGTERM, then SIGKILL after the
grace period), not at once. :func:`create_exec_world` makes what a fargate profile needs in moto.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from berth_aws.task_network import TaskNetwork

STOP_GRACE_S = 10
"""ECS's ``stopTimeout`` for the container (30 s by default on Fargate; shorter here)."""


@dataclass
class TaskPlayer:
    """Plays the tasks of one moto ECS backend in a Docker engine."""

    backend: Any
    docker: Any
    mounts: Mapping[str, Mapping[str, str]]
    credentials: Mapping[str, str]
    endpoint: str
    """moto's URL (``http://127.0.0.1:<port>``): the one address a task's network reaches."""
    mode: str = "play"
    """``play``; ``hold`` (tasks stay ``PROVISIONING``: no capacity ever comes); ``interrupt`` (a spot
    interruption stops the task once it runs); ``drop-input`` (the input snapshot vanishes before the task runs)."""
    capabilities: Sequence[str] = ()
    """Added to the container's default set: none, as on Fargate (which allows only ``SYS_PTRACE``);
    ``("SYS_ADMIN",)`` plays a task definition that grants what ``executor_namespaces: true`` needs (ECS on EC2)."""
    on_input: Callable[[Mapping[str, str]], None] = field(default=lambda _environment: None)
    played: list[Any] = field(default_factory=list)
    running: threading.Event = field(default_factory=threading.Event)
    """Set when a task's container has started."""
    changed: threading.Condition = field(default_factory=threading.Condition)
    threads: list[threading.Thread] = field(default_factory=list)

    def install(self) -> None:
        """Wrap the backend's ``run_task`` and ``stop_task`` (as ECS behaves; see the module's docstring) and
        leave the tasks' status to the player."""
        from moto.moto_api import state_manager

        state_manager.set_transition("ecs::task", {"progression": "manual", "times": 10**12})
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
            raise LookupError(f"stop_task of a task this player does not know: {task_str}")

        self.backend.run_task = run_task
        self.backend.stop_task = stop_task

    def uninstall(self) -> None:
        """Wait for the tasks' containers, give moto its own ``run_task``/``stop_task`` and transitions back."""
        from moto.moto_api import state_manager

        self.join()
        for name in ("run_task", "stop_task"):
            self.backend.__dict__.pop(name, None)
        state_manager.unset_transition("ecs::task")

    def join(self) -> None:
        """Wait for every task's container to be gone."""
        for thread in self.threads:
            thread.join(timeout=120)

    def play(self, task: Any) -> None:
        """Run one task's container to its end, in a network of the task's own (removed whatever happened)."""
        network = TaskNetwork(
            self.docker, task.containers[0].image, self.endpoint, labels={"berth.test.ecs_task": task.id}
        )
        with contextlib.closing(network):
            self.play_in(task, network)

    def play_in(self, task: Any, network: TaskNetwork) -> None:
        """Run one task's container to its end in ``network``."""
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
                network_mode=network.open(),
                init=True,  # the task definition's linuxParameters.initProcessEnabled, as docs/exec.md advises
                cap_add=list(self.capabilities),
                read_only=True,
                tmpfs={"/workspace": "mode=0755", "/run/berth": "mode=0755", "/tmp": "mode=1777"},  # noqa: S108
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


def create_exec_world(endpoint: str, image: str, *, region: str = "eu-west-1") -> dict[str, Any]:
    """In moto at ``endpoint``: a VPC with DNS hostnames, a subnet, a security group, an ECS cluster, the task
    definitions ``exec-<suffix>`` (``image``) and ``absent-<suffix>`` (an image no engine has), and a bucket.
    Returns the boto3 ``clients``, the ``bucket``, the ``suffix`` and a fargate ``profile`` for them."""
    import uuid

    import boto3

    clients: dict[str, Any] = {
        name: boto3.client(name, region_name=region, endpoint_url=endpoint)
        for name in ("ec2", "ecs", "s3", "secretsmanager")
    }
    vpc = clients["ec2"].create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    clients["ec2"].modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnet = clients["ec2"].create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = clients["ec2"].create_security_group(GroupName=f"exec-{vpc}", Description="no egress", VpcId=vpc)
    suffix = uuid.uuid4().hex[:8]
    cluster = f"berth-exec-{suffix}"
    clients["ecs"].create_cluster(clusterName=cluster)
    for family, family_image in ((f"exec-{suffix}", image), (f"absent-{suffix}", "berth-exec:absent")):
        clients["ecs"].register_task_definition(
            family=family,
            networkMode="awsvpc",
            requiresCompatibilities=["FARGATE"],
            cpu="512",
            memory="512",
            containerDefinitions=[
                {"name": "exec", "image": family_image, "memory": 512, "cpu": 512, "essential": True}
            ],
        )
    bucket = f"berth-exec-{suffix}"
    clients["s3"].create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    profile = {
        "backend": "fargate",
        "cluster": cluster,
        "task_definition": f"exec-{suffix}",
        "subnets": [subnet],
        "security_groups": [group["GroupId"]],
        "artifacts_bucket": bucket,
        "region": region,
        "endpoint_url": endpoint,
        "poll_interval_s": 0.05,
        "start_timeout_s": 60,
        "stop_timeout_s": 60,
        "timeout_s": 60,
    }
    return {"clients": clients, "bucket": bucket, "suffix": suffix, "profile": profile}
