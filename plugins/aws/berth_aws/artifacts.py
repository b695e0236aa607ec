"""The ``s3`` artifact store: a conversation's files in an S3 bucket (``platform.storage.artifacts`` of kind ``s3``).

Objects are keyed ``<prefix><tenant>/<project>/<user>/<conversation>/<sha256>`` (:func:`~berth.storage.artifacts.
artifact_key`): a tenant's or a conversation's objects can be listed, expired (a lifecycle rule on the prefix) or
deleted together. Uploads of ``multipart_threshold_mb`` or more go in parts (boto3's managed transfer), so a large
file neither needs one request nor restarts from zero when a part fails. Downloads stream the object through
the API, or, with ``presigned_downloads``, the files route redirects the client to a presigned ``GET`` URL valid
for ``presign_ttl_s`` (the browser then downloads from S3 itself; the URL names the file and its type).

boto3 is synchronous: each call runs in a thread. Credentials come from boto3's usual chain (environment,
profile, instance or task role); ``endpoint_url`` points at an S3-compatible store (MinIO, moto). boto3 is imported
by the first store made, not with this plugin module (the host loads every plugin at start-up).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from typing import Any, Final

from berth.config.errors import ConfigError
from berth.config.models.assembly import S3Artifacts
from berth.hooks import hookimpl
from berth.storage.artifacts import ArtifactStoreFactory
from berth.storage.downloads import content_disposition

__all__ = ["S3ArtifactStore", "create_s3_artifacts"]

MIB: Final = 1024 * 1024
CHUNK: Final = 256 * 1024


class S3ArtifactStore:
    """Objects in ``settings.bucket`` under ``settings.prefix``."""

    def __init__(self, settings: S3Artifacts, *, client: Any = None) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.settings = settings
        self._client = client or boto3.client(
            "s3",
            region_name=settings.region,
            endpoint_url=settings.endpoint_url,
            config=Config(retries={"mode": "standard", "max_attempts": 5}),
        )
        threshold = settings.multipart_threshold_mb * MIB
        self._transfer = TransferConfig(multipart_threshold=threshold, multipart_chunksize=threshold, use_threads=True)

    def _key(self, key: str) -> str:
        return self.settings.prefix + key

    async def put(self, key: str, data: bytes) -> None:
        """Upload the object (in parts from the multipart threshold on)."""
        await asyncio.to_thread(
            self._client.upload_fileobj, io.BytesIO(data), self.settings.bucket, self._key(key), Config=self._transfer
        )

    async def get(self, key: str) -> bytes:
        """The object's bytes (``KeyError`` when it is missing)."""

        def read() -> bytes:
            from botocore.exceptions import ClientError

            try:
                response = self._client.get_object(Bucket=self.settings.bucket, Key=self._key(key))
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    raise KeyError(key) from None
                raise
            body: bytes = response["Body"].read()
            return body

        return await asyncio.to_thread(read)

    async def chunks(self, key: str) -> AsyncIterator[bytes]:
        """The object in pieces of 256 KiB, read as they are sent."""

        def open_body() -> Any:
            from botocore.exceptions import ClientError

            try:
                return self._client.get_object(Bucket=self.settings.bucket, Key=self._key(key))["Body"]
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    raise KeyError(key) from None
                raise

        body = await asyncio.to_thread(open_body)
        try:
            while piece := await asyncio.to_thread(body.read, CHUNK):
                yield piece
        finally:
            body.close()

    async def download_url(self, key: str, *, filename: str, mime: str) -> str | None:
        """A presigned ``GET`` URL when ``presigned_downloads`` is on (else None: the API streams the object)."""
        if not self.settings.presigned_downloads:
            return None
        params = {
            "Bucket": self.settings.bucket,
            "Key": self._key(key),
            "ResponseContentDisposition": content_disposition(filename),
            "ResponseContentType": mime,
        }
        url: str = await asyncio.to_thread(
            self._client.generate_presigned_url, "get_object", Params=params, ExpiresIn=self.settings.presign_ttl_s
        )
        return url

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (listed a page at a time, deleted up to 1000 per request); return how
        many there were. In a versioned bucket this adds delete markers: the versions stay until a lifecycle rule
        expires them."""

        def delete() -> int:
            deleted = 0
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.settings.bucket, Prefix=self._key(prefix)):
                keys = [{"Key": item["Key"]} for item in page.get("Contents", ())]
                if not keys:
                    continue
                batch = {"Objects": keys, "Quiet": True}
                reply = self._client.delete_objects(Bucket=self.settings.bucket, Delete=batch)
                errors = reply.get("Errors") or []
                if errors:
                    first = errors[0]
                    raise RuntimeError(
                        f"S3 refused to delete {len(errors)} object(s) under {prefix!r}: {first.get('Code')} "
                        f"{first.get('Message')} ({first.get('Key')})"
                    )
                deleted += len(keys)
            return deleted

        return await asyncio.to_thread(delete)

    async def check(self) -> str:
        """The bucket exists and these credentials reach it (``HeadBucket``)."""
        await asyncio.to_thread(self._client.head_bucket, Bucket=self.settings.bucket)
        return f"bucket {self.settings.bucket}"

    async def aclose(self) -> None:
        """Close the client's connections."""
        await asyncio.to_thread(self._client.close)


def create_s3_artifacts(settings: object, /) -> S3ArtifactStore:
    """Build the store for ``platform.storage.artifacts`` of kind ``s3``."""
    if not isinstance(settings, S3Artifacts):
        raise ConfigError("artifacts_kind_mismatch", f"the s3 artifact store cannot use {settings!r}")
    return S3ArtifactStore(settings)


@hookimpl
def berth_artifact_stores() -> dict[str, ArtifactStoreFactory]:
    """Register ``s3``."""
    return {"s3": create_s3_artifacts}
