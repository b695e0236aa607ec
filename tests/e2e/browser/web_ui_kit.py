"""Helpers of the browser tests: a ``berth run --demo`` host in a subprocess, screenshots, SSE frames."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

REPO_ROOT = Path(__file__).resolve().parents[3]
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OPEN_DESCRIPTORS = {
    "assembly.yaml": """\
tenants:
  default:
    title: Default
    projects:
      default: {title: Default}
      paging: {title: Paging}
""",
    "bundles.yaml": """\
bundles:
  hello: {source: {entry_point: hello}}
tenants:
  default:
    bundles: [hello]
    default_bundle: hello
""",
    "gateway.yaml": "auth: {mode: none}\n",
}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def chromium_path() -> str:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return "/usr/bin/chromium"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _berth_executable() -> str:
    beside_python = Path(sys.executable).parent / "berth"
    found = str(beside_python) if beside_python.exists() else shutil.which("berth")
    if found is None:
        pytest.fail("the `berth` command is not installed (pip install -e .)")
    return found


@dataclass
class BerthHost:
    """A running ``berth run --demo`` process."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    headers: dict[str, str] = field(default_factory=dict)
    var_root: Path | None = None
    """The storage root the host was started with (``--var``)."""

    def api(self) -> httpx.Client:
        """An HTTP client for set-up calls against this host."""
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=10)


def start_host(descriptors: Path, var_root: Path, log_path: Path, *, demo: bool = True) -> BerthHost:
    port = _free_port()
    command = [_berth_executable(), "run", *(["--demo"] if demo else []), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--descriptors", str(descriptors), "--var", str(var_root)]
    log = log_path.open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=descriptors)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"berth run exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return BerthHost(url=url, process=process, log_path=log_path, var_root=var_root)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    pytest.fail(f"berth run was not ready within 60 s:\n{log_path.read_text()}")


def stop_host(host: BerthHost) -> None:
    host.process.terminate()
    try:
        host.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        host.process.kill()
        host.process.wait(timeout=5)


SCREENSHOTS = REPO_ROOT / "build" / "screenshots"


def save_screenshot(page: Page, name: str) -> Path:
    """Save a screenshot artifact under ``build/screenshots/``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = SCREENSHOTS / name
    page.screenshot(path=str(target))
    return target


def sse_frames(body: str) -> list[dict[str, Any]]:
    """An SSE body as frames ``{id, event, data, raw}``; ``raw`` is the frame's exact text."""
    frames = []
    for raw in body.split("\n\n"):
        if not raw.strip() or raw.startswith(":"):
            continue
        frame: dict[str, Any] = {"raw": raw + "\n\n"}
        for line in raw.splitlines():
            name, _, value = line.partition(": ")
            frame[name] = value
        frames.append(frame)
    return frames


def sign_in(page: Page, host: BerthHost, project: str = "support", tenant: str = "acme") -> None:
    """Sign in as the README says: key ``acme-web-dev-key``, tenant ``acme``, a project the key covers."""
    page.goto(host.url + "/")
    page.wait_for_selector("#login-form", state="visible")
    page.fill("#login-key", "acme-web-dev-key")
    page.fill("#login-tenant", tenant)
    page.fill("#login-project", project)
    page.click("#login-form button[type='submit']")
    page.wait_for_selector("body[data-ready='true']")


def start_scripted_host(
    root: Path,
    responses: list[Any],
    *,
    chunk_size: int = 12,
    repeat: bool = False,
    price: dict[str, float] | None = None,
    gateway: dict[str, Any] | None = None,
    bundles: dict[str, Any] | None = None,
) -> BerthHost:
    """A ``berth run`` host (``auth: none``, tenant/project ``default/default``) whose model plays ``responses`` in
    order (``repeat``: again from the first when they run out), priced at ``price`` when given; conversation titles
    are off, so the first message stays each conversation's title. ``bundles`` replaces the ``hello`` bundle."""
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    script = root / "script.yaml"
    script.write_text(yaml.safe_dump({"chunk_size": chunk_size, "repeat": repeat, "responses": responses}))
    models: dict[str, Any] = {"default": {"provider": "scripted", "model": str(script)}}
    if price is not None:
        models["prices"] = {script.name: price}
    assembly = yaml.safe_load(OPEN_DESCRIPTORS["assembly.yaml"])
    assembly["platform"] = {"models": models, "react": {"conversation_titles": False}}
    bundle_yaml = yaml.safe_load(OPEN_DESCRIPTORS["bundles.yaml"])
    if bundles is not None:
        bundle_yaml = {
            "bundles": bundles,
            "tenants": {"default": {"bundles": sorted(bundles), "default_bundle": sorted(bundles)[0]}},
        }
    gateway_yaml = {"auth": {"mode": "none"}, **(gateway or {})}
    descriptors = root / "descriptors"
    descriptors.mkdir(exist_ok=True)
    for name, document in {
        "assembly.yaml": assembly,
        "bundles.yaml": bundle_yaml,
        "gateway.yaml": gateway_yaml,
    }.items():
        (descriptors / name).write_text(yaml.safe_dump(document))
    return start_host(descriptors, root / "var", root / "berth.log", demo=False)


DOC_IMAGES = REPO_ROOT / "docs" / "images"


def save_doc_image(page: Page, name: str, selector: str | None = None) -> Path:
    """Save a screenshot the documentation shows, under ``docs/images/`` (the whole page, or one element)."""
    DOC_IMAGES.mkdir(parents=True, exist_ok=True)
    target = DOC_IMAGES / name
    if selector is None:
        page.screenshot(path=str(target))
    else:
        page.locator(selector).screenshot(path=str(target))
    return target
