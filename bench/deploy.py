"""Deployment figures: the images' sizes, their build times (cold, nothing changed, one bundle file changed), an API
container's cold start, and the compose stack's ``up`` to its first answered turn and a killed worker's takeover.

    DOCKER_HOST=unix:///tmp/berth-docker/docker.sock .venv/bin/python bench/deploy.py [--runs 3] [--build]

Sizes: the images ``deploy/build-images`` makes (``--build`` builds them first). Builds (full mode only): in a copy
of the repository (its tracked files and the wheelhouse), at the tag ``bench`` so ``latest`` and its cache are left
alone: one cold build (``--no-cache``; the wheelhouse is already gathered), then ``--runs`` builds with nothing
changed and ``--runs`` with one bundle file edited before each (``bundles/hello``); the bench images are removed at
the end. Cold start: on the example descriptors (mounted read-only; embedded storage in the container's writable
/var/lib/berth), with the container hardened as compose.yaml runs it (read-only root, no capabilities); the baseline
is the same ``berth run`` started as a plain process from the development venv, in the same run. Stack (full mode
only; needs compose and makes the local stand-in images of tests/deploy/stand_ins.py once): ``deploy/compose.yaml``
as the deploy tests run it, two workers, the scripted model of tests/deploy/compose_kit.py (a turn runs
``exec.python`` in a sibling container, then answers after a 4 s model pause); from ``up -d`` of a new project to
that turn's ``turn.completed``; then a second turn whose worker is killed (``kill -9`` from the host) once the
program ran: kill to the turn's next event (another worker took it over: the lease is 15 s) and to its
``turn.completed``. A new project each run. Medians of the runs with min and max. ``--quick`` (the test suite):
sizes and one cold start only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped, unused-ignore]
import httpx
from _machine import header

from berth.config.environment import docker_host

REPOSITORY = Path(__file__).resolve().parents[1]
BERTH = str(Path(sys.executable).parent / "berth")
BUNDLE_FILE = Path("bundles/hello/hello_bundle/__init__.py")
BENCH_TAG = "bench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def until_ready(url: str, started: float, timeout_s: float = 120) -> float:
    """Seconds from ``started`` until ``url`` answers 200."""
    with httpx.Client(timeout=2) as client:
        while time.perf_counter() - started < timeout_s:
            try:
                if client.get(url).status_code == 200:
                    return time.perf_counter() - started
            except httpx.TransportError:
                pass
            time.sleep(0.02)
    raise TimeoutError(f"{url} was not ready within {timeout_s} s")


def container_cold_start(engine: Any, image: str) -> float:
    port = free_port()
    started = time.perf_counter()
    container = engine.containers.run(
        image,
        ["run", "--host", "127.0.0.1", "--port", str(port), "--demo", "--var", "/var/lib/berth/var"],
        detach=True,
        network_mode="host",
        read_only=True,
        tmpfs={"/tmp": "", "/var/lib/berth": "uid=10001,gid=10001,mode=0700"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges:true"],
        volumes={str(REPOSITORY / "descriptors"): {"bind": "/etc/berth/descriptors", "mode": "ro"}},
    )
    try:
        return until_ready(f"http://127.0.0.1:{port}/readyz", started)
    finally:
        container.remove(force=True)


def process_cold_start(root: Path) -> float:
    port = free_port()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("BERTH_")}
    environment["BERTH_DESCRIPTORS"] = str(REPOSITORY / "descriptors")
    started = time.perf_counter()
    process = subprocess.Popen(
        [BERTH, "run", "--host", "127.0.0.1", "--port", str(port), "--demo", "--var", str(root / "var")],
        env=environment,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        return until_ready(f"http://127.0.0.1:{port}/readyz", started)
    finally:
        process.terminate()
        process.wait(timeout=30)


def summary(samples: list[float]) -> str:
    return f"{statistics.median(samples):8.2f}  {min(samples):7.2f}  {max(samples):7.2f}"


def row(arm: str, samples: list[float]) -> str:
    return f"{arm:<64}  {len(samples):>4}  {summary(samples)}"


def engine_or_reason(tag: str) -> tuple[Any, str | None]:
    """The engine, or why this cannot run here (no engine, or the images are not built)."""
    try:
        engine = docker.DockerClient(base_url=docker_host() or "unix:///var/run/docker.sock")
        engine.ping()
    except Exception as error:
        return None, f'no Docker engine ({type(error).__name__}); start one: eval "$(bash .ci/start-docker)"'
    for name in (f"berth:{tag}", f"berth-exec:{tag}", "berth-exec-base:offline"):
        if not engine.images.list(name=name):
            return None, f"image {name} is not built: deploy/build-images (or run with --build)"
    return engine, None


# builds ----------------------------------------------------------------------------------------------------------


def repository_copy(root: Path) -> Path:
    """The repository's tracked and untracked-but-not-ignored files, and the wheelhouse (hard links), under root."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPOSITORY,
        capture_output=True,
        check=True,
    ).stdout.decode()
    copy = root / "repository"
    for name in filter(None, listed.split("\0")):
        source = REPOSITORY / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    for wheel in (REPOSITORY / "deploy" / "wheels").iterdir():
        target = copy / "deploy" / "wheels" / wheel.name
        if not target.exists():
            try:
                os.link(wheel, target)  # 90 MB: linked where the file system allows
            except OSError:
                shutil.copy2(wheel, target)
    return copy


def timed_build(copy: Path, *options: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [str(copy / "deploy" / "build-images"), "--tag", BENCH_TAG, *options],
        cwd=copy,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def build_times(engine: Any, runs: int) -> dict[str, list[float]]:
    """Cold, nothing-changed and bundle-changed builds of a copy of the repository, at the bench tag."""
    if not (REPOSITORY / "deploy" / "wheels" / ".key").is_file():
        timed_build(REPOSITORY)  # the wheelhouse (network-bound, once per lock) is not what is measured
    with tempfile.TemporaryDirectory() as root:
        copy = repository_copy(Path(root))
        try:
            times = {"cold": [timed_build(copy, "--no-cache")], "unchanged": [], "bundle": []}
            for _ in range(runs):
                times["unchanged"].append(timed_build(copy))
            for edit in range(runs):
                with (copy / BUNDLE_FILE).open("a") as bundle:
                    bundle.write(f"# bench edit {edit}\n")
                times["bundle"].append(timed_build(copy))
            return times
        finally:
            for image in engine.images.list():
                if any(tag.endswith(f":{BENCH_TAG}") or tag.endswith(f"-{BENCH_TAG}") for tag in image.tags):
                    for tag in image.tags:
                        engine.images.remove(tag)


# the compose stack -----------------------------------------------------------------------------------------------


def stack_kit() -> Any:
    """tests/deploy's compose kit (the same stack the deploy tests run), or None without compose."""
    sys.path.insert(0, str(REPOSITORY / "tests" / "deploy"))
    import compose_kit

    return compose_kit


async def first_turn(kit: Any, stack: Any) -> dict[str, float]:
    """From ``up -d`` to the first turn's end; then a second turn's worker killed: to takeover and to its end."""
    started = time.perf_counter()
    stack.run("up", "-d", timeout=900)
    up = time.perf_counter() - started
    await kit.until_ok(f"{stack.api_url}/readyz")
    ready = time.perf_counter() - started
    headers = {"Authorization": f"Bearer {kit.API_KEY}"}
    async with httpx.AsyncClient(base_url=stack.api_url, headers=headers, timeout=30) as client:
        conversation = (await client.post("/v1/acme/ops/conversations", json={})).json()["id"]
        turns = f"/v1/acme/ops/conversations/{conversation}/turns"
        turn = (await client.post(turns, json={"message": "report"})).json()
        events = await kit.follow(client, turn["events_url"])
        answered = time.perf_counter() - started
        assert events[-1][0] == "turn.completed", events[-4:]

        turn = (await client.post(turns, json={"message": "report"})).json()
        seen: list[tuple[str, dict[str, Any]]] = []
        following = asyncio.create_task(kit.follow(client, turn["events_url"], seen))
        deadline = time.monotonic() + 120
        while not any(kind == "tool.result" for kind, _ in seen):
            if time.monotonic() > deadline or following.done():
                raise RuntimeError(f"the turn's program never ran: {seen[-4:]}")
            await asyncio.sleep(0.02)
        engine = docker.DockerClient(base_url=docker_host() or "unix:///var/run/docker.sock")
        try:
            victim = next(
                worker
                for worker in stack.containers(engine, "worker")
                if kit.worker_readiness(worker)["checks"]["worker"]["running"]
            )
            before = len(seen)
            kill_at = time.perf_counter()
            kit.kill_9(victim)
            while len(seen) == before:
                if time.monotonic() > deadline + 300 or following.done():
                    raise RuntimeError(f"no event after the kill: {seen[-4:]}")
                await asyncio.sleep(0.02)
            next_event = time.perf_counter() - kill_at
            await following
            completed = time.perf_counter() - kill_at
        finally:
            engine.close()
        assert seen[-1][0] == "turn.completed", seen[-4:]
    return {"up": up, "ready": ready, "answered": answered, "next_event": next_event, "completed": completed}


def stack_times(engine: Any, tag: str, runs: int) -> dict[str, list[float]] | str:
    """The stack's figures over ``runs`` new projects, or why they cannot be measured here."""
    kit = stack_kit()
    command = kit.compose_command()
    if command is None:
        return "no compose (apt-get install docker-compose)"
    from stand_ins import ensure_stand_ins

    stand_ins = ensure_stand_ins(engine)
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as root:
            folders = kit.prepare_folders(Path(root))
            stack = kit.stack_of(command, tag, stand_ins, folders)
            try:
                for name, value in asyncio.run(first_turn(kit, stack)).items():
                    samples.setdefault(name, []).append(value)
            finally:
                stack.down()
                shutil.rmtree(folders.runs, ignore_errors=True)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="sizes and one cold start (what the test suite runs)")
    parser.add_argument("--build", action="store_true", help="run deploy/build-images first")
    parser.add_argument("--tag", default="latest")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    if args.build:
        subprocess.run([str(REPOSITORY / "deploy" / "build-images"), "--tag", args.tag], check=True)
    engine, reason = engine_or_reason(args.tag)
    if engine is None:
        print(f"skipped: {reason}")
        return
    base = engine.images.get("berth-exec-base:offline").attrs["Size"]
    print(f"{'image':<40}  {'size MB':>8}  {'over the shared base MB':>24}")
    print(f"{'berth-exec-base:offline (shared base)':<40}  {base / 1e6:8.0f}  {'-':>24}")
    for name in ("berth", "berth-exec"):
        size = engine.images.get(f"{name}:{args.tag}").attrs["Size"]
        print(f"{name + ':' + args.tag:<40}  {size / 1e6:8.0f}  {(size - base) / 1e6:24.0f}")

    columns = f"{'arm':<64}  {'runs':>4}  {'median s':>8}  {'min':>7}  {'max':>7}"
    builds = None if args.quick else build_times(engine, runs)
    if builds is not None:
        print(f"\ndeploy/build-images, both images, a copy of the repository (wheelhouse gathered already)\n{columns}")
        print(row("cold (--no-cache: every layer built)", builds["cold"]))
        print(row("nothing changed", builds["unchanged"]))
        print(row("one bundle file changed (bundles/hello)", builds["bundle"]))

    container_runs, process_runs = [], []
    for _ in range(runs):
        container_runs.append(container_cold_start(engine, f"berth:{args.tag}"))
        with tempfile.TemporaryDirectory() as root:
            process_runs.append(process_cold_start(Path(root)))
    print(f"\ncold start to /readyz OK: the example descriptors, embedded storage, --demo\n{columns}")
    print(row(f"berth:{args.tag} container (read-only root, no capabilities)", container_runs))
    print(row("baseline: berth run as a plain process (development venv)", process_runs))

    stack = None if args.quick else stack_times(engine, args.tag, runs)
    if isinstance(stack, str):
        print(f"\ncompose stack: not measured: {stack}")
    elif stack is not None:
        print(f"\ndeploy/compose.yaml, 2 workers, a new project each run (lease 15 s)\n{columns}")
        print(row("up -d returned", stack["up"]))
        print(row("up -d to API /readyz OK", stack["ready"]))
        print(row("up -d to the first turn answered (exec.python + 4 s model pause)", stack["answered"]))
        print(row("worker kill -9 mid-turn to the turn's next event (takeover)", stack["next_event"]))
        print(row("worker kill -9 mid-turn to turn.completed", stack["completed"]))

    ratio = statistics.median(container_runs) / statistics.median(process_runs)
    print(f"\ncontainer / process cold start: {ratio:.2f}x")
    if builds is not None:
        unchanged, bundle, cold = (statistics.median(builds[arm]) for arm in ("unchanged", "bundle", "cold"))
        print(f"ratio build with nothing changed / cold: {unchanged / cold:.3f}x")
        print(f"ratio build with one bundle changed / cold: {bundle / cold:.2f}x")
    if args.quick:
        print("(builds and the compose stack: full mode only, minutes)")
    engine.close()


if __name__ == "__main__":
    print(header(), flush=True)
    main()
