"""The supervisor's launch payload, and the descriptors it is given, filtered per ``descriptor_payload_scope``.

A supervisor that runs away from the host (a Docker container, a Fargate task) gets everything it needs as a set of
variables, per the isolated-execution contract (the split supervisor process reads them from its environment; the
combined entry reads them from its stdin, :func:`supervisor_input`, so they are in no container's environment):

* ``BERTH_EXEC_PAYLOAD``: the run as JSON (:class:`LaunchPayload`: exec id, token, tenant, project, bundle,
  executor uid, socket path, per-call timeout);
* ``BERTH_DESCRIPTOR_ASSEMBLY_B64``, ``…_BUNDLES_B64``, ``…_SECRETS_B64``, ``…_BUNDLES_SECRETS_B64``,
  ``…_GATEWAY_B64``: the descriptor files as base64 YAML.

With ``active_bundle`` (the default) the descriptors hold only what the active bundle may see: ``assembly.yaml``'s
platform section and the active tenant with only the active project; ``bundles.yaml``'s entry of the active bundle
and the active scope's visibility and props of it alone; ``bundles.secrets.yaml``'s secrets of the active bundle
(bundle-wide and the active scope's) and no other bundle's; no ``gateway.yaml`` (the supervisor admits nothing;
its keys are other tenants' business); ``secrets.yaml``'s platform secrets that the active bundle declares
(``secrets:`` of its ``bundles.yaml`` entry) and no other: one that the shipped descriptors still refer to
(``secret:anthropic_api_key`` in the models section) goes as ``withheld:``, a name without its source, which the
supervisor cannot read. With ``full``, every file goes unchanged. :func:`materialize` writes them back into a folder of
mode 0700 that :meth:`berth.config.Configuration.load` reads like any descriptor set.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from berth.config.models.common import is_secret_ref, secret_ref_name
from berth.execution.sandbox import SANDBOX_SOCKET_DIR, SOCKET_NAME, SandboxRequest

if TYPE_CHECKING:
    from berth.config import Configuration

PAYLOAD_VARIABLE = "BERTH_EXEC_PAYLOAD"
DESCRIPTOR_VARIABLES = {
    "assembly.yaml": "BERTH_DESCRIPTOR_ASSEMBLY_B64",
    "bundles.yaml": "BERTH_DESCRIPTOR_BUNDLES_B64",
    "secrets.yaml": "BERTH_DESCRIPTOR_SECRETS_B64",
    "bundles.secrets.yaml": "BERTH_DESCRIPTOR_BUNDLES_SECRETS_B64",
    "gateway.yaml": "BERTH_DESCRIPTOR_GATEWAY_B64",
}
PayloadScope = Literal["active_bundle", "full"]
WITHHELD_SOURCE = "withheld:"
"""What a platform secret the active bundle did not declare becomes in the shipped ``secrets.yaml``."""


@dataclass(frozen=True, slots=True)
class LaunchPayload:
    """One run, as the supervisor needs it."""

    exec_id: str
    token: str
    tenant: str
    project: str
    bundle_id: str
    executor_uid: int | None
    socket_path: str
    call_timeout_s: float = 60.0
    executor_python: str = "/usr/bin/python3"
    """The combined entry's executor interpreter (in the image, readable by the executor's uid)."""
    hidden_paths: tuple[str, ...] = ()
    """Folders the combined entry covers with an empty read-only tmpfs in the executor's mount namespace (the
    supervisor's own Python and anything else mounted for it)."""
    executor_namespaces: bool = True
    """Whether the combined entry gives the executor its own network and mount namespaces (needs
    ``CAP_SYS_ADMIN``); without, the executor is only another uid and the task's network is its boundary."""

    def to_json(self) -> str:
        """The payload as ``BERTH_EXEC_PAYLOAD`` carries it."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> LaunchPayload:
        """Read ``BERTH_EXEC_PAYLOAD``."""
        fields = json.loads(text)
        fields["hidden_paths"] = tuple(fields.get("hidden_paths", ()))
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class SupervisorScope:
    """What a backend that runs the supervisor itself (combined container, task) is given for one run: the scope
    the bundle's tools run in, and the host's descriptors, filtered per ``scope`` before they leave the host."""

    tenant: str
    project: str
    documents: Mapping[str, Any]
    scope: PayloadScope = "active_bundle"
    base_dir: Path | None = None


def launch_environment(request: SandboxRequest, options: Mapping[str, Any]) -> dict[str, str]:
    """What a backend that runs the supervisor itself starts it with: the request's payload and descriptors, or,
    when the program gets no tools, a payload that still says who the executor is (``options``:
    :func:`~berth.execution.sandbox.executor_options`)."""
    if request.supervisor_environment:
        return dict(request.supervisor_environment)
    payload = LaunchPayload(
        request.exec_id, request.token, "-", "-", request.bundle_id, request.uid,
        f"{SANDBOX_SOCKET_DIR}/{SOCKET_NAME}", **options,
    )  # fmt: skip
    return {PAYLOAD_VARIABLE: payload.to_json()}


def filter_descriptors(
    documents: Mapping[str, Any],
    *,
    tenant: str,
    project: str,
    bundle_id: str,
    scope: PayloadScope,
    base_dir: Path | None = None,
) -> dict[str, Any]:
    """The descriptor documents (parsed YAML by file name) the supervisor of one run is given.

    ``base_dir`` makes relative bundle folders absolute, since the materialized files live elsewhere.
    """
    if scope == "full":
        chosen = {name: documents.get(name) or {} for name in DESCRIPTOR_VARIABLES}
    else:
        assembly = _active_assembly(documents.get("assembly.yaml") or {}, tenant, project)
        bundles = _active_bundles(documents.get("bundles.yaml") or {}, tenant, project, bundle_id)
        chosen = {
            "assembly.yaml": assembly,
            "bundles.yaml": bundles,
            "secrets.yaml": _declared_platform_secrets(
                documents.get("secrets.yaml") or {}, bundles, bundle_id, _secret_refs(assembly, bundles)
            ),
            "bundles.secrets.yaml": _active_bundle_secrets(
                documents.get("bundles.secrets.yaml") or {}, tenant, project, bundle_id
            ),
            "gateway.yaml": {},
        }
    if base_dir is not None:
        chosen["bundles.yaml"] = _absolute_sources(chosen["bundles.yaml"], base_dir)
    return chosen


def payload_environment(payload: LaunchPayload, documents: Mapping[str, Any]) -> dict[str, str]:
    """``BERTH_EXEC_PAYLOAD`` and the ``BERTH_DESCRIPTOR_*_B64`` variables for filtered ``documents``."""
    environment = {PAYLOAD_VARIABLE: payload.to_json()}
    for name, variable in DESCRIPTOR_VARIABLES.items():
        text = yaml.safe_dump(documents.get(name) or {}, sort_keys=False)
        environment[variable] = base64.b64encode(text.encode("utf-8")).decode("ascii")
    return environment


def supervisor_input(environment: Mapping[str, str], launch: bytes) -> bytes:
    """What the combined entry reads on its stdin: the launch variables (payload, descriptors) as one JSON line,
    then the executor's launch lines. Nothing of it is in the container's or task's environment."""
    return json.dumps(dict(environment)).encode("utf-8") + b"\n" + launch


def read_supervisor_input(data: bytes) -> tuple[dict[str, str], bytes]:
    """Split :func:`supervisor_input` back into the launch variables and the launch lines; ``ValueError`` when the
    first line is not a JSON object of strings."""
    first, _, launch = data.partition(b"\n")
    environment = json.loads(first.decode("utf-8"))
    if not isinstance(environment, dict) or not all(isinstance(v, str) for v in environment.values()):
        raise ValueError("the first line of the input is not a JSON object of strings")
    return environment, launch


def materialize(environment: Mapping[str, str], folder: Path) -> Path:
    """Write the descriptors of ``environment`` into ``folder`` (created with mode 0700); return it."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    for name, variable in DESCRIPTOR_VARIABLES.items():
        encoded = environment.get(variable)
        if encoded is None:
            continue
        text = base64.b64decode(encoded.encode("ascii"), validate=True).decode("utf-8")
        target = folder / name
        target.write_text(text, encoding="utf-8")
        os.chmod(target, 0o600)
    return folder


def _active_assembly(document: Mapping[str, Any], tenant: str, project: str) -> dict[str, Any]:
    result = {key: value for key, value in document.items() if key != "tenants"}
    tenant_entry = dict((document.get("tenants") or {}).get(tenant) or {})
    projects = tenant_entry.get("projects") or {}
    tenant_entry["projects"] = {project: projects[project]} if project in projects else {}
    result["tenants"] = {tenant: tenant_entry}
    return result


def _active_bundles(document: Mapping[str, Any], tenant: str, project: str, bundle_id: str) -> dict[str, Any]:
    bundles = document.get("bundles") or {}
    result: dict[str, Any] = {"bundles": {bundle_id: bundles[bundle_id]} if bundle_id in bundles else {}}
    if "tenants" in document:
        scoped: dict[str, Any] = {}
        for key in (tenant, f"{tenant}/{project}"):
            entry = (document.get("tenants") or {}).get(key)
            if entry is None:
                continue
            kept: dict[str, Any] = {}
            if "bundles" in entry:
                kept["bundles"] = [name for name in entry["bundles"] if name == bundle_id]
            if entry.get("default_bundle") == bundle_id:
                kept["default_bundle"] = bundle_id
            props = entry.get("props") or {}
            if bundle_id in props:
                kept["props"] = {bundle_id: props[bundle_id]}
            scoped[key] = kept
        result["tenants"] = scoped
    return result


def _active_bundle_secrets(document: Mapping[str, Any], tenant: str, project: str, bundle_id: str) -> dict[str, Any]:
    bundles = document.get("bundles") or {}
    result: dict[str, Any] = {"bundles": {bundle_id: bundles[bundle_id]} if bundle_id in bundles else {}}
    tenants = document.get("tenants") or {}
    scoped = {
        key: {bundle_id: tenants[key][bundle_id]}
        for key in (tenant, f"{tenant}/{project}")
        if key in tenants and bundle_id in (tenants[key] or {})
    }
    if scoped:
        result["tenants"] = scoped
    return result


def _secret_refs(*documents: Any) -> set[str]:
    """The names every ``secret:NAME`` string in ``documents`` refers to."""
    names: set[str] = set()
    pending = list(documents)
    while pending:
        node = pending.pop()
        if isinstance(node, Mapping):
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
        elif is_secret_ref(node):
            names.add(secret_ref_name(node))
    return names


def _declared_platform_secrets(
    document: Mapping[str, Any], bundles: Mapping[str, Any], bundle_id: str, referenced: set[str]
) -> dict[str, Any]:
    entry = (bundles.get("bundles") or {}).get(bundle_id) or {}
    declared = set(entry.get("secrets") or [])
    return {
        name: source if name in declared else WITHHELD_SOURCE
        for name, source in document.items()
        if name in declared or name in referenced
    }


def _absolute_sources(document: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
    result = dict(document)
    bundles = {}
    for name, entry in (document.get("bundles") or {}).items():
        entry = dict(entry or {})
        source = dict(entry.get("source") or {})
        if "path" in source and not Path(source["path"]).is_absolute():
            source["path"] = str((base_dir / source["path"]).resolve())
        entry["source"] = source
        bundles[name] = entry
    result["bundles"] = bundles
    return result


def supervisor_scope_of(config: Configuration, tenant: str, project: str) -> SupervisorScope:
    """The scope and descriptors a backend that runs the supervisor itself is given (filtered before they leave)."""
    documents = {name: document.data for name, document in config.descriptors.documents.items()}
    scope = config.settings_for(tenant, project).exec.descriptor_payload_scope
    return SupervisorScope(tenant, project, documents, scope=scope, base_dir=config.descriptors.base_dir.resolve())
