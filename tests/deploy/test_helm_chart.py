"""The Helm chart (``deploy/helm/berth``): rendered by Helm's own engine, every manifest valid for Kubernetes 1.31.

Helm runs in process (``helm-python-sdk``, Helm's Go SDK through ctypes: no ``helm`` binary, no cluster) and the
manifests are checked offline against the Kubernetes JSON schemas ``kubernetes-validate`` ships. Custom resources
(KEDA's ``ScaledObject`` and ``TriggerAuthentication``, the Prometheus Operator's ``ServiceMonitor``) have no schema
there: their fields are asserted instead.
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
from prometheus_client.parser import text_string_to_metric_families

from berth.cli import cli
from berth.turns.metrics import Metrics

CHART_DIR = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "berth"
KUBERNETES_VERSION = "1.31"
RELEASE = "demo"
NAMESPACE = "berth"
CUSTOM_RESOURCE_GROUPS = ("keda.sh/", "monitoring.coreos.com/")
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
        "worker": {"autoscaling": {"keda": {"enabled": True, "minReplicas": 0}}},
        "metrics": {"apiKeySecret": {"key": "metrics_api_key"}},
    },
    "api-and-worker-autoscaling-and-budgets": {
        "api": {
            "autoscaling": {
                "enabled": True,
                "targetMemoryUtilizationPercentage": 80,
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
            },
            "podDisruptionBudget": {"enabled": True, "minAvailable": "", "maxUnavailable": "25%"},
        },
        "worker": {
            "podDisruptionBudget": {"enabled": True},
            "autoscaling": {
                "enabled": True,
                "targetCPUUtilizationPercentage": "",
                "queueDepth": {"enabled": True, "selector": {"service": "{{ .Release.Name }}-berth-api"}},
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
            },
        },
    },
    "service-monitors": {
        "metrics": {
            "apiKeySecret": {"key": "metrics_api_key"},
            "serviceMonitor": {
                "enabled": True,
                "labels": {"release": "kube-prometheus-stack"},
                "interval": "15s",
                "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "python_.*"}],
            },
        },
        "networkPolicy": {"api": {"enabled": True}},
    },
    "scheduling-volumes-and-extra-containers": {
        "nodeSelector": {"pool": "general"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "berth", "effect": "NoSchedule"}],
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        "priorityClassName": "berth",
        "extraVolumes": [{"name": "corporate-ca", "configMap": {"name": "{{ .Release.Name }}-ca"}}],
        "extraVolumeMounts": [{"name": "corporate-ca", "mountPath": "/etc/ssl/corporate", "readOnly": True}],
        "initContainers": [{"name": "wait-for-dns", "image": "busybox:1.36", "command": ["nslookup", "kubernetes"]}],
        "sidecars": [{"name": "log-shipper", "image": "fluent-bit:3", "args": ["--quiet"]}],
        "worker": {
            "nodeSelector": {"pool": "workers"},
            "priorityClassName": "berth-workers",
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "{{ .Release.Name }}"}},
                            },
                        }
                    ]
                }
            },
            "extraVolumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}}],
            "extraVolumeMounts": [{"name": "models", "mountPath": "/var/lib/models", "readOnly": True}],
            "sidecars": [
                {
                    "name": "proxy",
                    "image": "envoy:1.31",
                    "securityContext": {
                        "runAsUser": 10002,
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
        "migrate": {
            "tolerations": [{"operator": "Exists"}],
            "initContainers": [{"name": "check", "image": "busybox:1.36"}],
        },
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
    """The workload's own container, named after its component (sidecars may run beside it)."""
    containers: list[Manifest] = pod_spec(workload)["containers"]
    [own] = [each for each in containers if each["name"] == component(workload)]
    return own


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


@pytest.mark.parametrize(
    "scenario", ["defaults", "bundled-postgresql-and-redis", "scheduling-volumes-and-extra-containers"]
)
def test_helm_lint_finds_no_error(scenario: str) -> None:
    report = lint(CHART_DIR, SCENARIOS[scenario], strict=True, kube_version=f"v{KUBERNETES_VERSION}.0")
    errors = [message for message in report["messages"] if message["severity"] >= 3]
    assert errors == []
    assert report["errors"] == []


@pytest.mark.parametrize(
    "scenario", ["defaults", "ingress-pdb-and-api-policy", "bundled-postgresql-and-redis", "service-monitors"]
)
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


@pytest.mark.parametrize(
    ("scenario", "events"),
    [("defaults", "pre-install,pre-upgrade"), ("bundled-postgresql-and-redis", "post-install,pre-upgrade")],
)
def test_migrate_runs_as_a_hook_with_its_own_hook_objects_created_first(
    chart: Chart, scenario: str, events: str
) -> None:
    manifests = render(chart, SCENARIOS[scenario])
    job = the_one(manifests, "Job", "migrate")
    annotations = job["metadata"]["annotations"]
    assert container(job)["args"] == ["migrate"]
    assert annotations["helm.sh/hook"] == events
    assert set(annotations["helm.sh/hook-delete-policy"].split(",")) == {"before-hook-creation", "hook-succeeded"}
    assert job["spec"]["backoffLimit"] <= 3
    # a pre-install hook runs before the release's own objects exist, a pre-upgrade hook before they are updated:
    # what the Job uses must be hooks of the same events, created first (a lower weight) and replaced on a retry
    used = {
        ("ServiceAccount", pod_spec(job)["serviceAccountName"]),
        ("ConfigMap", mount(job, "/etc/berth/descriptors")[1]["configMap"]["name"]),
        ("Secret", mount(job, "/run/secrets")[1]["secret"]["secretName"]),
    }
    for kind, name in used:
        [dependency] = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
        hook = dependency["metadata"].get("annotations", {})
        assert hook.get("helm.sh/hook") == events, f"{kind} {name} is not a hook of {events}"
        assert int(hook["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"])
        assert "before-hook-creation" in hook["helm.sh/hook-delete-policy"]


def test_the_migration_hook_holds_the_same_descriptors_and_secrets_as_the_release(chart: Chart) -> None:
    # with a generated PostgreSQL password too: the release's Secret and the hook's copy are rendered apart
    manifests = render(chart, SCENARIOS["bundled-postgresql-and-redis"])
    release_secret = next(m for m in manifests if m["kind"] == "Secret" and component(m) is None)
    hook_secret = the_one(manifests, "Secret", "migrate")
    assert secret_data(hook_secret) == secret_data(release_secret)
    assert len(secret_data(hook_secret)["postgres_password"]) == 32
    release_config = next(m for m in manifests if m["kind"] == "ConfigMap" and component(m) is None)
    assert the_one(manifests, "ConfigMap", "migrate")["data"] == release_config["data"]


def test_with_existing_objects_the_migration_uses_them(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["existing-secret-and-configmap"])
    job = the_one(manifests, "Job", "migrate")
    assert pod_spec(job)["serviceAccountName"] == "berth-prod"
    assert mount(job, "/etc/berth/descriptors")[1]["configMap"]["name"] == "berth-prod-descriptors"
    assert mount(job, "/run/secrets")[1]["secret"]["secretName"] == "berth-prod-secrets"
    assert not [m for m in manifests if m["kind"] in ("Secret", "ConfigMap", "ServiceAccount")]


def test_the_bundled_services_are_what_the_secret_points_at(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["bundled-postgresql-and-redis"])
    [secret] = [m for m in manifests if m["kind"] == "Secret" and component(m) is None]
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


def test_the_hpa_follows_the_queue_depth_alone_with_a_selector_and_a_behavior(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["api-and-worker-autoscaling-and-budgets"])
    hpa = the_one(manifests, "HorizontalPodAutoscaler", "worker")
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    api_service = the_one(manifests, "Service", "api")["metadata"]["name"]
    assert metric["external"]["metric"]["selector"] == {"matchLabels": {"service": api_service}}
    assert hpa["spec"]["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 600}}


def test_an_hpa_without_a_metric_is_refused(chart: Chart) -> None:
    values = with_values(
        **{"worker.autoscaling.enabled": True, "worker.autoscaling.targetCPUUtilizationPercentage": ""}
    )
    with pytest.raises(HelmRenderError, match=r"worker\.autoscaling: no metric"):
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE)
    values = with_values(**{"api.autoscaling.enabled": True, "api.autoscaling.targetCPUUtilizationPercentage": ""})
    with pytest.raises(HelmRenderError, match=r"api\.autoscaling: set targetCPU"):
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE)


def test_keda_scales_workers_on_the_queue_depth_the_api_reports(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["keda"])
    scaled = the_one(manifests, "ScaledObject", "worker")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == the_one(manifests, "Deployment", "worker")["metadata"]["name"]
    assert scaled["spec"]["minReplicaCount"] == 0
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "metrics-api"
    metadata = trigger["metadata"]
    # the API Service, by its cluster DNS name (KEDA runs in its own namespace), on the Service's port
    service = the_one(manifests, "Service", "api")
    url = urlsplit(metadata["url"])
    assert url.hostname == f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert url.port == service["spec"]["ports"][0]["port"]
    assert url.path == "/metrics"
    assert metadata["format"] == "prometheus"
    assert float(metadata["targetValue"]) > 0
    # scaling from zero: above the activation value KEDA starts a worker
    assert float(metadata["activationTargetValue"]) == 0
    # the admin key is sent as a Bearer token through a TriggerAuthentication naming the chart's Secret key
    assert metadata["authMode"] == "bearer"
    authentication = the_one(manifests, "TriggerAuthentication", "worker")
    assert trigger["authenticationRef"] == {"name": authentication["metadata"]["name"]}
    secret = next(m for m in manifests if m["kind"] == "Secret" and component(m) is None)
    assert authentication["spec"]["secretTargetRef"] == [
        {"parameter": "token", "name": secret["metadata"]["name"], "key": "metrics_api_key"}
    ]
    assert not [m for m in manifests if m["kind"] == "HorizontalPodAutoscaler"]


def test_the_queue_depth_autoscaling_reads_is_an_unlabelled_gauge_of_the_exposition(chart: Chart) -> None:
    # KEDA's metrics-api trigger takes the first sample of the family named valueLocation; a labelled family would
    # give one series' value only
    metrics = Metrics()
    metrics.turn_queue_depth.set(17)
    families = {family.name: family for family in text_string_to_metric_families(metrics.render().decode())}
    trigger = the_one(render(chart, SCENARIOS["keda"]), "ScaledObject", "worker")["spec"]["triggers"][0]
    for name in (
        trigger["metadata"]["valueLocation"],
        chart.values["worker"]["autoscaling"]["queueDepth"]["metricName"],
    ):
        family = families[name]
        assert family.type == "gauge"
        assert [(sample.labels, sample.value) for sample in family.samples] == [({}, 17.0)]


def test_keda_without_an_api_key_sends_none_and_a_trigger_authentication_of_your_own_is_used(chart: Chart) -> None:
    manifests = render(chart, with_values(**{"worker.autoscaling.keda.enabled": True}))
    trigger = the_one(manifests, "ScaledObject", "worker")["spec"]["triggers"][0]
    assert "authMode" not in trigger["metadata"]
    assert "authenticationRef" not in trigger
    assert not [m for m in manifests if m["kind"] == "TriggerAuthentication"]
    values = with_values(
        **{"worker.autoscaling.keda.enabled": True, "worker.autoscaling.keda.authenticationRef": "berth-metrics"}
    )
    manifests = render(chart, values)
    trigger = the_one(manifests, "ScaledObject", "worker")["spec"]["triggers"][0]
    assert trigger["authenticationRef"] == {"name": "berth-metrics"}
    assert trigger["metadata"]["authMode"] == "bearer"
    assert not [m for m in manifests if m["kind"] == "TriggerAuthentication"]


def test_hpa_and_keda_together_are_refused_naming_both(chart: Chart) -> None:
    values = with_values(**{"worker.autoscaling.enabled": True, "worker.autoscaling.keda.enabled": True})
    with pytest.raises(HelmRenderError) as refused:
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE)
    assert "worker.autoscaling.enabled" in str(refused.value)
    assert "worker.autoscaling.keda.enabled" in str(refused.value)


# --- API autoscaling and disruption budgets ---


def test_the_api_hpa_scales_the_api_deployment_on_cpu_and_memory(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["api-and-worker-autoscaling-and-budgets"])
    hpa = the_one(manifests, "HorizontalPodAutoscaler", "api")
    api = the_one(manifests, "Deployment", "api")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": api["metadata"]["name"],
    }
    targets = {m["resource"]["name"]: m["resource"]["target"]["averageUtilization"] for m in hpa["spec"]["metrics"]}
    assert targets == {"cpu": 70, "memory": 80}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 10)
    assert hpa["spec"]["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 300}}
    assert "replicas" not in api["spec"], "a fixed replica count would fight the autoscaler"
    assert the_one(render(chart), "Deployment", "api")["spec"]["replicas"] == 2


def test_the_disruption_budgets_select_their_component_pods(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["api-and-worker-autoscaling-and-budgets"])
    for name, budget in (("api", {"maxUnavailable": "25%"}), ("worker", {"maxUnavailable": 1})):
        pdb = the_one(manifests, "PodDisruptionBudget", name)
        spec = dict(pdb["spec"])
        selector = spec.pop("selector")["matchLabels"]
        assert spec == budget
        pod_labels = the_one(manifests, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
    assert not [m for m in render(chart) if m["kind"] == "PodDisruptionBudget"]


def test_a_budget_with_both_min_available_and_max_unavailable_is_refused(chart: Chart) -> None:
    values = with_values(**{"worker.podDisruptionBudget": {"enabled": True, "minAvailable": 1, "maxUnavailable": 1}})
    with pytest.raises(
        HelmRenderError, match=r"worker\.podDisruptionBudget: set minAvailable or maxUnavailable, not both"
    ):
        chart.render(values=values, name=RELEASE, namespace=NAMESPACE)


# --- Prometheus ---


def test_service_monitors_scrape_the_api_and_the_workers_metrics_with_the_api_key(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["service-monitors"])
    secret = next(m for m in manifests if m["kind"] == "Secret" and component(m) is None)
    for name, port in (("api", 8000), ("worker", 8001)):
        monitor = the_one(manifests, "ServiceMonitor", name)
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["namespace"] == NAMESPACE
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        # the Service it selects, of this component only, and its named port: the container port serving /metrics
        selector = monitor["spec"]["selector"]["matchLabels"]
        [service] = [
            m for m in manifests if m["kind"] == "Service" and selector.items() <= m["metadata"]["labels"].items()
        ]
        assert component(service) == name
        [endpoint] = monitor["spec"]["endpoints"]
        [service_port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
        pods = the_one(manifests, "Deployment", name)
        assert service["spec"]["selector"].items() <= pods["spec"]["template"]["metadata"]["labels"].items()
        [container_port] = [p for p in container(pods)["ports"] if p["name"] == service_port["targetPort"]]
        assert container_port["containerPort"] == port
        assert endpoint["path"] == "/metrics"
        assert endpoint["interval"] == "15s"
        assert endpoint["authorization"] == {
            "type": "Bearer",
            "credentials": {"name": secret["metadata"]["name"], "key": "metrics_api_key"},
        }
        assert endpoint["metricRelabelings"][0]["action"] == "drop"


def test_without_service_monitors_the_workers_have_no_service(chart: Chart) -> None:
    manifests = render(chart)
    assert not [m for m in manifests if m["kind"] == "ServiceMonitor"]
    assert [component(m) for m in manifests if m["kind"] == "Service"] == ["api"]


def test_a_service_monitor_without_an_api_key_sends_no_authorization(chart: Chart) -> None:
    manifests = render(chart, with_values(**{"metrics.serviceMonitor.enabled": True}))
    for name in ("api", "worker"):
        [endpoint] = the_one(manifests, "ServiceMonitor", name)["spec"]["endpoints"]
        assert "authorization" not in endpoint


def notes(chart: Chart, values: dict[str, Any]) -> str:
    rendered = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


def test_the_notes_warn_when_scrapers_would_be_refused_for_want_of_an_api_key(chart: Chart) -> None:
    warning = "WARNING: /metrics needs a global admin API key"
    assert warning in notes(chart, with_values(**{"metrics.serviceMonitor.enabled": True}))
    with_key = with_values(**{"metrics.serviceMonitor.enabled": True, "metrics.apiKeySecret.key": "metrics_api_key"})
    assert warning not in notes(chart, with_key)
    files = dict(chart.values["descriptors"]["files"])
    files["assembly.yaml"] = files["assembly.yaml"].replace("platform:\n", "platform:\n  metrics: {access: open}\n", 1)
    open_access = with_values(**{"worker.autoscaling.keda.enabled": True, "descriptors.files": files})
    assert warning not in notes(chart, open_access)


# --- scheduling, volumes and extra containers ---


def test_scheduling_is_the_global_one_unless_the_component_sets_its_own(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["scheduling-volumes-and-extra-containers"])
    api = pod_spec(the_one(manifests, "Deployment", "api"))
    worker = pod_spec(the_one(manifests, "Deployment", "worker"))
    migrate = pod_spec(the_one(manifests, "Job", "migrate"))
    assert api["nodeSelector"] == migrate["nodeSelector"] == {"pool": "general"}
    assert worker["nodeSelector"] == {"pool": "workers"}
    assert api["priorityClassName"] == migrate["priorityClassName"] == "berth"
    assert worker["priorityClassName"] == "berth-workers"
    assert (
        api["tolerations"]
        == worker["tolerations"]
        == [{"key": "dedicated", "operator": "Equal", "value": "berth", "effect": "NoSchedule"}]
    )
    assert migrate["tolerations"] == [{"operator": "Exists"}]
    assert "affinity" not in api
    term = worker["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == {"app.kubernetes.io/instance": RELEASE}
    assert "affinity" not in migrate


def test_a_spread_constraint_without_a_selector_spreads_each_component_on_its_own(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["scheduling-volumes-and-extra-containers"])
    for name in BERTH_COMPONENTS:
        workload = the_one(manifests, "Job" if name == "migrate" else "Deployment", name)
        [constraint] = pod_spec(workload)["topologySpreadConstraints"]
        assert constraint["topologyKey"] == "topology.kubernetes.io/zone"
        selector = {"app.kubernetes.io/name": "berth", "app.kubernetes.io/instance": RELEASE}
        assert constraint["labelSelector"] == {"matchLabels": {**selector, "app.kubernetes.io/component": name}}
        assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    given = {
        "maxSkew": 2,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/part-of": "berth"}},
    }
    manifests = render(chart, with_values(**{"worker.topologySpreadConstraints": [given]}))
    assert pod_spec(the_one(manifests, "Deployment", "worker"))["topologySpreadConstraints"] == [given]
    assert "topologySpreadConstraints" not in pod_spec(the_one(manifests, "Deployment", "api"))


def test_extra_volumes_and_mounts_are_added_global_first_with_templates_rendered(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["scheduling-volumes-and-extra-containers"])
    for name in BERTH_COMPONENTS:
        workload = the_one(manifests, "Job" if name == "migrate" else "Deployment", name)
        mount_at, volume = mount(workload, "/etc/ssl/corporate")
        assert mount_at["readOnly"] is True
        assert volume["configMap"] == {"name": f"{RELEASE}-ca"}
        # the chart's own mounts stay as they are
        assert mount(workload, "/etc/berth/descriptors")[0]["readOnly"] is True
    worker = the_one(manifests, "Deployment", "worker")
    assert mount(worker, "/var/lib/models")[1]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert [v["name"] for v in pod_spec(worker)["volumes"]][-2:] == ["corporate-ca", "models"]
    api = the_one(manifests, "Deployment", "api")
    assert "models" not in {v["name"] for v in pod_spec(api)["volumes"]}


def test_init_containers_and_sidecars_are_added_locked_down_unless_they_bring_a_context(chart: Chart) -> None:
    manifests = render(chart, SCENARIOS["scheduling-volumes-and-extra-containers"])
    locked_down = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    api = pod_spec(the_one(manifests, "Deployment", "api"))
    worker = pod_spec(the_one(manifests, "Deployment", "worker"))
    migrate = pod_spec(the_one(manifests, "Job", "migrate"))
    # the Berth container stays first: the probes, kubectl exec and logs default to it
    assert [c["name"] for c in api["containers"]] == ["api", "log-shipper"]
    assert [c["name"] for c in worker["containers"]] == ["worker", "log-shipper", "proxy"]
    assert [c["name"] for c in migrate["containers"]] == ["migrate"], "a sidecar would keep the Job from completing"
    assert (
        [c["name"] for c in api["initContainers"]] == [c["name"] for c in worker["initContainers"]] == ["wait-for-dns"]
    )
    assert [c["name"] for c in migrate["initContainers"]] == ["wait-for-dns", "check"]
    assert api["containers"][1]["securityContext"] == locked_down
    assert api["initContainers"][0]["securityContext"] == locked_down
    assert worker["containers"][2]["securityContext"]["runAsUser"] == 10002


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
        ("api.autoscaling.targetCPUUtilizationPercentage", 0, "/api/autoscaling/targetCPUUtilizationPercentage"),
        ("worker.autoscaling.keda.redis", {"address": "redis:6379"}, "/worker/autoscaling/keda"),
        ("worker.autoscaling.keda.metricsUrl", "berth-api/metrics", "/worker/autoscaling/keda/metricsUrl"),
        ("worker.topologySpreadConstraints", [{"maxSkew": 1}], "/worker/topologySpreadConstraints/0"),
        ("api.extraVolumeMounts", [{"name": "ca"}], "/api/extraVolumeMounts/0"),
        ("sidecars", [{"image": "envoy"}], "/sidecars/0"),
        ("migrate.sidecars", [{"name": "proxy", "image": "envoy"}], "/migrate"),
        ("metrics.serviceMonitor.interval", "30 seconds", "/metrics/serviceMonitor/interval"),
        ("worker.podDisruptionBudget.maxUnavailable", -1, "/worker/podDisruptionBudget/maxUnavailable"),
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
