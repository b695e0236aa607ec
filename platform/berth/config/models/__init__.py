"""Pydantic models of the five descriptors (SPEC §2)."""

from berth.config.models.assembly import AssemblyDescriptor, PlatformConfig
from berth.config.models.bundles import BundleEntry, BundlesDescriptor, BundleSource, ScopeBundles
from berth.config.models.common import DescriptorModel, SecretSetting
from berth.config.models.gateway import GatewayDescriptor
from berth.config.models.secrets import BundlesSecretsDescriptor, SecretsDescriptor

__all__ = [
    "AssemblyDescriptor",
    "BundleEntry",
    "BundleSource",
    "BundlesDescriptor",
    "BundlesSecretsDescriptor",
    "DescriptorModel",
    "GatewayDescriptor",
    "PlatformConfig",
    "ScopeBundles",
    "SecretSetting",
    "SecretsDescriptor",
]
