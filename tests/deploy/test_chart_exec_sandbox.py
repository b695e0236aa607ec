"""``exec.python`` under the Helm chart's own security context: the Berth image run exactly as the chart's worker pod
says, and a hostile program run through Berth's exec service in it.

The chart is rendered with its default values (Helm's engine, in process); the worker Deployment's pod and container
security contexts, volumes, mounts and environment are translated one to one into ``docker run`` arguments: the
uid and group, ``fsGroup`` as a supplementary group, ``--cap-drop ALL``, ``--read-only``, ``no-new-privileges`` for
``allowPrivilegeEscalation: false``, Docker's default seccomp profile for ``RuntimeDefault`` (the runtime's default
profile is what Kubernetes means by it; containerd's and Docker's allow the ``landlock_*`` system calls), each
``emptyDir`` as a tmpfs of its size owned by the pod's uid and ``fsGroup``, the ConfigMap's and Secret's files
read-only with the Secret's mode. A field the translation does not know fails the test, so the test cannot go on
passing for a chart that changed what it runs under.

In that container ``berth exec run`` runs a program through the default profile (``isolation: landlock``) with the
bundle ``hello``'s tools served on the run's socket; the program calls a tool, writes a file, and tries what a
hostile program would: the mounted secrets and descriptors, another run's folder, the host's process, TCP to a
listener the container itself reaches, UDP, a user namespace, a mount, a new session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python.chart import Chart

from berth.default_plugins.exec.landlocked import landlock_abi
from berth_exec.landlock import FULL_ABI

pytestmark = [
    pytest.mark.deploy,
    pytest.mark.docker,
    pytest.mark.skipif(landlock_abi() < FULL_ABI, reason=f"the chart's exec profile needs Landlock ABI {FULL_ABI}"),
]

REPOSITORY = Path(__file__).resolve().parents[2]
CHART_DIR = REPOSITORY / "deploy" / "helm" / "berth"
IMAGE_TAG = "chart-exec-test"
SECRETS = {
    "pg_dsn": "postgresql://berth:pg-password-secret-0001@db:5432/berth",
    "redis_url": "redis://:redis-password-secret-0002@redis:6379/0",
    "anthropic_api_key": "sk-ant-api-key-secret-0003",
}
OTHER_RUN_SECRET = "another-tenants-data-0004"

ATTACKS = """
import ctypes, errno, json, os, signal, socket
from berth_exec import tools

libc = ctypes.CDLL(None, use_errno=True)
seen = {"uid": os.getuid(), "tool": tools.call("hello.greet", name="Ann")}

def attempt(name, action):
    try:
        result = action()
        seen[name] = "allowed" if result is None else str(result)[:300]
    except OSError as error:
        seen[name] = errno.errorcode.get(error.errno, type(error).__name__)

def call(result):
    if result != 0:
        raise OSError(ctypes.get_errno(), "refused")

for name in ("pg_dsn", "redis_url", "anthropic_api_key"):
    attempt("secret " + name, lambda: open("/run/secrets/" + name).read())
attempt("descriptors", lambda: os.listdir("/etc/berth/descriptors"))
attempt("gateway.yaml", lambda: open("/etc/berth/descriptors/gateway.yaml").read())
attempt("runs root", lambda: os.listdir("/var/lib/berth/exec"))
attempt("another run's file", lambda: open("/var/lib/berth/exec/ex_other_run/work/notes.txt").read())
attempt("the host's environ", lambda: open("/proc/1/environ", "rb").read())
attempt("signal the host", lambda: os.kill(1, 0))
attempt("write home", lambda: open("/var/lib/berth/planted", "w").write("x"))
attempt("write /tmp", lambda: open("/tmp/planted", "w").write("x"))
attempt("tcp connect", lambda: socket.create_connection(("127.0.0.1", LISTENER), timeout=3).close())
attempt("udp socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close())
attempt("unshare", lambda: call(libc.unshare(0x10000000)))
attempt("mount", lambda: call(libc.mount(b"none", os.environ["WORKDIR"].encode(), b"tmpfs", 0, None)))
attempt("setsid", os.setsid)
open(os.path.join(os.environ["OUTPUT_DIR"], "seen.json"), "w").write(json.dumps(seen))
print(json.dumps(seen))
"""


@dataclass
class PodRun:
    """The ``docker run`` arguments a pod spec translates to, and the host folders its volumes are made of."""

    arguments: list[str] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)


def render_defaults() -> list[dict[str, Any]]:
    with Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values={}, name="demo", namespace="berth", is_install=True)
    return [
        document
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document
    ]


def worker(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    found = [
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"
    ]
    assert len(found) == 1
    return found[0]


def translate(manifests: list[dict[str, Any]], scratch: Path) -> PodRun:
    """``docker run`` arguments for the worker pod's single container, field by field; an unknown field fails."""
    spec = worker(manifests)["spec"]["template"]["spec"]
    pod, (container,) = dict(spec["securityContext"]), spec["containers"]
    run = PodRun()
    uid, gid, fs_group = pod.pop("runAsUser"), pod.pop("runAsGroup"), pod.pop("fsGroup")
    assert pod.pop("runAsNonRoot") is True and uid != 0
    assert pod.pop("seccompProfile") == {"type": "RuntimeDefault"}  # Docker's default profile stands in for it
    assert pod == {}, f"pod securityContext fields the test does not mirror: {pod}"
    run.arguments += ["--user", f"{uid}:{gid}", "--group-add", str(fs_group)]
    context = dict(container["securityContext"])
    assert context.pop("allowPrivilegeEscalation") is False
    run.arguments += ["--security-opt", "no-new-privileges"]
    if context.pop("readOnlyRootFilesystem"):
        run.arguments.append("--read-only")
    capabilities = context.pop("capabilities")
    run.arguments += [f"--cap-drop={name}" for name in capabilities.pop("drop", [])]
    run.arguments += [f"--cap-add={name}" for name in capabilities.pop("add", [])]
    assert capabilities == {} and context == {}, f"container securityContext fields not mirrored: {context}"
    run.arguments += [f"--env={variable['name']}={variable['value']}" for variable in container["env"]]
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    config_maps = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ConfigMap"}
    for mount in container["volumeMounts"]:
        volume = dict(volumes[mount["name"]])
        volume.pop("name")
        (kind, source), = volume.items()  # fmt: skip
        path = mount["mountPath"]
        if kind == "emptyDir":  # writable by the pod's uid and fsGroup, as the kubelet makes it
            size = tmpfs_size(source["sizeLimit"])
            run.arguments += ["--tmpfs", f"{path}:rw,exec,uid={uid},gid={fs_group},size={size}"]
            continue
        folder = scratch / mount["name"]
        folder.mkdir(mode=0o755)
        if kind == "configMap":
            files, mode = config_maps[source["name"]]["data"], 0o644
        elif kind == "secret":
            files, mode = SECRETS, source["defaultMode"]
        else:
            raise AssertionError(f"a volume of kind {kind} the test does not mirror")
        for name, text in files.items():
            (folder / name).write_text(text)
            os.chown(folder / name, 0, fs_group)
            (folder / name).chmod(mode)
        assert mount.get("readOnly") is True
        run.arguments += ["-v", f"{folder}:{path}:ro"]
        run.folders.append(folder)
    return run


def tmpfs_size(quantity: str) -> str:
    """A Kubernetes binary quantity (``4Gi``) as tmpfs's ``size`` (``4g``)."""
    for suffix, unit in (("Ki", "k"), ("Mi", "m"), ("Gi", "g")):
        if quantity.endswith(suffix):
            return quantity.removesuffix(suffix) + unit
    raise AssertionError(f"an emptyDir sizeLimit the test does not translate: {quantity}")


@pytest.fixture(scope="module")
def image() -> str:
    """``berth:chart-exec-test``, built offline from this checkout by the script operators use."""
    built = subprocess.run(
        [str(REPOSITORY / "deploy" / "build-images"), "--tag", IMAGE_TAG],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return built.stdout.split()[0]


@pytest.fixture
def scratch() -> Iterator[Path]:
    folder = Path("/tmp") / f"berth-chart-exec-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def docker_run(run: PodRun, image: str, script: str, *mounts: str) -> subprocess.CompletedProcess[str]:
    command = ["docker", "run", "--rm", "--network", "host", *run.arguments, *mounts, "--entrypoint", "sh", image]
    return subprocess.run([*command, "-c", script], capture_output=True, text=True, timeout=300, check=False)


def test_the_charts_default_exec_profile_runs_a_program_under_the_charts_security_context(
    image: str, scratch: Path, listener: int
) -> None:
    run = translate(render_defaults(), scratch)
    probe = scratch / "probe"
    probe.mkdir(mode=0o755)
    (probe / "attacks.py").write_text(f"LISTENER = {listener}\n{ATTACKS}")
    (probe / "attacks.py").chmod(0o644)
    script = textwrap.dedent(
        f"""\
        set -e
        # what a hostile program should not reach: another run's folder, beside its own under the runs root
        mkdir -p /var/lib/berth/exec/ex_other_run/work
        echo {OTHER_RUN_SECRET} > /var/lib/berth/exec/ex_other_run/work/notes.txt
        # the Berth process itself reaches the listener: a refusal in the run is the sandbox's
        python3 -c 'import socket; socket.create_connection(("127.0.0.1", {listener}), timeout=5).close()'
        exec berth exec run /probe/attacks.py --bundle hello --tenant default --project default --out /tmp/out
        """
    )
    done = docker_run(run, image, script, "-v", f"{probe}:/probe:ro")
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    envelope = json.loads(done.stdout)
    assert envelope["ok"], envelope["report_text"]
    assert "on local (landlock): ok" in envelope["report_text"]
    assert [artifact["path"] for artifact in envelope["artifacts"]] == ["/tmp/out/seen.json"]
    seen = json.loads(envelope["user_out_tail"])
    assert seen == {
        "uid": 10001,  # the worker's own uid: the pod cannot switch users
        "tool": "Hello, Ann!",  # the bundle's tool, through the supervisor's socket in the run's folder
        "secret pg_dsn": "EACCES",
        "secret redis_url": "EACCES",
        "secret anthropic_api_key": "EACCES",
        "descriptors": "EACCES",
        "gateway.yaml": "EACCES",
        "runs root": "EACCES",
        "another run's file": "EACCES",
        "the host's environ": "EACCES",
        "signal the host": "EPERM",
        "write home": "EACCES",
        "write /tmp": "EACCES",
        "tcp connect": "EPERM",
        "udp socket": "EPERM",
        "unshare": "EPERM",
        "mount": "EPERM",
        "setsid": "EPERM",
    }


def test_doctor_in_the_charts_pod_says_landlock_is_in_force(image: str, scratch: Path) -> None:
    run = translate(render_defaults(), scratch)
    done = docker_run(run, image, "exec berth exec doctor")
    lines = done.stdout.splitlines()
    isolation = next(line for line in lines if "  isolation  " in line)
    assert " yes  landlock (requested landlock): Landlock and seccomp" in isolation, done.stdout
    assert "the host's uid 10001" in isolation
    landlock = next(line for line in lines if "  Landlock  " in line)
    assert " yes  ABI " in landlock, done.stdout
