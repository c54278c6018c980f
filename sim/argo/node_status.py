"""How the simulated Argo controller stores a workflow's nodes: in ``status.nodes`` (the
default), compressed into ``status.compressedNodes`` (Argo's ``packer``: base64 of gzipped
JSON, which Argo does when a workflow is too large for etcd), or offloaded to the controller's
own database (``status.offloadNodeStatusVersion``, the nodes only in ``offloaded`` here).

The controller and the Argo server share one ``NodeStatusStorage``: both ``unpack`` a
workflow they read from the store and ``pack`` one they write, as Argo's controller and server
do (the server's GET hydrates, as Argo's ``hydrator`` does). Which way is chosen per workflow
name (``modes``) or for every workflow (``default``): tests pick it.
"""

from __future__ import annotations

import base64
import copy
import gzip
import hashlib
import json
from typing import Any, Literal

Obj = dict[str, Any]
Mode = Literal["nodes", "compressed", "offloaded"]


class NodeStatusStorage:
    def __init__(self, default: Mode = "nodes") -> None:
        self.default: Mode = default
        self.modes: dict[str, Mode] = {}
        # (workflow uid, version) -> nodes, as Argo's offload table keeps them
        self.offloaded: dict[tuple[str, str], Obj] = {}

    def mode_of(self, workflow: Obj) -> Mode:
        return self.modes.get(str((workflow.get("metadata") or {}).get("name")), self.default)

    def pack(self, workflow: Obj) -> Obj:
        """The document to write: ``workflow`` itself when its nodes stay in place, else a
        copy with them compressed or offloaded."""
        mode = self.mode_of(workflow)
        status = workflow.get("status")
        if mode == "nodes" or not isinstance(status, dict) or not status.get("nodes"):
            return workflow
        packed = copy.copy(workflow)
        packed["status"] = status = dict(status)
        nodes = status.pop("nodes")
        text = json.dumps(nodes, sort_keys=True, separators=(",", ":")).encode()
        if mode == "compressed":
            status["compressedNodes"] = base64.b64encode(gzip.compress(text)).decode()
            return packed
        uid = str((workflow.get("metadata") or {}).get("uid"))
        version = "fnv:" + hashlib.sha256(text).hexdigest()[:16]
        self.offloaded[(uid, version)] = copy.deepcopy(nodes)
        status["offloadNodeStatusVersion"] = version
        return packed

    def unpack(self, workflow: Obj) -> Obj:
        """``workflow`` with its nodes in ``status.nodes`` (a copy when they were not)."""
        status = workflow.get("status")
        if not isinstance(status, dict) or not (
            status.get("compressedNodes") or status.get("offloadNodeStatusVersion")
        ):
            return workflow
        workflow = copy.copy(workflow)
        workflow["status"] = status = dict(status)
        compressed = status.pop("compressedNodes", None)
        if isinstance(compressed, str) and compressed:
            status["nodes"] = json.loads(gzip.decompress(base64.b64decode(compressed)))
        version = status.pop("offloadNodeStatusVersion", None)
        if isinstance(version, str) and version:
            uid = str((workflow.get("metadata") or {}).get("uid"))
            status["nodes"] = copy.deepcopy(self.offloaded.get((uid, version), {}))
        return workflow
