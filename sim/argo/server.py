"""The Argo server's HTTP API (grpc-gateway JSON), served behind the Kubernetes API service
proxy at `argo/argo-server:2746` (and, on the host, the data controller's at
`kubeopera-argo-data/argo-data-server:2746`). Only the routes the project calls, plus a few for
tests. A server run with an instance ID (`--instanceid`) labels what it creates with it and
refuses other instances' workflows, as Argo's does."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from shared.labels import DATA_CONTROLLER_INSTANCE_ID
from sim.argo import actions
from sim.argo.actions import ActionError
from sim.argo.lint import LintError, lint_spec
from sim.argo.naming import (
    LABEL_CONTROLLER_INSTANCE_ID,
    LABEL_WORKFLOW,
    LABEL_WORKFLOW_TEMPLATE,
    Obj,
)
from sim.argo.node_status import NodeStatusStorage
from sim.argo.restrictions import (
    instance_selector,
    label_instance,
    manages,
    not_managed_message,
)
from sim.argo.templates import effective_spec, override_parameters
from sim.kube.types import ApiError

if TYPE_CHECKING:
    from sim.kube.store import ClusterStore

ARGO_NAMESPACE = "argo"
ARGO_SERVICE = "argo-server"
ARGO_PORT = "2746"
# The host's second Argo, for tenants' pipelines: where ARGO_DATA_SERVER_URL's default points,
# and the default of ARGO_DATA_INSTANCE_ID.
DATA_ARGO_NAMESPACE = "kubeopera-argo-data"
DATA_ARGO_SERVICE = "argo-data-server"
DATA_INSTANCE_ID = DATA_CONTROLLER_INSTANCE_ID
VERSION = {
    "version": "v3.6.2",
    "buildDate": "2024-12-02T00:00:00Z",
    "gitCommit": "f016ad8000000000000000000000000000000000",
    "gitTag": "v3.6.2",
    "gitTreeState": "clean",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}
MERGE_PATCH = "application/merge-patch+json"
Handler = Callable[[web.Request, dict[str, str]], Awaitable[web.StreamResponse]]
# A test's hook around set and resume: (moment "before" or "after", action, namespace, name,
# nodeFieldSelector). Raising ActionError before refuses the call unapplied.
Interceptor = Callable[[str, str, str, str, str], Awaitable[None]]


@dataclass(frozen=True)
class NodeAction:
    """One set or resume call, as the server answered it: what a test counts to prove a node
    was completed exactly once."""

    action: str  # "set" | "resume"
    namespace: str
    name: str
    selector: str
    error: str | None  # the refusal's message; None when it succeeded
    completed: tuple[str, ...]  # node ids this call moved from Running to a finished phase
    outputs_set: tuple[str, ...]  # node ids whose supplied outputs this call set


def _node_states(workflow: Obj) -> dict[str, tuple[str, bool]]:
    """Node id -> (phase, whether any supplied output is still unset)."""
    states = {}
    for nid, node in ((workflow.get("status") or {}).get("nodes") or {}).items():
        params = (node.get("outputs") or {}).get("parameters") or []
        unset = any("supplied" in (p.get("valueFrom") or {}) for p in params)
        states[nid] = (str(node.get("phase")), unset)
    return states


def _json(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


def _api_error_code(error: ApiError) -> int:
    if error.status == 404:
        return actions.NOT_FOUND
    if error.status == 409:
        return actions.ALREADY_EXISTS if error.reason == "AlreadyExists" else actions.ABORTED
    if error.status in (400, 422):
        return actions.INVALID_ARGUMENT
    return actions.INTERNAL


class ArgoServer:
    """Routes of the Argo server over one cluster's store."""

    def __init__(
        self,
        store: ClusterStore,
        *,
        clock: Callable[[], float] = time.time,
        instance_id: str | None = None,
        node_status: NodeStatusStorage | None = None,
    ) -> None:
        self.store = store
        self.node_status = node_status or NodeStatusStorage()
        self.clock = clock
        self.instance_id = instance_id or None
        self.workflows = store.resolve("argoproj.io", "v1alpha1", "workflows")
        self.templates = store.resolve("argoproj.io", "v1alpha1", "workflowtemplates")
        self.pods = store.resolve("", "v1", "pods")
        self.node_actions: list[NodeAction] = []
        self.interceptor: Interceptor | None = None
        ns, name = r"(?P<ns>[^/]+)", r"(?P<name>[^/]+)"
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = [
            ("GET", re.compile(r"api/v1/version"), self.version),
            ("GET", re.compile(r"api/v1/info"), self.info),
            ("POST", re.compile(rf"api/v1/workflows/{ns}/lint"), self.lint_workflow),
            ("POST", re.compile(rf"api/v1/workflows/{ns}/submit"), self.submit),
            ("POST", re.compile(rf"api/v1/workflow-templates/{ns}/lint"), self.lint_template),
            ("POST", re.compile(rf"api/v1/workflows/{ns}"), self.create),
            ("GET", re.compile(rf"api/v1/workflows/{ns}"), self.list),
            ("GET", re.compile(rf"api/v1/workflows/{ns}/{name}/log"), self.logs),
            ("GET", re.compile(rf"api/v1/workflows/{ns}/{name}"), self.get),
            ("DELETE", re.compile(rf"api/v1/workflows/{ns}/{name}"), self.delete),
            ("PUT", re.compile(rf"api/v1/workflows/{ns}/{name}/retry"), self.retry),
            ("PUT", re.compile(rf"api/v1/workflows/{ns}/{name}/resubmit"), self.resubmit),
            ("PUT", re.compile(rf"api/v1/workflows/{ns}/{name}/set"), self.set),
            ("PUT", re.compile(rf"api/v1/workflows/{ns}/{name}/resume"), self.resume),
            ("PUT", re.compile(rf"api/v1/workflows/{ns}/{name}/suspend"), self.suspend),
            ("PUT", re.compile(rf"api/v1/workflows/{ns}/{name}/stop"), self.stop),
            ("PUT", re.compile(rf"api/v1/workflows/{ns}/{name}/terminate"), self.terminate),
        ]

    def register(
        self,
        *,
        namespace: str = ARGO_NAMESPACE,
        service: str = ARGO_SERVICE,
        port: str = ARGO_PORT,
    ) -> Callable[[], None]:
        """Serve behind `<namespace>/<service>:<port>`; returns unregister."""
        return self.store.register_proxy(namespace, service, port, self.handle)

    async def handle(self, request: web.Request, path: str) -> web.StreamResponse:
        """Route one proxied request; errors become grpc-gateway error bodies."""
        path = path.strip("/")
        allowed = False
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            allowed = True
            if method != request.method:
                continue
            try:
                return await handler(request, match.groupdict())
            except ActionError as error:
                return _json(error.body(), error.http_status)
            except ApiError as error:
                wrapped = ActionError(_api_error_code(error), error.message)
                return _json(wrapped.body(), wrapped.http_status)
        if allowed:
            return _json({"code": 12, "message": "Method Not Allowed", "details": []}, 405)
        return _json({"code": 5, "message": "Not Found", "details": []}, 404)

    # -- helpers ------------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> Obj:
        if not request.can_read_body:
            return {}
        try:
            body = await request.json()
        except ValueError as error:
            raise ActionError(actions.INVALID_ARGUMENT, f"invalid JSON body: {error}") from error
        if not isinstance(body, dict):
            raise ActionError(actions.INVALID_ARGUMENT, "the body must be a JSON object")
        return body

    def _get(self, args: dict[str, str]) -> Obj:
        """The workflow, if this server's instance manages it (InvalidArgument otherwise)."""
        workflow = self.node_status.unpack(self.store.get(self.workflows, args["ns"], args["name"]))
        if not manages(workflow["metadata"].get("labels"), self.instance_id):
            raise ActionError(actions.INVALID_ARGUMENT, not_managed_message(args["name"]))
        return workflow

    def _save(self, workflow: Obj) -> Obj:
        metadata = workflow["metadata"]
        packed = self.node_status.pack(workflow)
        return self.store.replace(self.workflows, metadata["namespace"], metadata["name"], packed)

    # -- routes -------------------------------------------------------------------------------

    async def version(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        return _json(VERSION)

    async def info(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        return _json({"managedNamespace": "", "links": [], "modals": {}})

    async def get(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        return _json(self._get(args))

    async def list(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        selectors = [request.query.get("listOptions.labelSelector") or ""]
        selectors.append(instance_selector(self.instance_id))
        selector = ",".join(part for part in selectors if part)
        items, rv = self.store.list(self.workflows, args["ns"], label_selector=selector)
        return _json({"metadata": {"resourceVersion": rv}, "items": items})

    async def delete(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        self._get(args)
        self.store.delete(self.workflows, args["ns"], args["name"])
        return _json({})

    async def create(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        body = await self._body(request)
        workflow = body.get("workflow")
        if not isinstance(workflow, dict):
            raise ActionError(actions.INVALID_ARGUMENT, "workflow is required")
        label_instance(workflow, self.instance_id)
        self._lint_workflow(args["ns"], workflow)
        if body.get("serverDryRun"):
            return _json(workflow)
        return _json(self.store.create(self.workflows, args["ns"], workflow))

    async def submit(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        body = await self._body(request)
        if body.get("resourceKind") not in ("WorkflowTemplate", "workflowtemplate"):
            raise ActionError(
                actions.INVALID_ARGUMENT, f"resourceKind {body.get('resourceKind')} not supported"
            )
        name = str(body.get("resourceName", ""))
        self.store.get(self.templates, args["ns"], name)
        options: Obj = body.get("submitOptions") or {}
        labels = {LABEL_WORKFLOW_TEMPLATE: name}
        if self.instance_id:
            labels[LABEL_CONTROLLER_INSTANCE_ID] = self.instance_id
        # Then the submitter's labels, over it: Argo applies submitOptions after its own.
        for pair in str(options.get("labels") or "").split(","):
            key, sep, value = pair.partition("=")
            if sep:
                labels[key.strip()] = value.strip()
        metadata: Obj = {"namespace": args["ns"], "labels": labels}
        if options.get("name"):
            metadata["name"] = options["name"]
        else:
            metadata["generateName"] = options.get("generateName") or f"{name}-"
        spec: Obj = {"workflowTemplateRef": {"name": name}}
        if options.get("entrypoint"):
            spec["entrypoint"] = options["entrypoint"]
        try:
            params = override_parameters([], list(options.get("parameters") or []))
        except ValueError as error:
            raise ActionError(actions.INVALID_ARGUMENT, str(error)) from error
        if params:
            spec["arguments"] = {"parameters": params}
        workflow = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": metadata,
            "spec": spec,
        }
        return _json(self.store.create(self.workflows, args["ns"], workflow))

    def _lint_workflow(self, namespace: str, workflow: Obj) -> None:
        ref = (workflow.get("spec") or {}).get("workflowTemplateRef")
        template = None
        if ref:
            try:
                template = self.store.get(self.templates, namespace, str(ref.get("name")))
            except ApiError as error:
                raise ActionError(actions.INVALID_ARGUMENT, error.message) from error
        try:
            lint_spec(effective_spec(workflow, template))
        except LintError as error:
            raise ActionError(actions.INVALID_ARGUMENT, str(error)) from error

    async def lint_workflow(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        body = await self._body(request)
        workflow = body.get("workflow")
        if not isinstance(workflow, dict):
            raise ActionError(actions.INVALID_ARGUMENT, "workflow is required")
        label_instance(workflow, self.instance_id)
        self._lint_workflow(args["ns"], workflow)
        return _json(workflow)

    async def lint_template(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        body = await self._body(request)
        template = body.get("template")
        if not isinstance(template, dict):
            raise ActionError(actions.INVALID_ARGUMENT, "template is required")
        label_instance(template, self.instance_id)
        metadata = template.get("metadata") or {}
        if not (metadata.get("name") or metadata.get("generateName")):
            raise ActionError(actions.INVALID_ARGUMENT, "metadata.name is required")
        try:
            lint_spec(template.get("spec") or {})
        except LintError as error:
            raise ActionError(actions.INVALID_ARGUMENT, str(error)) from error
        return _json(template)

    async def retry(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        body = await self._body(request)
        workflow, pods = actions.formulate_retry(
            self._get(args),
            restart_successful=bool(body.get("restartSuccessful")),
            node_field_selector=str(body.get("nodeFieldSelector") or ""),
            parameters=list(body.get("parameters") or []) or None,
            now=self.clock(),
        )
        for pod in pods:
            try:
                self.store.delete(self.pods, args["ns"], pod)
            except ApiError as error:
                if error.status != 404:
                    raise
        return _json(self._save(workflow))

    async def resubmit(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        body = await self._body(request)
        new = actions.formulate_resubmit(
            self._get(args),
            memoized=bool(body.get("memoized")),
            parameters=list(body.get("parameters") or []) or None,
        )
        return _json(self.store.create(self.workflows, args["ns"], new))

    async def set(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        body = await self._body(request)

        def apply(workflow: Obj) -> None:
            outputs = actions.parse_set_request(
                str(body.get("phase") or ""), str(body.get("outputParameters") or "")
            )
            actions.set_suspended_nodes(
                workflow,
                node_field_selector=str(body.get("nodeFieldSelector") or ""),
                phase=str(body.get("phase") or ""),
                message=str(body.get("message") or ""),
                output_parameters=outputs,
                now=self.clock(),
            )

        return await self._node_action("set", args, body, apply)

    async def resume(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        body = await self._body(request)

        def apply(workflow: Obj) -> None:
            actions.resume(
                workflow,
                node_field_selector=str(body.get("nodeFieldSelector") or ""),
                now=self.clock(),
            )

        return await self._node_action("resume", args, body, apply)

    async def _node_action(
        self, action: str, args: dict[str, str], body: Obj, apply: Callable[[Obj], None]
    ) -> web.StreamResponse:
        """Apply a set or resume, record what it did (``node_actions``), and let a test's
        ``interceptor`` hold the call before it is applied and before it is answered."""
        selector = str(body.get("nodeFieldSelector") or "")
        if self.interceptor is not None:
            await self.interceptor("before", action, args["ns"], args["name"], selector)
        workflow = self._get(args)
        before = _node_states(workflow)
        try:
            apply(workflow)
        except ActionError as error:
            self.node_actions.append(
                NodeAction(action, args["ns"], args["name"], selector, error.message, (), ())
            )
            raise
        saved = self._save(workflow)
        after = _node_states(self.node_status.unpack(saved))
        completed = tuple(
            nid
            for nid, (phase, _) in after.items()
            if before.get(nid, ("", False))[0] == "Running" and phase != "Running"
        )
        outputs_set = tuple(
            nid
            for nid, (_, unset) in after.items()
            if before.get(nid, ("", False))[1] and not unset
        )
        self.node_actions.append(
            NodeAction(action, args["ns"], args["name"], selector, None, completed, outputs_set)
        )
        if self.interceptor is not None:
            await self.interceptor("after", action, args["ns"], args["name"], selector)
        return _json(copy.deepcopy(saved))

    async def suspend(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        workflow = self._get(args)
        actions.check_shutdown_allowed(workflow)
        workflow.setdefault("spec", {})["suspend"] = True
        return _json(self._save(workflow))

    async def _shutdown(self, request: web.Request, args: dict[str, str], strategy: str) -> Obj:
        body = await self._body(request)
        workflow = self._get(args)
        actions.check_shutdown_allowed(workflow)
        selector = str(body.get("nodeFieldSelector") or "")
        if strategy == "Stop" and selector:
            actions.set_suspended_nodes(
                workflow,
                node_field_selector=selector,
                phase="Failed",
                message=str(body.get("message") or ""),
                output_parameters={},
                now=self.clock(),
            )
            return self._save(workflow)
        patch = {"spec": {"shutdown": strategy}}
        return self.store.patch(
            self.workflows, args["ns"], args["name"], patch, content_type=MERGE_PATCH
        )

    async def stop(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        return _json(await self._shutdown(request, args, "Stop"))

    async def terminate(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        return _json(await self._shutdown(request, args, "Terminate"))

    async def logs(self, request: web.Request, args: dict[str, str]) -> web.StreamResponse:
        """Log entries as grpc-gateway streams them: one `{"result": {...}}` per line, or SSE
        `data:` events; nothing for a pod that is gone (upstream #8057)."""
        self._get(args)
        query = request.query
        container = query.get("logOptions.container") or "main"
        follow = query.get("logOptions.follow", "").lower() in ("true", "1")
        pod = query.get("podName")
        if pod:
            pods = [pod]
        else:
            items, _ = self.store.list(self.pods, args["ns"])
            pods = sorted(
                str(p["metadata"]["name"])
                for p in items
                if (p["metadata"].get("labels") or {}).get(LABEL_WORKFLOW) == args["name"]
            )
        sse = "text/event-stream" in request.headers.get("Accept", "")
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream" if sse else "application/json"}
        )
        await response.prepare(request)
        for name in pods:
            try:
                lines = self.store.read_log(args["ns"], name, container, follow=follow)
                async for line in lines:
                    entry = json.dumps({"result": {"content": line, "podName": name}})
                    await response.write(
                        f"data: {entry}\n\n".encode() if sse else f"{entry}\n".encode()
                    )
            except ApiError:
                continue  # the pod is gone or has no such container: nothing, like upstream
        await response.write_eof()
        return response
