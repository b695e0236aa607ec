"""An API process for tests: real app, real bundles, SQLite under tmp, a scripted model from a file."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from berth.api import create_app
from berth.default_plugins.models.scripted import ScriptedProvider
from berth.distributed.worker import TurnWorker, WorkerSettings
from berth.testing.storage import current_storage_kind, distributed_storage
from berth.turns.build import build_services
from berth.turns.services import HostServices

KEYS = {"acme": "acme-key-0001", "globex": "globex-key-0002", "admin": "admin-key-0003"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def write_stack_descriptors(
    root: Path,
    script: Path,
    bundles: dict[str, Any] | None = None,
    auth: str = "api_keys",
    gateway: dict[str, Any] | None = None,
    bundles_secrets: dict[str, Any] | None = None,
    platform: dict[str, Any] | None = None,
    extra_keys: Sequence[dict[str, Any]] = (),
    tenant_bundles: dict[str, list[str]] | None = None,
    tenants: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Descriptors of two tenants; ``gateway`` adds sections to ``gateway.yaml`` (limits, backpressure);
    ``bundles_secrets`` is ``bundles.secrets.yaml``; ``platform`` adds sections to ``assembly.yaml``'s platform;
    ``extra_keys`` are more entries of ``auth.keys``; ``tenant_bundles`` says which bundles each tenant enables
    (default: every bundle for both); ``tenants`` adds settings to a tenant of ``assembly.yaml``."""
    root.mkdir(parents=True, exist_ok=True)
    platform = dict(platform or {})
    # titles would take a response of the test's script: a test that wants them says so
    platform["react"] = {"conversation_titles": False, **platform.get("react", {})}
    assembly = {
        "platform": {"models": {"default": {"provider": "scripted", "model": str(script)}}, **platform},
        "tenants": {"acme": {"projects": {"support": {}, "sales": {}}}, "globex": {"projects": {"research": {}}}},
    }
    for tenant, settings in (tenants or {}).items():
        assembly["tenants"][tenant].update(settings)
    bundles = bundles or {"hello": {"source": {"entry_point": "hello"}}}
    scopes = {
        "acme": {"bundles": sorted(bundles), "default_bundle": sorted(bundles)[0]},
        "globex": {"bundles": sorted(bundles)},
    }
    if tenant_bundles is not None:
        scopes = {name: {"bundles": enabled, "default_bundle": enabled[0]} for name, enabled in tenant_bundles.items()}
    gateway_yaml: dict[str, Any] = {"auth": {"mode": auth}, **(gateway or {})}
    if auth == "api_keys":
        gateway_yaml["auth"]["keys"] = [
            {"id": "acme-user", "sha256": key_hash(KEYS["acme"]), "tenant": "acme", "projects": ["support"]},
            {"id": "globex-user", "sha256": key_hash(KEYS["globex"]), "tenant": "globex"},
            {"id": "ops", "sha256": key_hash(KEYS["admin"]), "tenant": "*", "roles": ["admin", "user"]},
            *extra_keys,
        ]
    (root / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    (root / "bundles.yaml").write_text(yaml.safe_dump({"bundles": bundles, "tenants": scopes}))
    (root / "gateway.yaml").write_text(yaml.safe_dump(gateway_yaml))
    if bundles_secrets is not None:
        (root / "bundles.secrets.yaml").write_text(yaml.safe_dump(bundles_secrets))
    return root


def write_script(path: Path, responses: Sequence[str], repeat: bool = False) -> Path:
    path.write_text(yaml.safe_dump({"chunk_size": 9, "repeat": repeat, "responses": list(responses)}))
    return path


@dataclass
class ApiStack:
    """The app's client and services."""

    client: httpx.AsyncClient
    services: HostServices
    worker: HostServices | None = None
    """With distributed storage: the services of the worker process that runs the turns (in this process)."""

    def auth(self, who: str = "acme") -> dict[str, str]:
        return {"Authorization": f"Bearer {KEYS[who]}"}

    def model(self) -> ScriptedProvider:
        """The scripted model serving the platform's default model (its ``requests`` are what it was sent)."""
        runs_turns = self.worker or self.services
        assert runs_turns.models is not None
        provider = runs_turns.models.provider(runs_turns.config.settings_for().models.default)
        assert isinstance(provider, ScriptedProvider)
        return provider

    async def conversation(self, who: str = "acme", tenant: str = "acme", project: str = "support", **body: Any) -> str:
        response = await self.client.post(f"/v1/{tenant}/{project}/conversations", json=body, headers=self.auth(who))
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    async def start_turn(
        self,
        conversation: str,
        message: str,
        who: str = "acme",
        tenant: str = "acme",
        project: str = "support",
        **body: Any,
    ) -> dict[str, Any]:
        response = await self.client.post(
            f"/v1/{tenant}/{project}/conversations/{conversation}/turns",
            json={"message": message, **body},
            headers=self.auth(who),
        )
        assert response.status_code == 202, response.text
        return dict(response.json())

    async def wait_for(self, events_url: str, kind: str, who: str = "acme") -> dict[str, Any]:
        """Follow the stream until its first event of ``kind``; return its data."""
        async with self.client.stream("GET", events_url, headers=self.auth(who)) as response:
            event = ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == kind:
                    return dict(json.loads(line[6:]))
        raise AssertionError(f"the stream ended before a {kind} event")

    async def events(
        self, events_url: str, who: str = "acme", last_event_id: str | None = None, limit: int | None = None
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """(id, event, data) of the stream, until the turn ends (or ``limit`` events)."""
        headers = self.auth(who)
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        found: list[tuple[str, str, dict[str, Any]]] = []
        async with self.client.stream("GET", events_url, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            frame: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line.startswith(":"):
                    continue
                if not line:
                    if frame:
                        found.append((frame["id"], frame["event"], json.loads(frame["data"])))
                        frame = {}
                        if limit is not None and len(found) >= limit:
                            break
                    continue
                name, _, value = line.partition(": ")
                frame[name] = value
        return found


@asynccontextmanager
async def api_stack(
    tmp_path: Path,
    responses: Sequence[str],
    *,
    bundles: dict[str, Any] | None = None,
    auth: str = "api_keys",
    repeat: bool = False,
    govern_heap: bool = False,
    gateway: dict[str, Any] | None = None,
    bundles_secrets: dict[str, Any] | None = None,
    platform: dict[str, Any] | None = None,
    extra_keys: Sequence[dict[str, Any]] = (),
    tenant_bundles: dict[str, list[str]] | None = None,
    tenants: dict[str, dict[str, Any]] | None = None,
) -> AsyncIterator[ApiStack]:
    script = write_script(tmp_path / "script.yaml", responses, repeat)

    def descriptors_with(platform: dict[str, Any] | None) -> Path:
        return write_stack_descriptors(
            tmp_path / "descriptors", script, bundles, auth, gateway, bundles_secrets, platform, extra_keys,
            tenant_bundles, tenants,
        )  # fmt: skip

    if current_storage_kind() == "distributed":
        async with distributed_storage() as storage:
            extra = (platform or {}).get("storage", {})  # a test's additions (the artifact store)
            platform = {**(platform or {}), "storage": {**storage, **extra}}
            descriptors = descriptors_with(platform)
            async with _turn_worker(descriptors) as worker, _serving(descriptors, tmp_path, govern_heap) as stack:
                stack.worker = worker
                yield stack
        return
    descriptors = descriptors_with(platform)
    async with _serving(descriptors, tmp_path, govern_heap) as stack:
        yield stack


@asynccontextmanager
async def _serving(descriptors: Path, tmp_path: Path, govern_heap: bool) -> AsyncIterator[ApiStack]:
    """The API over ``descriptors`` on a loopback port, and a client of it."""
    services = build_services(descriptors, var_root=tmp_path / "var")
    app = create_app(services=services, govern_heap=govern_heap)
    # a real server on loopback: httpx's ASGI transport buffers whole responses, so it cannot stream SSE
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield ApiStack(client, services)
    finally:
        server.should_exit = True
        await serving


@asynccontextmanager
async def _turn_worker(descriptors: Path) -> AsyncIterator[HostServices]:
    """A turn worker over ``descriptors`` (distributed storage), run in this process beside the API: its own
    services, store instance and Redis client, as a ``berth worker`` process has."""
    services = build_services(descriptors)
    await services.start()
    worker = TurnWorker(services, WorkerSettings(concurrency=8, lease_s=2.0, block_s=0.2), name="test-worker")
    running = asyncio.create_task(worker.run())
    try:
        yield services
    finally:
        worker.stop()
        await running
        await services.stop()
