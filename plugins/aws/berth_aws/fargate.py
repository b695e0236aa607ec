"""The ``fargate`` exec backend: each run is one ECS task that holds the supervisor and the executor.

For one run the host

1. snapshots ``work/`` and the program into ``s3://<artifacts_bucket>/<artifacts_prefix>/<exec id>/input.zip``;
2. puts the launch payload (``BERTH_EXEC_PAYLOAD``, the descriptors filtered per ``descriptor_payload_scope``,
   the executor's launch lines with the run's token) in a Secrets Manager secret of its own;
3. starts the profile's task definition with ``ecs.run_task``, overriding the container's command with
   ``<supervisor_python> -m berth_aws.task`` and its environment with where the secret and snapshots are
   (never the payload itself);
4. polls ``describe_tasks`` until the task is ``STOPPED``: ``start_timeout_s`` to reach ``RUNNING``, then the
   profile's wall time, after which it stops the task (``stop_task``) and says the run timed out;
5. restores ``out/``, stdout and stderr from ``output.zip``; and
6. always deletes the secret and every object under the run's prefix, however the run ended.

ECS failures map to the same envelope as every backend: no capacity and tasks that never start (image pull,
resources) are ``sandbox_failed`` with ECS's reason; a task stopped by the scheduler or a spot interruption is
``sandbox_stopped``; a container killed for memory is ``memory_limit``; the wall time is ``timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from berth.execution.limits import MIB
from berth.execution.payload import launch_environment
from berth.execution.runs import MAX_OUTPUT_BYTES, MAX_OUTPUT_FILES
from berth.execution.sandbox import (
    PROGRAM_NAME,
    SANDBOX_PROGRAM_DIR,
    DoctorFinding,
    SandboxOutcome,
    SandboxRequest,
    executor_options,
    signal_of_status,
)
from berth.hooks import hookimpl
from berth_aws.archive import ArchiveError, Budget, pack, unpack
from berth_aws.ecs import STARTING, STOPPED, TaskEnd, end_of, run_failure
from berth_exec.runner import launch_lines

if TYPE_CHECKING:
    from botocore.exceptions import ClientError

BACKEND_NAME: Final = "fargate"
TASK_ENTRY: Final = ("-B", "-m", "berth_aws.task")
TASK_REPORT: Final = "task.json"
"""What the task entry writes next to stdout and stderr in ``logs/``: whether it ran the program, or why not."""


class AwsCallError(Exception):
    """An AWS call of the run failed: which operation and AWS's error code (never a payload)."""


@dataclass(frozen=True, slots=True)
class RunLocation:
    """Where one run's snapshots and payload live."""

    bucket: str
    prefix: str
    exec_id: str

    @property
    def folder(self) -> str:
        """The run's key prefix (everything under it is deleted after the run)."""
        return f"{self.prefix}/{self.exec_id}/"

    @property
    def input_key(self) -> str:
        """``work/`` and the program, for the task."""
        return f"{self.folder}input.zip"

    @property
    def output_key(self) -> str:
        """``out/`` and ``logs/``, from the task."""
        return f"{self.folder}output.zip"

    @property
    def secret_name(self) -> str:
        """The Secrets Manager secret of the launch payload."""
        return f"{self.prefix}/{self.exec_id}/payload"

    def uri(self, key: str) -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.bucket}/{key}"


class FargateBackend:
    """Runs each program in an ECS task of the profile's task definition."""

    name = BACKEND_NAME
    runs_supervisor = True
    own_storage = True
    """The program writes its task's ephemeral storage, not this host's run folder (no disk quota mounted here)."""

    def __init__(self, profile: Mapping[str, Any]) -> None:
        self.cluster: str = profile["cluster"]
        self.task_definition: str = profile["task_definition"]
        self.container_name: str = profile.get("container_name", "exec")
        self.subnets: list[str] = list(profile["subnets"])
        self.security_groups: list[str] = list(profile.get("security_groups") or [])
        self.assign_public_ip: bool = bool(profile.get("assign_public_ip", False))
        self.bucket: str = profile["artifacts_bucket"]
        self.prefix: str = str(profile.get("artifacts_prefix", "berth-exec")).strip("/")
        self.region: str | None = profile.get("region")
        self.endpoint_url: str | None = profile.get("endpoint_url")
        self.supervisor_python: str = profile.get("supervisor_python", "/opt/berth-host/venv/bin/python")
        self.python: str = profile.get("python", "/usr/bin/python3")
        self.executor_namespaces: bool = bool(profile.get("executor_namespaces", True))
        self.hidden_paths: tuple[str, ...] = tuple(profile.get("hidden_paths") or ())
        self.start_timeout_s = float(profile.get("start_timeout_s", 300))
        self.stop_timeout_s = float(profile.get("stop_timeout_s", 120))
        self.poll_interval_s = float(profile.get("poll_interval_s", 2.0))
        self.task_deadline_grace_s = float(profile.get("task_deadline_grace_s", 120))
        self._clients: dict[str, Any] = {}

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> FargateBackend:
        """Build from a ``fargate`` profile's options."""
        return cls(profile)

    def client(self, service: str) -> Any:
        """The boto3 client of ``service`` (made on first use; credentials from boto3's usual chain)."""
        if service not in self._clients:
            import boto3  # with the first client: the host loads this plugin module whether a profile uses it or not

            self._clients[service] = boto3.client(  # type: ignore[call-overload]  # the service is a name here
                service, region_name=self.region, endpoint_url=self.endpoint_url
            )
        return self._clients[service]

    @property
    def isolation(self) -> str:
        """How the executor is isolated inside the task."""
        return "fargate-namespaces" if self.executor_namespaces else "fargate-uid"

    async def run(self, request: SandboxRequest) -> SandboxOutcome:
        """Run the program in a task and bring its ``out/`` back; clean up the run's secret and objects always.

        Cancelling waits for the launch in flight (so no task starts unseen), stops the task and waits for it to
        end before cleaning up (so its hand-back cannot land after the cleanup)."""
        started = time.monotonic()
        location = RunLocation(self.bucket, self.prefix, request.exec_id)
        launching = asyncio.ensure_future(asyncio.to_thread(self.launch, request, location))
        task_arn: str | None = None
        try:
            try:
                task_arn, failure = await asyncio.shield(launching)
                if failure is not None:
                    return self.outcome(started, failure=failure)
                assert task_arn is not None
                task, why = await self.follow(task_arn, request.limits.timeout_s)
                if why == "start":
                    return self.outcome(started, failure=f"the task did not start within {self.start_timeout_s:g} s")
                end = end_of(task, self.container_name, stopped_by_berth=why is not None) if task else None
                report = await asyncio.to_thread(self.restore_output, request, location)
            except (AwsCallError, ArchiveError) as error:
                return self.outcome(started, failure=str(error))
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    task_arn, _ = await asyncio.shield(launching)
                if task_arn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(self.stop_and_wait(task_arn, "berth: run cancelled"))
                raise
        finally:
            await asyncio.shield(asyncio.to_thread(self.clean_up, location))
        return self.outcome_of(started, end, report, timed_out=why == "timeout")

    def launch(self, request: SandboxRequest, location: RunLocation) -> tuple[str | None, str | None]:
        """Upload the snapshot, store the payload, start the task: ``(task ARN, None)`` or ``(None, failure)``."""
        try:
            self.upload_input(request, location)
            secret_arn = self.put_payload(request, location)
            return self.start_task(request, location, secret_arn)
        except (AwsCallError, ArchiveError, OSError) as error:
            return None, str(error)

    def outcome(self, started: float, **fields: Any) -> SandboxOutcome:
        """A sandbox outcome of this backend (no exit code unless given)."""
        values: dict[str, Any] = {"exit_code": None, "killed_by": None, "timed_out": False}
        values.update(fields)
        return SandboxOutcome(duration_s=time.monotonic() - started, isolation=self.isolation, **values)

    def outcome_of(
        self, started: float, end: TaskEnd | None, report: Mapping[str, Any], *, timed_out: bool
    ) -> SandboxOutcome:
        """The outcome of a task that stopped (or was given up on after ``stop_task``)."""
        if end is None:  # stop_task was sent and the task never reached STOPPED within stop_timeout_s
            return self.outcome(started, timed_out=True)
        if end.failure and not timed_out:
            return self.outcome(started, failure=end.failure)
        if report.get("phase") == "setup":
            return self.outcome(started, failure=f"the task could not prepare the run: {report.get('error')}")
        if not report and not timed_out and end.stopped is None:
            code = end.exit_code
            return self.outcome(started, failure=f"the task ended (exit status {code}) without handing back out/")
        exit_code = report.get("exit_code", end.exit_code)
        return self.outcome(
            started,
            exit_code=exit_code,
            killed_by=signal_of_status(exit_code),
            timed_out=timed_out,
            out_of_memory=end.out_of_memory and not timed_out,
            stopped=end.stopped,
        )

    def upload_input(self, request: SandboxRequest, location: RunLocation) -> None:
        """Zip ``work/`` and the program and put them at the run's input key."""
        with tempfile.TemporaryDirectory(prefix="berth-fargate-") as scratch:
            archive = Path(scratch) / "input.zip"
            pack(archive, {"work": request.folder.work, "program": request.folder.program.parent})
            self.call("s3", "upload_file", str(archive), location.bucket, location.input_key)

    def put_payload(self, request: SandboxRequest, location: RunLocation) -> str:
        """Create the run's payload secret; return its ARN."""
        launch = launch_lines(request.token, f"{SANDBOX_PROGRAM_DIR}/{PROGRAM_NAME}", request.limits.launch_limits())
        document = {"environment": launch_environment(request, executor_options(self)), "launch": launch}
        created = self.call(
            "secretsmanager",
            "create_secret",
            Name=location.secret_name,
            SecretString=json.dumps(document),
            Description=f"Berth exec launch payload of {request.exec_id} (deleted when the run ends)",
            Tags=[{"Key": "berth:exec_id", "Value": request.exec_id}],
        )
        return str(created["ARN"])

    def start_task(
        self, request: SandboxRequest, location: RunLocation, secret_arn: str
    ) -> tuple[str | None, str | None]:
        """``run_task`` with the run's overrides; ``(task ARN, None)`` or ``(None, why no task started)``."""
        environment = {
            "BERTH_EXEC_PAYLOAD_SECRET_ID": secret_arn,
            "BERTH_EXEC_INPUT_URI": location.uri(location.input_key),
            "BERTH_EXEC_OUTPUT_URI": location.uri(location.output_key),
            "BERTH_EXEC_DEADLINE_S": str(request.limits.timeout_s + self.task_deadline_grace_s),
        }
        if self.region:
            environment["BERTH_EXEC_REGION"] = self.region
        if self.endpoint_url:
            environment["BERTH_EXEC_ENDPOINT_URL"] = self.endpoint_url
        network: dict[str, Any] = {
            "subnets": self.subnets,
            "assignPublicIp": "ENABLED" if self.assign_public_ip else "DISABLED",
        }
        if self.security_groups:
            network["securityGroups"] = self.security_groups
        response = self.call(
            "ecs",
            "run_task",
            cluster=self.cluster,
            taskDefinition=self.task_definition,
            launchType="FARGATE",
            count=1,
            startedBy=f"berth-{request.exec_id}"[:128],
            networkConfiguration={"awsvpcConfiguration": network},
            overrides={
                "containerOverrides": [
                    {
                        "name": self.container_name,
                        "command": [self.supervisor_python, *TASK_ENTRY],
                        "environment": [{"name": k, "value": v} for k, v in environment.items()],
                    }
                ]
            },
            tags=[{"key": "berth:exec_id", "value": request.exec_id}],
        )
        failure = run_failure(response)
        if failure is not None:
            return None, failure
        return str(response["tasks"][0]["taskArn"]), None

    async def follow(self, task_arn: str, timeout_s: float) -> tuple[Mapping[str, Any] | None, str | None]:
        """Poll the task until ``STOPPED``. Returns its last description and why Berth stopped it (``"start"``:
        it did not start in time; ``"timeout"``: its wall time ran out; None: it ended by itself). The
        description is None when a task Berth stopped does not reach ``STOPPED`` within ``stop_timeout_s``."""
        begun = time.monotonic()
        running_since: float | None = None
        while True:
            task = await asyncio.to_thread(self.describe, task_arn)
            status = task.get("lastStatus")
            if status == STOPPED:
                return task, None
            now = time.monotonic()
            why: str | None = None
            if status in STARTING:
                if now - begun > self.start_timeout_s:
                    why = "start"
            else:
                running_since = running_since or now
                if now - running_since > timeout_s:
                    why = "timeout"
            if why is not None:
                reason = "berth: exec timeout" if why == "timeout" else "berth: the task did not start in time"
                return await self.stop_and_wait(task_arn, reason), why
            await asyncio.sleep(self.poll_interval_s)

    async def stop_and_wait(self, task_arn: str, reason: str) -> Mapping[str, Any] | None:
        """Stop the task and wait up to ``stop_timeout_s`` for ``STOPPED``: its last description, or None."""
        await asyncio.to_thread(self.stop_task, task_arn, reason)
        deadline = time.monotonic() + self.stop_timeout_s
        while time.monotonic() < deadline:
            task = await asyncio.to_thread(self.describe, task_arn)
            if task.get("lastStatus") == STOPPED:
                return task
            await asyncio.sleep(self.poll_interval_s)
        return None

    def describe(self, task_arn: str) -> Mapping[str, Any]:
        """The task's current description."""
        response = self.call("ecs", "describe_tasks", cluster=self.cluster, tasks=[task_arn])
        tasks = response.get("tasks") or []
        if not tasks:
            reasons = ", ".join(str(f.get("reason")) for f in response.get("failures") or []) or "unknown"
            raise AwsCallError(f"ECS does not know the task any more ({reasons})")
        return dict(tasks[0])

    def stop_task(self, task_arn: str, reason: str) -> None:
        """Ask ECS to stop the task (its containers get SIGTERM, then SIGKILL)."""
        self.call("ecs", "stop_task", cluster=self.cluster, task=task_arn, reason=reason)

    def restore_output(self, request: SandboxRequest, location: RunLocation) -> dict[str, Any]:
        """Unpack ``output.zip`` into the run folder (``out/``, ``logs/``); the task's report (empty: no output)."""
        from botocore.exceptions import BotoCoreError, ClientError

        with tempfile.TemporaryDirectory(prefix="berth-fargate-") as scratch:
            archive = Path(scratch) / "output.zip"
            try:
                self.client("s3").download_file(location.bucket, location.output_key, str(archive))
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                    return {}
                raise AwsCallError(f"s3 download_file: {error_code(error)}") from None
            except BotoCoreError as error:
                raise AwsCallError(f"s3 download_file: {type(error).__name__}") from None
            # stdout, stderr, the supervisor's log and task.json
            log_budget = Budget(max_bytes=4 * request.limits.file_size_mb * MIB, max_files=4)
            unpack(
                archive,
                request.folder.root,
                {"out": Budget(MAX_OUTPUT_BYTES, MAX_OUTPUT_FILES), "logs": log_budget},
            )
        report_path = request.folder.logs / TASK_REPORT
        try:
            report = json.loads(report_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"phase": "ran"}
        return report if isinstance(report, dict) else {"phase": "ran"}

    def clean_up(self, location: RunLocation) -> None:
        """Delete the run's payload secret and every object under its prefix (each step tried, whatever failed)."""
        from botocore.exceptions import BotoCoreError, ClientError

        with contextlib.suppress(ClientError, BotoCoreError):
            self.client("secretsmanager").delete_secret(SecretId=location.secret_name, ForceDeleteWithoutRecovery=True)
        s3 = self.client("s3")
        with contextlib.suppress(ClientError, BotoCoreError):
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=location.folder):
                keys = [{"Key": item["Key"]} for item in page.get("Contents") or []]
                if keys:
                    s3.delete_objects(Bucket=location.bucket, Delete={"Objects": keys, "Quiet": True})

    def call(self, service: str, operation: str, *args: Any, **kwargs: Any) -> Any:
        """One AWS call; a failure becomes :class:`AwsCallError` naming the operation and AWS's error code."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client(service), operation)(*args, **kwargs)
        except ClientError as error:
            raise AwsCallError(f"{service} {operation}: {error_code(error)}") from None
        except BotoCoreError as error:
            raise AwsCallError(f"{service} {operation}: {type(error).__name__}") from None

    def doctor(self) -> list[DoctorFinding]:
        """Whether the cluster, the task definition (with the named container) and the bucket are reachable."""
        from botocore.exceptions import BotoCoreError, ClientError

        findings: list[DoctorFinding] = []
        checks: Sequence[tuple[str, Any]] = (
            (f"ECS cluster {self.cluster}", self._cluster_finding),
            (f"task definition {self.task_definition}", self._task_definition_finding),
            (f"artifacts bucket {self.bucket}", self._bucket_finding),
        )
        for check, probe in checks:
            try:
                findings.append(DoctorFinding(check, *probe()))
            except (AwsCallError, ClientError, BotoCoreError) as error:
                findings.append(DoctorFinding(check, False, str(error)))
        network = (
            "own network and mount namespaces in the task (the task definition must add CAP_SYS_ADMIN, "
            "CAP_SETUID, CAP_SETGID: not possible on Fargate itself)"
            if self.executor_namespaces
            else "another uid in the task, on the task's network: its subnets, security group and endpoint "
            "policies are the program's network boundary (docs/exec.md, 'The task's network')"
        )
        findings.append(DoctorFinding("isolation", True, f"{self.isolation}: executor has {network}"))
        return findings

    def _cluster_finding(self) -> tuple[bool, str]:
        clusters = self.call("ecs", "describe_clusters", clusters=[self.cluster]).get("clusters") or []
        status = clusters[0].get("status") if clusters else "MISSING"
        return status == "ACTIVE", f"status {status}"

    def _task_definition_finding(self) -> tuple[bool, str]:
        definition = self.call("ecs", "describe_task_definition", taskDefinition=self.task_definition)
        names = [c.get("name") for c in definition["taskDefinition"].get("containerDefinitions") or []]
        if self.container_name not in names:
            return False, f"has no container '{self.container_name}' (has: {', '.join(map(str, names))})"
        return True, f"container '{self.container_name}' present"

    def _bucket_finding(self) -> tuple[bool, str]:
        self.call("s3", "head_bucket", Bucket=self.bucket)
        return True, "reachable"


def error_code(error: ClientError) -> str:
    """AWS's error code of ``error`` (its message may echo request fields, so it is left out)."""
    return str(error.response.get("Error", {}).get("Code", "error"))


@hookimpl
def berth_exec_backends() -> dict[str, Any]:
    """Register ``fargate``."""
    return {BACKEND_NAME: FargateBackend.from_profile}
