"""`python -m sim --clusters N [--state-dir DIR] [--load RATE] [--s3-endpoint URL --bucket B]
[--serving]`: run the simulated world until SIGINT/SIGTERM, describing it in DIR/world.json."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
from pathlib import Path
from typing import Any

from sim.argo.server import (
    ARGO_NAMESPACE,
    ARGO_PORT,
    ARGO_SERVICE,
    DATA_ARGO_NAMESPACE,
    DATA_ARGO_SERVICE,
)
from sim.world import DEFAULT_REGISTRY_KEY, KNATIVE_GATEWAY, World, start_world


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    parser.add_argument("--clusters", type=int, default=2, help="number of clusters (0 = host)")
    parser.add_argument("--state-dir", type=Path, default=None, help="where to write world.json")
    parser.add_argument(
        "--load", type=float, default=0.0, help="sample runs per second per cluster"
    )
    parser.add_argument("--tick", type=float, default=1.0, help="Argo simulator tick in seconds")
    parser.add_argument("--pod-gc-delay", type=float, default=30.0, help="seconds before pod GC")
    parser.add_argument("--s3-endpoint", default=None, help="S3 endpoint for log archival")
    parser.add_argument("--bucket", default=None, help="bucket for archived logs and artifacts")
    parser.add_argument("--registry-key", default=DEFAULT_REGISTRY_KEY)
    parser.add_argument("--host-registered", action="store_true", help="list the host too")
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument(
        "--serving", action="store_true", help="run the KServe stand-in on the host (needs S3)"
    )
    args = parser.parse_args(argv)
    if bool(args.s3_endpoint) != bool(args.bucket):
        parser.error("--s3-endpoint and --bucket go together")
    return args


def describe(world: World, state_dir: Path) -> dict[str, Any]:
    """Write each kubeconfig and return the world.json document."""
    clusters = []
    for cluster in world.clusters:
        path = state_dir / f"{cluster.name}.kubeconfig"
        path.write_text(cluster.kubeconfig)
        path.chmod(0o600)
        clusters.append(
            {
                "id": cluster.id,
                "name": cluster.name,
                "region": cluster.region,
                "url": cluster.url,
                "kubeconfig": str(path),
                "kube_system_uid": cluster.kube_system_uid,
                "host": cluster.host,
                "registered": world.registry.registry.get(cluster.id) is not None,
            }
        )
    return {
        "clusters": clusters,
        "registry": {"url": world.registry_url, "key": world.registry_key},
        "argo_server": {"namespace": ARGO_NAMESPACE, "service": ARGO_SERVICE, "port": ARGO_PORT},
        # The host's data controller's server (ARGO_DATA_SERVER_URL) and instance ID
        # (ARGO_DATA_INSTANCE_ID).
        "argo_data_server": {
            "namespace": DATA_ARGO_NAMESPACE,
            "service": DATA_ARGO_SERVICE,
            "port": ARGO_PORT,
            "instance_id": world.host.data_instance_id,
            "url": f"https://{DATA_ARGO_SERVICE}.{DATA_ARGO_NAMESPACE}.svc:{ARGO_PORT}",
        },
        # The host's Argo Events: its webhooks (what EVENTS_PUBLIC_HOST routes to in production).
        "argo_events": {"url": world.host.events.url if world.host.events else None},
        "s3": (
            {"endpoint": world.archive.settings.endpoint, "bucket": world.archive.bucket}
            if world.archive
            else None
        ),
        # The KServe stand-in's gateway (what KNATIVE_GATEWAY names in production) and the
        # Service name that stands for it on the host.
        "serving": (
            {"gateway": world.host.serving.gateway.url, "knative_gateway": KNATIVE_GATEWAY}
            if world.host.serving
            else None
        ),
    }


def write_state(world: World, state_dir: Path) -> Path:
    """Write kubeconfigs and world.json atomically (readers never see a half-written file)."""
    document = describe(world, state_dir)
    target = state_dir / "world.json"
    partial = state_dir / "world.json.tmp"
    partial.write_text(json.dumps(document, indent=2))
    partial.replace(target)
    return target


async def serve(args: argparse.Namespace, state_dir: Path) -> None:
    world = await start_world(
        args.clusters,
        tick=args.tick,
        s3_endpoint=args.s3_endpoint,
        bucket=args.bucket,
        registry_key=args.registry_key,
        host_registered=args.host_registered,
        pod_gc_delay=args.pod_gc_delay,
        load_rate=args.load or None,
        bind=args.bind,
        serving=args.serving,
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    try:
        target = write_state(world, state_dir)
        print(f"sim world ready: {target}", flush=True)
        await stopping.wait()
    finally:
        await world.stop()


def main() -> None:
    args = parse_args()
    state_dir: Path = args.state_dir or Path(tempfile.mkdtemp(prefix="sim-world-"))
    state_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(serve(args, state_dir))


if __name__ == "__main__":
    main()
