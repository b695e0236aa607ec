"""The exec task's entry, ``python -m berth_aws.task``: what a fargate run's ECS task runs (as root, in the exec
image with Berth, berth-aws and the bundles installed for the supervisor).

1. reads where its run is from ``BERTH_EXEC_PAYLOAD_SECRET_ID``, ``BERTH_EXEC_INPUT_URI`` and
   ``BERTH_EXEC_OUTPUT_URI`` (:class:`berth.config.environment.ExecTaskEnvironment`);
2. fetches the launch payload from Secrets Manager and the ``work/`` + program snapshot from S3 into
   ``/workspace``, giving ``work/`` and ``out/`` to the executor's uid;
3. runs :mod:`berth.execution.combined` (the supervisor serving the bundle's tools, the executor as a child that
   drops its uid) with the payload on its stdin, the program's stdout and stderr going to ``/workspace/logs`` and
   the supervisor's own log to ``logs/supervisor.log`` (never into the program's stderr); on SIGTERM
   (``stop_task``) it kills the run and still hands back what the program wrote so far;
4. zips ``out/`` and ``logs/`` (with ``task.json``: whether the program ran, and its status) to the output URI
   and exits with the program's status.

A failure before the program runs is reported in ``task.json`` as ``{"phase": "setup", "error": …}`` (AWS
error codes and names only, never a payload) and the task exits 70.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any, Final
from urllib.parse import urlparse

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from berth.config.environment import ExecTaskEnvironment, aws_sdk_variables, exec_task_environment
from berth.execution.combined import ISOLATION_FAILED, ISOLATION_FAILURE
from berth.execution.payload import PAYLOAD_VARIABLE, LaunchPayload, supervisor_input
from berth.execution.sandbox import SANDBOX_ROOT, SANDBOX_SOCKET_DIR
from berth_aws.archive import ArchiveError, Budget, pack, unpack
from berth_aws.fargate import TASK_REPORT

SETUP_FAILED: Final = 70
SUPERVISOR_LOG: Final = "supervisor.log"
INPUT_BUDGET: Final = Budget(max_bytes=16 * 1024**3, max_files=1_000_000)


class TaskSetupError(Exception):
    """The run could not be prepared: the sentence to report."""


def s3_location(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` → ``(bucket, key)``."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
        raise TaskSetupError(f"'{uri}' is not an s3://bucket/key URI")
    return parsed.netloc, parsed.path.lstrip("/")


class ExecTask:
    """One run inside its task."""

    def __init__(self, settings: ExecTaskEnvironment, workspace: Path = Path(SANDBOX_ROOT)) -> None:
        self.settings = settings
        self.workspace = workspace
        self.logs = workspace / "logs"
        self.process: subprocess.Popen[bytes] | None = None
        self.stopping = threading.Event()
        """Set by SIGTERM: ECS stops the task."""
        self.overdue = False
        """Set when the run reached the task's own deadline (its host never stopped it)."""

    def client(self, service: str) -> Any:
        """A boto3 client with the task's region and endpoint."""
        return boto3.client(  # type: ignore[call-overload]  # the service is a name here
            service, region_name=self.settings.region, endpoint_url=self.settings.endpoint_url
        )

    def run(self) -> int:
        """Prepare, run, hand back; the exit status of the task. A stop (SIGTERM) at any point ends the run and
        still hands back what there is."""
        signal.signal(signal.SIGTERM, self.on_stop)
        self.logs.mkdir(parents=True, exist_ok=True)
        os.chmod(self.logs, 0o700)
        try:
            document = self.fetch_payload()
            environment = dict(document["environment"])
            payload = LaunchPayload.from_json(environment[PAYLOAD_VARIABLE])
            self.prepare_workspace(payload)
        except TaskSetupError as error:
            return self.hand_back({"phase": "setup", "error": str(error)}, SETUP_FAILED)
        code = self.run_combined(environment, str(document["launch"]).encode("utf-8"))
        if code == ISOLATION_FAILED:
            return self.hand_back({"phase": "setup", "error": ISOLATION_FAILURE}, SETUP_FAILED)
        report = {"phase": "ran", "exit_code": code, "stopped": self.stopping.is_set() or self.overdue}
        if self.overdue:
            report["overdue"] = True
        return self.hand_back(report, code)

    def fetch_payload(self) -> Mapping[str, Any]:
        """The launch payload document: ``{"environment": {…}, "launch": "…"}``."""
        secret_id = self.settings.payload_secret_id
        try:
            value = self.client("secretsmanager").get_secret_value(SecretId=secret_id)["SecretString"]
            document = json.loads(value)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "error")
            raise TaskSetupError(f"the launch payload could not be read ({code})") from None
        except (BotoCoreError, ValueError) as error:
            raise TaskSetupError(f"the launch payload could not be read ({type(error).__name__})") from None
        if not isinstance(document, dict) or PAYLOAD_VARIABLE not in (document.get("environment") or {}):
            raise TaskSetupError("the launch payload has no BERTH_EXEC_PAYLOAD")
        if "launch" not in document:
            raise TaskSetupError("the launch payload has no launch lines")
        return document

    def prepare_workspace(self, payload: LaunchPayload) -> None:
        """``/workspace/{work,program,out}`` from the input snapshot; ``work/`` and ``out/`` the executor's."""
        bucket, key = s3_location(self.settings.input_uri)
        with tempfile.TemporaryDirectory(prefix="berth-task-") as scratch:
            archive = Path(scratch) / "input.zip"
            try:
                self.client("s3").download_file(bucket, key, str(archive))
                unpack(archive, self.workspace, {"work": INPUT_BUDGET, "program": INPUT_BUDGET})
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "error")
                raise TaskSetupError(f"the input snapshot could not be read ({code})") from None
            except (BotoCoreError, ArchiveError, OSError) as error:
                raise TaskSetupError(f"the input snapshot could not be unpacked ({error})") from None
        uid = payload.executor_uid if payload.executor_uid is not None else 65534
        for name in ("work", "out"):
            folder = self.workspace / name
            folder.mkdir(exist_ok=True)
            for inner, dirs, files in os.walk(folder):
                for entry in [*dirs, *files]:
                    os.chown(os.path.join(inner, entry), uid, uid, follow_symlinks=False)
            os.chown(folder, uid, uid)
            os.chmod(folder, 0o700)
        program = self.workspace / "program"
        program.mkdir(exist_ok=True)
        os.chmod(program, 0o755)  # noqa: S103 - the executor reads its program
        for program_file in program.iterdir():
            os.chmod(program_file, 0o644)
        Path(SANDBOX_SOCKET_DIR).mkdir(mode=0o755, parents=True, exist_ok=True)

    def run_combined(self, environment: Mapping[str, str], launch: bytes) -> int:
        """Run :mod:`berth.execution.combined` in a process group of its own, ``environment`` and ``launch`` on its
        stdin; a stop kills that group."""
        if self.stopping.is_set():
            return 128 + signal.SIGTERM
        try:
            with open(self.logs / "stdout", "wb") as stdout, open(self.logs / "stderr", "wb") as stderr:
                entry = [sys.executable, "-B", "-m", "berth.execution.combined"]
                self.process = subprocess.Popen(  # noqa: S603 - a fixed entry and the task's own log path
                    [*entry, "--supervisor-log", str(self.logs / SUPERVISOR_LOG)],
                    stdin=subprocess.PIPE,
                    stdout=stdout,
                    stderr=stderr,
                    env=aws_sdk_variables(),
                    cwd="/",
                    start_new_session=True,
                )
                if self.stopping.is_set():  # the stop came while the process was being started
                    self.kill_group()
                assert self.process.stdin is not None
                with contextlib.suppress(BrokenPipeError):
                    self.process.stdin.write(supervisor_input(environment, launch))
                    self.process.stdin.close()
                try:
                    returncode = self.process.wait(timeout=self.settings.deadline_s)
                except subprocess.TimeoutExpired:  # the host that should have stopped the task is gone
                    self.overdue = True
                    sys.stderr.write(
                        f"berth_aws.task: the run passed the task's deadline ({self.settings.deadline_s:g} s)\n"
                    )
                    self.kill_group()
                    returncode = self.process.wait()
        finally:
            self.kill_group()
        return 128 - returncode if returncode < 0 else returncode

    def on_stop(self, _signal: int, _frame: FrameType | None) -> None:
        """ECS stops the task: end the run now; what it wrote is still handed back."""
        self.stopping.set()
        self.kill_group()

    def kill_group(self) -> None:
        """SIGKILL the run's process group (the supervisor, the executor and anything they started)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def hand_back(self, report: Mapping[str, Any], code: int) -> int:
        """Zip ``out/`` and ``logs/`` (with ``task.json``) to the output URI; ``code``, or 70 if that failed."""
        (self.logs / TASK_REPORT).write_text(json.dumps(report), encoding="utf-8")
        try:
            bucket, key = s3_location(self.settings.output_uri)
            with tempfile.TemporaryDirectory(prefix="berth-task-") as scratch:
                archive = Path(scratch) / "output.zip"
                pack(archive, {"out": self.workspace / "out", "logs": self.logs})
                self.client("s3").upload_file(str(archive), bucket, key)
        except (ClientError, BotoCoreError, TaskSetupError, OSError) as error:
            sys.stderr.write(f"berth_aws.task: could not hand back the run's output: {type(error).__name__}\n")
            return SETUP_FAILED
        return code


def main() -> None:
    """Entry point of the exec task."""
    try:
        settings = exec_task_environment()
    except ValidationError as error:
        missing = ", ".join(f"BERTH_EXEC_{'_'.join(map(str, e['loc'])).upper()}" for e in error.errors())
        sys.stderr.write(f"berth_aws.task: the task was started without {missing}\n")
        sys.exit(2)
    sys.exit(ExecTask(settings).run())


if __name__ == "__main__":
    main()
