"""What the gateway and the revisions' queue-proxies export, in Prometheus' text format;
purely computational, no side effects.

Envoy (Kourier's gateway) stats as Envoy's `/stats/prometheus` names them and as Flagger's
knative observer (`pkg/metrics/observers/knative.go`) queries them:
`envoy_cluster_upstream_rq{envoy_response_code, envoy_cluster_name="<ns>/<revision>"}` and the
`envoy_cluster_upstream_rq_time` histogram in milliseconds (Envoy's default buckets). And
Knative's queue-proxy (≤ 1.18) `revision_app_request_count` and the
`revision_app_request_latencies` histogram (ms, Knative's default distribution) with
`revision_name` and `response_code_class` among their labels.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

ENVOY_BUCKETS_MS = (
    0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000,
    600000, 1800000, 3600000,
)  # fmt: skip
QUEUE_PROXY_BUCKETS_MS = (
    5, 10, 20, 40, 60, 80, 100, 150, 200, 250, 300, 350, 400, 450, 500, 600, 700, 800, 900,
    1000, 2000, 5000, 10000, 20000, 50000, 100000,
)  # fmt: skip
USER_CONTAINER = "kserve-container"


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; last: +Inf
    total: float = 0.0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def lines(self, name: str, labels: str) -> Iterable[str]:
        counts = self.counts or [0] * (len(self.bounds) + 1)
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else _number(bound)
            yield f'{name}_bucket{{{labels},le="{le}"}} {running}'
        yield f"{name}_sum{{{labels}}} {_number(self.total)}"
        yield f"{name}_count{{{labels}}} {running}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass
class RevisionStats:
    namespace: str
    revision: str
    service: str
    codes: dict[int, int] = field(default_factory=dict)
    envoy_time: Histogram = field(default_factory=lambda: Histogram(ENVOY_BUCKETS_MS))
    app_latency: dict[str, Histogram] = field(default_factory=dict)  # by response code class


class ServingMetrics:
    """Counters and histograms per revision, fed by the gateway."""

    def __init__(self) -> None:
        self._revisions: dict[tuple[str, str], RevisionStats] = {}

    def record(
        self, *, namespace: str, revision: str, service: str, code: int, elapsed_ms: float
    ) -> None:
        stats = self._revisions.get((namespace, revision))
        if stats is None:
            stats = RevisionStats(namespace, revision, service)
            self._revisions[(namespace, revision)] = stats
        stats.codes[code] = stats.codes.get(code, 0) + 1
        stats.envoy_time.observe(elapsed_ms)
        code_class = f"{code // 100}xx"
        histogram = stats.app_latency.setdefault(code_class, Histogram(QUEUE_PROXY_BUCKETS_MS))
        histogram.observe(elapsed_ms)

    def requests(self, namespace: str, revision: str) -> int:
        """Requests a revision answered (every code)."""
        stats = self._revisions.get((namespace, revision))
        return sum(stats.codes.values()) if stats else 0

    def render(self) -> str:
        """The exposition (text format 0.0.4)."""
        ordered = [self._revisions[key] for key in sorted(self._revisions)]
        lines = ["# TYPE envoy_cluster_upstream_rq counter"]
        for stats in ordered:
            cluster = _escape(f"{stats.namespace}/{stats.revision}")
            for code in sorted(stats.codes):
                lines.append(
                    f'envoy_cluster_upstream_rq{{envoy_response_code="{code}",'
                    f'envoy_cluster_name="{cluster}"}} {stats.codes[code]}'
                )
        lines.append("# TYPE envoy_cluster_upstream_rq_time histogram")
        for stats in ordered:
            cluster = _escape(f"{stats.namespace}/{stats.revision}")
            lines += stats.envoy_time.lines(
                "envoy_cluster_upstream_rq_time", f'envoy_cluster_name="{cluster}"'
            )
        lines.append("# TYPE revision_app_request_count counter")
        for stats in ordered:
            for code in sorted(stats.codes):
                labels = _queue_proxy_labels(stats, code_class=f"{code // 100}xx")
                lines.append(
                    f'revision_app_request_count{{{labels},response_code="{code}"}} '
                    f"{stats.codes[code]}"
                )
        lines.append("# TYPE revision_app_request_latencies histogram")
        for stats in ordered:
            for code_class in sorted(stats.app_latency):
                labels = _queue_proxy_labels(stats, code_class=code_class)
                lines += stats.app_latency[code_class].lines(
                    "revision_app_request_latencies", labels
                )
        return "\n".join(lines) + "\n"


def _queue_proxy_labels(stats: RevisionStats, *, code_class: str) -> str:
    return ",".join(
        f'{name}="{_escape(value)}"'
        for name, value in (
            ("configuration_name", stats.service),
            ("container_name", USER_CONTAINER),
            ("namespace_name", stats.namespace),
            ("pod_name", f"{stats.revision}-deployment-0"),
            ("response_code_class", code_class),
            ("revision_name", stats.revision),
            ("service_name", stats.service),
        )
    )
