"""deploy/kubernetes: render the kustomize base and validate it offline.

Core objects are validated against the Kubernetes OpenAPI schemas that kubernetes-validate
ships (strict: unknown fields are errors); the Prometheus Operator CRDs are checked by hand.
"""

from __future__ import annotations

import inspect
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from pgsched import Scheduler
from pgsched._times import parse_duration

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "kubernetes"
CORE_KINDS = (
    "Deployment",
    "Service",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "ServiceAccount",
)
CRD_KINDS = ("ServiceMonitor", "PrometheusRule")
METRICS_PORT = 9464

Obj = dict[str, Any]


def _kubernetes_version() -> str:
    """The newest Kubernetes version the installed kubernetes-validate has schemas for."""
    latest = getattr(kubernetes_validate, "latest_version", None)
    if latest is not None:
        return str(latest())
    from kubernetes_validate import utils

    return str(utils.all_versions()[-1])


K8S_VERSION = _kubernetes_version()


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: it renders the base (`kubectl kustomize`)")
    proc = subprocess.run(
        [kubectl, "kustomize", str(BASE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize failed: {proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def _one(objs: list[Obj], kind: str) -> Obj:
    found = [obj for obj in objs if obj["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


def _pod_spec(obj: Obj) -> Obj:
    spec: Obj = obj["spec"]["template"]["spec"]
    return spec


def _pod_labels(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = obj["spec"]["template"]["metadata"]["labels"]
    return labels


def _container(obj: Obj) -> Obj:
    containers = _pod_spec(obj)["containers"]
    assert len(containers) == 1
    container: Obj = containers[0]
    return container


def _init_container(obj: Obj) -> Obj:
    containers = _pod_spec(obj).get("initContainers", [])
    assert len(containers) == 1, "one init container: migrate"
    container: Obj = containers[0]
    return container


def _env(container: Obj) -> dict[str, Obj]:
    return {item["name"]: item for item in container.get("env", [])}


def _secret_ref(container: Obj, name: str) -> tuple[str, str]:
    ref = _env(container)[name]["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


# -- the rendered set ----------------------------------------------------------------------


def test_renders_exactly_the_expected_objects(rendered: list[Obj]) -> None:
    kinds = sorted(obj["kind"] for obj in rendered)
    assert kinds == sorted(CORE_KINDS + CRD_KINDS)
    for obj in rendered:
        meta = obj["metadata"]
        assert "namespace" not in meta, f"{obj['kind']} pins a namespace; the base must not"
        assert meta["labels"]["app.kubernetes.io/name"] == "pgsched", obj["kind"]


def test_no_secret_is_committed(rendered: list[Obj]) -> None:
    assert not [obj for obj in rendered if obj["kind"] == "Secret"]
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    listed = kustomization.get("resources", [])
    assert "secret.example.yaml" not in listed
    assert "prometheusrule.yaml" in listed
    for key in ("secretGenerator", "namespace"):
        assert key not in kustomization, f"the base must not set {key}"


@pytest.mark.parametrize("kind", CORE_KINDS)
def test_core_object_matches_the_kubernetes_schema(rendered: list[Obj], kind: str) -> None:
    obj = _one(rendered, kind)
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(str(p) for p in exc.absolute_path)
        pytest.fail(f"{kind} is invalid for Kubernetes {K8S_VERSION} at {path}: {exc.message}")


def test_example_secrets_are_valid_and_use_the_expected_names() -> None:
    docs = [doc for doc in yaml.safe_load_all((BASE / "secret.example.yaml").read_text()) if doc]
    keys = {}
    for doc in docs:
        assert doc["kind"] == "Secret"
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        keys[doc["metadata"]["name"]] = set(doc["stringData"])
    assert keys == {
        "pgsched-runtime": {"dsn"},
        "pgsched-owner": {"dsn"},
        "pgsched-http": {"operator-token", "view-token"},
    }


# -- the scheduler Deployment --------------------------------------------------------------


def test_deployment_replicas_and_rollout(rendered: list[Obj]) -> None:
    deployment = _one(rendered, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    assert _matches(spec["selector"]["matchLabels"], _pod_labels(deployment))
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 1}


def test_runner_id_is_the_pod_name(rendered: list[Obj]) -> None:
    container = _container(_one(rendered, "Deployment"))
    pod_name = _env(container)["POD_NAME"]
    assert pod_name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    args = container["args"]
    assert args[0] == "run"
    assert args[args.index("--runner-id") + 1] == "$(POD_NAME)"
    assert args[args.index("--http-host") + 1] == "0.0.0.0"
    if "--http-port" in args:
        assert args[args.index("--http-port") + 1] == str(METRICS_PORT)
    assert "--migrate" not in args, "migrations belong to the init container and the owner role"
    assert "command" not in container, "keep the image's exec-form ENTRYPOINT"


def test_metrics_port_and_probes(rendered: list[Obj]) -> None:
    container = _container(_one(rendered, "Deployment"))
    ports = {port["name"]: port for port in container["ports"]}
    assert ports["metrics"]["containerPort"] == METRICS_PORT
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert get["port"] in ("metrics", METRICS_PORT), probe
    startup = container.get("startupProbe")
    if startup is not None:
        assert startup["httpGet"]["path"] == "/healthz"


def test_grace_period_outlasts_shutdown_grace(rendered: list[Obj]) -> None:
    default = inspect.signature(Scheduler).parameters["shutdown_grace"].default
    shutdown_grace = parse_duration(default, field="shutdown_grace").total_seconds()
    grace = _pod_spec(_one(rendered, "Deployment"))["terminationGracePeriodSeconds"]
    assert grace > shutdown_grace >= 30


@pytest.mark.parametrize("which", ["scheduler", "migrate"])
def test_pods_are_locked_down(rendered: list[Obj], which: str) -> None:
    obj = _one(rendered, "Deployment")
    pod = _pod_spec(obj)
    container = _container(obj) if which == "scheduler" else _init_container(obj)
    pod_sc = pod.get("securityContext", {})
    sc = container["securityContext"]

    def effective(key: str) -> Any:
        return sc.get(key, pod_sc.get(key))

    assert effective("runAsNonRoot") is True
    user = effective("runAsUser")
    assert isinstance(user, int) and user != 0
    assert effective("seccompProfile") == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert not sc.get("privileged", False)
    # /tmp is the one writable place: an emptyDir.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    resources = container["resources"]
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= resources[section].keys(), f"{which} {section}"


def test_service_account_has_no_token(rendered: list[Obj]) -> None:
    account = _one(rendered, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    pod = _pod_spec(_one(rendered, "Deployment"))
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod.get("automountServiceAccountToken", False) is False


# -- secrets: runtime role for the Deployment, owner role for the migration ---------------


def test_scheduler_and_migration_use_their_own_roles(rendered: list[Obj]) -> None:
    deployment = _one(rendered, "Deployment")
    runner, migrate = _container(deployment), _init_container(deployment)
    assert _secret_ref(runner, "PGSCHED_DSN") == ("pgsched-runtime", "dsn")
    assert _secret_ref(migrate, "PGSCHED_DSN") == ("pgsched-owner", "dsn")
    assert "pgsched-owner" not in yaml.safe_dump(runner), "the owner DSN leaks to the scheduler"
    assert runner["image"] == migrate["image"]
    schema = {_env(c).get("PGSCHED_SCHEMA", {}).get("value") for c in (runner, migrate)}
    assert len(schema) == 1, "the init container must migrate the schema the scheduler uses"


def test_migrations_run_before_the_scheduler_without_an_immutable_job(rendered: list[Obj]) -> None:
    # A Job's pod template is immutable: applying the manifests again with a new image failed
    # while the previous Job existed. `pgsched migrate` is idempotent and safe concurrently,
    # so each pod runs it first.
    assert not [obj for obj in rendered if obj["kind"] == "Job"]
    migrate = _init_container(_one(rendered, "Deployment"))
    command = migrate.get("command", []) + migrate["args"]
    assert command == ["migrate"], "run `pgsched migrate` through the image's ENTRYPOINT"


def test_the_http_tokens_come_from_an_optional_secret(rendered: list[Obj]) -> None:
    runner = _container(_one(rendered, "Deployment"))
    for name, key in (
        ("PGSCHED_HTTP_TOKEN", "operator-token"),
        ("PGSCHED_HTTP_VIEW_TOKEN", "view-token"),
    ):
        ref = _env(runner)[name]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"], ref.get("optional")) == ("pgsched-http", key, True)


# -- Service, PDB, NetworkPolicy -------------------------------------------------------------


def test_service_selects_the_scheduler_pods(rendered: list[Obj]) -> None:
    service = _one(rendered, "Service")
    spec = service["spec"]
    assert spec.get("type", "ClusterIP") == "ClusterIP"
    assert _matches(spec["selector"], _pod_labels(_one(rendered, "Deployment")))
    (port,) = spec["ports"]
    assert port["name"] == "metrics"
    assert port["port"] == METRICS_PORT
    assert port.get("targetPort") in ("metrics", METRICS_PORT)


def test_pdb_selects_the_scheduler_pods(rendered: list[Obj]) -> None:
    pdb = _one(rendered, "PodDisruptionBudget")
    deployment = _one(rendered, "Deployment")
    spec = pdb["spec"]
    assert _matches(spec["selector"]["matchLabels"], _pod_labels(deployment))
    replicas = deployment["spec"]["replicas"]
    if "maxUnavailable" in spec:
        assert spec["maxUnavailable"] == 1
    else:
        assert 1 <= spec["minAvailable"] < replicas


def test_network_policy_admits_only_prometheus_to_the_metrics_port(rendered: list[Obj]) -> None:
    policy = _one(rendered, "NetworkPolicy")
    spec = policy["spec"]
    assert _matches(spec["podSelector"]["matchLabels"], _pod_labels(_one(rendered, "Deployment")))
    assert "Ingress" in spec["policyTypes"]
    (rule,) = spec["ingress"]
    (peer,) = rule["from"]
    assert peer == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    assert [(p.get("protocol", "TCP"), p["port"]) for p in rule["ports"]] == [("TCP", METRICS_PORT)]
    # Egress stays open (PostgreSQL); tightening it is documented in the manifest.
    assert "Egress" not in spec["policyTypes"] or spec.get("egress")


# -- Prometheus Operator CRDs (no schema shipped: structure checked by hand) ---------------


def test_service_monitor_scrapes_the_metrics_port(rendered: list[Obj]) -> None:
    monitor = _one(rendered, "ServiceMonitor")
    service = _one(rendered, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"]
    assert _matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert "namespaceSelector" not in monitor["spec"], "scrape the Service in its own namespace"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["port"] == "metrics"
    assert endpoint.get("path", "/metrics") == "/metrics"
    assert endpoint["interval"] == "30s"
    # pgsched's own `job` label (the pgsched job) must survive the scrape.
    assert endpoint["honorLabels"] is True


def test_prometheus_rule_structure(rendered: list[Obj]) -> None:
    rule = _one(rendered, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"]
    groups = rule["spec"]["groups"]
    assert isinstance(groups, list) and groups
    for group in groups:
        assert isinstance(group["name"], str) and group["name"]
        assert isinstance(group.get("rules", []), list)
        for item in group.get("rules") or []:
            assert ("alert" in item) != ("record" in item), item
            assert isinstance(item["expr"], (str, int)), item
