"""Who may read ``/metrics``: it names every tenant and its usage, so an admin key by default
(``platform.metrics.access`` of ``assembly.yaml``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_stack import api_stack, write_stack_descriptors

from berth.config import Configuration
from berth.config.errors import DescriptorError

pytestmark = pytest.mark.usefixtures("clean_berth_env")

DONE = ['<channel:action>{"action": "complete", "notes": ""}</channel:action><channel:answer>ok</channel:answer>']


async def test_metrics_need_an_admin_key_by_default(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE) as stack:
        await stack.conversation("acme")  # so that the exposition has something of tenant acme's to show
        anonymous = await stack.client.get("/metrics")
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "unauthorized"
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert "acme" not in anonymous.text
        wrong = await stack.client.get("/metrics", headers={"Authorization": "Bearer not-a-key"})
        assert wrong.status_code == 401
        tenant = await stack.client.get("/metrics", headers=stack.auth("acme"))
        assert tenant.status_code == 403
        assert tenant.json()["error"]["code"] == "forbidden"
        assert "acme" not in tenant.text
        admin = await stack.client.get("/metrics", headers=stack.auth("admin"))
        assert admin.status_code == 200
        assert admin.headers["content-type"].startswith("text/plain")
        assert "berth_turns_running" in admin.text


async def test_metrics_can_be_opened_in_assembly_yaml(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE, platform={"metrics": {"access": "open"}}) as stack:
        anonymous = await stack.client.get("/metrics")
        assert anonymous.status_code == 200
        assert "berth_turns_running" in anonymous.text
        assert (await stack.client.get("/metrics", headers=stack.auth("acme"))).status_code == 200


async def test_without_auth_the_local_caller_is_the_admin_and_reads_metrics(tmp_path: Path) -> None:
    async with api_stack(tmp_path, DONE, auth="none") as stack:  # auth none: loopback only
        assert (await stack.client.get("/metrics")).status_code == 200


def test_an_unknown_metrics_access_is_a_descriptor_error(tmp_path: Path) -> None:
    root = write_stack_descriptors(tmp_path, tmp_path / "script.yaml", platform={"metrics": {"access": "public"}})
    with pytest.raises(DescriptorError) as raised:
        Configuration.load(root)
    assert "platform.metrics.access" in str(raised.value)
