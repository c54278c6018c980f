"""The serving simulator: KServe's InferenceService controller and Knative Serving over one
emulated cluster, with a model server per ready revision and the gateway in front.

For each InferenceService (`serving.kserve.io/v1beta1`): a change of `spec.predictor` other
than `canaryTrafficPercent` creates the next Knative Revision (`serving.knative.dev/v1`,
`<isvc>-predictor-0000N`, owned by the ISVC, so deleting it collects them). The latest
revision loads its model `readiness_delay` seconds after it was created (the annotation
`sim.serving.kserve.io/readiness-delay` overrides it per ISVC): the storage initializer reads
the storageUri with the ServiceAccount's Secret (`sim.serving.credentials`), the stand-in
runtime loads the JSON model (`sim.serving.model`), and a model server starts; any failure
marks the revision failed with the message KServe's storage initializer or runtime would
print. Then the canary bookkeeping (`sim.serving.rollout`) and the status
(`sim.serving.status`) are written, and the gateway's routes follow the traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import structlog

from sim.kube.objects import owned
from sim.kube.types import ApiError, ResourceType, WatchEvent
from sim.serving import naming, rollout
from sim.serving.credentials import S3Config, StorageError, parse_storage_uri, s3_access
from sim.serving.gateway import DEFAULT_OWN_HOSTS, Backend, Gateway, Route
from sim.serving.model import ModelLoadError, load
from sim.serving.model_server import ModelServer
from sim.serving.status import RevisionState, isvc_status, knative_status, parse_predictor
from sim.serving.storage import download

if TYPE_CHECKING:
    from sim.kube.store import ClusterStore

log = structlog.get_logger("sim.serving")

REVISIONS = ResourceType("serving.knative.dev", "v1", "revisions", "Revision", True)
DIGEST_ANNOTATION = "sim.serving.kserve.io/template-digest"
DELAY_ANNOTATION = "sim.serving.kserve.io/readiness-delay"
# What the stand-in runtime (one ClusterServingRuntime, `kserve-sim`) declares it serves.
DEFAULT_FORMATS = frozenset({"sklearn", "xgboost", "lightgbm", "onnx", "pytorch", "tensorflow"})
NO_RUNTIME = "No runtime found to support specified framework/version"
Key = tuple[str, str]


@dataclass
class RevisionRuntime:
    namespace: str
    isvc: str
    name: str
    created: float
    delay: float
    state: RevisionState
    server: ModelServer | None = None


@dataclass
class ServingConfig:
    """What `inferenceservice-config` and Knative's `config-domain` would say."""

    domain: str = "example.com"
    s3: S3Config = field(default_factory=S3Config)
    formats: frozenset[str] = DEFAULT_FORMATS
    readiness_delay: float = 0.0


class ServingSimulator:
    """Reconciles the InferenceServices of one store; `step()` once, or `start()` to run in
    the background (woken by every ISVC change, and every `tick` while a model is loading)."""

    def __init__(
        self,
        store: ClusterStore,
        *,
        config: ServingConfig | None = None,
        tick: float = 0.05,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
        own_hosts: Iterable[str] = DEFAULT_OWN_HOSTS,
    ) -> None:
        self.store = store
        self.config = config or ServingConfig()
        self.tick = tick
        self.clock = clock
        store.register(REVISIONS)
        self.isvcs = store.resolve(naming.GROUP, "v1beta1", "inferenceservices")
        self.secrets = store.resolve("", "v1", "secrets")
        self.accounts = store.resolve("", "v1", "serviceaccounts")
        self.gateway = Gateway(self.route, seed=seed, own_hosts=tuple(own_hosts))
        self._revisions: dict[Key, RevisionRuntime] = {}
        self._routes: dict[str, Route] = {}
        self._dirty: set[Key] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe = store.subscribe(self._on_event)
        items, _ = store.list(self.isvcs, None)
        for item in items:
            self._dirty.add((item["metadata"]["namespace"], item["metadata"]["name"]))

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        """Start the gateway and reconcile in the background."""
        await self.gateway.start(host, port)
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"serving-sim-{self.store.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._unsubscribe()
        for runtime in self._revisions.values():
            if runtime.server is not None:
                await runtime.server.stop()
        await self.gateway.stop()

    async def run(self) -> None:
        """Reconcile forever; a failing pass is logged and the next one runs."""
        while True:
            try:
                await self.step()
            except Exception:
                log.exception("serving_sim_step_failed", cluster=self.store.name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.tick)
            self._wake.clear()

    def _on_event(self, event: WatchEvent, rtype: ResourceType) -> None:
        if rtype.key != self.isvcs.key:
            return
        metadata = event["object"].get("metadata") or {}
        self._dirty.add((str(metadata.get("namespace", "")), str(metadata.get("name", ""))))
        self._wake.set()

    # -- reconciling --------------------------------------------------------------------------

    async def step(self) -> None:
        """Reconcile every changed ISVC and every one with a model loading."""
        due = set(self._dirty)
        self._dirty.clear()
        due |= {
            (r.namespace, r.isvc) for r in self._revisions.values() if r.state.phase == "Loading"
        }
        for key in sorted(due):
            await self.reconcile(*key)

    async def reconcile(self, namespace: str, name: str) -> None:
        try:
            isvc = self.store.get(self.isvcs, namespace, name)
        except ApiError as error:
            if error.status != 404:
                raise
            await self._forget(namespace, name)
            return
        metadata = isvc["metadata"]
        if metadata.get("deletionTimestamp"):
            return
        predictor: dict[str, Any] = (isvc.get("spec") or {}).get("predictor") or {}
        model = predictor.get("model") or {}
        model_format = str((model.get("modelFormat") or {}).get("name") or "")
        failure = None
        if model_format not in self.config.formats:
            failure = ("NoSupportingRuntime", NO_RUNTIME)
        else:
            self._ensure_revision(isvc, predictor)
        revisions = self._revisions_of(namespace, name)
        latest = revisions[-1] if revisions else None
        if (
            latest is not None
            and latest.state.phase == "Loading"
            and failure is None
            and self.clock() >= latest.created + latest.delay
        ):
            await self._load(latest, predictor, isvc)
        ready = [r for r in revisions if r.state.phase == "Ready"]
        previous: dict[str, Any] = isvc.get("status") or {}
        bookkeeping = rollout.reconcile(
            parse_predictor(previous),
            canary_percent=naming.canary_percent(predictor),
            latest_created=latest.name if latest else "",
            latest_ready=ready[-1].name if ready else "",
        )
        now = self._now()
        cluster_local = naming.is_cluster_local(metadata)
        url = naming.url(name, namespace, domain=self.config.domain, cluster_local=cluster_local)
        knative = knative_status(
            service=naming.predictor_service(name),
            latest=latest.state if latest else None,
            traffic=bookkeeping.traffic,
            url=url,
            now=now,
        )
        status = isvc_status(
            previous,
            generation=int(metadata.get("generation") or 1),
            predictor=bookkeeping,
            knative=knative,
            latest=latest.state if latest else None,
            failure=failure,
            now=now,
        )
        self._publish_routes(namespace, name, cluster_local, bookkeeping.traffic)
        if status != previous:
            isvc["status"] = status
            try:
                self.store.replace_raw(self.isvcs, namespace, name, owned(isvc), status_only=True)
            except ApiError as error:
                if error.status not in (404, 409):
                    raise
                self._dirty.add((namespace, name))  # changed meanwhile: read it again

    def _ensure_revision(self, isvc: dict[str, Any], predictor: dict[str, Any]) -> None:
        metadata = isvc["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        digest = naming.template_digest(predictor)
        existing, _ = self.store.list(
            REVISIONS, namespace, label_selector=f"{naming.ISVC_LABEL}={name}"
        )
        existing.sort(key=lambda r: int(r["metadata"]["labels"]["serving.knative.dev/generation"]))
        if (
            existing
            and (existing[-1]["metadata"].get("annotations") or {}).get(DIGEST_ANNOTATION) == digest
        ):
            self._adopt(existing, isvc)
            return
        number = (
            int(existing[-1]["metadata"]["labels"]["serving.knative.dev/generation"]) + 1
            if existing
            else 1
        )
        revision = naming.revision_name(name, number)
        service = naming.predictor_service(name)
        self.store.create(
            REVISIONS,
            namespace,
            {
                "metadata": {
                    "name": revision,
                    "labels": {
                        naming.ISVC_LABEL: name,
                        naming.SERVICE_LABEL: service,
                        naming.CONFIGURATION_LABEL: service,
                        "serving.knative.dev/generation": str(number),
                        "component": "predictor",
                    },
                    "annotations": {DIGEST_ANNOTATION: digest},
                    "ownerReferences": [
                        {
                            "apiVersion": f"{naming.GROUP}/v1beta1",
                            "kind": "InferenceService",
                            "name": name,
                            "uid": metadata["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": naming.template(predictor),
            },
        )
        self._adopt(existing, isvc)
        for older in self._revisions_of(namespace, name):
            if older.state.phase == "Loading":  # never loaded: Knative leaves it unready
                older.state = replace(older.state, phase="Failed", message="superseded")
        self._revisions[(namespace, revision)] = RevisionRuntime(
            namespace,
            name,
            revision,
            self.clock(),
            self._delay(isvc),
            RevisionState(revision, "Loading"),
        )

    def _adopt(self, existing: list[dict[str, Any]], isvc: dict[str, Any]) -> None:
        """Revisions stored before this simulator started: the latest loads again at once."""
        for index, item in enumerate(existing):
            meta = item["metadata"]
            key = (meta["namespace"], meta["name"])
            if key in self._revisions:
                continue
            latest = index == len(existing) - 1
            self._revisions[key] = RevisionRuntime(
                key[0],
                isvc["metadata"]["name"],
                key[1],
                self.clock(),
                0.0,
                RevisionState(key[1], "Loading" if latest else "Failed", message="superseded"),
            )

    def _delay(self, isvc: dict[str, Any]) -> float:
        raw = (isvc["metadata"].get("annotations") or {}).get(DELAY_ANNOTATION)
        try:
            return float(raw) if raw is not None else self.config.readiness_delay
        except ValueError:
            return self.config.readiness_delay

    def _revisions_of(self, namespace: str, name: str) -> list[RevisionRuntime]:
        found = [r for r in self._revisions.values() if r.namespace == namespace and r.isvc == name]
        return sorted(found, key=lambda r: r.name)

    async def _load(
        self, runtime: RevisionRuntime, predictor: dict[str, Any], isvc: dict[str, Any]
    ) -> None:
        namespace = runtime.namespace
        try:
            files = await self._storage_initializer(namespace, predictor)
        except StorageError as error:
            runtime.state = replace(
                runtime.state, phase="Failed", reason="ModelLoadFailed", message=str(error)
            )
            log.info("serving_sim_model_load_failed", revision=runtime.name, reason=str(error))
            return
        try:
            model = load(files)
        except ModelLoadError as error:
            message = f"Container failed with: {error}"
            runtime.state = replace(
                runtime.state, phase="Failed", reason="ModelLoadFailed", message=message
            )
            return
        server = ModelServer(name=isvc["metadata"]["name"], model=model, revision=runtime.name)
        await server.start()
        runtime.server = server
        runtime.state = replace(runtime.state, phase="Ready")

    async def _storage_initializer(
        self, namespace: str, predictor: dict[str, Any]
    ) -> dict[str, bytes]:
        uri = parse_storage_uri((predictor.get("model") or {}).get("storageUri"))
        account_name = str(predictor.get("serviceAccountName") or "default")
        try:
            account = self.store.get(self.accounts, namespace, account_name)
        except ApiError as error:
            if error.status != 404:
                raise
            if account_name != "default":
                raise StorageError(
                    f"error looking up service account {namespace}/{account_name}: "
                    f'serviceaccount "{account_name}" not found'
                ) from error
            account = {"metadata": {"name": "default"}}  # every namespace has one
        secrets: dict[str, dict[str, Any]] = {}
        for reference in account.get("secrets") or []:
            secret_name = str((reference or {}).get("name") or "")
            with contextlib.suppress(ApiError):
                secrets[secret_name] = self.store.get(self.secrets, namespace, secret_name)
        return await download(uri, s3_access(account, secrets, self.config.s3))

    async def _forget(self, namespace: str, name: str) -> None:
        for key, runtime in list(self._revisions.items()):
            if runtime.namespace == namespace and runtime.isvc == name:
                if runtime.server is not None:
                    await runtime.server.stop()
                del self._revisions[key]
        self._publish_routes(namespace, name, True, ())

    # -- routing ------------------------------------------------------------------------------

    def _publish_routes(
        self,
        namespace: str,
        name: str,
        cluster_local: bool,
        traffic: tuple[rollout.TrafficTarget, ...],
    ) -> None:
        every = naming.hosts(name, namespace, domain=self.config.domain, cluster_local=False)
        for host in every:
            self._routes.pop(host, None)
        backends = []
        for target in traffic:
            runtime = self._revisions.get((namespace, target.revision_name))
            if runtime is None or runtime.server is None:
                continue
            backends.append(Backend(target.revision_name, target.percent, runtime.server.address))
        route = Route(namespace, naming.predictor_service(name), tuple(backends))
        for host in naming.hosts(
            name, namespace, domain=self.config.domain, cluster_local=cluster_local
        ):
            self._routes[host] = route

    def route(self, host: str) -> Route | None:
        """The gateway's route for a `Host` (None: no such virtual host)."""
        return self._routes.get(host)

    def revision(self, namespace: str, name: str) -> RevisionRuntime | None:
        return self._revisions.get((namespace, name))

    def _now(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
