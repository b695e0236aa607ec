"""Which URLs ``web.fetch`` may open: http(s) only, and by default only public internet addresses.

Every hop of a redirect chain is checked again. The address check resolves the host name before the
request; it stops a model from naming ``http://169.254.169.254/`` or ``http://localhost:6379/``, but a
host whose DNS answer changes between the check and the connection is not caught — deployments that
need a hard guarantee route fetches through an egress proxy (the ``fetch.proxy`` option).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Final

import httpx

from berth.default_plugins.tools.web.errors import FETCH_UNREACHABLE, INVALID_URL, UNSAFE_URL, WebToolError

FETCHABLE_SCHEMES: Final[frozenset[str]] = frozenset({"http", "https"})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_fetch_url(url: str) -> httpx.URL:
    """Parse ``url`` and refuse anything but an absolute http(s) URL with a host.

    Raises :class:`WebToolError` ``invalid_url`` (does not parse, no host) or ``unsafe_url`` (another scheme).
    """
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError):
        raise WebToolError(INVALID_URL, f"'{url}' is not a valid URL; give an absolute http(s) URL") from None
    if not parsed.scheme:
        raise WebToolError(INVALID_URL, f"'{url}' is not an absolute URL; give an absolute http(s) URL")
    if parsed.scheme not in FETCHABLE_SCHEMES:
        raise WebToolError(UNSAFE_URL, f"scheme '{parsed.scheme}' is not fetched; only http and https URLs are")
    if not parsed.host:
        raise WebToolError(INVALID_URL, f"'{url}' has no host; give an absolute http(s) URL")
    return parsed


async def ensure_public_host(url: httpx.URL) -> None:
    """Refuse (``unsafe_url``) a URL whose host is, or resolves to, a non-public address.

    Loopback, private, link-local (cloud metadata), shared, reserved and multicast addresses are all
    refused. A host that does not resolve raises ``fetch_unreachable``.
    """
    host = url.host
    literal = _ip_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise WebToolError(FETCH_UNREACHABLE, f"host '{host}' could not be resolved; check the URL") from None
        addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    blocked = [address for address in addresses if not _is_public(address)]
    if blocked:
        raise WebToolError(
            UNSAFE_URL,
            f"host '{host}' is a private or local address ({blocked[0]}); only public internet addresses are fetched",
        )


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast
