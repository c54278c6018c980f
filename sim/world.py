"""The simulated world for tests and the demo: N Kubernetes API emulators, each with an Argo
simulator and Argo server, a cluster registry, optional log archival and sample load.

Cluster 0 is the host: its kube-system UID is the host identity, and it is listed in the
registry (with a null kubeconfig, like production's in-cluster identity) only when
`host_registered`. The host runs a second Argo, as production's does for tenants' pipelines:
a controller with the data instance ID in Strict template referencing, and its Argo server;
and Argo Events (`sim.events`), whose webhooks listen on `SimCluster.events.url`.

With `serving`, the host also runs the KServe + Knative + Kourier stand-in (`sim.serving`,
`SimCluster.serving`), since stagectl serves models on the host cluster: an InferenceService
created there becomes Ready with a URL served by a model server of its own, behind the gateway
(`serving.gateway.url`, what KNATIVE_GATEWAY resolves to here) that routes by `Host`. The host
then has what installing Knative Serving with Kourier leaves: the namespaces `knative-serving`
and `kourier-system` and the Service `kourier-internal` (KNATIVE_GATEWAY's default name).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from sim.argo.archive import S3Archive, S3Settings
from sim.argo.controller import ArgoSimulator
from sim.argo.node_status import NodeStatusStorage
from sim.argo.restrictions import STRICT
from sim.argo.samples import install_samples, submit_sample_workflows
from sim.argo.server import (
    ARGO_NAMESPACE,
    ARGO_PORT,
    ARGO_SERVICE,
    DATA_ARGO_NAMESPACE,
    DATA_ARGO_SERVICE,
    DATA_INSTANCE_ID,
    ArgoServer,
)
from sim.events.argo_events import ArgoEventsSim
from sim.kube.server import RunningCluster, start_cluster
from sim.kube.store import ClusterStore
from sim.kube.types import ApiError
from sim.registry import ClusterRecord, RunningRegistry, start_registry
from sim.serving.controller import ServingConfig, ServingSimulator
from sim.serving.credentials import S3Config

__all__ = ["SimCluster", "World", "start_world", "submit_sample_workflows"]
# EVENTS_NAMESPACE's default: where the host's Argo Events finds event sources and sensors.
EVENTS_NAMESPACE = "kubeopera-pipeline-events"

log = structlog.get_logger("sim.world")
REGIONS = ("eu-west-1", "us-east-1", "ap-southeast-1", "eu-central-1")
DEFAULT_REGISTRY_KEY = "sim-registry-key"
# Where Knative Serving and Kourier install themselves (KNATIVE_GATEWAY's default Service).
KNATIVE_NAMESPACE = "knative-serving"
KOURIER_NAMESPACE = "kourier-system"
KOURIER_SERVICE = "kourier-internal"
KNATIVE_GATEWAY = f"{KOURIER_SERVICE}.{KOURIER_NAMESPACE}.svc.cluster.local"
# The gateway's draws along a canary split: the same every run unless a test reseeds it.
SERVING_SEED = 0


@dataclass
class SimCluster:
    """One simulated cluster: the API emulator, its Argo controller and Argo server (no
    instance ID), and on the host the data controller and its server (`data_argo`,
    `data_server`)."""

    id: str
    name: str
    region: str
    running: RunningCluster
    argo: ArgoSimulator
    server: ArgoServer
    host: bool = False
    data_argo: ArgoSimulator | None = None
    data_server: ArgoServer | None = None
    events: ArgoEventsSim | None = None  # the host's Argo Events (webhooks, sensors)
    # The host's KServe + Knative + Kourier stand-in (sim/serving), when serving is on.
    serving: ServingSimulator | None = None

    @property
    def controllers(self) -> list[ArgoSimulator]:
        return [self.argo, *([self.data_argo] if self.data_argo else [])]

    @property
    def data_instance_id(self) -> str | None:
        return self.data_argo.instance_id if self.data_argo else None

    async def step(self) -> None:
        """One tick of every controller of the cluster."""
        for controller in self.controllers:
            await controller.step()

    @property
    def store(self) -> ClusterStore:
        return self.running.store

    @property
    def url(self) -> str:
        return self.running.url

    @property
    def kubeconfig(self) -> str:
        return self.running.kubeconfig

    @property
    def kube_system_uid(self) -> str:
        return self.running.kube_system_uid

    def record(self, *, with_kubeconfig: bool = True) -> ClusterRecord:
        return ClusterRecord(
            id=self.id,
            name=self.name,
            region=self.region,
            provider="sim",
            kubeconfig=self.kubeconfig if with_kubeconfig else None,
            kube_system_uid=self.kube_system_uid,
        )


@dataclass
class World:
    clusters: list[SimCluster]
    registry: RunningRegistry
    archive: S3Archive | None = None
    _load: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def host(self) -> SimCluster:
        return self.clusters[0]

    @property
    def registry_url(self) -> str:
        return self.registry.url

    @property
    def registry_key(self) -> str:
        return self.registry.key

    def register(self, cluster: SimCluster) -> None:
        """List a cluster in the registry (the host without a kubeconfig)."""
        self.registry.registry.add(cluster.record(with_kubeconfig=not cluster.host))

    def unregister(self, cluster: SimCluster) -> None:
        self.registry.registry.remove(cluster.id)

    def start_load(self, rate: float, *, seed: int | None = None) -> None:
        """Submit sample workflows to every cluster at `rate` runs per second each."""
        for index, cluster in enumerate(self.clusters):
            install_samples(cluster.store, bucket=self.archive.bucket if self.archive else None)
            task = asyncio.create_task(
                _guarded(
                    submit_sample_workflows(
                        cluster.store,
                        rate,
                        seed=None if seed is None else seed + index,
                        data_instance_id=cluster.data_instance_id,
                    ),
                    cluster=cluster.name,
                ),
                name=f"sim-load-{cluster.name}",
            )
            self._load.append(task)

    async def stop(self) -> None:
        for task in self._load:
            task.cancel()
        for task in self._load:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._load.clear()
        for cluster in self.clusters:
            for controller in cluster.controllers:
                await controller.stop()
            if cluster.serving is not None:
                await cluster.serving.stop()
            if cluster.events is not None:
                await cluster.events.stop()
            cluster.store.close_streams()
            await cluster.running.stop()
        await self.registry.stop()


async def _guarded(coroutine: Coroutine[Any, Any, None], *, cluster: str) -> None:
    """Run a background coroutine; a crash is logged, never silently lost."""
    try:
        await coroutine
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("sim_load_failed", cluster=cluster)


def _ensure(
    store: ClusterStore, group: str, plural: str, namespace: str | None, obj: dict[str, object]
) -> None:
    try:
        store.create(store.resolve(group, "v1", plural), namespace, obj)
    except ApiError as error:
        if error.status != 409:
            raise


async def start_cluster_with_argo(
    name: str,
    *,
    region: str,
    tick: float,
    archive: S3Archive | None,
    pod_gc_delay: float,
    autostart: bool,
    host: bool = False,
    bind: str = "127.0.0.1",
) -> SimCluster:
    """One emulated cluster with an `argo` namespace, the Argo server proxy and controller."""
    running = await start_cluster(name, host=bind)
    store = running.store
    _ensure_argo_service(store, ARGO_NAMESPACE, ARGO_SERVICE)
    if host:
        # Where workflow-manager's own Leases live (its release namespace in production).
        _ensure(store, "", "namespaces", None, {"metadata": {"name": "workflow-manager"}})
    server = ArgoServer(store)
    server.register()
    argo = ArgoSimulator(store, tick=tick, archive=archive, pod_gc_delay=pod_gc_delay)
    cluster_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"sim-cluster/{name}"))
    cluster = SimCluster(cluster_id, name, region, running, argo, server, host=host)
    if host:
        _start_data_argo(cluster, tick=tick, archive=archive, pod_gc_delay=pod_gc_delay)
        _ensure(store, "", "namespaces", None, {"metadata": {"name": EVENTS_NAMESPACE}})
        cluster.events = ArgoEventsSim(store, host=bind)
        await cluster.events.start()
    if autostart:
        for controller in cluster.controllers:
            controller.start()
    return cluster


def _ensure_argo_service(store: ClusterStore, namespace: str, service: str) -> None:
    """An Argo server's namespace and Service, which the service proxy routes to."""
    _ensure(store, "", "namespaces", None, {"metadata": {"name": namespace}})
    _ensure(
        store,
        "",
        "services",
        namespace,
        {
            "metadata": {"name": service, "labels": {"app": "argo-server"}},
            "spec": {"ports": [{"name": "web", "port": int(ARGO_PORT)}]},
        },
    )


def _start_data_argo(
    cluster: SimCluster, *, tick: float, archive: S3Archive | None, pod_gc_delay: float
) -> None:
    """The host's controller for tenants' pipelines and its Argo server (ARGO_DATA_SERVER_URL's
    default location; the instance ID is ARGO_DATA_INSTANCE_ID's default)."""
    store = cluster.store
    _ensure_argo_service(store, DATA_ARGO_NAMESPACE, DATA_ARGO_SERVICE)
    # One node storage for the controller and its server, as Argo's share the offload table.
    node_status = NodeStatusStorage()
    cluster.data_server = ArgoServer(store, instance_id=DATA_INSTANCE_ID, node_status=node_status)
    cluster.data_server.register(namespace=DATA_ARGO_NAMESPACE, service=DATA_ARGO_SERVICE)
    cluster.data_argo = ArgoSimulator(
        store,
        node_status=node_status,
        tick=tick,
        archive=archive,
        pod_gc_delay=pod_gc_delay,
        instance_id=DATA_INSTANCE_ID,
        template_referencing=STRICT,
    )


async def _start_serving(cluster: SimCluster, *, s3_endpoint: str, bind: str) -> None:
    """The serving stand-in on `cluster` and the objects a Knative install leaves."""
    store = cluster.store
    for namespace in (KNATIVE_NAMESPACE, KOURIER_NAMESPACE):
        _ensure(store, "", "namespaces", None, {"metadata": {"name": namespace}})
    _ensure(
        store,
        "",
        "services",
        KOURIER_NAMESPACE,
        {
            "metadata": {
                "name": KOURIER_SERVICE,
                "labels": {"networking.knative.dev/ingress-provider": "kourier"},
            },
            "spec": {
                "selector": {"app": "3scale-kourier-gateway"},
                "ports": [{"name": "http2", "port": 80, "targetPort": 8081}],
            },
        },
    )
    config = ServingConfig(s3=S3Config(endpoint=s3_endpoint))
    cluster.serving = ServingSimulator(store, config=config, seed=SERVING_SEED)
    await cluster.serving.start(host=bind)


async def start_world(
    n_clusters: int,
    *,
    tick: float = 1.0,
    s3_endpoint: str | None = None,
    bucket: str | None = None,
    registry_key: str = DEFAULT_REGISTRY_KEY,
    host_registered: bool = False,
    pod_gc_delay: float = 5.0,
    autostart: bool = True,
    load_rate: float | None = None,
    bind: str = "127.0.0.1",
    serving: bool = False,
) -> World:
    """Start `n_clusters` clusters with Argo (cluster 0 is the host) and the registry.

    With `autostart=False` the Argo simulators do not tick by themselves: call
    `cluster.argo.step()`. Log archival needs both `s3_endpoint` and `bucket`. `serving`
    (needs `s3_endpoint`): the host runs the KServe stand-in, its model servers downloading
    from that object storage, its gateway on a port of its own (`host.serving.gateway.url`).
    """
    archive = None
    if s3_endpoint and bucket:
        archive = S3Archive(S3Settings(endpoint=s3_endpoint, bucket=bucket))
        await archive.ensure_bucket()
    registry = await start_registry(internal_key=registry_key, host=bind)
    world = World(clusters=[], registry=registry, archive=archive)
    try:
        for index in range(n_clusters):
            cluster = await start_cluster_with_argo(
                "host" if index == 0 else f"cluster-{index}",
                region=REGIONS[index % len(REGIONS)],
                tick=tick,
                archive=archive,
                pod_gc_delay=pod_gc_delay,
                autostart=autostart,
                host=index == 0,
                bind=bind,
            )
            world.clusters.append(cluster)
            if index > 0 or host_registered:
                world.register(cluster)
        if serving:
            if not s3_endpoint:
                raise ValueError("serving needs s3_endpoint (the models' object storage)")
            await _start_serving(world.host, s3_endpoint=s3_endpoint, bind=bind)
    except BaseException:
        await world.stop()
        raise
    if load_rate:
        world.start_load(load_rate)
    return world
