"""Artifacts on S3 (moto's server on loopback) in distributed mode: a turn's files are uploaded (in parts when
large) under a key per tenant, project, user and conversation; the files route streams them, or redirects to a
presigned URL."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import boto3
import httpx
import pytest
from api_stack import api_stack

from berth.config.models.assembly import S3Artifacts
from berth.storage.artifacts import artifact_key
from berth.storage.scope import ConversationScope

pytestmark = [pytest.mark.aws, pytest.mark.postgres, pytest.mark.redis]

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Read it.</channel:answer>'
BUCKET = "berth-artifacts"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def moto_s3() -> Iterator[str]:
    """moto's server with an empty bucket; the AWS credentials it accepts are set in the environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{server._server.server_port}"  # type: ignore[union-attr]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        try:
            yield endpoint
        finally:
            server.stop()


def artifacts(endpoint: str, **options: Any) -> dict[str, Any]:
    return {
        "storage": {
            "artifacts": {
                "kind": "s3",
                "bucket": BUCKET,
                "prefix": "berth/",
                "endpoint_url": endpoint,
                "region": "us-east-1",
                **options,
            }
        }
    }


async def test_large_objects_go_up_in_parts_and_come_back_whole(moto_s3: str) -> None:
    from berth_aws.artifacts import S3ArtifactStore

    store = S3ArtifactStore(
        S3Artifacts(kind="s3", bucket=BUCKET, prefix="unit/", endpoint_url=moto_s3, region="us-east-1")
    )
    try:
        data = bytes(range(256)) * (20 * 4096)  # 20 MiB: three parts of 8 MiB
        await store.put("big", data)
        head = boto3.client("s3", endpoint_url=moto_s3).head_object(Bucket=BUCKET, Key="unit/big")
        assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # a multipart upload's ETag counts its parts
        assert await store.get("big") == data
        assert b"".join([piece async for piece in store.chunks("big")]) == data
        assert await store.download_url("big", filename="big.bin", mime="application/octet-stream") is None
        with pytest.raises(KeyError):
            await store.get("missing")
    finally:
        await store.aclose()


@pytest.mark.parametrize("storage_kind", ["distributed"], indirect=True)
@pytest.mark.usefixtures("storage_kind")
async def test_a_turns_attachment_is_stored_in_s3_and_streamed_back(tmp_path: Path, moto_s3: str) -> None:
    async with api_stack(tmp_path, [ANSWER], platform=artifacts(moto_s3)) as stack:
        conversation = await stack.conversation()
        body = b"The launch is on Tuesday.\n" * 20000  # 520 KB
        response = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns",
            data={"message": "read this"},
            files={"notes": ("notes.txt", body, "text/plain")},
            headers=stack.auth(),
        )
        assert response.status_code == 202, response.text
        turn = response.json()["turn_id"]
        await stack.events(response.json()["events_url"])
        url = f"/v1/acme/support/conversations/{conversation}/files/fi:{turn}.attachments/notes.txt"
        download = await stack.client.get(url, headers=stack.auth())
        assert download.status_code == 200
        assert download.content == body
        assert download.headers["content-type"].startswith("text/plain")
        # the row holds where the object is, not its bytes; the key names its tenant, project, user, conversation
        dsn = stack.services.config.settings_for().storage.postgres.dsn.literal_value()  # type: ignore[union-attr]
        connection = await asyncpg.connect(dsn)
        try:
            row = await connection.fetchrow(
                "SELECT user_id, data, location FROM berth_artifacts WHERE turn_id=$1", turn
            )
        finally:
            await connection.close()
        scope = ConversationScope(
            tenant="acme", project="support", user_id=row["user_id"], conversation_id=conversation
        )
        assert row["data"] is None
        assert row["location"] == artifact_key(scope, hashlib.sha256(body).hexdigest())
        stored = boto3.client("s3", endpoint_url=moto_s3).get_object(Bucket=BUCKET, Key="berth/" + row["location"])
        assert stored["Body"].read() == body


@pytest.mark.parametrize("storage_kind", ["distributed"], indirect=True)
@pytest.mark.usefixtures("storage_kind")
async def test_downloads_redirect_to_a_presigned_url_when_configured(tmp_path: Path, moto_s3: str) -> None:
    async with api_stack(tmp_path, [ANSWER], platform=artifacts(moto_s3, presigned_downloads=True)) as stack:
        conversation = await stack.conversation()
        response = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns",
            data={"message": "read this"},
            files={"notes": ("notes.txt", b"hello from s3", "text/plain")},
            headers=stack.auth(),
        )
        turn = response.json()["turn_id"]
        await stack.events(response.json()["events_url"])
        url = f"/v1/acme/support/conversations/{conversation}/files/fi:{turn}.attachments/notes.txt"
        redirect = await stack.client.get(url, headers=stack.auth())
        assert redirect.status_code == 307
        location = redirect.headers["location"]
        assert location.startswith(moto_s3) and "Signature" in location
        async with httpx.AsyncClient() as outside:  # the client fetches it from the object store, without its key
            fetched = await outside.get(location)
        assert fetched.status_code == 200
        assert fetched.content == b"hello from s3"
        assert fetched.headers["content-disposition"] == 'attachment; filename="notes.txt"'
        refused = await stack.client.get(url, headers=stack.auth("globex"))
        assert refused.status_code == 404  # another tenant gets no URL


@pytest.mark.parametrize("storage_kind", ["distributed"], indirect=True)
@pytest.mark.usefixtures("storage_kind")
async def test_a_presigned_download_names_a_file_outside_latin_1_as_rfc_6266_says(tmp_path: Path, moto_s3: str) -> None:
    async with api_stack(tmp_path, [ANSWER], platform=artifacts(moto_s3, presigned_downloads=True)) as stack:
        conversation = await stack.conversation()
        response = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns",
            data={"message": "read this"},
            files={"notes": ("Отчёт.txt", b"hello from s3", "text/plain")},
            headers=stack.auth(),
        )
        turn = response.json()["turn_id"]
        await stack.events(response.json()["events_url"])
        url = f"/v1/acme/support/conversations/{conversation}/files/fi:{turn}.attachments/Отчёт.txt"
        redirect = await stack.client.get(url, headers=stack.auth())
        assert redirect.status_code == 307
        async with httpx.AsyncClient() as outside:
            fetched = await outside.get(redirect.headers["location"])
        assert fetched.status_code == 200
        assert fetched.headers["content-disposition"] == (
            "attachment; filename=\"_____.txt\"; filename*=UTF-8''%D0%9E%D1%82%D1%87%D1%91%D1%82.txt"
        )


@pytest.mark.parametrize("storage_kind", ["distributed"], indirect=True)
@pytest.mark.usefixtures("storage_kind")
async def test_deleting_a_conversation_deletes_its_objects(tmp_path: Path, moto_s3: str) -> None:
    s3 = boto3.client("s3", endpoint_url=moto_s3)
    async with api_stack(tmp_path, [ANSWER], repeat=True, platform=artifacts(moto_s3)) as stack:
        kept, deleted = await stack.conversation(), await stack.conversation()
        for conversation, body in ((kept, b"kept notes"), (deleted, b"secret notes")):
            response = await stack.client.post(
                f"/v1/acme/support/conversations/{conversation}/turns",
                data={"message": "read this"},
                files={"notes": ("notes.txt", body, "text/plain")},
                headers=stack.auth(),
            )
            await stack.events(response.json()["events_url"])
        # an upload no row names (a commit that failed after it): under the conversation's prefix all the same
        scope = ConversationScope(tenant="acme", project="support", user_id="acme-user", conversation_id=deleted)
        stray = "berth/" + artifact_key(scope, "0" * 64)
        s3.put_object(Bucket=BUCKET, Key=stray, Body=b"left behind")
        prefix = "berth/" + artifact_key(scope, "")

        def keys(under: str) -> list[str]:
            return [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=under).get("Contents", [])]

        assert len(keys(prefix)) == 2
        response = await stack.client.delete(f"/v1/acme/support/conversations/{deleted}", headers=stack.auth())
        assert response.status_code == 204
        assert keys(prefix) == []
        kept_scope = ConversationScope(tenant="acme", project="support", user_id="acme-user", conversation_id=kept)
        assert len(keys("berth/" + artifact_key(kept_scope, ""))) == 1
        url = f"/v1/acme/support/conversations/{kept}"
        assert (await stack.client.get(url, headers=stack.auth())).status_code == 200
