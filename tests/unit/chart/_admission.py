"""ValidatingAdmissionPolicies evaluated as the API server does, their CEL by cel-python.

Purely computational. For each policy with a binding whose validationActions include Deny
(admissionregistration.k8s.io/v1; the API server's validating admission policy plugin):

1. ``matchConstraints.resourceRules`` select by operation, group, version and resource (``*``
   all resources but no subresource, ``*/*`` everything, ``pods/*`` a resource's subresources,
   ``*/status`` a subresource of every resource);
2. every ``matchConditions`` expression must be true, or the policy does not apply;
3. ``variables`` are evaluated in order, each seeing the ones before as ``variables.<name>``;
4. every ``validations`` expression must be true; a false one denies with its
   ``messageExpression`` (or ``message``).

An expression that fails to evaluate (a field of a null ``object``) denies under
``failurePolicy: Fail`` and is ignored under ``Ignore``. Parameters, namespace and object
selectors, and the ``authorizer`` variable are outside this model: ``Admission`` refuses
policies that use them rather than answer wrongly. Reads never reach admission.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

from tests.unit.chart._rbac import Account

ADMISSION_GROUP = "admissionregistration.k8s.io/v1"


def _resource_matches(patterns: Iterable[str], resource: str, sub_resource: str) -> bool:
    for pattern in patterns:
        main, _, sub = pattern.partition("/")
        if main not in ("*", resource):
            continue
        if (not sub and not sub_resource) or sub == "*" or (sub and sub == sub_resource):
            return True
    return False


def request(
    who: Account | str,
    operation: str,
    *,
    group: str,
    version: str,
    resource: str,
    kind: str,
    namespace: str = "",
    name: str = "",
    sub_resource: str = "",
) -> dict[str, Any]:
    """An AdmissionRequest (admission.k8s.io/v1) as the API server hands it to CEL."""
    username = who if isinstance(who, str) else who.username
    groups = [] if isinstance(who, str) else list(who.groups)
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    return {
        "uid": "00000000-0000-0000-0000-000000000000",
        "kind": gvk,
        "resource": gvr,
        "subResource": sub_resource,
        "requestKind": gvk,
        "requestResource": gvr,
        "requestSubResource": sub_resource,
        "name": name,
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": username, "groups": groups},
        "dryRun": False,
    }


@dataclass(frozen=True)
class _Compiled:
    name: str
    program: celpy.Runner
    message: str | None = None
    message_program: celpy.Runner | None = None


class _Failed(Exception):
    pass


class Admission:
    """The bound, denying ValidatingAdmissionPolicies among some manifests, compiled."""

    def __init__(self, manifests: Iterable[Mapping[str, Any]]) -> None:
        manifests = [m for m in manifests if m.get("apiVersion") == ADMISSION_GROUP]
        self._env = celpy.Environment()
        denying = {
            m["spec"]["policyName"]
            for m in manifests
            if m["kind"] == "ValidatingAdmissionPolicyBinding"
            and "Deny" in m["spec"].get("validationActions", [])
        }
        for m in manifests:
            if m["kind"] == "ValidatingAdmissionPolicyBinding" and (
                m["spec"].get("paramRef") or m["spec"].get("matchResources")
            ):
                raise ValueError(f"{m['metadata']['name']}: paramRef/matchResources not modelled")
        self.policies = [
            self._compile(m)
            for m in manifests
            if m["kind"] == "ValidatingAdmissionPolicy" and m["metadata"]["name"] in denying
        ]

    def _program(self, expression: str) -> celpy.Runner:
        if "authorizer" in expression or "params" in expression:
            raise ValueError(f"{expression!r}: authorizer and params are not modelled")
        return self._env.program(self._env.compile(expression))

    def _compile(self, policy: Mapping[str, Any]) -> dict[str, Any]:
        spec = policy["spec"]
        constraints = spec.get("matchConstraints") or {}
        for unsupported in ("namespaceSelector", "objectSelector", "excludeResourceRules"):
            if constraints.get(unsupported):
                raise ValueError(f"{policy['metadata']['name']}: {unsupported} not modelled")
        if spec.get("paramKind"):
            raise ValueError(f"{policy['metadata']['name']}: paramKind not modelled")
        return {
            "name": policy["metadata"]["name"],
            "fail": spec.get("failurePolicy", "Fail") == "Fail",
            "rules": list(constraints.get("resourceRules") or []),
            "conditions": [
                _Compiled(c["name"], self._program(c["expression"]))
                for c in spec.get("matchConditions") or []
            ],
            "variables": [
                _Compiled(v["name"], self._program(v["expression"]))
                for v in spec.get("variables") or []
            ],
            "validations": [
                _Compiled(
                    v["expression"],
                    self._program(v["expression"]),
                    v.get("message"),
                    self._program(v["messageExpression"]) if v.get("messageExpression") else None,
                )
                for v in spec.get("validations") or []
            ],
        }

    @staticmethod
    def _selects(policy: Mapping[str, Any], req: Mapping[str, Any]) -> bool:
        gvr = req["resource"]
        return any(
            {"*", req["operation"]} & set(rule.get("operations") or [])
            and {"*", gvr["group"]} & set(rule.get("apiGroups") or [])
            and {"*", gvr["version"]} & set(rule.get("apiVersions") or [])
            and _resource_matches(rule.get("resources") or [], gvr["resource"], req["subResource"])
            for rule in policy["rules"]
        )

    @staticmethod
    def _run(program: celpy.Runner, activation: Mapping[str, Any]) -> Any:
        try:
            return program.evaluate(dict(activation))
        except celpy.CELEvalError as exc:
            raise _Failed(str(exc)) from exc

    def review(
        self,
        req: Mapping[str, Any],
        *,
        obj: Mapping[str, Any] | None = None,
        old: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Why the request is denied (one message a failed validation); empty when admitted."""
        activation: dict[str, Any] = {
            "request": celpy.json_to_cel(dict(req)),
            "object": celpy.json_to_cel(dict(obj) if obj is not None else None),
            "oldObject": celpy.json_to_cel(dict(old) if old is not None else None),
            "params": celpy.json_to_cel(None),
            "namespaceObject": celpy.json_to_cel(None),
        }
        denials: list[str] = []
        for policy in self.policies:
            if not self._selects(policy, req):
                continue
            try:
                denials.extend(self._validate(policy, activation))
            except _Failed as exc:
                if policy["fail"]:
                    denials.append(f"{policy['name']}: expression failed: {exc}")
        return denials

    def _validate(self, policy: Mapping[str, Any], activation: dict[str, Any]) -> list[str]:
        for condition in policy["conditions"]:
            matched = self._run(condition.program, activation)
            if not isinstance(matched, celtypes.BoolType):
                raise _Failed(f"{condition.name}: not a bool but {matched!r}")
            if not matched:
                return []
        values: dict[celtypes.StringType, Any] = {}
        for variable in policy["variables"]:
            activation["variables"] = celtypes.MapType(values)
            values[celtypes.StringType(variable.name)] = self._run(variable.program, activation)
        activation["variables"] = celtypes.MapType(values)
        denials = []
        for validation in policy["validations"]:
            verdict = self._run(validation.program, activation)
            if not isinstance(verdict, celtypes.BoolType):
                raise _Failed(f"{validation.name}: not a bool but {verdict!r}")
            if not verdict:
                message = validation.message or f"failed expression: {validation.name}"
                if validation.message_program is not None:
                    message = str(self._run(validation.message_program, activation))
                denials.append(message)
        return denials

    def admits(
        self,
        req: Mapping[str, Any],
        *,
        obj: Mapping[str, Any] | None = None,
        old: Mapping[str, Any] | None = None,
    ) -> bool:
        return not self.review(req, obj=obj, old=old)
