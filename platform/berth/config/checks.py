"""Checks across descriptor files: every name one file uses must be declared by another."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from berth.config.descriptors import (
    ASSEMBLY,
    BUNDLES,
    BUNDLES_SECRETS,
    GATEWAY,
    SECRETS,
    DescriptorSet,
)
from berth.config.errors import ConfigError, DescriptorError, DescriptorProblem
from berth.config.models.assembly import DistributedStorage
from berth.config.models.common import is_secret_ref, secret_ref_name
from berth.config.secrets import parse_secret_source
from berth.config.settings import resolve_platform_settings
from berth.config.storage_checks import distributed_storage_problems
from berth.config.yamlsource import format_field_path


def cross_file_problems(descriptors: DescriptorSet, secret_providers: Iterable[str]) -> list[DescriptorProblem]:
    """Every cross-file problem of ``descriptors`` (an empty list when the set is consistent)."""
    providers = list(secret_providers)
    return [
        *_bundle_scope_problems(descriptors),
        *_bundle_secret_problems(descriptors),
        *_gateway_problems(descriptors),
        *_budget_problems(descriptors),
        *_secret_ref_problems(descriptors),
        *_bundle_platform_secret_problems(descriptors),
        *_secret_source_problems(descriptors, providers),
        *_effective_settings_problems(descriptors),
        *_bundle_exec_problems(descriptors),
        *_storage_problems(descriptors),
    ]


def _storage_problems(descriptors: DescriptorSet) -> Iterator[DescriptorProblem]:
    """The form of a distributed assembly's DSN, Redis URL and bucket (``berth run --check-services`` connects)."""
    storage = descriptors.assembly.platform.storage
    if isinstance(storage, DistributedStorage):
        for path, message in distributed_storage_problems(storage):
            yield _problem(descriptors, ASSEMBLY, ("platform", "storage", *path), message)


def _problem(descriptors: DescriptorSet, file: str, path: tuple[Any, ...], message: str) -> DescriptorProblem:
    document = descriptors.document(file)
    line, _ = document.lines.locate(path)
    return DescriptorProblem(document.file, line, format_field_path(path), message)


def _scope_problem(descriptors: DescriptorSet, scope_key: str) -> str | None:
    """Why ``scope_key`` (``tenant`` or ``tenant/project``) is not declared, or None."""
    tenant, _, project = scope_key.partition("/")
    if not descriptors.assembly.has_scope(tenant):
        known = ", ".join(sorted(descriptors.assembly.tenants)) or "none"
        return f"tenant '{tenant}' is not declared in assembly.yaml (known: {known})"
    if project and not descriptors.assembly.has_scope(tenant, project):
        known = ", ".join(sorted(descriptors.assembly.tenants[tenant].projects)) or "none"
        return f"project '{project}' is not declared for tenant '{tenant}' in assembly.yaml (known: {known})"
    return None


def _known(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def _bundle_scope_problems(descriptors: DescriptorSet) -> Iterator[DescriptorProblem]:
    declared = descriptors.bundles.bundles
    for scope_key, entry in descriptors.bundles.tenants.items():
        base = ("tenants", scope_key)
        reason = _scope_problem(descriptors, scope_key)
        if reason:
            yield _problem(descriptors, BUNDLES, base, reason)
        unknown_in_list = False
        for index, bundle_id in enumerate(entry.bundles):
            if bundle_id not in declared:
                unknown_in_list = True
                yield _problem(
                    descriptors,
                    BUNDLES,
                    (*base, "bundles", index),
                    f"unknown bundle '{bundle_id}' (known: {_known(declared)})",
                )
        tenant, _, project = scope_key.partition("/")
        visible = descriptors.scope_bundles(tenant, project or None).bundles
        default = entry.default_bundle
        if default is not None and default not in visible:
            if default not in declared:
                yield _problem(
                    descriptors,
                    BUNDLES,
                    (*base, "default_bundle"),
                    f"unknown bundle '{default}' (known: {_known(declared)})",
                )
            elif not unknown_in_list:  # with a typo in the list, the typo is the one problem to report
                yield _problem(
                    descriptors,
                    BUNDLES,
                    (*base, "default_bundle"),
                    f"'{default}' is not one of this scope's bundles ({_known(visible)})",
                )
        for bundle_id in entry.props:
            if bundle_id not in visible:
                yield _problem(
                    descriptors,
                    BUNDLES,
                    (*base, "props", bundle_id),
                    f"props for bundle '{bundle_id}', which this scope does not use (its bundles: {_known(visible)})",
                )


def _bundle_exec_problems(descriptors: DescriptorSet) -> Iterator[DescriptorProblem]:
    """A bundle's exec profiles must be defined somewhere: on the platform, or by a tenant or project."""
    assembly = descriptors.assembly
    defined = set(assembly.platform.exec.profiles)
    for tenant in assembly.tenants.values():
        overrides = [tenant.exec, *(project.exec for project in tenant.projects.values())]
        for override in overrides:
            defined.update(getattr(override, "profiles", None) or {})
    for bundle_id, entry in descriptors.bundles.bundles.items():
        if entry.exec is None:
            continue
        base: tuple[Any, ...] = ("bundles", bundle_id, "exec")
        named = [((*base, "profile"), entry.exec.profile)] if entry.exec.profile else []
        named += [((*base, "profiles", index), name) for index, name in enumerate(entry.exec.profiles)]
        for path, name in named:
            if name not in defined:
                yield _problem(
                    descriptors, BUNDLES, path, f"exec profile '{name}' is not defined (known: {_known(defined)})"
                )


def _bundle_secret_problems(descriptors: DescriptorSet) -> Iterator[DescriptorProblem]:
    declared = descriptors.bundles.bundles
    for bundle_id in descriptors.bundles_secrets.bundles:
        if bundle_id not in declared:
            yield _problem(
                descriptors,
                BUNDLES_SECRETS,
                ("bundles", bundle_id),
                f"unknown bundle '{bundle_id}' (known: {_known(declared)})",
            )
    for scope_key, per_bundle in descriptors.bundles_secrets.tenants.items():
        reason = _scope_problem(descriptors, scope_key)
        if reason:
            yield _problem(descriptors, BUNDLES_SECRETS, ("tenants", scope_key), reason)
        for bundle_id in per_bundle:
            if bundle_id not in declared:
                yield _problem(
                    descriptors,
                    BUNDLES_SECRETS,
                    ("tenants", scope_key, bundle_id),
                    f"unknown bundle '{bundle_id}' (known: {_known(declared)})",
                )


def _gateway_problems(descriptors: DescriptorSet) -> Iterator[DescriptorProblem]:
    gateway = descriptors.gateway
    for index, key in enumerate(gateway.auth.keys):
        base = ("auth", "keys", index)
        if key.tenant == "*":
            continue
        reason = _scope_problem(descriptors, key.tenant)
        if reason:
            yield _problem(descriptors, GATEWAY, (*base, "tenant"), reason)
            continue
        for p_index, project in enumerate(key.projects or []):
            reason = _scope_problem(descriptors, f"{key.tenant}/{project}")
            if reason:
                yield _problem(descriptors, GATEWAY, (*base, "projects", p_index), reason)
    for tenant in gateway.limits.tenants:
        reason = _scope_problem(descriptors, tenant)
        if reason:
            yield _problem(descriptors, GATEWAY, ("limits", "tenants", tenant), reason)


def _budget_problems(descriptors: DescriptorSet) -> Iterator[DescriptorProblem]:
    """A budget's scope must be declared; a cost budget needs a price for every model its scope may call."""
    assembly = descriptors.document(ASSEMBLY)
    seen: dict[tuple[str, bool, str], int] = {}
    for index, budget in enumerate(descriptors.gateway.budgets):
        base = ("budgets", index)
        same = (budget.scope, budget.per_user, budget.period)
        if same in seen:
            yield _problem(
                descriptors,
                GATEWAY,
                base,
                f"repeats budgets[{seen[same]}] (scope '{budget.scope}', per_user {str(budget.per_user).lower()}, "
                f"period '{budget.period}'); give both limits in one entry",
            )
        seen.setdefault(same, index)
        reason = _scope_problem(descriptors, budget.scope)
        if reason:
            yield _problem(descriptors, GATEWAY, (*base, "scope"), reason)
            continue
        if budget.cost_usd is None:
            continue
        tenant, project = budget.tenant, budget.project
        projects: list[str | None] = [project] if project else [*sorted(descriptors.assembly.tenants[tenant].projects)]
        projects = projects or [None]
        unpriced: dict[str, str] = {}  # model label -> a scope that uses it
        for each in projects:
            try:
                models = resolve_platform_settings(assembly, tenant, each).models
            except DescriptorError:
                continue  # reported by the effective settings check
            for ref in (models.default, *models.roles.values()):
                if models.price_of(ref.label) is None:
                    unpriced.setdefault(ref.label, f"{tenant}/{each}" if each else tenant)
        if unpriced:
            listed = ", ".join(f"'{label}' ({where})" for label, where in sorted(unpriced.items()))
            yield _problem(
                descriptors,
                GATEWAY,
                (*base, "cost_usd"),
                f"a cost budget needs a price for every model its scope may call; platform.models.prices of "
                f"assembly.yaml has none for {listed}",
            )


def _strings(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, (*path, index))
    elif isinstance(node, str):
        yield path, node


def _secret_ref_problems(descriptors: DescriptorSet) -> Iterator[DescriptorProblem]:
    declared = descriptors.secrets.root
    for file in (ASSEMBLY, BUNDLES, GATEWAY):
        for path, value in _strings(descriptors.document(file).data):
            if is_secret_ref(value) and secret_ref_name(value) not in declared:
                yield _problem(
                    descriptors,
                    file,
                    path,
                    f"secret '{secret_ref_name(value)}' is not declared in secrets.yaml (known: {_known(declared)})",
                )


def _bundle_platform_secret_problems(descriptors: DescriptorSet) -> Iterator[DescriptorProblem]:
    declared = descriptors.secrets.root
    for bundle_id, entry in descriptors.bundles.bundles.items():
        for index, name in enumerate(entry.secrets):
            if name not in declared:
                yield _problem(
                    descriptors,
                    BUNDLES,
                    ("bundles", bundle_id, "secrets", index),
                    f"secret '{name}' is not declared in secrets.yaml (known: {_known(declared)})",
                )


def _secret_source_problems(descriptors: DescriptorSet, providers: list[str]) -> Iterator[DescriptorProblem]:
    sources: list[tuple[str, tuple[Any, ...], str]] = [
        (SECRETS, (name,), source) for name, source in descriptors.secrets.root.items()
    ]
    sources += [
        (BUNDLES_SECRETS, ("bundles", bundle_id, name), source)
        for bundle_id, secrets in descriptors.bundles_secrets.bundles.items()
        for name, source in secrets.items()
    ]
    sources += [
        (BUNDLES_SECRETS, ("tenants", scope, bundle_id, name), source)
        for scope, per_bundle in descriptors.bundles_secrets.tenants.items()
        for bundle_id, secrets in per_bundle.items()
        for name, source in secrets.items()
    ]
    for file, path, source in sources:
        try:
            parse_secret_source(source, providers)
        except ConfigError as exc:
            yield _problem(descriptors, file, path, str(exc))


def _effective_settings_problems(descriptors: DescriptorSet) -> Iterator[DescriptorProblem]:
    assembly = descriptors.document(ASSEMBLY)
    scopes: list[tuple[str | None, str | None]] = [(None, None)]
    scopes += [(tenant, None) for tenant in sorted(descriptors.assembly.tenants)]
    scopes += descriptors.assembly.scopes()
    for tenant, project in scopes:
        try:
            resolve_platform_settings(assembly, tenant, project)
        except DescriptorError as exc:
            yield from exc.problems
