"""Realistic, varied sample workflows for the demo and load: a few WorkflowTemplates in tenant
namespaces and a generator submitting runs of them (DAGs and steps of 2-6 steps, parameters,
artifacts, some failing, some waiting on an approval suspend node)."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

import yaml

from shared.storage import namespace_prefix
from sim.argo.naming import LABEL_CONTROLLER_INSTANCE_ID, Obj
from sim.kube.types import ApiError, ResourceType

if TYPE_CHECKING:
    from sim.kube.store import ClusterStore

SAMPLE_NAMESPACES = ("kubeopera-data-acme", "kubeopera-data-globex", "argo")


def _container(
    image: str, script: str, *, fail: str = "false", ticks: str = "2", cpu: str = "250m"
) -> Obj:
    return {
        "image": image,
        "command": ["sh", "-c"],
        "args": [script],
        "env": [
            {"name": "SIM_FAIL", "value": fail},
            {"name": "SIM_DURATION_TICKS", "value": ticks},
        ],
        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
    }


def _template(name: str, spec: Obj) -> Obj:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "sim-samples"}},
        "spec": spec,
    }


def _params(*pairs: tuple[str, str]) -> Obj:
    return {"parameters": [{"name": n, "value": v} for n, v in pairs]}


def etl_template() -> Obj:
    """extract -> (clean, enrich) -> load, with an artifact and a failure switch."""
    step = {"inputs": {"parameters": [{"name": "ticks", "value": "2"}]}}
    return _template(
        "etl-daily",
        {
            "entrypoint": "pipeline",
            "arguments": _params(("date", "2024-01-01"), ("fail", "false"), ("ticks", "2")),
            "templates": [
                {
                    "name": "pipeline",
                    "dag": {
                        "tasks": [
                            {"name": "extract", "template": "extract"},
                            {"name": "clean", "template": "transform", "depends": "extract"},
                            {"name": "enrich", "template": "transform", "depends": "extract"},
                            {
                                "name": "load",
                                "template": "load",
                                "depends": "clean && enrich",
                                "arguments": _params(
                                    ("rows", "{{tasks.extract.outputs.parameters.rows}}")
                                ),
                            },
                        ]
                    },
                },
                {
                    **step,
                    "name": "extract",
                    "container": _container(
                        "python:3.12",
                        "echo extracting {{workflow.parameters.date}}",
                        ticks="{{workflow.parameters.ticks}}",
                    ),
                    "outputs": {
                        "parameters": [
                            {"name": "rows", "valueFrom": {"path": "/tmp/rows", "default": "1200"}}
                        ],
                        "artifacts": [{"name": "raw", "path": "/tmp/raw.csv"}],
                    },
                },
                {
                    "name": "transform",
                    "container": _container(
                        "python:3.12", "echo transforming", ticks="{{workflow.parameters.ticks}}"
                    ),
                },
                {
                    "name": "load",
                    "inputs": {"parameters": [{"name": "rows"}]},
                    "container": _container(
                        "postgres:16",
                        "echo loading {{inputs.parameters.rows}} rows",
                        fail="{{workflow.parameters.fail}}",
                    ),
                },
            ],
        },
    )


def train_template() -> Obj:
    """prepare -> train -> evaluate -> approve (suspend) -> register, with an exit handler."""
    return _template(
        "model-train",
        {
            "entrypoint": "train-pipeline",
            "onExit": "notify",
            "arguments": _params(("model", "churn"), ("fail", "false"), ("approval", "30s")),
            "templates": [
                {
                    "name": "train-pipeline",
                    "dag": {
                        "tasks": [
                            {"name": "prepare", "template": "work"},
                            {"name": "train", "template": "train", "depends": "prepare"},
                            {"name": "evaluate", "template": "work", "depends": "train"},
                            {"name": "approve", "template": "approve", "depends": "evaluate"},
                            {
                                "name": "register",
                                "template": "work",
                                "depends": "approve",
                                "when": "{{tasks.approve.outputs.parameters.approved}} == true",
                            },
                        ]
                    },
                },
                {"name": "work", "container": _container("python:3.12", "echo working")},
                {
                    "name": "train",
                    "container": _container(
                        "pytorch/pytorch:2.3",
                        "echo training {{workflow.parameters.model}}",
                        fail="{{workflow.parameters.fail}}",
                        ticks="4",
                        cpu="2",
                    ),
                    "outputs": {"artifacts": [{"name": "model", "path": "/tmp/model.pt"}]},
                },
                {
                    "name": "approve",
                    "suspend": {"duration": "{{workflow.parameters.approval}}"},
                    "outputs": {
                        "parameters": [
                            {"name": "approved", "valueFrom": {"supplied": {}, "default": "true"}}
                        ]
                    },
                },
                {
                    "name": "notify",
                    "container": _container(
                        "curlimages/curl", "echo run {{workflow.status}}", ticks="1"
                    ),
                },
            ],
        },
    )


def report_template() -> Obj:
    """Steps: fetch, then two renders in parallel, then publish."""
    return _template(
        "weekly-report",
        {
            "entrypoint": "report",
            "arguments": _params(("fail", "false")),
            "templates": [
                {
                    "name": "report",
                    "steps": [
                        [{"name": "fetch", "template": "task"}],
                        [
                            {"name": "render-pdf", "template": "task"},
                            {"name": "render-html", "template": "task"},
                        ],
                        [{"name": "publish", "template": "publish"}],
                    ],
                },
                {"name": "task", "container": _container("alpine:3.20", "echo step")},
                {
                    "name": "publish",
                    "retryStrategy": {"limit": 1},
                    "container": _container(
                        "alpine:3.20", "echo publish", fail="{{workflow.parameters.fail}}"
                    ),
                },
            ],
        },
    )


def sample_templates() -> list[Obj]:
    return [etl_template(), train_template(), report_template()]


def install_samples(store: ClusterStore, *, bucket: str | None = None) -> None:
    """Create the sample namespaces and templates (idempotent); with a bucket, also each
    tenant namespace's `artifact-repositories` ConfigMap."""
    namespaces = store.resolve("", "v1", "namespaces")
    templates = store.resolve("argoproj.io", "v1alpha1", "workflowtemplates")
    configmaps = store.resolve("", "v1", "configmaps")
    for namespace in SAMPLE_NAMESPACES:
        _create(store, namespaces, None, {"metadata": {"name": namespace}})
        for template in sample_templates():
            _create(store, templates, namespace, template)
        if bucket and namespace.startswith("kubeopera-"):
            key_format = f"{namespace_prefix(namespace)}{{{{workflow.name}}}}/{{{{pod.name}}}}"
            repository = {
                "archiveLogs": True,
                "s3": {
                    "bucket": bucket,
                    "keyFormat": key_format,
                },
            }
            _create(
                store,
                configmaps,
                namespace,
                {
                    "metadata": {
                        "name": "artifact-repositories",
                        "annotations": {
                            "workflows.argoproj.io/default-artifact-repository": "default-v1"
                        },
                    },
                    "data": {"default-v1": yaml.safe_dump(repository)},
                },
            )


def _create(store: ClusterStore, rtype: ResourceType, namespace: str | None, obj: Obj) -> None:
    try:
        store.create(rtype, namespace, obj)
    except ApiError as error:
        if error.status != 409:
            raise


def sample_workflow(rng: random.Random) -> tuple[str, Obj]:
    """A run of one of the sample templates with varied parameters: (namespace, workflow)."""
    namespace = rng.choice(SAMPLE_NAMESPACES)
    template = rng.choice(["etl-daily", "etl-daily", "model-train", "weekly-report"])
    fail = "true" if rng.random() < 0.2 else "false"
    params = [("fail", fail)]
    if template == "etl-daily":
        params += [
            ("date", f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"),
            ("ticks", str(rng.randint(1, 4))),
        ]
    if template == "model-train":
        params += [
            ("model", rng.choice(["churn", "fraud", "ltv"])),
            ("approval", rng.choice(["20s", "45s", "2m"])),
        ]
    workflow: Obj = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": f"{template}-", "namespace": namespace},
        "spec": {
            "workflowTemplateRef": {"name": template},
            "arguments": _params(*params),
        },
    }
    return namespace, workflow


async def submit_sample_workflows(
    store: ClusterStore,
    rate: float,
    *,
    seed: int | None = None,
    limit: int | None = None,
    data_instance_id: str | None = None,
) -> None:
    """Submit sample runs at `rate` per second (forever, or `limit` runs). With
    `data_instance_id` (the host), runs in tenant namespaces carry it, as the compiler's do, and
    so run on the data controller."""
    install_samples(store)
    workflows = store.resolve("argoproj.io", "v1alpha1", "workflows")
    rng = random.Random(seed)
    submitted = 0
    while limit is None or submitted < limit:
        namespace, workflow = sample_workflow(rng)
        if data_instance_id and namespace.startswith("kubeopera-data-"):
            workflow["metadata"]["labels"] = {LABEL_CONTROLLER_INSTANCE_ID: data_instance_id}
        store.create(workflows, namespace, workflow)
        submitted += 1
        await asyncio.sleep(rng.expovariate(rate) if rate > 0 else 1.0)
