"""Deployment figures: the images' sizes and an API container's cold start (container start to ``/readyz`` OK).

    DOCKER_HOST=unix:///tmp/berth-docker/docker.sock .venv/bin/python bench/deploy.py [--runs 5] [--build]

The images are the ones ``deploy/build-images`` makes (``--build`` builds them first). The cold start is measured on
the example descriptors (mounted read-only; embedded storage in the container's writable /var/lib/berth), with
the container hardened as compose.yaml runs it (read-only root, no capabilities); the baseline is the same
``berth run`` started as a plain process on this machine from the development venv, in the same run. Median of
``--runs`` runs with min and max.
"""

from __future__ import annotations

import argparse
import os
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
    return f"{statistics.median(samples):8.2f}  {min(samples):6.2f}  {max(samples):6.2f}"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one run of each arm (what the test suite runs)")
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

    container_runs, process_runs = [], []
    for _ in range(runs):
        container_runs.append(container_cold_start(engine, f"berth:{args.tag}"))
        with tempfile.TemporaryDirectory() as root:
            process_runs.append(process_cold_start(Path(root)))
    print()
    print(f"cold start to /readyz OK, {runs} run(s): the example descriptors, embedded storage, --demo")
    print(f"{'arm':<62}  {'median s':>8}  {'min':>6}  {'max':>6}")
    print(f"{'berth:' + args.tag + ' container (read-only root, no capabilities)':<62}  {summary(container_runs)}")
    print(f"{'baseline: berth run as a plain process (development venv)':<62}  {summary(process_runs)}")
    ratio = statistics.median(container_runs) / statistics.median(process_runs)
    print(f"\ncontainer / process cold start: {ratio:.2f}x")
    engine.close()


if __name__ == "__main__":
    print(header(), flush=True)
    main()
