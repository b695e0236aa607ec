"""``bundles.yaml``: which bundles exist, where their code comes from, and who sees them with which props."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from berth.config.models.common import BundleId, DescriptorModel, ScopeKey, SecretName


class BundleSource(DescriptorModel):
    """Where a bundle's code comes from: an installed entry point, or a folder during development."""

    entry_point: str | None = Field(None, description="name in the 'berth.bundles' entry-point group")
    path: str | None = Field(None, description="a folder, relative to the descriptors folder")
    module: str | None = Field(None, description="package inside the folder; default: the folder itself")

    @model_validator(mode="after")
    def _exactly_one_origin(self) -> BundleSource:
        if (self.entry_point is None) == (self.path is None):
            raise ValueError("give exactly one of 'entry_point' or 'path'")
        if self.module is not None and self.path is None:
            raise ValueError("'module' only applies to a 'path' source")
        return self


class BundleExec(DescriptorModel):
    """Which exec profiles a bundle's ``exec.python`` uses: the operator's choice, over the bundle author's."""

    profile: str | None = Field(None, description="the profile its runs use (a name in platform.exec.profiles)")
    profiles: list[str] = Field(default_factory=list, description="other profiles the model may choose")


class BundleEntry(DescriptorModel):
    """One bundle: its source, whether to watch it for changes, its platform-wide props and exec profiles."""

    source: BundleSource
    watch: bool = Field(False, description="reload on file changes (folder bundles, development)")
    props: dict[str, Any] = Field(default_factory=dict, description="overrides of the bundle's props model")
    exec: BundleExec | None = Field(None, description="exec profiles for the bundle's exec.python runs")
    secrets: list[SecretName] = Field(
        default_factory=list,
        description="platform secrets (names in secrets.yaml) the bundle's tools read where they run away from the "
        "host (a combined container, a Fargate task): under descriptor_payload_scope active_bundle no other leaves",
    )


class ScopeBundles(DescriptorModel):
    """The bundles a tenant (``acme``) or project (``acme/support``) may use, and its prop overrides."""

    bundles: list[BundleId] = Field(default_factory=list)
    default_bundle: BundleId | None = None
    props: dict[BundleId, dict[str, Any]] = Field(default_factory=dict)


class BundlesDescriptor(DescriptorModel):
    """``bundles.yaml``.

    A scope without an entry under ``tenants`` sees every bundle when the file has no ``tenants``
    section at all (development), and none otherwise. A project entry (``acme/support``) replaces
    its tenant's (``acme``) bundle list and default; props merge tenant first, then project.
    """

    bundles: dict[BundleId, BundleEntry] = Field(default_factory=dict)
    tenants: dict[ScopeKey, ScopeBundles] = Field(default_factory=dict)
