"""The Helm chart (``deploy/helm/berth``): rendered by Helm's own engine, every manifest valid for Kubernetes 1.31.

Helm runs in process (``helm-python-sdk``, Helm's Go SDK through ctypes: no ``helm`` binary, no cluster) and the
manifests are checked offline against the Kubernetes JSON schemas ``kubernetes-validate`` ships. Custom resources
(KEDA's ``ScaledObject``) have no schema there: their fields are asserted instead.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from helm_python.chart import Chart, lint
from helm_python.errors import HelmError, HelmRenderError, HelmValuesError

from berth.cli import cli

CHART_DIR = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "berth"
KUBERNETES_VERSION = "1.31"
RELEASE = "demo"
NAMESPACE = "berth"
CUSTOM_RESOURCE_GROUPS = ("keda.sh/",)
"""API groups of custom resources: no schema in kubernetes-validate, their fields are asserted instead."""
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")
BERTH_COMPONENTS = ("api", "worker", "migrate")
"""The pods that run the Berth image (the others are the bundled PostgreSQL and Redis)."""

Manifest = dict[str, Any]

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "bundled-postgresql-and-redis": {"postgresql": {"bundled": True}, "redis": {"bundled": True}},
    "hpa-on-cpu-and-queue-depth": {"worker": {"autoscaling": {"enabled": True, "queueDepth": {"enabled": True}}}},
    "keda": {
        "redis": {"bundled": True, "persistence": {"enabled": True}},
        "worker": {"autoscaling": {"keda": {"enabled": True}}},
    },
    "ingress-pdb-and-api-policy": {
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "tls": [{"secretName": "berth-tls", "hosts": ["berth.example.com"]}],
        },
        "api": {"podDisruptionBudget": {"enabled": True}},
        "networkPolicy": {
            "api": {"enabled": True, "from": [{"namespaceSelector": {"matchLabels": {"ingress": "yes"}}}]}
        },
    },
    "existing-secret-and-configmap": {
        "secrets": {"existingSecret": "berth-prod-secrets"},
        "descriptors": {"existingConfigMap": "berth-prod-descriptors"},
        "serviceAccount": {"create": False, "name": "berth-prod"},
    },
}


@pytest.fixture(scope="module")
def chart() -> Iterator[Chart]:
    """The chart, loaded once: the first load maps Helm's ~85 MB shared library."""
    with Chart.load(CHART_DIR) as loaded:
        yield loaded


def render(chart: Chart, values: dict[str, Any] | None = None) -> list[Manifest]:
    """Every object an install of the chart with ``values`` would create (hooks included, NOTES.txt left out)."""
    rendered = chart.render(values=values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    manifests: list[Manifest] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        manifests.extend(document for document in yaml.safe_load_all(text) if document)
    return manifests


def component(manifest: Manifest) -> str | None:
    labels: dict[str, str] = manifest["metadata"].get("labels", {})
    return labels.get("app.kubernetes.io/component")


def the_one(manifests: list[Manifest], kind: str, of_component: str) -> Manifest:
    """The single object of ``kind`` labelled with ``of_component``."""
    found = [m for m in manifests if m["kind"] == kind and component(m) == of_component]
    assert len(found) == 1, f"expected one {kind} of component {of_component}, found {len(found)}"
    return found[0]


def workloads(manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if m["kind"] in WORKLOAD_KINDS]


def pod_spec(workload: Manifest) -> Manifest:
    spec: Manifest = workload["spec"]["template"]["spec"]
    return spec


def container(workload: Manifest) -> Manifest:
    containers: list[Manifest] = pod_spec(workload)["containers"]
    assert len(containers) == 1
    return containers[0]


def mount(workload: Manifest, path: str) -> tuple[Manifest, Manifest]:
    """The volume mount at ``path`` in the workload's container, and the volume it mounts."""
    mounts = [m for m in container(workload)["volumeMounts"] if m["mountPath"] == path]
    assert len(mounts) == 1, f"{workload['metadata']['name']}: no single mount at {path}"
    volumes = {volume["name"]: volume for volume in pod_spec(workload)["volumes"]}
    return mounts[0], volumes[mounts[0]["name"]]


def secret_data(secret: Manifest) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}


def with_values(**overrides: Any) -> dict[str, Any]:
    """Nested values from dotted keys: ``with_values(**{"worker.concurrency": 3})``."""
    values: dict[str, Any] = {}
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        level = values
        for parent in parents:
            level = level.setdefault(parent, {})
        level[leaf] = value
    return values


# --- the manifests are valid Kubernetes objects ---


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_manifest_is_valid_for_kubernetes_1_31(chart: Chart, scenario: str) -> None:
    manifests = render(chart, SCENARIOS[scenario])
    assert workloads(manifests), "the render produced no workload"
    for manifest in manifests:
        if manifest["apiVersion"].startswith(CUSTOM_RESOURCE_GROUPS):
            continue
        try:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = "/".join(str(part) for part in error.path)
            pytest.fail(f"{scenario}: {manifest['kind']} {manifest['metadata']['name']} at {where}: {error.message}")


def test_the_validator_refuses_a_field_kubernetes_does_not_know(chart: Chart) -> None:
    deployment = copy.deepcopy(the_one(render(chart), "Deployment", "api"))
    container(deployment)["readOnlyRootFileSystem"] = True  # the real field is readOnlyRootFilesystem
    with pytest.raises(kubernetes_validate.ValidationError, match="readOnlyRootFileSystem"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("scenario", ["defaults", "bundled-postgresql-and-redis"])
def test_helm_lint_finds_no_error(scenario: str) -> None:
    report = lint(CHART_DIR, SCENARIOS[scenario], strict=True, kube_version=f"v{KUBERNETES_VERSION}.0")
    errors = [message for message in report["messages"] if message["severity"] >= 3]
    assert errors == []
    assert report["errors"] == []


@pytest.mark.parametrize("scenario", ["defaults", "ingress-pdb-and-api-policy", "bundled-postgresql-and-redis"])
def test_every_service_selects_the_pods_of_a_workload(chart: Chart, scenario: str) -> None:
    manifests = render(chart, SCENARIOS[scenario])
    pod_labels = [w["spec"]["template"]["metadata"]["labels"] for w in workloads(manifests)]
    for service in (m for m in manifests if m["kind"] == "Service"):
        selector: dict[str, str] = service["spec"]["selector"]
        assert any(selector.items() <= labels.items() for labels in pod_labels), service["metadata"]["name"]


# --- every pod is locked down ---


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_pod_runs_as_non_root_on_a_read_only_root_without_capabilities(chart: Chart, scenario: str) -> None:
    for workload in workloads(render(chart, SCENARIOS[scenario])):
        name = workload["metadata"]["name"]
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["automountServiceAccountToken"] is False, name
        for each in spec["containers"] + spec.get("initContainers", []):
            context = each["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_berth_pods_mount_descriptors_and_secrets_read_only(chart: Chart, scenario: str) -> None:
    values = SCENARIOS[scenario]
    manifests = render(chart, values)
    config_map = values.get("descriptors", {}).get("existingConfigMap")
    secret = values.get("secrets", {}).get("existingSecret")
    for name in BERTH_COMPONENTS:
        workload = the_one(manifests, "Job" if name == "migrate" else "Deployment", name)
        descriptors_mount, descriptors_volume = mount(workload, "/etc/berth/descriptors")
        secrets_mount, secrets_volume = mount(workload, "/run/secrets")
        assert descriptors_mount["readOnly"] is True
        assert secrets_mount["readOnly"] is True
        assert "configMap" in descriptors_volume
        assert "secret" in secrets_volume
        if config_map:
            assert descriptors_volume["configMap"]["name"] == config_map
        if secret:
            assert secrets_volume["secret"]["secretName"] == secret
        env = {variable["name"]: variable.get("value") for variable in container(workload)["env"]}
        assert env["BERTH_DESCRIPTORS"] == "/etc/berth/descriptors"
        assert env["BERTH_PLATFORM__EXEC__RUNS_ROOT"] == "/var/lib/berth/exec"
        for writable in ("/tmp", "/var/lib/berth"):
            assert "emptyDir" in mount(workload, writable)[1]


def test_the_pods_mount_the_configmap_and_secret_the_chart_creates(chart: Chart) -> None:
    manifests = render(chart)
    config_maps = {m["metadata"]["name"] for m in manifests if m["kind"] == "ConfigMap"}
    secrets = {m["metadata"]["name"] for m in manifests if m["kind"] == "Secret"}
    for name in BERTH_COMPONENTS:
        workload = the_one(manifests, "Job" if name == "migrate" else "Deployment", name)
        assert mount(workload, "/etc/berth/descriptors")[1]["configMap"]["name"] in config_maps
        assert mount(workload, "/run/secrets")[1]["secret"]["secretName"] in secrets


# --- the processes ---


def test_the_api_runs_berth_run_on_port_8000_with_health_probes(chart: Chart) -> None:
    api = container(the_one(render(chart), "Deployment", "api"))
    assert api["args"] == ["run", "--host", "0.0.0.0", "--port", "8000"]
    assert {port["containerPort"] for port in api["ports"]} == {8000}
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_worker_runs_berth_worker_with_its_health_port(chart: Chart) -> None:
    manifests = render(chart, with_values(**{"worker.concurrency": 3, "worker.leaseSeconds": 20}))
    deployment = the_one(manifests, "Deployment", "worker")
    worker = container(deployment)
    args: list[str] = worker["args"]
    assert args[0] == "worker"
    assert args[args.index("--concurrency") + 1] == "3"
    assert args[args.index("--lease") + 1] == "20"
    assert args[args.index("--health-port") + 1] == "8001"
    assert worker["ports"] == [{"name": "health", "containerPort": 8001, "protocol": "TCP"}]
    assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert worker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] == 60


def test_migrate_runs_before_install_and_upgrade_with_its_own_hook_objects(chart: Chart) -> None:
    manifests = render(chart)
    job = the_one(manifests, "Job", "migrate")
    annotations = job["metadata"]["annotations"]
    assert container(job)["args"] == ["migrate"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert set(annotations["helm.sh/hook-delete-policy"].split(",")) == {"before-hook-creation", "hook-succeeded"}
    assert job["spec"]["backoffLimit"] <= 3
    # a pre-install hook runs before the release's own objects exist: what the Job uses must be hooks created first
    used = {
        ("ServiceAccount", pod_spec(job)["serviceAccountName"]),
        ("ConfigMap", mount(job, "/etc/berth/descriptors")[1]["configMap"]["name"]),
        ("Secret", mount(job, "/run/secrets")[1]["secret"]["secretName"]),
    }
    for kind, name in used:
        [dependency] = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
        hook = dependency["metadata"].get("annotations", {})
        assert hook.get("helm.sh/hook") == "pre-install,pre-upgrade", f"{kind} {name} is not a pre-install hook"
        assert int(hook["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"])


def test_with_a_bundled_postgresql_migrate_runs_after_install(chart: Chart) -> None:
    job = the_one(render(chart, SCENARIOS["bundled-postgresql-and-redis"]), "Job", "migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"


def test_the_bundled_services_are_what_the_secret_points_at(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["bundled-postgresql-and-redis"])
    [secret] = [m for m in manifests if m["kind"] == "Secret"]
    data = secret_data(secret)
    postgresql = the_one(manifests, "StatefulSet", "postgresql")
    redis = the_one(manifests, "StatefulSet", "redis")
    dsn = urlsplit(data["pg_dsn"])
    assert dsn.hostname == the_one(manifests, "Service", "postgresql")["metadata"]["name"]
    assert dsn.password == data["postgres_password"]
    assert urlsplit(data["redis_url"]).hostname == the_one(manifests, "Service", "redis")["metadata"]["name"]
    password = next(v for v in container(postgresql)["env"] if v["name"] == "POSTGRES_PASSWORD")
    assert password["valueFrom"]["secretKeyRef"] == {"name": secret["metadata"]["name"], "key": "postgres_password"}
    assert container(postgresql)["image"] == "postgres:16"
    assert container(redis)["image"] == "redis:7"


def test_user_secret_values_become_files_of_the_secret(chart: Chart) -> None:
    values = with_values(**{"secrets.values": {"pg_dsn": "postgresql://db/berth", "anthropic_api_key": "sk-test"}})
    [secret] = [m for m in render(chart, values) if m["kind"] == "Secret" and component(m) is None]
    assert secret_data(secret) == {"pg_dsn": "postgresql://db/berth", "anthropic_api_key": "sk-test"}


# --- network policies ---


def test_exec_pods_get_no_egress_at_all(chart: Chart) -> None:
    policies = [m for m in render(chart) if m["kind"] == "NetworkPolicy"]
    [policy] = [
        p for p in policies if p["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/component": "exec"}
    ]
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert policy["spec"]["egress"] == []


def test_the_api_policy_admits_port_8000_only_when_asked(chart: Chart) -> None:
    assert not [m for m in render(chart) if m["kind"] == "NetworkPolicy" and component(m) == "api"]
    policy = the_one(render(chart, SCENARIOS["ingress-pdb-and-api-policy"]), "NetworkPolicy", "api")
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]


def test_network_policies_can_be_turned_off(chart: Chart) -> None:
    manifests = render(chart, with_values(**{"networkPolicy.enabled": False}))
    assert not [m for m in manifests if m["kind"] == "NetworkPolicy"]


# --- worker autoscaling ---


def test_the_hpa_scales_workers_on_cpu_and_on_the_queue_depth_when_asked(chart: Chart) -> None:
    cpu_only = the_one(
        render(chart, with_values(**{"worker.autoscaling.enabled": True})), "HorizontalPodAutoscaler", "worker"
    )
    assert [metric["type"] for metric in cpu_only["spec"]["metrics"]] == ["Resource"]

    manifests = render(chart, SCENARIOS["hpa-on-cpu-and-queue-depth"])
    hpa = the_one(manifests, "HorizontalPodAutoscaler", "worker")
    [external] = [metric["external"] for metric in hpa["spec"]["metrics"] if metric["type"] == "External"]
    assert external["metric"]["name"] == "berth_turn_queue_depth"
    assert external["target"]["type"] == "AverageValue"
    worker = the_one(manifests, "Deployment", "worker")
    assert hpa["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    assert "replicas" not in worker["spec"], "a fixed replica count would fight the autoscaler"


def test_keda_scales_workers_on_the_pending_turns_of_the_stream(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["keda"])
    scaled = the_one(manifests, "ScaledObject", "worker")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == the_one(manifests, "Deployment", "worker")["metadata"]["name"]
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis-streams"
    metadata = trigger["metadata"]
    assert metadata["stream"] == "berth:turns:stream"
    assert metadata["consumerGroup"] == "workers"
    assert int(metadata["pendingEntriesCount"]) >= 1
    assert metadata["address"].startswith(the_one(manifests, "Service", "redis")["metadata"]["name"] + ".")
    assert not [m for m in manifests if m["kind"] == "HorizontalPodAutoscaler"]


def test_hpa_and_keda_together_are_refused_naming_both(chart: Chart) -> None:
    values = with_values(**{"worker.autoscaling.enabled": True, "worker.autoscaling.keda.enabled": True})
    with pytest.raises(HelmRenderError) as refused:
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE)
    assert "worker.autoscaling.enabled" in str(refused.value)
    assert "worker.autoscaling.keda.enabled" in str(refused.value)


def test_keda_without_a_redis_address_is_refused(chart: Chart) -> None:
    with pytest.raises(HelmRenderError, match=r"worker\.autoscaling\.keda\.redis\.address"):
        chart.render(values=with_values(**{"worker.autoscaling.keda.enabled": True}), name=RELEASE)


# --- values are checked ---


@pytest.mark.parametrize(
    ("key", "value", "path"),
    [
        ("worker.concurrency", 0, "/worker/concurrency"),
        ("worker.concurrency", "8", "/worker/concurrency"),
        ("worker.concurrency", 2.5, "/worker/concurrency"),
        ("image.repository", "", "/image/repository"),
        ("worker.leaseSeconds", 0, "/worker/leaseSeconds"),
        ("descriptors.files", {"assembly.yml": "platform: {}"}, "/descriptors/files"),
        ("secrets.values", {"pg dsn": "postgresql://db/berth"}, "/secrets/values"),
    ],
)
def test_bad_values_are_refused_naming_the_key(chart: Chart, key: str, value: Any, path: str) -> None:
    values = with_values(**{key: value})
    with pytest.raises(HelmValuesError, match=path):
        chart.validate_schema(values)
    with pytest.raises(HelmError, match=path):
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE)


def test_the_default_values_pass_the_schema(chart: Chart) -> None:
    chart.validate_schema(chart.values)


# --- descriptors ---


def pod_checksums(manifests: list[Manifest]) -> dict[str, str]:
    return {
        name: the_one(manifests, "Deployment", name)["spec"]["template"]["metadata"]["annotations"][
            "checksum/descriptors"
        ]
        for name in ("api", "worker")
    }


def test_changing_a_descriptor_rolls_the_pods(chart: Chart) -> None:
    files = dict(chart.values["descriptors"]["files"])
    before = pod_checksums(render(chart))
    assert pod_checksums(render(chart)) == before, "the checksum must not change between renders of the same values"
    files["gateway.yaml"] = files["gateway.yaml"].replace("port: 8000", "port: 8000  # edited")
    after = pod_checksums(render(chart, with_values(**{"descriptors.files": files})))
    assert after["api"] != before["api"]
    assert after["worker"] != before["worker"]


def test_the_configmap_holds_the_five_descriptor_files(chart: Chart) -> None:
    [config_map] = [m for m in render(chart) if m["kind"] == "ConfigMap" and component(m) is None]
    assert set(config_map["data"]) == {
        "assembly.yaml",
        "bundles.yaml",
        "secrets.yaml",
        "bundles.secrets.yaml",
        "gateway.yaml",
    }
    assert config_map["data"] == chart.values["descriptors"]["files"]


@pytest.mark.usefixtures("clean_berth_env")
def test_the_default_descriptors_pass_berth_descriptors_check(chart: Chart, tmp_path: Path) -> None:
    files: dict[str, str] = chart.values["descriptors"]["files"]
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    result = CliRunner().invoke(cli, ["descriptors", "check", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "5 descriptor file(s)" in result.output
    assembly = yaml.safe_load(files["assembly.yaml"])
    assert assembly["platform"]["storage"]["kind"] == "distributed"
    secrets = yaml.safe_load(files["secrets.yaml"])
    assert secrets == {name: f"file:/run/secrets/{name}" for name in ("pg_dsn", "redis_url", "anthropic_api_key")}


def test_the_default_exec_profile_confines_runs_with_landlock_under_the_pods_own_context(chart: Chart) -> None:
    """The chart's exec profile must run under the chart's own restricted security context: no user namespace, no
    capability, no bubblewrap (``tests/deploy/test_chart_exec_sandbox.py`` runs it so)."""
    exec_settings = yaml.safe_load(chart.values["descriptors"]["files"]["assembly.yaml"])["platform"]["exec"]
    profile = exec_settings["profiles"][exec_settings["default_profile"]]
    assert (profile["backend"], profile["isolation"]) == ("local", "landlock")
    deployment = the_one(render(chart), "Deployment", "worker")
    assert "runtimeClassName" not in pod_spec(deployment)


def test_the_workers_can_run_under_a_runtime_class_of_their_own(chart: Chart) -> None:
    manifests = render(chart, with_values(**{"worker.runtimeClassName": "kata"}))
    assert pod_spec(the_one(manifests, "Deployment", "worker"))["runtimeClassName"] == "kata"
    assert "runtimeClassName" not in pod_spec(the_one(manifests, "Deployment", "api"))
