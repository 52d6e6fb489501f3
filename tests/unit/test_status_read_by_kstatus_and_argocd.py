"""What Flux (kstatus, run as the real sigs.k8s.io/cli-utils library) and Argo CD (gitops/
argocd-health.lua) conclude from a QuantizedModel's status, step by step through apply, a weights
edit, a KV-dtype edit, a limits edit and a failed conversion, reconciled on an in-memory cluster."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

from kvant_contracts.kube_object import Obj
from kvant_dev.toolchain import Toolchain
from kvant_operator.artifact_recipe import artifact_key
from kvant_operator.reconcile import Reconciler
from kvant_operator.render.jobs import artifact_job_name, plan_job_name
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, NOW, SETTINGS, body, plan_log
from tests.unit.render_inputs import spec_of
from tests.unit.test_argocd_health_lua import health

RESULT = '{"digest": "sha256:%s", "bytes": 1234, "sourceBytes": 5678}'


def kstatus(objects: list[Obj]) -> list[str]:
    lines = "\n".join(json.dumps(o) for o in objects) + "\n"
    run = subprocess.run(
        [str(Toolchain.locate().kstatus)], input=lines, capture_output=True, text=True, check=True, timeout=60
    )
    return [json.loads(line)["status"] for line in run.stdout.splitlines()]


class Model:
    """One QuantizedModel on the in-memory cluster, edited and reconciled the way the operator would."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path, self.kube = tmp_path, MemoryKube()
        self.obj = body(
            weights={"format": "int4", "groupSize": 32}, kvCache={"dtype": "fp8_e4m3", "scales": "unit"}
        )
        self.reconciler = Reconciler(self.kube, SETTINGS)
        self.seen: list[tuple[str, Obj]] = []

    def reconcile(self, step: str) -> None:
        outcome = self.reconciler.reconcile(self.obj, now=NOW)
        self.obj["status"] = {**self.obj.get("status", {}), **outcome.status}
        self.seen.append((step, copy.deepcopy(self.obj)))

    def edit(self, **spec: Any) -> None:
        self.obj["spec"].update(spec)
        self.obj["metadata"]["generation"] += 1

    def finish_plan(self) -> None:
        self.kube.finish_job(
            NAMESPACE, plan_job_name("tiny", spec_of(self.obj)), {"plan": plan_log(self.obj, self.tmp_path)}
        )

    def finish_conversion(self, failed: bool = False) -> None:
        key = artifact_key(spec_of(self.obj))
        logs = {"convert": "shard 2: truncated" if failed else RESULT % key}
        self.kube.finish_job(NAMESPACE, artifact_job_name(key, 1), logs, failed="convert" if failed else None)

    def roll_out(self) -> None:
        self.kube.roll_out(NAMESPACE, "tiny")


def test_flux_and_argocd_see_each_step_as_a_user_expects(tmp_path: Path) -> None:
    m = Model(tmp_path)
    m.reconcile("applied")
    m.finish_plan()
    m.reconcile("planned, converting")
    m.finish_conversion()
    m.reconcile("converted, rolling out")
    m.roll_out()
    m.reconcile("serving")

    m.edit(weights={"format": "int4", "groupSize": 64})
    m.reconcile("weights edited: re-planning")
    m.finish_plan()
    m.reconcile("weights edited: converting, old generation serves")
    m.finish_conversion()
    m.reconcile("weights edited: rolling out")
    m.roll_out()
    m.reconcile("weights edited: serving")

    m.edit(limits={**m.obj["spec"]["limits"], "maxConcurrency": 4})
    m.reconcile("limits edited")

    m.edit(weights={"format": "int4", "groupSize": 128})
    m.reconcile("bad weights: re-planning")
    m.finish_plan()
    m.reconcile("bad weights: converting")
    m.finish_conversion(failed=True)
    m.reconcile("bad weights: conversion failed")

    expected = {
        "applied": ("InProgress", "Progressing"),
        "planned, converting": ("InProgress", "Progressing"),
        "converted, rolling out": ("InProgress", "Progressing"),
        "serving": ("Current", "Healthy"),
        "weights edited: re-planning": ("InProgress", "Progressing"),
        "weights edited: converting, old generation serves": ("InProgress", "Progressing"),
        "weights edited: rolling out": ("InProgress", "Progressing"),
        "weights edited: serving": ("Current", "Healthy"),
        "limits edited": ("Current", "Healthy"),
        "bad weights: re-planning": ("InProgress", "Progressing"),
        "bad weights: converting": ("InProgress", "Progressing"),
        "bad weights: conversion failed": ("Failed", "Degraded"),
    }
    flux = kstatus([obj for _, obj in m.seen])
    argo = [health(obj)[0] for _, obj in m.seen]
    assert {step: (f, a) for (step, _), f, a in zip(m.seen, flux, argo, strict=True)} == expected

    # While the new weights converted, the old generation's replicas kept answering, and said so.
    during = dict(m.seen)["weights edited: converting, old generation serves"]
    serving = next(c for c in during["status"]["conditions"] if c["type"] == "Serving")
    assert (serving["status"], serving["reason"]) == ("True", "PreviousGeneration")


def test_a_stale_status_is_in_progress_for_both(tmp_path: Path) -> None:
    m = Model(tmp_path)
    m.reconcile("applied")
    m.obj["metadata"]["generation"] += 1  # an edit the operator has not seen yet
    assert kstatus([m.obj]) == ["InProgress"]
    assert health(m.obj)[0] == "Progressing"
