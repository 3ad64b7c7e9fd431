"""deploy/kubernetes/ validated offline: the core kinds against the Kubernetes OpenAPI
schemas bundled in `kubernetes-validate` (strict: unknown fields refused), the security
posture with `checkov` (its own venv, `.venv-checkov`, made by `make checkov`: its pins
clash with common packages) with zero failed checks and every skip justified in place, and
the facts that tie the manifests to the server (probes, ports, drain time, metric names)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from server.config import ServeConfig
from tests.oracle import REPO_ROOT

MANIFESTS = REPO_ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.33.0"
CORE_KINDS = {"Namespace", "ConfigMap", "ServiceAccount", "Deployment", "Service",
              "PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy", "Role",
              "RoleBinding"}
CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
HEALTH_PORT, API_PORT = 9464, 8000
# The picker's default metric names (the model-server protocol's vLLM column) and its
# metric-name flags, deprecated in favour of per-engine mappings
PICKER_DEFAULT_METRICS = ("vllm:num_requests_waiting", "vllm:num_requests_running",
                          "vllm:kv_cache_usage_perc", "vllm:cache_config_info",
                          "vllm:lora_requests_info")
DEPRECATED_METRIC_FLAGS = {"total-queued-requests-metric", "total-running-requests-metric",
                           "kv-cache-usage-percentage-metric", "lora-info-metric",
                           "cache-info-metric"}


def documents() -> list[dict]:
    docs = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind: str, name: str = "tl-serve") -> dict:
    return next(d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name)


def test_core_kinds_validate_strictly_against_the_bundled_schemas():
    kinds = set()
    for doc in documents():
        kinds.add(doc["kind"])
        if doc["kind"] in CORE_KINDS:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert CORE_KINDS <= kinds and "InferencePool" in kinds
    # the validator does refuse what is wrong (so a pass above means something)
    broken = json.loads(json.dumps(by_kind("Deployment")))
    broken["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_the_deployment_matches_the_server():
    spec = by_kind("Deployment")["spec"]["template"]["spec"]
    main = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {"http": API_PORT, "health": HEALTH_PORT}
    probes = {k: main[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {k: (v["path"], v["port"]) for k, v in probes.items()} == {
        "startupProbe": ("/readyz", "health"), "livenessProbe": ("/healthz", "health"),
        "readinessProbe": ("/readyz", "health")}
    config = by_kind("ConfigMap", "tl-serve-config")["data"]["runtime.toml"]
    key_line = 'api_key_file = "/var/run/secrets/tlserve/api_key"'     # the Secret's mount
    assert key_line in config
    cfg = ServeConfig.from_toml(config.replace(key_line, 'api_key = "placeholder"'), {})
    assert cfg.http_listen.endswith(f":{API_PORT}") and cfg.health_listen.endswith(
        f":{HEALTH_PORT}")
    pause_s = int(main["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert spec["terminationGracePeriodSeconds"] > pause_s + cfg.drain_timeout_s
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert main["resources"]["requests"] and main["resources"]["limits"]
    mounts = {m["mountPath"] for m in main["volumeMounts"]}
    assert cfg.model_dir.startswith(tuple(mounts))                # the model comes from a volume
    init = spec["initContainers"][0]["command"]
    assert init[:2] == ["tlserve", "fetch-model"] and "--from" in init


def test_autoscaler_and_gateway_name_our_metrics():
    metrics_text = (REPO_ROOT / "server" / "observe" / "metrics.py").read_text()
    hpa = by_kind("HorizontalPodAutoscaler")["spec"]["metrics"]
    assert [m["type"] for m in hpa] == ["Pods", "Resource"]
    assert hpa[0]["pods"]["metric"]["name"] == "tl_engine_queue_depth"
    assert f'"{hpa[0]["pods"]["metric"]["name"]}"' in metrics_text       # a metric we export
    assert hpa[1]["resource"]["name"] == "cpu"


def test_the_endpoint_picker_reads_vllm_names_at_its_defaults_with_the_prefix_scorer():
    """The pool's pods are vLLM-type pods to the picker, which then reads the protocol's
    vLLM names (its defaults, written by server/observe/vllm_metrics.py) from the health
    port; no metric-name flag (deprecated in favour of per-engine mappings); the
    prefix-cache scorer is in the scheduling profile, weighted highest."""
    vllm_text = (REPO_ROOT / "server" / "observe" / "vllm_metrics.py").read_text()
    pool = by_kind("InferencePool")["spec"]
    assert pool["targetPorts"] == [{"number": API_PORT}]
    pods = by_kind("Deployment")["spec"]
    assert pool["selector"]["matchLabels"] == pods["selector"]["matchLabels"]
    assert pods["template"]["metadata"]["labels"]["llm-d.ai/engine-type"] == "vllm"
    for name in PICKER_DEFAULT_METRICS:
        assert f'"{name}"' in vllm_text, name
    epp = by_kind("Deployment", "tl-serve-epp")["spec"]["template"]["spec"]
    args = epp["containers"][0]["args"]
    flags = dict(a.lstrip("-").split("=", 1) for a in args)
    assert not set(flags) & DEPRECATED_METRIC_FLAGS, flags
    assert flags["model-server-metrics-port"] == str(HEALTH_PORT)
    mount = next(m for m in epp["containers"][0]["volumeMounts"])
    volume = next(v for v in epp["volumes"] if v["name"] == mount["name"])
    config_map = by_kind("ConfigMap", volume["configMap"]["name"])["data"]
    directory, _, file_name = flags["config-file"].rpartition("/")
    assert directory == mount["mountPath"] and file_name in config_map
    config = yaml.safe_load(config_map[file_name])
    assert config["kind"] == "EndpointPickerConfig"
    assert {p["type"] for p in config["plugins"]} >= {"prefix-cache-scorer", "queue-scorer",
                                                       "lora-affinity-scorer"}
    profile = {p["pluginRef"]: p.get("weight") for p in config["schedulingProfiles"][0]["plugins"]}
    scorers = {ref: w for ref, w in profile.items() if w is not None}
    assert max(scorers, key=scorers.get) == "prefix-cache-scorer"


@pytest.fixture(scope="module")
def checkov() -> Path:
    if not CHECKOV.exists():
        subprocess.run(["make", "checkov"], cwd=REPO_ROOT, check=True, capture_output=True,
                       timeout=900)
    return CHECKOV


def test_checkov_finds_no_failed_check_and_every_skip_is_justified(checkov):
    done = subprocess.run([str(checkov), "--directory", str(MANIFESTS), "--framework",
                           "kubernetes", "--output", "json", "--compact",
                           "--skip-download"],                    # offline: no platform calls
                          capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    failed = [(c["check_id"], c["resource"]) for r in reports
              for c in r["results"]["failed_checks"]]
    assert failed == [], failed
    assert sum(r["summary"]["passed"] for r in reports) > 50
    # each skip is an annotation `checkov.io/skipN: CHECK_ID=<why>` on the object it skips
    # (checkov does not copy the reason into its report, so it is read from the manifests)
    reasons = {}
    for doc in documents():
        for key, value in doc["metadata"].get("annotations", {}).items():
            if key.startswith("checkov.io/skip"):
                check_id, _, why = value.partition("=")
                reasons.setdefault(check_id, []).append(why)
    skipped = {c["check_id"] for r in reports for c in r["results"]["skipped_checks"]}
    assert skipped and skipped <= set(reasons)
    assert all(re.fullmatch(r"CKV2?_K8S_\d+", k) for k in reasons)
    assert all(len(why.split()) >= 8 for whys in reasons.values() for why in whys), reasons
