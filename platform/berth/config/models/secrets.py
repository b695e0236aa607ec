"""``secrets.yaml`` and ``bundles.secrets.yaml``: where each secret's value comes from."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, RootModel

from berth.config.models.common import BundleId, DescriptorModel, ScopeKey, SecretName

SecretSource = Annotated[
    str,
    Field(
        min_length=1,
        description="a literal, 'env:NAME', 'file:PATH', 'literal:VALUE' or '<provider>:<ref>' (e.g. aws-sm:)",
    ),
]


class SecretsDescriptor(RootModel[dict[SecretName, SecretSource]]):
    """``secrets.yaml``: a flat mapping of platform secret names to their sources."""

    model_config = {"frozen": True}

    def __repr__(self) -> str:
        return f"SecretsDescriptor(names={sorted(self.root)!r})"

    __str__ = __repr__


BundleSecretMap = dict[SecretName, SecretSource]


class BundlesSecretsDescriptor(DescriptorModel):
    """``bundles.secrets.yaml``: each bundle's own secrets, with tenant/project overrides."""

    bundles: dict[BundleId, BundleSecretMap] = Field(default_factory=dict)
    tenants: dict[ScopeKey, dict[BundleId, BundleSecretMap]] = Field(default_factory=dict)

    def __repr__(self) -> str:
        names = {bundle: sorted(values) for bundle, values in self.bundles.items()}
        return f"BundlesSecretsDescriptor(bundles={names!r}, tenants={sorted(self.tenants)!r})"

    __str__ = __repr__
