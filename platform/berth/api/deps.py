"""Request dependencies: the host services and the authenticated caller.

The dependencies are ``async def`` although they do no I/O: FastAPI runs a plain ``def`` dependency in a
worker thread, and that hop (thread pool, capacity limiter, GIL hand-off) cost more than the check.
"""

from __future__ import annotations

from fastapi import Request

from berth.storage.scope import ConversationScope
from berth.turns.callers import Caller, authenticate, require_admin, require_scope
from berth.turns.services import HostServices


def host_services(request: Request) -> HostServices:
    """The app's :class:`HostServices`."""
    found: HostServices = request.app.state.services
    return found


async def services(request: Request) -> HostServices:
    """The app's :class:`HostServices` (as a dependency)."""
    return host_services(request)


def caller(request: Request) -> Caller:
    """The authenticated caller (401 otherwise)."""
    return authenticate(request.headers, host_services(request).config.descriptors)


async def scoped_caller(request: Request, tenant: str, project: str) -> Caller:
    """The caller, checked against ``tenant``/``project`` (404 when not covered) and counted against the
    tenant's request rate (429 when over it)."""
    who = caller(request)
    host = host_services(request)
    require_scope(who, host.config.descriptors, tenant, project)
    await host.admission.check_request(tenant)
    return who


async def admin_caller(request: Request) -> Caller:
    """The caller, who must have the admin role (403 otherwise)."""
    who = caller(request)
    require_admin(who)
    return who


def conversation_scope(who: Caller, tenant: str, project: str, conversation_id: str) -> ConversationScope:
    """The storage scope of one of the caller's conversations (ids validated: 404 when malformed)."""
    from pydantic import ValidationError

    from berth.turns.errors import not_found

    try:
        return ConversationScope(tenant=tenant, project=project, user_id=who.user_id, conversation_id=conversation_id)
    except ValidationError:
        raise not_found(f"conversation {conversation_id}") from None
