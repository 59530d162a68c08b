"""Prefix caching on an agent workload: radix cache + lpm vs radix cache + fcfs vs no cache.

8 concurrent sessions share one ~1,500-token system prompt with tool definitions and run 6
turns each; every turn resends the whole conversation plus a new user message and gets a
64-token answer. Then a few-shot batch: 50 questions behind one 20-shot prefix. The same
requests run three ways in one process; ends with one JSON line.

With --dp-size N the same workload runs against servers instead, the sessions as concurrent
clients (each sends its next turn when its answer arrives): one worker (the hit-rate
reference), then N workers with cache-aware routing, then the same N workers round-robin.

    python benchmarks/bench_prefix_cache.py [--sessions 8] [--turns 6] [--questions 50]
    python benchmarks/bench_prefix_cache.py --dp-size 2 [--sessions 8] [--turns 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import httpx  # noqa: E402

from runtime import Engine  # noqa: E402

ANSWER_TOKENS = 64
WAYS = {
    "cache_lpm": {"schedule_policy": "lpm"},
    "cache_fcfs": {"schedule_policy": "fcfs"},
    "no_cache": {"disable_radix_cache": True, "schedule_policy": "fcfs"},
}


def tool(name: str, purpose: str, fields: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{purpose}. Use it only when the user asks for it explicitly.",
            "parameters": {
                "type": "object",
                "properties": {
                    f: {"type": "string", "description": f"The {f.replace('_', ' ')}."}
                    for f in fields
                },
                "required": fields[:1],
            },
        },
    }


def system_prompt() -> str:
    tools = [
        tool(
            "search_orders",
            "Find a customer's orders by date or status",
            ["customer_id", "status", "since"],
        ),
        tool("get_order", "Fetch one order with its items and shipping state", ["order_id"]),
        tool("refund_order", "Refund an order fully or in part", ["order_id", "amount", "reason"]),
        tool(
            "update_address",
            "Change the shipping address of an open order",
            ["order_id", "street", "city", "postcode", "country"],
        ),
        tool("track_parcel", "Look up a parcel with the carrier", ["tracking_number", "carrier"]),
        tool(
            "create_ticket",
            "Open a support ticket for a human agent",
            ["subject", "body", "priority"],
        ),
        tool("list_products", "Search the product catalogue", ["query", "category", "max_price"]),
        tool("check_stock", "Stock level of a product in each warehouse", ["product_id"]),
        tool("apply_coupon", "Apply a coupon code to an open order", ["order_id", "code"]),
        tool("send_email", "Send an email to the customer", ["to", "subject", "body"]),
        tool("schedule_callback", "Book a phone call with the customer", ["phone", "time_slot"]),
        tool("get_policy", "Quote a store policy section verbatim", ["section"]),
    ]
    rules = " ".join(
        f"Rule {i}: when the customer mentions topic {i}, confirm the order number, restate the "
        f"request in one sentence, and call at most one tool before answering."
        for i in range(1, 9)
    )
    return (
        "You are the customer-support assistant of an online store. Be brief, polite and exact. "
        f"{rules}\nYou can call these tools:\n{json.dumps(tools)}\n"
    )


def user_turn(s: int, turn: int) -> dict:
    return {
        "role": "user",
        "content": f"Session {s}, turn {turn}: where is my order {1000 + 37 * s + turn}?",
    }


def run_sessions(engine: Engine, system: str, sessions: int, turns: int):
    histories = [[{"role": "system", "content": system}] for _ in range(sessions)]
    records = []
    for turn in range(turns):
        prompts = []
        for s, history in enumerate(histories):
            history.append(user_turn(s, turn))
            prompts.append(
                engine.tokenizer.apply_chat_template(
                    history, tokenize=False, add_generation_prompt=True
                )
            )
        outs = engine.generate(
            prompts, {"max_new_tokens": ANSWER_TOKENS, "temperature": 0, "ignore_eos": True}
        )
        for history, out in zip(histories, outs):
            history.append({"role": "assistant", "content": out["text"]})
            records.append((turn, out["meta_info"]))
    return records


def few_shot_prompts(questions: int) -> list[str]:
    shots = "".join(
        f"Q: What is {a} plus {a * 3 % 17}?\nA: {a + a * 3 % 17}\n" for a in range(1, 21)
    )
    return [f"{shots}Q: What is {q} plus {q % 7}?\nA:" for q in range(100, 100 + questions)]


FEW_SHOT_PARAMS = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}


def run_few_shot(engine: Engine, questions: int):
    outs = engine.generate(few_shot_prompts(questions), FEW_SHOT_PARAMS)
    return [(1, o["meta_info"]) for o in outs]


def measure(name: str, options: dict, args) -> dict:
    engine = Engine(model_path=args.model_path, log_level="warning", **options)
    engine.generate("warm up", {"max_new_tokens": 4})
    engine.scheduler.flush_cache()
    start = time.perf_counter()
    records = run_sessions(engine, system_prompt(), args.sessions, args.turns)
    records += run_few_shot(engine, args.questions)
    elapsed = time.perf_counter() - start
    engine.shutdown()
    return summarize(name, records, elapsed)


def summarize(name: str, records: list, elapsed: float) -> dict:
    later = [m for turn, m in records if turn > 0]
    ttfts = sorted(m["ttft"] for _, m in records)
    out_tokens = sum(m["completion_tokens"] for _, m in records)
    return {
        "way": name,
        "seconds": round(elapsed, 2),
        "throughput_tok_s": round(out_tokens / elapsed, 2),
        "ttft_mean_s": round(statistics.mean(ttfts), 3),
        "ttft_p95_s": round(ttfts[int(0.95 * (len(ttfts) - 1))], 3),
        "hit_rate_after_first_turn": round(
            sum(m["cached_tokens"] for m in later) / sum(m["prompt_tokens"] for m in later), 3
        ),
        "prompt_tokens": sum(m["prompt_tokens"] for _, m in records),
        "output_tokens": out_tokens,
    }


async def http_session(client, tokenizer, system: str, s: int, turns: int, records: list):
    """One agent: each turn resends the conversation once the previous answer is back."""
    history = [{"role": "system", "content": system}]
    for turn in range(turns):
        history.append(user_turn(s, turn))
        text = tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
        params = {"max_new_tokens": ANSWER_TOKENS, "temperature": 0, "ignore_eos": True}
        r = await client.post("/generate", json={"text": text, "sampling_params": params})
        r.raise_for_status()
        out = r.json()
        history.append({"role": "assistant", "content": out["text"]})
        records.append((turn, out["meta_info"]))


async def run_http_workload(url: str, tokenizer, args) -> tuple[list, float]:
    records: list = []
    async with httpx.AsyncClient(base_url=url, timeout=1800) as client:
        start = time.perf_counter()
        system = system_prompt()
        await asyncio.gather(
            *(
                http_session(client, tokenizer, system, s, args.turns, records)
                for s in range(args.sessions)
            )
        )
        r = await client.post(
            "/generate",
            json={"text": few_shot_prompts(args.questions), "sampling_params": FEW_SHOT_PARAMS},
        )
        r.raise_for_status()
        records += [(1, o["meta_info"]) for o in r.json()]
        return records, time.perf_counter() - start


def measure_server(name: str, dp_size: int, method: str, tokenizer, args) -> dict:
    from tests.runtime.server_helpers import ServerProcess

    server = ServerProcess(
        "--model-path", args.model_path, "--dp-size", str(dp_size),
        "--load-balance-method", method, "--cpu-threads", str(args.cpu_threads),
        "--log-level", "warning", "--log-interval", "0",
        timeout=600,
    )  # fmt: skip
    try:
        for prompt in ("warm up", "and the other worker"):
            httpx.post(
                f"{server.url}/generate",
                json={"text": prompt, "sampling_params": {"max_new_tokens": 4}},
                timeout=300,
            )
        httpx.post(f"{server.url}/flush_cache", timeout=60).raise_for_status()
        records, elapsed = asyncio.run(run_http_workload(server.url, tokenizer, args))
        out = summarize(name, records, elapsed)
        workers = httpx.get(f"{server.url}/get_server_info", timeout=60).json().get("workers")
        if workers:
            out["prompt_tokens_per_worker"] = [w["prompt_tokens"] for w in workers]
        return out
    finally:
        server.stop()


def main_data_parallel(args) -> None:
    from runtime.model.loader import load_tokenizer, resolve_model_path

    tokenizer = load_tokenizer(resolve_model_path(args.model_path))
    n = args.dp_size
    ways = {
        "dp1": (1, "cache_aware"),
        f"dp{n}_cache_aware": (n, "cache_aware"),
        f"dp{n}_round_robin": (n, "round_robin"),
    }
    results = {}
    for name, (dp, method) in ways.items():
        results[name] = measure_server(name, dp, method, tokenizer, args)
        print(json.dumps(results[name]), flush=True)
    one, aware, rr = results["dp1"], results[f"dp{n}_cache_aware"], results[f"dp{n}_round_robin"]
    figures = {
        "cache_aware_vs_round_robin": round(aware["throughput_tok_s"] / rr["throughput_tok_s"], 2),
        "cache_aware_vs_dp1": round(aware["throughput_tok_s"] / one["throughput_tok_s"], 2),
        "hit_rate_points_below_dp1": round(
            100 * (one["hit_rate_after_first_turn"] - aware["hit_rate_after_first_turn"]), 1
        ),
        "round_robin_hit_rate_points_below_dp1": round(
            100 * (one["hit_rate_after_first_turn"] - rr["hit_rate_after_first_turn"]), 1
        ),
    }
    print(json.dumps({"bench": "prefix_cache_dp", "dp_size": n, **figures, "ways": results}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-path", default="smollm2")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument(
        "--dp-size", type=int, default=1, help="N > 1: servers with N workers (see above)"
    )
    parser.add_argument("--cpu-threads", type=int, default=1, help="per server worker")
    args = parser.parse_args()
    if args.dp_size > 1:
        main_data_parallel(args)
        return
    results = {name: measure(name, options, args) for name, options in WAYS.items()}
    print(
        f"{'way':12} {'tok/s':>8} {'ttft mean':>10} {'ttft p95':>9} {'hit rate':>9} {'seconds':>8}"
    )
    for r in results.values():
        print(
            f"{r['way']:12} {r['throughput_tok_s']:8.1f} {r['ttft_mean_s']:10.3f} {r['ttft_p95_s']:9.3f} "
            f"{r['hit_rate_after_first_turn']:9.3f} {r['seconds']:8.1f}"
        )
    lpm, fcfs, off = results["cache_lpm"], results["cache_fcfs"], results["no_cache"]
    ratios = {
        "lpm_vs_no_cache": round(lpm["throughput_tok_s"] / off["throughput_tok_s"], 2),
        "lpm_vs_fcfs": round(lpm["throughput_tok_s"] / fcfs["throughput_tok_s"], 2),
    }
    print(
        f"cache+lpm vs no cache: {ratios['lpm_vs_no_cache']}x; lpm vs fcfs: {ratios['lpm_vs_fcfs']}x"
    )
    print(json.dumps({"bench": "prefix_cache", **ratios, "ways": results}))


if __name__ == "__main__":
    main()
