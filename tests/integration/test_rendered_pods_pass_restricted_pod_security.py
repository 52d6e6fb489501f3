"""Every pod Kvant renders (plan, shards, artifact and eval Jobs, and the serving pods of every role)
is admitted by kube-apiserver's own PodSecurity admission in a namespace that enforces `restricted`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvant_dev.cluster import KubectlError
from kvant_operator.api.status import SourceStatus
from kvant_operator.artifact_recipe import artifact_key, artifact_location, needs_conversion
from kvant_operator.render import jobs
from kvant_operator.render.fetch_job import fetch_job, fetch_key
from kvant_operator.render.gate_access import gate_identity
from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment, serving_objects
from kvant_operator.settings import OperatorSettings
from tests.unit.render_inputs import body, plan, spec_of

pytestmark = pytest.mark.cluster

NAMESPACE = "kvant-restricted"
SETTINGS = OperatorSettings()
EVALUATION = {"maxKLDivergence": 0.05, "blockRollout": True}


@pytest.fixture(scope="module")
def restricted_namespace(apiserver: Any) -> Any:
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": labels}}
    apiserver.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(namespace))
    # Pods need the namespace's default ServiceAccount, which a controller-manager would create.
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": NAMESPACE},
    }
    apiserver.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(account))
    yield apiserver
    apiserver.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    """The pod a Job or Deployment would create, as the API server would be asked to admit it."""
    template = workload["spec"]["template"]
    name = workload["metadata"]["name"][:50] + "-pod"
    metadata = {"name": name, "namespace": NAMESPACE, "labels": template["metadata"].get("labels", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def _apply_gate_account(cluster: Any, example: str) -> None:
    """Serving pods run as the gate's ServiceAccount, which the operator applies before the Deployments
    (the API server refuses a pod whose account does not exist)."""
    model = body(example)
    model["metadata"]["namespace"] = NAMESPACE
    account = next(o for o in gate_identity(model) if o["kind"] == "ServiceAccount")
    account["metadata"].pop("ownerReferences", None)  # the owner does not exist in this namespace
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(account))


def _workloads(example: str, **overrides: Any) -> list[dict[str, Any]]:
    model = body(example, evaluation=EVALUATION, **overrides)
    model["metadata"]["namespace"] = NAMESPACE
    spec = spec_of(model)
    key = artifact_key(spec)
    found = [
        jobs.plan_job(model, spec, SETTINGS),
        jobs.artifact_job([model], spec, SETTINGS, key, attempt=1, workers=2, plan=plan()),
        jobs.eval_job(model, spec, SETTINGS, key),
    ]
    if needs_conversion(spec):  # the only case the operator renders a shards Job in
        found.append(jobs.shards_job([model], spec, SETTINGS, key, workers=2, attempt=1, plan=plan()))
    inputs = ServingInputs(model, spec, plan(), artifact_location(spec, SETTINGS, key), "sha256:a", SETTINGS)
    return found + [deployment(inputs, role) for role in roles(spec)]


@pytest.mark.parametrize("example", ["tiny.yaml", "llama-70b-prefill-decode-fp8kv.yaml"])
def test_every_rendered_pod_is_admitted_under_restricted(restricted_namespace: Any, example: str) -> None:
    _apply_gate_account(restricted_namespace, example)
    pods = [_pod(w) for w in _workloads(example, source={"uri": "pvc://models/tiny-llama"})]
    result = restricted_namespace.kubectl(
        "create", "--dry-run=server", "-f", "-", input="\n".join(json.dumps(p) for p in pods)
    )
    assert result.stdout.count("(server dry run)") == len(pods), result.stdout + result.stderr


def test_a_fetch_job_and_the_jobs_reading_its_folder_are_admitted_and_valid(
    restricted_namespace: Any,
) -> None:
    """An s3:// model's fetch Job (credentials as envFrom, a podFailurePolicy) and the Jobs that read
    the fetched folder: admitted under restricted, and the Job specs valid for the API server."""
    model = body("tiny.yaml", source={"uri": "s3://models/tiny", "credentialsSecret": "s3-keys"})
    model["metadata"]["namespace"] = NAMESPACE
    spec = spec_of(model)
    fetched = SourceStatus(
        uri="s3://models/tiny",
        revision="r" * 64,
        location="pvc://kvant-artifacts/sources/s3/models/x/y",
        digest="sha256:" + "a" * 64,
    )
    key = artifact_key(spec, fetched)
    workloads = [
        fetch_job([model], spec, SETTINGS, fetch_key(spec, SETTINGS), 1),
        jobs.plan_job(model, spec, SETTINGS, fetched),
        jobs.artifact_job([model], spec, SETTINGS, key, attempt=1, fetched=fetched, plan=plan()),
    ]
    pods = [_pod(w) for w in workloads]
    result = restricted_namespace.kubectl(
        "create", "--dry-run=server", "-f", "-", input="\n".join(json.dumps(p) for p in pods)
    )
    assert result.stdout.count("(server dry run)") == len(pods), result.stdout + result.stderr
    for job in workloads:
        job["metadata"].pop("ownerReferences", None)
    result = restricted_namespace.kubectl(
        "create", "--dry-run=server", "-f", "-", input="\n".join(json.dumps(j) for j in workloads)
    )
    assert result.stdout.count("(server dry run)") == len(workloads), result.stdout + result.stderr


def test_a_file_source_is_a_host_path_which_restricted_refuses(restricted_namespace: Any) -> None:
    """file:// is for a dev node (a hostPath); a restricted namespace needs pvc:// sources."""
    plan_job = _workloads("tiny.yaml")[0]
    with pytest.raises(KubectlError, match='volume "source" uses restricted volume type "hostPath"'):
        restricted_namespace.kubectl(
            "create", "--dry-run=server", "-f", "-", input=json.dumps(_pod(plan_job))
        )


def test_the_namespace_really_enforces_restricted(restricted_namespace: Any) -> None:
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "c", "image": "kvant-runtime:0.1.0"}]},
    }
    with pytest.raises(KubectlError, match="violates PodSecurity"):
        restricted_namespace.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(bare))


def test_every_serving_object_passes_server_side_dry_run(restricted_namespace: Any) -> None:
    """The NetworkPolicy, Service, PDB, limits ConfigMap and Deployments, validated by the API server."""
    model = body("llama-70b-prefill-decode-fp8kv.yaml")
    model["metadata"]["namespace"] = NAMESPACE
    spec = spec_of(model)
    key = artifact_key(spec)
    inputs = ServingInputs(model, spec, plan(), artifact_location(spec, SETTINGS, key), "sha256:a", SETTINGS)
    objects = serving_objects(inputs, None)
    for obj in objects:
        obj["metadata"].pop("ownerReferences", None)  # the owner does not exist in this namespace
    result = restricted_namespace.kubectl(
        "apply",
        "--dry-run=server",
        "--server-side",
        "-f",
        "-",
        input="\n".join(json.dumps(o) for o in objects),
    )
    assert result.stdout.count("(server dry run)") == len(objects), result.stdout + result.stderr
    assert "NetworkPolicy" in {o["kind"] for o in objects}
