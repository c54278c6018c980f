"""shared.argo_status: the one reader of an Argo Workflow's nodes, however Argo stored them."""

from __future__ import annotations

import base64
import gzip
import json
import zlib

from shared.argo_status import (
    MAX_DECOMPRESSED_NODES_BYTES,
    nodes_of,
    offloaded,
    status_nodes,
)

NODES = {"wf-1": {"id": "wf-1", "name": "wf.wm-gate", "phase": "Running"}}


def packed(nodes: object, *, compress: bool = True) -> str:
    data = json.dumps(nodes).encode()
    return base64.b64encode(gzip.compress(data) if compress else zlib.compress(data)).decode()


def test_plain_nodes_are_read_as_they_are() -> None:
    assert status_nodes({"nodes": NODES}) == (NODES, "nodes")
    assert nodes_of({"status": {"nodes": NODES}}) == NODES


def test_compressed_nodes_are_decoded_gzip_or_zlib() -> None:
    assert status_nodes({"compressedNodes": packed(NODES)}) == (NODES, "compressedNodes")
    assert nodes_of({"status": {"compressedNodes": packed(NODES, compress=False)}}) == NODES


def test_unreadable_compressed_nodes_read_as_none() -> None:
    assert status_nodes({"compressedNodes": "not base64!"})[1] == "unreadable"
    assert status_nodes({"compressedNodes": packed([1, 2])})[1] == "unreadable"
    bomb = base64.b64encode(gzip.compress(b" " * (MAX_DECOMPRESSED_NODES_BYTES + 1))).decode()
    assert status_nodes({"compressedNodes": bomb}) == ({}, "unreadable")


def test_offloaded_nodes_are_said_to_be_elsewhere() -> None:
    workflow = {"status": {"offloadNodeStatusVersion": "fnv:123"}}
    assert offloaded(workflow)
    assert nodes_of(workflow) == {}
    assert not offloaded({"status": {"nodes": NODES, "offloadNodeStatusVersion": "fnv:1"}})


def test_wrong_types_read_as_absent() -> None:
    assert nodes_of({"status": "x"}) == {}
    assert nodes_of({"status": {"nodes": {"a": "not a node", 3: {}, "b": {"id": "b"}}}}) == {
        "b": {"id": "b"}
    }
    assert not offloaded({"status": {"offloadNodeStatusVersion": 7}})
