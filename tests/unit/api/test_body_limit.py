"""Which tenant's body limit a request path falls under."""

from __future__ import annotations

import pytest

from berth.api.body_limit import BodyLimits, tenant_of_path
from berth.config.models.gateway import GatewayDescriptor


@pytest.mark.parametrize(
    ("path", "tenant"),
    [
        ("/v1/acme/support/conversations", "acme"),
        ("/v1/acme/support/conversations/c_1/turns", "acme"),
        ("/mcp/globex/research/hello", "globex"),
        ("/v1/admin/bundles/hello/reload", None),
        ("/v1/me", None),
        ("/v1//x", None),
        ("/healthz", None),
        ("/", None),
        ("/v1/acme/support/bundles/hello/widgets/greeter/t/index.html", "acme"),
    ],
)
def test_the_tenant_of_a_path(path: str, tenant: str | None) -> None:
    assert tenant_of_path(path) == tenant


def test_a_tenant_override_applies_to_its_paths_and_the_default_elsewhere() -> None:
    gateway = GatewayDescriptor.model_validate(
        {"limits": {"default": {"max_body_bytes": 1000}, "tenants": {"acme": {"max_body_bytes": 5000}}}}
    )
    limits = BodyLimits(lambda: gateway)
    assert limits.limit_for("/v1/acme/support/conversations") == 5000
    assert limits.limit_for("/v1/globex/research/conversations") == 1000
    assert limits.limit_for("/v1/admin/bundles/x/reload") == 1000
    assert BodyLimits(lambda: None).limit_for("/v1/acme/x") is None
