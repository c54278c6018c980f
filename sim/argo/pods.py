"""The pods of simulated steps: deterministic outcome and duration, logs, phases.

A step fails when its container's command, args or script contain `exit <n>` with n > 0, or
when its env has SIM_FAIL=1/true; it runs SIM_DURATION_TICKS ticks (default 2) after one tick
Pending. An output artifact holds the value of the env variable SIM_ARTIFACT_<NAME> (its name
upper-cased, anything but letters and digits as `_`) when the step has one, else a line naming
it. Purely computational, no side effects: the controller writes what this decides.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from sim.argo.engine import PodState
from sim.argo.naming import Obj, iso

DEFAULT_DURATION_TICKS = 2
_EXIT = re.compile(r"\bexit\s+([1-9][0-9]*)\b")
_ECHO = re.compile(r"\becho\s+([^;&|]+)")
_NOT_ALNUM = re.compile(r"[^A-Z0-9]")
ARTIFACT_ENV_PREFIX = "SIM_ARTIFACT_"


def _container(template: Obj) -> Obj:
    container: Obj = template.get("container") or template.get("script") or {}
    return container


def _env(template: Obj) -> dict[str, str]:
    return {
        str(e.get("name")): str(e.get("value", ""))
        for e in _container(template).get("env") or []
        if isinstance(e, dict)
    }


def _command_text(template: Obj) -> str:
    container = _container(template)
    parts = [str(p) for p in (container.get("command") or []) + (container.get("args") or [])]
    if container.get("source"):
        parts.append(str(container["source"]))
    return "\n".join(parts)


def exit_code_of(template: Obj) -> int:
    """The exit code the step will end with (0 unless it asks to fail)."""
    if _env(template).get("SIM_FAIL", "").strip().lower() in ("1", "true", "yes"):
        return 1
    match = _EXIT.search(_command_text(template))
    return int(match.group(1)) if match else 0


def artifact_env(name: str) -> str:
    """The env variable whose value a step's output artifact `name` holds."""
    return ARTIFACT_ENV_PREFIX + _NOT_ALNUM.sub("_", name.upper())


def artifact_contents_of(template: Obj) -> dict[str, str]:
    """Env variable -> value of the SIM_ARTIFACT_* variables the step has."""
    return {k: v for k, v in _env(template).items() if k.startswith(ARTIFACT_ENV_PREFIX)}


def duration_ticks_of(template: Obj) -> int:
    raw = _env(template).get("SIM_DURATION_TICKS", "")
    try:
        return max(1, int(raw))
    except ValueError:
        return DEFAULT_DURATION_TICKS


def scripted_lines(template: Obj, ticks: int) -> list[str]:
    """What the main container prints, one entry per running tick."""
    echoed: list[str] = []
    for match in _ECHO.finditer(_command_text(template)):
        try:
            echoed.append(" ".join(shlex.split(match.group(1))))
        except ValueError:
            echoed.append(match.group(1).strip())
    image = str(_container(template).get("image", "busybox"))
    lines = [f"running {image}", *echoed]
    while len(lines) < ticks:
        lines.append(f"progress {len(lines)}/{ticks}")
    return lines


@dataclass
class PodRun:
    namespace: str
    name: str
    workflow: str
    ticks: int
    exit_code: int
    script: list[str]
    image: str = "busybox"
    phase: str = "Pending"
    ticks_done: int = 0
    started: float | None = None
    finished: float | None = None
    lines: list[str] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)  # SIM_ARTIFACT_* env -> contents

    @property
    def done(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def state(self) -> PodState:
        return PodState(
            self.phase,
            self.exit_code if self.done else None,
            self.started,
            self.finished,
        )

    def log_text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def new_run(namespace: str, name: str, workflow: str, template: Obj) -> PodRun:
    ticks = duration_ticks_of(template)
    return PodRun(
        namespace=namespace,
        name=name,
        workflow=workflow,
        ticks=ticks,
        exit_code=exit_code_of(template),
        script=scripted_lines(template, ticks),
        image=str(_container(template).get("image") or "busybox"),
        artifacts=artifact_contents_of(template),
    )


def advance(run: PodRun, now: float) -> list[str]:
    """Advance a pod one tick; returns the log lines it printed during the tick."""
    if run.done:
        return []
    printed: list[str] = []
    if run.phase == "Pending":
        run.phase = "Running"
        run.started = now
        return printed
    if run.ticks_done < len(run.script):
        printed.append(f"{iso(now)} {run.script[run.ticks_done]}")
    run.ticks_done += 1
    if run.ticks_done >= run.ticks:
        run.finished = now
        if run.exit_code:
            printed.append(f"{iso(now)} Error: exit status {run.exit_code}")
            run.phase = "Failed"
        else:
            run.phase = "Succeeded"
    run.lines.extend(printed)
    return printed


def kill(run: PodRun, now: float) -> None:
    """The pod is stopped: SIGTERM's exit code."""
    if run.done:
        return
    run.started = run.started or now
    run.finished = now
    run.exit_code = 143
    run.phase = "Failed"


def pod_status(run: PodRun) -> Obj:
    """The pod `status` matching a run's phase."""
    status: Obj = {"phase": run.phase}
    if run.started is not None:
        status["startTime"] = iso(run.started)
    container: Obj = {
        "name": "main",
        "image": run.image,
        "imageID": f"docker.io/library/{run.image}",
        "restartCount": 0,
    }
    if run.phase == "Running":
        status["containerStatuses"] = [
            {
                **container,
                "ready": True,
                "started": True,
                "state": {"running": {"startedAt": iso(run.started or 0)}},
            }
        ]
    elif run.done:
        status["containerStatuses"] = [
            {
                **container,
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": run.exit_code,
                        "reason": "Completed" if run.exit_code == 0 else "Error",
                        "startedAt": iso(run.started or 0),
                        "finishedAt": iso(run.finished or 0),
                    }
                },
            }
        ]
    return status


def pod_manifest(
    *,
    workflow: Obj,
    name: str,
    node_id: str,
    node_name: str,
    template: Obj,
    on_exit: bool,
    service_account: str,
) -> Obj:
    """The Pod object Argo would create for a step (main container only)."""
    metadata = workflow["metadata"]
    container = dict(_container(template))
    container["name"] = "main"
    container.setdefault("image", "busybox")
    if "source" in container:
        source = container.pop("source")
        container.setdefault("command", ["sh"])
        container["args"] = [*container.get("args", []), "-c", source]
    labels = {
        "workflows.argoproj.io/workflow": metadata["name"],
        "workflows.argoproj.io/completed": "false",
    }
    if on_exit:
        labels["workflows.argoproj.io/on-exit"] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": metadata["namespace"],
            "labels": labels,
            "annotations": {
                "workflows.argoproj.io/node-id": node_id,
                "workflows.argoproj.io/node-name": node_name,
            },
            "ownerReferences": [
                {
                    "apiVersion": "argoproj.io/v1alpha1",
                    "kind": "Workflow",
                    "name": metadata["name"],
                    "uid": metadata.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [container],
            "restartPolicy": "Never",
            "serviceAccountName": service_account,
        },
        "status": {"phase": "Pending"},
    }
