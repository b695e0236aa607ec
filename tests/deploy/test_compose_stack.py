"""The deployed stack, for real: ``deploy/compose.yaml`` as it is, run by compose (Debian's ``docker-compose``, or
``docker compose`` v2) with the images ``deploy/build-images`` makes, built once and then again with every layer
reused. Only what no registry here can give is replaced (:mod:`compose_kit`).

One stack (two workers, the file's ``BERTH_WORKERS``) serves the module, in order: a turn goes through the API
container, is run by a worker container, is persisted in the stack's PostgreSQL, and runs a program with
``exec.python`` in a sibling container the worker starts through the engine's socket; the file it writes is stored
in the stack's S3 store and served by the API; an API key added to the mounted ``gateway.yaml`` works without a
restart. Then the worker running a turn is killed (``kill -9``) after the turn announced its file: another worker
finishes the turn and the file still downloads. Then PostgreSQL and Redis restart and every conversation takes a
new turn.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped, unused-ignore]
import httpx
import pytest
import yaml
from compose_kit import (
    API_KEY,
    DEPLOY,
    REPOSITORY,
    ComposeStack,
    compose_command,
    follow,
    kill_9,
    prepare_folders,
    stack_of,
    until_ok,
    worker_readiness,
)
from stand_ins import ensure_stand_ins

from berth.config.environment import docker_host, running_in_ci

pytestmark = [pytest.mark.deploy, pytest.mark.docker]

REPORT = re.compile(r"host=[0-9a-f]{12} uid=10001")


def build_images() -> tuple[str, str]:
    built = subprocess.run(
        [str(DEPLOY / "build-images")], cwd=REPOSITORY, capture_output=True, text=True, timeout=1800, check=False
    )
    assert built.returncode == 0, built.stderr[-4000:]
    berth, exec_image = built.stdout.split()
    return berth, exec_image


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    client = docker.DockerClient(base_url=docker_host() or "unix:///var/run/docker.sock")
    yield client
    client.close()


@pytest.fixture(scope="module")
def images() -> tuple[str, str]:
    """berth:latest and berth-exec:latest, built offline from the local base by the script operators use."""
    return build_images()


@pytest.fixture(scope="module")
def stack(images: tuple[str, str], engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    command = compose_command()
    if command is None:
        reason = "no compose: apt-get install docker-compose (.ci/run does)"
        if running_in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    folders = prepare_folders(tmp_path_factory.mktemp("stack"))
    running = stack_of(command, images[0].partition(":")[2], ensure_stand_ins(engine), folders)
    try:
        running.run("up", "-d", timeout=900)
        yield running
    except BaseException:
        print(running.run("logs", "--tail", "60").stdout)
        raise
    finally:
        running.down()
        shutil.rmtree(folders.runs, ignore_errors=True)


def test_a_second_build_with_nothing_changed_reuses_every_layer(images: tuple[str, str], engine: Any) -> None:
    """The same image IDs (no layer rebuilt, so nothing new), and no build leftover dangling."""
    first = [engine.images.get(name).id for name in images]
    assert build_images() == images
    assert [engine.images.get(name).id for name in images] == first
    leftovers = engine.images.list(filters={"dangling": True, "label": "org.berth.build-stage"})
    assert leftovers == [], [image.id for image in leftovers]


async def wait_healthy(containers: list[Any], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    for container in containers:
        while container.attrs["State"].get("Health", {}).get("Status") != "healthy":
            assert time.monotonic() < deadline, (container.name, container.attrs["State"])
            await asyncio.sleep(1)
            container.reload()


def api(stack: ComposeStack, key: str = API_KEY) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


async def start_turn(client: httpx.AsyncClient, conversation: str | None = None) -> tuple[str, dict[str, Any]]:
    """A turn of the stack's script in ``conversation`` (a new one by default): its conversation and start body."""
    if conversation is None:
        created = await client.post("/v1/acme/ops/conversations", json={})
        assert created.status_code == 201, created.text
        conversation = str(created.json()["id"])
    turn = await client.post(f"/v1/acme/ops/conversations/{conversation}/turns", json={"message": "report"})
    assert turn.status_code == 202, turn.text
    return conversation, dict(turn.json())


async def test_a_turn_runs_through_the_compose_stack_with_exec_in_a_sibling_container(
    stack: ComposeStack, images: tuple[str, str], engine: Any
) -> None:
    _, exec_image = images
    ready = await until_ok(f"{stack.api_url}/readyz")
    assert {"postgres", "redis", "artifacts"} <= set(ready["checks"]["services"]), ready
    assert ready["checks"]["services"]["artifacts"]["detail"].startswith("s3: bucket "), ready
    workers = stack.containers(engine, "worker")
    assert len(workers) == 2
    await wait_healthy([*stack.containers(engine, "api"), *workers])  # the image's health check, per service

    started_at = int(time.time()) - 1
    async with api(stack) as client:
        conversation, turn = await start_turn(client)
        turn_id = turn["turn_id"]
        events = await asyncio.wait_for(follow(client, turn["events_url"]), 180)
        assert [kind for kind, _ in events][-1] == "turn.completed", events
        result = next(data for kind, data in events if kind == "tool.result" and data["tool_id"] == "exec.python")
        assert result["ok"], result
        artifact = next(data for kind, data in events if kind == "artifact")
        served = await client.get(f"/v1/acme/ops/conversations/{conversation}/files/{artifact['path']}")
        assert served.status_code == 200, served.text
        report = served.text

    # the program ran in a sibling container of the exec image, started through the engine's socket
    started = [
        event
        for event in engine.events(
            since=started_at, until=int(time.time()) + 1, decode=True, filters={"type": "container", "event": "start"}
        )
        if event["Actor"]["Attributes"].get("image") == exec_image
    ]
    assert len(started) == 1, started
    assert report == f"host={started[0]['id'][:12]} uid=10001"

    # run by one of the worker containers (an API process runs no turn), persisted in the stack's PostgreSQL,
    # its file in the stack's S3 store
    assert sum(worker_readiness(worker)["checks"]["worker"]["turns_run"] for worker in workers) == 1
    assert stack.psql(f"SELECT state FROM berth_turns WHERE turn_id='{turn_id}'") == "completed"
    location = stack.psql(f"SELECT location FROM berth_artifacts WHERE turn_id='{turn_id}' AND path LIKE '%report.txt'")
    assert re.fullmatch(r"acme/ops/.+/[0-9a-f]{64}", location), location

    # an API key added to the mounted gateway.yaml on the host works at once: the API container follows its descriptors
    gateway_file = Path(stack.environment["BERTH_DESCRIPTORS_DIR"]) / "gateway.yaml"
    gateway = yaml.safe_load(gateway_file.read_text())
    new_key = "acme-ops-added-key"
    gateway["auth"]["keys"].append(
        {"id": "added", "sha256": hashlib.sha256(new_key.encode()).hexdigest(), "tenant": "acme", "roles": ["user"]}
    )
    gateway_file.write_text(yaml.safe_dump(gateway))
    deadline = time.monotonic() + 60
    async with api(stack, new_key) as added:
        while (listed := await added.get("/v1/acme/ops/conversations")).status_code == 401:
            assert time.monotonic() < deadline, "the API never adopted the key added to gateway.yaml"
            await asyncio.sleep(0.25)
        assert listed.status_code == 200, listed.text


async def test_a_worker_killed_mid_turn_is_taken_over_and_the_announced_file_still_downloads(
    stack: ComposeStack, engine: Any
) -> None:
    await until_ok(f"{stack.api_url}/readyz")
    async with api(stack) as client:
        conversation, turn = await start_turn(client)
        events: list[tuple[str, dict[str, Any]]] = []
        following = asyncio.create_task(follow(client, turn["events_url"], events))
        deadline = time.monotonic() + 120
        # the program has run and its file is announced; the turn now waits on the model's second round
        while not any(kind == "tool.result" for kind, _ in events):
            assert time.monotonic() < deadline and not following.done(), events
            await asyncio.sleep(0.05)
        artifact = next(data for kind, data in events if kind == "artifact")
        running = [
            worker
            for worker in stack.containers(engine, "worker")
            if worker_readiness(worker)["checks"]["worker"]["running"]
        ]
        assert len(running) == 1, "one worker runs the turn"
        kill_9(running[0])
        assert not following.done(), "the turn ended before its worker was killed"

        await asyncio.wait_for(following, 180)
        assert events[-1][0] == "turn.completed", events[-8:]
        assert events[-1][1]["answer"] == "Report ready.", events[-1]
        served = await client.get(f"/v1/acme/ops/conversations/{conversation}/files/{artifact['path']}")
        assert served.status_code == 200, served.text
        assert REPORT.fullmatch(served.text), served.text
    assert stack.psql(f"SELECT state FROM berth_turns WHERE turn_id='{turn['turn_id']}'") == "completed"


async def test_every_conversation_takes_a_turn_after_postgres_and_redis_restart(stack: ComposeStack) -> None:
    async with api(stack) as client:
        await start_turn(client)  # at least one conversation, whichever tests ran before
        before = (await client.get("/v1/acme/ops/conversations", params={"limit": 100})).json()["items"]
        # every turn begun so far has ended before the restarts
        for item in before:
            deadline = time.monotonic() + 120
            while (await client.get(f"/v1/acme/ops/conversations/{item['id']}")).json()["turns"][-1]["state"] in (
                "accepted",
                "running",
            ):
                assert time.monotonic() < deadline, item
                await asyncio.sleep(0.25)

        stack.run("restart", "postgres", "redis", timeout=300)
        await until_ok(f"{stack.api_url}/readyz", timeout_s=180)

        conversations = (await client.get("/v1/acme/ops/conversations", params={"limit": 100})).json()["items"]
        assert {item["id"] for item in conversations} == {item["id"] for item in before}
        started = [await start_turn(client, item["id"]) for item in conversations]
        endings = await asyncio.wait_for(
            asyncio.gather(*(follow(client, turn["events_url"]) for _, turn in started)), 240
        )
        for (conversation, _), events in zip(started, endings, strict=True):
            assert events[-1][0] == "turn.completed", (conversation, events[-8:])
            artifact = next(data for kind, data in events if kind == "artifact")
            served = await client.get(f"/v1/acme/ops/conversations/{conversation}/files/{artifact['path']}")
            assert served.status_code == 200, served.text
            detail = (await client.get(f"/v1/acme/ops/conversations/{conversation}")).json()
            assert len(detail["turns"]) >= 2, detail
