"""A pipeline's webhook triggers on the host cluster: the attachment that keeps its event source,
sensor, token Secret and Ingress following its current version, and the tenant's reads and
rotations of the tokens.

``attach`` runs inside the save's transaction with the pipeline's row locked
(``compiler.pipelines.service``), after the version's template was applied: it renders the
objects (``compiler.automation.event_objects``), refuses them unless the event allowlist passes
them all (``compiler.automation.sensor_check``; nothing is applied then), and applies them in the
order they depend on one another: tokens, event source, sensor, Ingress. A token is made once
per trigger name (``secrets.token_urlsafe``) and kept across versions and rollbacks; a trigger
that goes away takes its token with it, so naming a trigger again later makes a new token. A
version without triggers has none of these objects. ``detach`` removes them all.

Reading a token (``webhook``) and rotating it (``rotate``) lock the pipeline's row too, so
neither races a save, and each is recorded in the audit (``run_actions``) with the actor and
the outcome, never the token. Tokens are never logged.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import asyncpg

from compiler.automation import event_objects as ev
from compiler.automation.sensor_check import (
    Confinement,
    event_source_violations,
    raise_if_refused,
    sensor_violations,
)
from compiler.pipelines.ports import Caller, Current
from shared.config import Settings
from shared.db.audit import record_action
from shared.db.pipelines import PipelineStore, VersionRow
from shared.errors import Conflict, NotFound, WorkflowManagerError
from shared.k8s_objects import KubeObjects
from shared.logging import get_logger
from shared.pipelines import PipelineKind, WebhookTrigger

log = get_logger(__name__)

TOKEN_BYTES: Final = 32
READ_ACTION: Final = "webhook_token_read"
ROTATE_ACTION: Final = "webhook_token_rotate"
PUBLIC_HOST_UNSET: Final = (
    "EVENTS_PUBLIC_HOST is not set on this installation: the webhook has no public URL, only "
    "its path on the event source's Service inside the cluster"
)


def triggers_of(settings: Mapping[str, Any]) -> list[WebhookTrigger]:
    """A version's webhook triggers, from its recorded settings (none before triggers existed)."""
    return [WebhookTrigger.model_validate(item) for item in settings.get("triggers") or []]


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass(frozen=True, slots=True)
class _Found:
    version: VersionRow
    trigger: WebhookTrigger
    cluster_id: str


class EventTriggers:
    """The webhook triggers of every pipeline (``compiler.pipelines.service.Attachment``)."""

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        objects: KubeObjects,
        target: ev.EventsTarget,
        token: Callable[[], str] = new_token,
    ) -> None:
        self._pool = pool
        self._objects = objects
        self._target = target
        self._token = token

    @classmethod
    def from_settings(
        cls, settings: Settings, *, pool: asyncpg.Pool, objects: KubeObjects
    ) -> EventTriggers:
        target = ev.EventsTarget(
            namespace=settings.EVENTS_NAMESPACE,
            public_host=settings.EVENTS_PUBLIC_HOST or None,
            instance_id=settings.ARGO_DATA_INSTANCE_ID,
        )
        return cls(pool=pool, objects=objects, target=target)

    # --- the attachment ----------------------------------------------------------------------
    async def attach(self, current: Current) -> None:
        triggers = triggers_of(current.version.settings)
        if not triggers:
            await self.detach(current.tenant, current.kind, current.pipeline_id)
            return
        ref = self._ref(current.tenant, current.kind, current.version)
        kept = ev.tokens_of(await self._secret(current.pipeline_id))
        tokens = {trigger.name: kept.get(trigger.name) or self._token() for trigger in triggers}
        source = ev.event_source(ref, self._target, triggers)
        sensor = ev.sensor(ref, self._target, triggers)
        rules = self._confinement(ref)
        raise_if_refused(event_source_violations(source, rules), "event source")
        raise_if_refused(sensor_violations(sensor, rules), "sensor")
        # The tokens of triggers this version drops stay until it is recorded (``settle``):
        # a save that is put back gives them back as they were.
        await self._objects.apply(ev.token_secret(ref, self._target, {**kept, **tokens}))
        await self._objects.apply(source)
        await self._objects.apply(sensor)
        ingress = ev.ingress(ref, self._target, triggers)
        if ingress is not None:
            await self._objects.apply(ingress)
        else:
            await self._delete("networking.k8s.io/v1", "Ingress", ev.secret_name(ref.pipeline_id))
        log.info(
            "event_triggers_applied",
            pipeline=ref.pipeline_id,
            version=ref.version,
            triggers=len(triggers),
            new_tokens=len(set(tokens) - set(kept)),
        )

    async def detach(self, tenant: str, kind: PipelineKind, pipeline_id: str) -> None:
        """Remove the objects, each tried even when one before failed (the first failure is
        raised after); the tokens go in ``settle``, once that is recorded."""
        objects = [
            (ev.API_VERSION, "Sensor", ev.object_name(pipeline_id)),
            (ev.API_VERSION, "EventSource", ev.object_name(pipeline_id)),
            ("networking.k8s.io/v1", "Ingress", ev.secret_name(pipeline_id)),
        ]
        removed, failure = False, None
        for api_version, kind_of, name in objects:
            try:
                removed |= await self._delete(api_version, kind_of, name)
            except WorkflowManagerError as error:
                failure = failure or error
        if removed:
            log.info("event_triggers_removed", pipeline=pipeline_id, tenant=tenant, kind=kind)
        if failure is not None:
            raise failure

    async def settle(
        self, tenant: str, kind: PipelineKind, pipeline_id: str, current: Current | None
    ) -> None:
        """Drop the tokens of triggers the recorded version (``current``) does not have: the
        whole Secret when it has none (or the pipeline is gone)."""
        triggers = triggers_of(current.version.settings) if current is not None else []
        if not triggers:
            if await self._delete("v1", "Secret", ev.secret_name(pipeline_id)):
                log.info("webhook_tokens_removed", pipeline=pipeline_id, tenant=tenant)
            return
        assert current is not None
        kept = ev.tokens_of(await self._secret(pipeline_id))
        wanted = {trigger.name for trigger in triggers}
        if set(kept) <= wanted:
            return
        tokens = {name: token for name, token in kept.items() if name in wanted}
        ref = self._ref(tenant, kind, current.version)
        await self._objects.apply(ev.token_secret(ref, self._target, tokens))
        log.info("webhook_tokens_dropped", pipeline=pipeline_id, dropped=len(set(kept) - wanted))

    # --- the tenant's tokens -----------------------------------------------------------------
    async def webhook(
        self, caller: Caller, kind: PipelineKind, pipeline_id: str, trigger: str
    ) -> dict[str, Any]:
        """The trigger's URL, token and an example ``curl`` (audited: the token is a credential)."""
        async with PipelineStore.transaction(self._pool) as store:
            found = await self._find(store, caller, kind, pipeline_id, trigger)
            try:
                token = ev.tokens_of(await self._secret(pipeline_id)).get(trigger)
                if token is None:
                    raise Conflict(
                        f"the webhook trigger {trigger!r} has no token: rotate it to make one",
                        details={"trigger": trigger},
                    )
            except WorkflowManagerError as error:
                await self._audit(caller, kind, found, READ_ACTION, "failed", error)
                raise
        await self._audit(caller, kind, found, READ_ACTION, "succeeded", None)
        return self._answer(pipeline_id, found.trigger, token)

    async def rotate(
        self, caller: Caller, kind: PipelineKind, pipeline_id: str, trigger: str
    ) -> dict[str, Any]:
        """A new token for the trigger; the old one stops working (audited)."""
        async with PipelineStore.transaction(self._pool) as store:
            found = await self._find(store, caller, kind, pipeline_id, trigger)
            ref = self._ref(caller.tenant, kind, found.version)
            token = self._token()
            try:
                tokens = ev.tokens_of(await self._secret(pipeline_id))
                tokens[trigger] = token
                await self._objects.apply(ev.token_secret(ref, self._target, tokens))
            except WorkflowManagerError as error:
                await self._audit(caller, kind, found, ROTATE_ACTION, "failed", error)
                raise
        await self._audit(caller, kind, found, ROTATE_ACTION, "succeeded", None)
        log.info("webhook_token_rotated", pipeline=pipeline_id, trigger=trigger)
        return self._answer(pipeline_id, found.trigger, token)

    # --- helpers -----------------------------------------------------------------------------
    def _answer(self, pipeline_id: str, trigger: WebhookTrigger, token: str) -> dict[str, Any]:
        url = ev.webhook_url(self._target.public_host, pipeline_id, trigger.name)
        answer: dict[str, Any] = {
            "trigger": trigger.name,
            "url": url,
            "path": ev.webhook_path(pipeline_id, trigger.name),
            "token": token,
            "curl": ev.curl_example(url, token, trigger) if url else None,
        }
        if url is None:
            answer["warning"] = PUBLIC_HOST_UNSET
        return answer

    async def _find(
        self,
        store: PipelineStore,
        caller: Caller,
        kind: PipelineKind,
        pipeline_id: str,
        trigger: str,
    ) -> _Found:
        pipeline = await store.lock(caller.tenant, kind, pipeline_id)
        if pipeline is None:  # another tenant's pipeline is indistinguishable from none
            raise NotFound(f"no {kind} pipeline {pipeline_id!r}", details={"id": pipeline_id})
        version = await store.version(pipeline_id, pipeline.current_version)
        if version is None:
            raise Conflict("the pipeline's current version is missing", details={"id": pipeline_id})
        for candidate in triggers_of(version.settings):
            if candidate.name == trigger:
                return _Found(version, candidate, await store.host_cluster_id() or "host")
        raise NotFound(
            f"pipeline {pipeline_id!r} has no webhook trigger {trigger!r}",
            details={"id": pipeline_id, "trigger": trigger},
        )

    async def _audit(
        self,
        caller: Caller,
        kind: PipelineKind,
        found: _Found,
        action: str,
        outcome: str,
        error: WorkflowManagerError | None,
    ) -> None:
        detail: dict[str, Any] = {
            "pipeline_id": found.version.pipeline_id,
            "kind": kind,
            "version": found.version.version,
        }
        if error is not None:
            detail["error"] = error.code
        await record_action(
            self._pool,
            cluster_id=found.cluster_id,
            namespace=self._target.namespace,
            name=ev.secret_name(found.version.pipeline_id),
            run_uid=None,
            tenant=caller.tenant,
            actor=caller.actor,
            action=action,
            parameters={"trigger": found.trigger.name},
            outcome=outcome,
            detail=detail,
        )

    def _ref(self, tenant: str, kind: PipelineKind, version: VersionRow) -> ev.PipelineVersion:
        return ev.PipelineVersion(
            tenant=tenant,
            kind=kind,
            pipeline_id=version.pipeline_id,
            version=version.version,
            template_name=version.template_name,
            parameters=version.parameters,
        )

    def _confinement(self, ref: ev.PipelineVersion) -> Confinement:
        return Confinement(
            events_namespace=self._target.namespace,
            tenant=ref.tenant,
            pipeline_id=ref.pipeline_id,
            template_name=ref.template_name,
            instance_id=self._target.instance_id,
        )

    async def _secret(self, pipeline_id: str) -> dict[str, Any] | None:
        return await self._objects.get(
            "v1", "Secret", self._target.namespace, ev.secret_name(pipeline_id)
        )

    async def _delete(self, api_version: str, kind: str, name: str) -> bool:
        return await self._objects.delete(api_version, kind, self._target.namespace, name)
