"""Prefix caching on an agent workload: radix cache + lpm vs radix cache + fcfs vs no cache.

8 concurrent sessions share one ~1,500-token system prompt with tool definitions and run 6
turns each; every turn resends the whole conversation plus a new user message and gets a
64-token answer. Then a few-shot batch: 50 questions behind one 20-shot prefix. The same
requests run three ways in one process; ends with one JSON line.

    python benchmarks/bench_prefix_cache.py [--sessions 8] [--turns 6] [--questions 50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

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


def run_sessions(engine: Engine, system: str, sessions: int, turns: int):
    histories = [[{"role": "system", "content": system}] for _ in range(sessions)]
    records = []
    for turn in range(turns):
        prompts = []
        for s, history in enumerate(histories):
            history.append(
                {
                    "role": "user",
                    "content": f"Session {s}, turn {turn}: where is my order {1000 + 37 * s + turn}?",
                }
            )
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


def run_few_shot(engine: Engine, questions: int):
    shots = "".join(
        f"Q: What is {a} plus {a * 3 % 17}?\nA: {a + a * 3 % 17}\n" for a in range(1, 21)
    )
    prompts = [f"{shots}Q: What is {q} plus {q % 7}?\nA:" for q in range(100, 100 + questions)]
    outs = engine.generate(prompts, {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True})
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-path", default="smollm2")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--questions", type=int, default=50)
    args = parser.parse_args()
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
