"""Prometheus metrics of the HTTP server (served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ServerMetrics:
    """Request counters and latency histograms, plus gauges copied from the scheduler's stats."""

    def __init__(self):
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
            "running": Gauge(
                "radixgen_running_requests", "Requests in the running batch", registry=r
            ),
            "waiting": Gauge("radixgen_queue_length", "Requests waiting for admission", registry=r),
            "cache_hit_rate": Gauge(
                "radixgen_cache_hit_rate", "Prompt tokens served from the prefix cache", registry=r
            ),
            "kv_free": Gauge("radixgen_kv_free_slots", "Free KV slots", registry=r),
            "tree_tokens": Gauge(
                "radixgen_cached_tokens", "KV slots held by the prefix cache", registry=r
            ),
            "retractions": Gauge(
                "radixgen_retractions", "Requests retracted for lack of KV memory", registry=r
            ),
            "jump_forward_tokens": Gauge(
                "radixgen_jump_forward_tokens",
                "Output tokens a grammar forced, appended without decoding",
                registry=r,
            ),
            "aborted_requests": Gauge(
                "radixgen_scheduler_aborted_requests",
                "Requests aborted in the scheduler",
                registry=r,
            ),
        }

    def update_engine(self, stats: dict) -> None:
        for key, gauge in self.gauges.items():
            if key in stats:
                gauge.set(stats[key])

    def render(self) -> bytes:
        return generate_latest(self.registry)
