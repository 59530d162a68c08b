"""Prometheus metrics of the HTTP server (served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# scheduler stat -> (metric name after "radixgen_", help)
ENGINE_GAUGES = {
    "running": ("running_requests", "Requests in the running batch"),
    "waiting": ("queue_length", "Requests waiting for admission"),
    "cache_hit_rate": ("cache_hit_rate", "Prompt tokens served from the prefix cache"),
    "kv_free": ("kv_free_slots", "Free KV slots"),
    "tree_tokens": ("cached_tokens", "KV slots held by the prefix cache"),
    "retractions": ("retractions", "Requests retracted for lack of KV memory"),
    "jump_forward_tokens": (
        "jump_forward_tokens",
        "Output tokens a grammar forced, appended without decoding",
    ),
    "aborted_requests": ("scheduler_aborted_requests", "Requests aborted in the scheduler"),
}


def total_stats(workers: list[dict]) -> dict:
    """The scheduler stats of several data-parallel workers as one: counters and sizes add up,
    the cache hit rate is recomputed from the summed token counts, ratios are averaged."""
    total: dict = {}
    for stats in workers:
        for key, value in stats.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    if "new_token_ratio" in total:
        total["new_token_ratio"] /= len(workers)
    if "cache_hit_rate" in total:
        prompt = total.get("cached_prompt_tokens", 0) + total.get("computed_prompt_tokens", 0)
        total["cache_hit_rate"] = total.get("cached_prompt_tokens", 0) / max(prompt, 1)
    return total


class ServerMetrics:
    """Request counters and latency histograms, plus gauges copied from the scheduler's stats
    (with --dp-size N: the workers' totals, and each worker's under the same names with
    `worker_` after the prefix and a `worker` label)."""

    def __init__(self, dp_size: int = 1):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("radixgen_requests", "Generation requests received", registry=r)
        self.aborted = Counter(
            "radixgen_aborted_requests", "Requests aborted (disconnects included)", registry=r
        )
        self.prompt_tokens = Counter("radixgen_prompt_tokens", "Prompt tokens received", registry=r)
        self.generation_tokens = Counter(
            "radixgen_generation_tokens", "Tokens generated", registry=r
        )
        self.ttft = Histogram(
            "radixgen_time_to_first_token_seconds",
            "Time to first token",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "radixgen_inter_token_latency_seconds",
            "Time between output tokens",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "radixgen_e2e_request_latency_seconds",
            "Request latency",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.gauges = {
            key: Gauge(f"radixgen_{name}", doc, registry=r)
            for key, (name, doc) in ENGINE_GAUGES.items()
        }
        self.worker_gauges: dict[str, Gauge] = {}
        if dp_size > 1:
            self._add_worker_metrics(dp_size)

    def _add_worker_metrics(self, dp_size: int) -> None:
        r = self.registry
        for key, (name, doc) in ENGINE_GAUGES.items():
            self.worker_gauges[key] = Gauge(
                f"radixgen_worker_{name}", f"{doc}, per worker", ["worker"], registry=r
            )
        self.worker_in_flight = Gauge(
            "radixgen_worker_requests_in_flight",
            "Requests the router has sent to a worker that have not ended",
            ["worker"],
            registry=r,
        )
        self.routed_requests = Counter(
            "radixgen_routed_requests",
            "Requests routed to each worker, by why (cache, load, round_robin, shortest_queue)",
            ["worker", "reason"],
            registry=r,
        )
        for worker in range(dp_size):
            self.in_flight(worker, 0)

    def update_worker(self, worker: int, stats: dict) -> None:
        for key, gauge in self.worker_gauges.items():
            if key in stats:
                gauge.labels(worker=str(worker)).set(stats[key])

    def routed(self, worker: int, reason: str, in_flight: list[int]) -> None:
        self.routed_requests.labels(worker=str(worker), reason=reason).inc()
        self.in_flight(worker, in_flight[worker])

    def in_flight(self, worker: int, count: int) -> None:
        self.worker_in_flight.labels(worker=str(worker)).set(count)

    def update_engine(self, stats: dict) -> None:
        for key, gauge in self.gauges.items():
            if key in stats:
                gauge.set(stats[key])

    def render(self) -> bytes:
        return generate_latest(self.registry)
