"""The effective configuration as plain data for ``berth descriptors show`` — secrets masked."""

from __future__ import annotations

from typing import Any

from berth.config import Configuration
from berth.config.props import merged_props
from berth.config.secrets import SecretSource, parse_secret_source

MASK = "***"


def _source_display(source: str, providers: list[str]) -> str:
    try:
        return parse_secret_source(source, providers).display
    except Exception:
        return SecretSource(None, source).display


def effective_view(config: Configuration, tenant: str | None = None, project: str | None = None) -> dict[str, Any]:
    """Everything an operator needs to see, as JSON-ready data; no secret value can appear in it.

    Without a scope: the platform-level settings and every descriptor as declared. With
    ``tenant`` (and ``project``): that scope's effective settings, visible bundles with their merged
    prop overrides, the secrets it can name, and its admission limits.
    """
    descriptors = config.descriptors
    providers = config.secret_resolver.provider_names
    secrets = {name: _source_display(src, providers) for name, src in sorted(descriptors.secrets.root.items())}
    bundle_secrets = {
        bundle_id: {name: _source_display(src, providers) for name, src in sorted(values.items())}
        for bundle_id, values in sorted(descriptors.bundles_secrets.bundles.items())
    }
    view: dict[str, Any] = {
        "descriptors": str(descriptors.root) if descriptors.root is not None else "(embedded defaults)",
        "files": list(descriptors.present),
    }
    if tenant is None:
        view["platform"] = config.settings_for().model_dump(mode="json")
        view["tenants"] = {
            name: {
                "title": t.title,
                "projects": {p: {"title": cfg.title} for p, cfg in sorted(t.projects.items())},
            }
            for name, t in sorted(descriptors.assembly.tenants.items())
        }
        view["bundles"] = descriptors.bundles.model_dump(mode="json")
        view["secrets"] = secrets
        view["bundles_secrets"] = bundle_secrets
        view["gateway"] = descriptors.gateway.model_dump(mode="json")
        return view
    settings = config.settings_for(tenant, project)
    scope_bundles = descriptors.scope_bundles(tenant, project)
    view["scope"] = f"{tenant}/{project}" if project else tenant
    view["settings"] = settings.model_dump(mode="json")
    view["bundles"] = {
        "visible": list(scope_bundles.bundles),
        "default": scope_bundles.default_bundle,
        "props": {
            bundle_id: merged_props(descriptors, bundle_id, tenant, project) for bundle_id in scope_bundles.bundles
        },
    }
    view["secrets"] = secrets
    view["limits"] = descriptors.gateway.limits.for_tenant(tenant).model_dump(mode="json")
    return view
