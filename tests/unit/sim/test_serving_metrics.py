"""The gateway exports exactly the series Flagger's knative observer queries
(fluxcd/flagger pkg/metrics/observers/knative.go, quoted below as data)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sim.serving.metrics import ServingMetrics

FLAGGER_SUCCESS_RATE = """
	sum(
		rate(
			envoy_cluster_upstream_rq{
				envoy_cluster_name=~"{{ namespace }}/{{ route }}",
				envoy_response_code!~"5.*"
			}[{{ interval }}]
		)
	)
	/
	sum(
		rate(
			envoy_cluster_upstream_rq{
				envoy_cluster_name=~"{{ namespace }}/{{ route }}",
			}[{{ interval }}]
		)
	)
	* 100"""
FLAGGER_DURATION = """
	histogram_quantile(
		0.99,
		sum(
			rate(
				envoy_cluster_upstream_rq_time_bucket{
					envoy_cluster_name=~"{{ namespace }}/{{ route }}",
				}[{{ interval }}]
			)
		) by (le)
	)"""


def _selectors(query: str) -> list[tuple[str, set[str]]]:
    found = []
    for name, labels in re.findall(
        r"(\w+)\{([^}]*)\}", query.replace("{{", "<").replace("}}", ">")
    ):
        found.append((name, set(re.findall(r"(\w+)\s*[=!]~", labels))))
    return found


@dataclass
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _samples(text: str) -> list[Sample]:
    """The exposition's samples as Prometheus reads them (names as written: a Python client
    parser would rename counters to `_total`)."""
    found = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        assert match, line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match[2]))
        found.append(Sample(match[1], labels, float(match[3])))
    return found


def test_the_series_flagger_queries_are_exported_with_its_labels() -> None:
    metrics = ServingMetrics()
    metrics.record(
        namespace="ns", revision="m-predictor-00001", service="m-predictor", code=200, elapsed_ms=3
    )
    metrics.record(
        namespace="ns", revision="m-predictor-00001", service="m-predictor", code=503, elapsed_ms=7
    )
    samples = _samples(metrics.render())
    wanted = _selectors(FLAGGER_SUCCESS_RATE) + _selectors(FLAGGER_DURATION)
    assert {name for name, _ in wanted} == {
        "envoy_cluster_upstream_rq",
        "envoy_cluster_upstream_rq_time_bucket",
    }
    for name, labels in wanted:
        matching = [s for s in samples if s.name == name]
        assert matching, name
        for sample in matching:
            assert labels <= set(sample.labels), (name, sample.labels)
            assert sample.labels["envoy_cluster_name"] == "ns/m-predictor-00001"
    codes = {
        s.labels["envoy_response_code"]: s.value
        for s in samples
        if s.name == "envoy_cluster_upstream_rq"
    }
    assert codes == {"200": 1.0, "503": 1.0}
    buckets = {s.labels["le"]: s.value for s in samples if s.name.endswith("rq_time_bucket")}
    assert (buckets["5"], buckets["10"], buckets["+Inf"]) == (1.0, 2.0, 2.0)
    app = [s for s in samples if s.name == "revision_app_request_count"]
    assert {(s.labels["revision_name"], s.labels["response_code_class"]) for s in app} == {
        ("m-predictor-00001", "2xx"),
        ("m-predictor-00001", "5xx"),
    }
    assert any(s.name == "revision_app_request_latencies_bucket" for s in samples)
