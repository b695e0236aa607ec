"""Who is calling: API keys from ``gateway.yaml`` (SHA-256, compared in constant time), scoped to a
tenant and its projects; ``auth: none`` makes every caller the local admin (loopback only)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from berth.turns.errors import ServiceError, not_found

if TYPE_CHECKING:
    from berth.config.descriptors import DescriptorSet
    from berth.config.models.gateway import ApiKey


@dataclass(frozen=True)
class Caller:
    """An authenticated caller."""

    key_id: str
    tenant: str
    projects: frozenset[str] | None
    roles: frozenset[str]

    @property
    def user_id(self) -> str:
        """Whose conversations these are (one user per API key)."""
        return self.key_id

    @property
    def is_admin(self) -> bool:
        """May use ``/v1/admin/*`` (within :attr:`is_global`'s reach: its own tenant's bundles, turns and metrics
        when it is not global)."""
        return "admin" in self.roles

    @property
    def is_global(self) -> bool:
        """The key covers every tenant and project (``tenant: "*"`` without ``projects``, or ``auth: none``)."""
        return self.tenant == "*" and self.projects is None

    def may_use(self, tenant: str, project: str) -> bool:
        """True when the key covers ``tenant``/``project``."""
        if self.tenant not in ("*", tenant):
            return False
        return self.projects is None or project in self.projects


LOCAL_CALLER = Caller(key_id="local", tenant="*", projects=None, roles=frozenset({"user", "admin"}))


def authenticate(headers: Mapping[str, str], descriptors: DescriptorSet) -> Caller:
    """The caller of a request with ``headers`` (HTTP's, lower-case names); 401 without a valid
    ``Authorization: Bearer <key>``."""
    auth = descriptors.gateway.auth
    if auth.mode == "none":
        return LOCAL_CALLER
    header = headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ServiceError(
            401, "unauthorized", "send 'Authorization: Bearer <api key>'", headers={"WWW-Authenticate": "Bearer"}
        )
    digest = hashlib.sha256(key.strip().encode()).hexdigest()
    found = None
    for candidate in auth.keys:  # compare with every key, so timing says nothing about which matched
        if hmac.compare_digest(candidate.sha256, digest):
            found = candidate
    if found is None:
        raise ServiceError(401, "unauthorized", "unknown API key", headers={"WWW-Authenticate": "Bearer"})
    return caller_of_key(found)


def caller_of_key(key: ApiKey) -> Caller:
    """The caller an API key of ``gateway.yaml`` makes."""
    projects = frozenset(key.projects) if key.projects is not None else None
    return Caller(key_id=key.id, tenant=key.tenant, projects=projects, roles=frozenset(key.roles))


def caller_by_id(key_id: str, descriptors: DescriptorSet) -> Caller | None:
    """The caller of the API key with id ``key_id`` as ``gateway.yaml`` has it now (the local caller's id with
    ``auth: none``); None when there is none (any more)."""
    auth = descriptors.gateway.auth
    if auth.mode == "none":
        return LOCAL_CALLER if key_id == LOCAL_CALLER.key_id else None
    return next((caller_of_key(key) for key in auth.keys if key.id == key_id), None)


def require_scope(caller: Caller, descriptors: DescriptorSet, tenant: str, project: str) -> None:
    """404 unless the scope is declared and the caller's key covers it (never says which)."""
    if not descriptors.assembly.has_scope(tenant, project) or not caller.may_use(tenant, project):
        raise not_found(f"project {tenant}/{project}")


def covered_bundles(caller: Caller, descriptors: DescriptorSet) -> frozenset[str] | None:
    """The bundles of the scopes ``caller`` covers (None: every bundle, for a global key): what a tenant's admin key
    may see and reload under ``/v1/admin``."""
    if caller.is_global:
        return None
    return frozenset(
        bundle
        for tenant, project in descriptors.assembly.scopes()
        if caller.may_use(tenant, project)
        for bundle in descriptors.visible_bundles(tenant, project)
    )


def require_admin(caller: Caller) -> None:
    """403 for a key without the admin role."""
    if not caller.is_admin:
        raise ServiceError(403, "forbidden", "this API key has no admin role")
