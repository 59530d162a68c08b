"""Structured output speed: jump-forward on vs off, with unconstrained generation as baseline.

Three cases, each at 1 stream (latency) and N concurrent streams (throughput):
  profile  a character profile from a short prompt, schema of long fixed keys and enums
  extract  fields of a ~1,000-token report pulled into a schema
  tool     one call among 8 tools (name + arguments valid against that tool's parameters)
Two servers run one after the other: the default one (jump-forward on; it also runs the
unconstrained baseline) and one with --disable-jump-forward. Every finished output is checked
against its schema. Prints a table per case and ends with one JSON line.

    python benchmarks/bench_json.py [--concurrency 32] [--latency-runs 3]
        [--json-whitespace bounded|compact|any] [--cases profile,extract,tool]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402
import jsonschema  # noqa: E402

from tests.runtime.server_helpers import ServerProcess  # noqa: E402


def chat(user: str) -> str:
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


PROFILE_SCHEMA = {
    "type": "object",
    "properties": {
        "character_full_name": {"type": "string", "maxLength": 24},
        "character_class_or_profession": {"enum": ["warrior", "wizard", "rogue", "cleric"]},
        "home_kingdom_or_region_of_origin": {"enum": ["northern_wastes", "silver_coast"]},
        "maximum_hit_points_value": {"type": "integer", "minimum": 1, "maximum": 999},
        "primary_weapon_of_choice": {"enum": ["longsword", "staff", "dagger", "mace"]},
        "character_alignment_on_the_moral_axis": {"enum": ["lawful_good", "chaotic_neutral"]},
        "character_is_currently_alive": {"type": "boolean"},
        "number_of_completed_quests": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "additionalProperties": False,
}
PROFILE_SCHEMA["required"] = list(PROFILE_SCHEMA["properties"])

EXTRACT_SCHEMA = {
    "type": "object",
    "properties": {
        "incident_id": {"type": "string", "pattern": "^INC-[0-9]{5}$"},
        "reported_by": {"type": "string", "maxLength": 32},
        "severity": {"enum": ["low", "medium", "high", "critical"]},
        "affected_service": {"type": "string", "maxLength": 32},
        "duration_minutes": {"type": "integer", "minimum": 0, "maximum": 10000},
        "customer_impact": {"type": "boolean"},
    },
    "additionalProperties": False,
}
EXTRACT_SCHEMA["required"] = list(EXTRACT_SCHEMA["properties"])


def report() -> str:
    """A made-up incident report of about 1,000 tokens."""
    lines = [
        "Incident report INC-20417, filed by Maria Okafor of the platform team.",
        "Severity was rated high. The affected service was the payments gateway.",
        "The outage lasted 47 minutes and customers were affected during checkout.",
    ]
    for i in range(24):
        lines.append(
            f"At 14:{i:02d} the on-call engineer checked node pool {i % 5} and found the "
            f"connection queue at {120 + 7 * i} entries; retries were throttled, the cache "
            f"warmed again and the error rate fell to {max(0, 9 - i) / 10:.1f} percent."
        )
    lines.append("Follow-up actions were assigned to the database and network teams.")
    return " ".join(lines)


TOOL_NAMES = [
    "get_weather",
    "search_flights",
    "book_hotel",
    "convert_currency",
    "send_email",
    "create_calendar_event",
    "lookup_stock_price",
    "translate_text",
]


def tools_schema() -> dict:
    def params(name: str) -> dict:
        props = {
            "get_weather": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "search_flights": {"origin": {"type": "string"}, "destination": {"type": "string"}},
            "book_hotel": {"city": {"type": "string"}, "nights": {"type": "integer"}},
            "convert_currency": {"amount": {"type": "number"}, "to": {"enum": ["EUR", "USD"]}},
            "send_email": {"to": {"type": "string"}, "subject": {"type": "string"}},
            "create_calendar_event": {"title": {"type": "string"}, "day": {"type": "string"}},
            "lookup_stock_price": {"ticker": {"type": "string", "maxLength": 5}},
            "translate_text": {"text": {"type": "string"}, "language": {"enum": ["fr", "de"]}},
        }[name]
        return {
            "type": "object",
            "properties": props,
            "required": list(props),
            "additionalProperties": False,
        }

    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": n}, "arguments": params(n)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for n in TOOL_NAMES
    ]
    return {"anyOf": calls}


CASES = {
    "profile": (chat("Invent a game character. Answer in JSON."), PROFILE_SCHEMA, 200),
    "extract": (
        chat(report() + "\n\nExtract the incident's fields as JSON."),
        EXTRACT_SCHEMA,
        120,
    ),
    "tool": (
        chat(
            "Tools: " + ", ".join(TOOL_NAMES) + ". What is the weather in Lisbon? "
            'Answer with a JSON tool call {"name": ..., "arguments": {...}}.'
        ),
        tools_schema(),
        80,
    ),
}


def run(url: str, prompt: str, schema: dict | None, max_tokens: int, n: int, seed0: int):
    """`n` requests at once: (wall seconds, latencies, completion tokens, outputs)."""

    def one(i: int):
        params = {"max_new_tokens": max_tokens, "temperature": 0.7, "seed": seed0 + i}
        if schema is not None:
            params["json_schema"] = json.dumps(schema)
        start = time.perf_counter()
        r = httpx.post(
            f"{url}/generate", json={"text": prompt, "sampling_params": params}, timeout=900
        )
        r.raise_for_status()
        return time.perf_counter() - start, r.json()

    start = time.perf_counter()
    with ThreadPoolExecutor(max(n, 1)) as pool:
        results = list(pool.map(one, range(n)))
    wall = time.perf_counter() - start
    outs = [o for _, o in results]
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    return wall, [lat for lat, _ in results], tokens, outs


def invalid_count(schema: dict, outs: list[dict]) -> int:
    bad = 0
    validator = jsonschema.validators.validator_for(schema)(schema)
    for o in outs:
        if o["meta_info"]["finish_reason"]["type"] != "stop":
            continue
        try:
            validator.validate(json.loads(o["text"]))
        except (ValueError, jsonschema.ValidationError):
            bad += 1
    return bad


def forward_steps(url: str) -> int:
    return httpx.get(f"{url}/get_server_info", timeout=10).json()["stats"]["forward_steps"]


def measure(url: str, case: str, constrained: bool, args) -> dict:
    prompt, schema, max_tokens = CASES[case]
    schema_used = schema if constrained else None
    run(url, prompt, schema_used, 4, 1, 0)  # compile the grammar, cache the prompt
    steps = forward_steps(url)
    lat, tokens_1, outs = [], 0, []
    for i in range(args.latency_runs):
        _, (latency,), tokens, got = run(url, prompt, schema_used, max_tokens, 1, 100 + i)
        lat.append(latency)
        tokens_1 += tokens
        outs += got
    steps_1 = (forward_steps(url) - steps) / args.latency_runs
    wall, _, tokens, got = run(url, prompt, schema_used, max_tokens, args.concurrency, 1000)
    outs += got
    return {
        "latency_p50_s": statistics.median(lat),
        "steps_per_request": steps_1,
        "tokens_per_request": tokens_1 / args.latency_runs,
        "throughput_tok_s": tokens / wall,
        "requests_per_s": args.concurrency / wall,
        "finished": sum(o["meta_info"]["finish_reason"]["type"] == "stop" for o in outs),
        "outputs": len(outs),
        "invalid": invalid_count(schema, outs) if constrained else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-runs", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument(
        "--json-whitespace", default="bounded", choices=["bounded", "compact", "any"]
    )
    args = parser.parse_args()
    cases = args.cases.split(",")
    results: dict[str, dict] = {c: {} for c in cases}
    for mode, flags in (("jump_forward", ()), ("token_by_token", ("--disable-jump-forward",))):
        server = ServerProcess("--json-whitespace", args.json_whitespace, *flags)
        try:
            for case in cases:
                results[case][mode] = measure(server.url, case, True, args)
                if mode == "jump_forward":
                    results[case]["unconstrained"] = measure(server.url, case, False, args)
        finally:
            server.stop()
    summary = {"concurrency": args.concurrency, "json_whitespace": args.json_whitespace}
    for case in cases:
        r = results[case]
        print(f"\n== {case} ==")
        print(
            f"{'mode':16} {'p50 s':>7} {'steps/req':>9} {'tok/req':>8} {'tok/s':>8} {'valid':>9}"
        )  # valid: finished and valid / all
        for mode in ("unconstrained", "jump_forward", "token_by_token"):
            m = r[mode]
            valid = (
                f"{m['finished'] - m['invalid']}/{m['outputs']}" if mode != "unconstrained" else "-"
            )
            print(
                f"{mode:16} {m['latency_p50_s']:7.2f} {m['steps_per_request']:9.1f} "
                f"{m['tokens_per_request']:8.1f} {m['throughput_tok_s']:8.1f} {valid:>9}"
            )
        on, off, free = r["jump_forward"], r["token_by_token"], r["unconstrained"]
        summary[case] = {
            "latency_speedup": off["latency_p50_s"] / on["latency_p50_s"],
            "throughput_speedup": on["requests_per_s"] / off["requests_per_s"],
            "steps_saved_per_request": off["steps_per_request"] - on["steps_per_request"],
            "constrained_vs_free_tok_s": on["throughput_tok_s"] / free["throughput_tok_s"],
            "invalid": on["invalid"] + off["invalid"],
        }
        print(json.dumps(summary[case]))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
