"""Widget tickets: what lets a sandboxed ``<iframe>`` load a bundle's widget without sending the API key.

A widget is served under its scope, ``/v1/{tenant}/{project}/bundles/{bundle}/widgets/{alias}/{ticket}/{path}``.
An iframe cannot send ``Authorization``, so the bundle listing (``GET /v1/{tenant}/{project}/bundles``, which needs
the key) hands out each widget's URL with a ticket in it: the key's id, an expiry and an HMAC-SHA256 of both with
the scope, the bundle and the widget's alias. The ticket sits in the path, so the widget's own relative URLs
(``app.js``, ``style.css``) carry it too. A request is served only while the ticket is unexpired, its HMAC matches,
its key still exists and covers the scope, and the scope still enables the bundle; anything else is a 404, as for
a widget that does not exist.

The HMAC key is ``gateway.yaml`` ``widgets.signing_key`` (a secret), else a random key made by each process: then
a ticket is valid only on the API process that issued it (several API processes behind one balancer need the
setting). Expiries are rounded to ``widgets.ticket_ttl_s`` windows, so a listing gives the same URL for a while
(the UI does not reload its widgets) and a ticket is valid for one to two windows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from berth.turns.callers import Caller, caller_by_id
from berth.turns.errors import not_found

if TYPE_CHECKING:
    from berth.config.configuration import Configuration

__all__ = ["WidgetTickets"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class WidgetTickets:
    """Issues and checks widget tickets for the configuration ``config()`` returns (read at every call, so a
    reload's ``gateway.yaml`` applies)."""

    def __init__(self, config: Callable[[], Configuration], *, clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._clock = clock
        self._process_key = secrets.token_bytes(32)
        self._resolved: tuple[object, bytes] | None = None

    def _key(self) -> bytes:
        """The HMAC key: ``widgets.signing_key`` resolved (cached while the setting is the same), else this
        process's own."""
        config = self._config()
        setting = config.descriptors.gateway.widgets.signing_key
        if setting is None:
            return self._process_key
        if self._resolved is None or self._resolved[0] != setting:
            secret = config.secret_resolver.resolve_setting(setting, "gateway.widgets.signing_key").reveal()
            self._resolved = (setting, hashlib.sha256(secret.encode()).digest())
        return self._resolved[1]

    def _mac(self, key_id: str, expiry: int, tenant: str, project: str, bundle_id: str, alias: str) -> str:
        message = "\n".join((key_id, str(expiry), tenant, project, bundle_id, alias)).encode()
        return _b64(hmac.new(self._key(), message, hashlib.sha256).digest())

    def issue(self, caller: Caller, tenant: str, project: str, bundle_id: str, alias: str) -> str:
        """A ticket for ``caller`` to load widget ``alias`` of ``bundle_id`` in ``tenant``/``project``."""
        ttl = self._config().descriptors.gateway.widgets.ticket_ttl_s
        expiry = (int(self._clock()) // ttl + 2) * ttl
        mac = self._mac(caller.key_id, expiry, tenant, project, bundle_id, alias)
        return f"{_b64(caller.key_id.encode())}.{expiry}.{mac}"

    def check(self, ticket: str, tenant: str, project: str, bundle_id: str, alias: str) -> Caller:
        """The caller a valid ticket was issued to.

        :raises ServiceError: 404 ``not_found`` for a malformed, forged, expired or revoked ticket, or a scope that
            no longer enables the bundle (it never says which).
        """
        refused = not_found(f"widget {alias} of bundle {bundle_id}")
        encoded_id, _, rest = ticket.partition(".")
        expiry_text, _, mac = rest.partition(".")
        try:
            key_id = _unb64(encoded_id).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise refused from None
        if not expiry_text.isdigit() or int(expiry_text) <= self._clock():
            raise refused
        expected = self._mac(key_id, int(expiry_text), tenant, project, bundle_id, alias)
        if not hmac.compare_digest(expected.encode(), mac.encode()):
            raise refused
        descriptors = self._config().descriptors
        caller = caller_by_id(key_id, descriptors)
        if caller is None or not caller.may_use(tenant, project) or not descriptors.assembly.has_scope(tenant, project):
            raise refused
        if bundle_id not in descriptors.visible_bundles(tenant, project):
            raise refused
        return caller
