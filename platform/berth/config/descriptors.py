"""A descriptor set: the five validated descriptor files of one folder (or the embedded defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from berth.config.models import (
    AssemblyDescriptor,
    BundlesDescriptor,
    BundlesSecretsDescriptor,
    GatewayDescriptor,
    ScopeBundles,
    SecretsDescriptor,
)
from berth.config.yamlsource import YamlDocument

ASSEMBLY = "assembly.yaml"
BUNDLES = "bundles.yaml"
SECRETS = "secrets.yaml"
BUNDLES_SECRETS = "bundles.secrets.yaml"
GATEWAY = "gateway.yaml"

DESCRIPTOR_MODELS: dict[str, type[BaseModel]] = {
    ASSEMBLY: AssemblyDescriptor,
    BUNDLES: BundlesDescriptor,
    SECRETS: SecretsDescriptor,
    BUNDLES_SECRETS: BundlesSecretsDescriptor,
    GATEWAY: GatewayDescriptor,
}


@dataclass(frozen=True)
class DescriptorSet:
    """The validated descriptors of one folder (or the embedded defaults when ``root`` is None).

    ``documents`` keeps each file's parsed YAML and line map, so later checks (props of a bundle,
    effective settings of a scope) can report the line of a value.
    """

    root: Path | None
    assembly: AssemblyDescriptor
    bundles: BundlesDescriptor
    secrets: SecretsDescriptor
    bundles_secrets: BundlesSecretsDescriptor
    gateway: GatewayDescriptor
    documents: dict[str, YamlDocument] = field(repr=False)
    present: tuple[str, ...] = ()

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in descriptors (bundle folders, ``file:`` secrets) start from."""
        return self.root if self.root is not None else Path.cwd()

    def document(self, name: str) -> YamlDocument:
        """The parsed file ``name`` (an empty document when the file is absent)."""
        return self.documents[name]

    def scope_bundles(self, tenant: str, project: str | None) -> ScopeBundles:
        """Effective bundle visibility of a scope: its project entry over its tenant entry.

        Fields a project entry does not set are inherited from the tenant entry; props merge in
        :func:`berth.config.props.effective_props`. With no ``tenants`` section at all every bundle
        is visible everywhere (development default).
        """
        if not self.bundles.tenants:
            return ScopeBundles(bundles=sorted(self.bundles.bundles))
        tenant_entry = self.bundles.tenants.get(tenant)
        project_entry = self.bundles.tenants.get(f"{tenant}/{project}") if project else None
        merged: dict[str, Any] = {}
        for entry in (tenant_entry, project_entry):
            if entry is not None:
                merged.update({name: getattr(entry, name) for name in entry.model_fields_set})
        return ScopeBundles(**{k: v for k, v in merged.items() if k != "props"})

    def visible_bundles(self, tenant: str, project: str | None) -> list[str]:
        """Ids of the bundles a tenant/project may use."""
        return list(self.scope_bundles(tenant, project).bundles)
