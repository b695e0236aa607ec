"""A bundle whose load failed, where people look: ``GET …/bundles`` tells admin keys which generation failed and
where (file:line) while the older one still serves; a tenant's users never see the host's file paths."""

from __future__ import annotations

import textwrap
from pathlib import Path

from api_stack import api_stack

GOOD = """
from berth import AgentSpec, BundleInfo, hookimpl

@hookimpl
def berth_bundle():
    return BundleInfo(id="fragile", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="answer")
"""
BROKEN_AT_LINE_4 = GOOD.replace("\n@hookimpl\ndef berth_bundle", "\nSETTING = 1 / 0\n@hookimpl\ndef berth_bundle", 1)
NEEDS_A_FILE = "open('/srv/berth-data/missing/table.csv')\n" + GOOD


def folder_bundle(tmp_path: Path, source: str) -> Path:
    folder = tmp_path / "fragile"
    folder.mkdir(exist_ok=True)
    (folder / "__init__.py").write_text(textwrap.dedent(source))
    return folder


async def test_a_failed_reload_shows_admins_the_generation_and_file_line_and_users_nothing(tmp_path: Path) -> None:
    folder = folder_bundle(tmp_path, GOOD)
    assert BROKEN_AT_LINE_4.splitlines()[3] == "SETTING = 1 / 0"  # line 4 of the file (the first line is blank)
    async with api_stack(tmp_path, [], bundles={"fragile": {"source": {"path": str(folder)}}}) as stack:
        (folder / "__init__.py").write_text(BROKEN_AT_LINE_4)
        reloaded = await stack.client.post("/v1/admin/bundles/fragile/reload", headers=stack.auth("admin"))
        assert reloaded.json()["ok"] is False

        (as_admin,) = (await stack.client.get("/v1/acme/support/bundles", headers=stack.auth("admin"))).json()
        assert as_admin["state"] == "loaded", "generation 1 still serves"
        error = as_admin["load_error"]
        assert (error["generation"], error["serving_generation"], error["code"]) == (2, 1, "bundle_import_failed")
        assert error["message"] == "ZeroDivisionError: division by zero"
        assert (Path(error["file"]), error["line"]) == (folder / "__init__.py", 4)

        (as_user,) = (await stack.client.get("/v1/acme/support/bundles", headers=stack.auth("acme"))).json()
        assert (as_user["state"], as_user["load_error"]) == ("loaded", None)

        (folder / "__init__.py").write_text(GOOD)
        assert (await stack.client.post("/v1/admin/bundles/fragile/reload", headers=stack.auth("admin"))).json()["ok"]
        (fixed,) = (await stack.client.get("/v1/acme/support/bundles", headers=stack.auth("admin"))).json()
        assert fixed["load_error"] is None


async def test_a_bundle_that_never_loaded_is_explained_to_users_without_the_hosts_paths(tmp_path: Path) -> None:
    folder = folder_bundle(tmp_path, NEEDS_A_FILE)
    async with api_stack(tmp_path, [], bundles={"fragile": {"source": {"path": str(folder)}}}) as stack:
        (as_user,) = (await stack.client.get("/v1/acme/support/bundles", headers=stack.auth("acme"))).json()
        assert as_user["state"] == "failed"
        error = as_user["load_error"]
        assert (error["generation"], error["serving_generation"], error["file"], error["line"]) == (1, None, None, None)
        assert error["message"].endswith("No such file or directory: 'table.csv'")

        conversation = await stack.conversation()
        refused = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns", json={"message": "hi"}, headers=stack.auth()
        )
        assert refused.status_code == 503
        message = refused.json()["error"]["message"]
        assert "table.csv" in message
        assert "/srv/berth-data" not in message and str(tmp_path) not in message, message

        (as_admin,) = (await stack.client.get("/v1/acme/support/bundles", headers=stack.auth("admin"))).json()
        assert "/srv/berth-data/missing/table.csv" in as_admin["load_error"]["message"]
        assert Path(as_admin["load_error"]["file"]) == folder / "__init__.py"
