"""Agent programs through the DSL: what the radix cache, the program-level prefix sharing of
`lang` (pre-cached traced prefix, committed fork prefixes) and the schedule policy buy.

Each program: a ~1,500-token system prompt with tool definitions, a task, N tool-call steps
(a JSON-schema-constrained call, a Python tool's result fed back) and one fork of 3 drafts.
Cases, each against a fresh server (one at a time):
  cache     run_batch against a server with the radix cache (lpm)
  no_cache  the same against --disable-radix-cache
  openai    the same through the OpenAI backend against that server's /v1
  lpm/fcfs  programs arriving over time, with a KV pool of about a quarter of the working set

    python benchmarks/bench_agent.py [--programs 64] [--steps 4] [--forks 3]
        [--system-tokens 1500] [--gen-tokens 24] [--cases cache,no_cache,openai,lpm,fcfs]
        [--tenants 1]
        [--pool-fraction 0.25 | --max-total-tokens N] [--arrival-span 0.5 | --arrival-seconds S]

lpm/fcfs size their pool and arrival span from a cache run (run first when not among the
cases), unless both --max-total-tokens and --arrival-seconds are given.

Prints programs/s, total time and the cached share of prompt tokens per case, then one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import lang as sgl  # noqa: E402

TOOLS = {  # the Python tools the model calls
    "square": lambda x: x * x,
    "double": lambda x: 2 * x,
    "increment": lambda x: x + 1,
    "digit_sum": lambda x: sum(int(d) for d in str(abs(x))),
}
CALL_SCHEMA = {
    "type": "object",
    "properties": {
        "tool": {"enum": sorted(TOOLS)},
        "x": {"type": "integer", "minimum": 0, "maximum": 999},
    },
    "required": ["tool", "x"],
    "additionalProperties": False,
}


def system_prompt(target_tokens: int, tenant: int = 0) -> str:
    """Tool definitions (the callable ones, then a catalogue of others) of about
    `target_tokens` tokens (~3.6 characters per token for this JSON-heavy text); each tenant's
    prompt differs from its first line on, so tenants share no cached prefix."""
    lines = [
        f"You are the operations agent of tenant {tenant}. Call one tool per turn with a JSON",
        "object that matches",
        f"this schema: {json.dumps(CALL_SCHEMA)}. The tool result comes back in the next",
        "user message. Callable tools: square(x), double(x), increment(x), digit_sum(x).",
        "Reference catalogue of the other tools of the platform (not callable here):",
    ]
    i = 0
    while sum(len(line) + 1 for line in lines) < target_tokens * 3.6:
        lines.append(
            json.dumps(
                {
                    "name": f"tenant{tenant}_tool_{i:03d}",
                    "description": f"Looks up record group {i} in the inventory and returns "
                    "its owner, location and last audit date.",
                    "parameters": {"record_id": "integer", "include_history": "boolean"},
                }
            )
        )
        i += 1
    return "\n".join(lines)


def tool_result(call_text: str) -> str:
    """Run the tool a call names; a malformed call (cut off by max_tokens) gets an error."""
    try:
        call = json.loads(call_text)
        return str(TOOLS[call["tool"]](int(call["x"])))
    except (ValueError, KeyError, TypeError):
        return "error: malformed call, answer with one JSON object"


def agent_body(s, system, task, steps, forks, gen_tokens, delay=0.0):
    s += sgl.system(system)
    if delay:
        time.sleep(delay)  # the program arrives now (its system text is not sent yet)
    s += sgl.user(task)
    for step in range(steps):
        s += sgl.assistant(sgl.gen(f"call_{step}", json_schema=CALL_SCHEMA, max_tokens=gen_tokens))
        s += sgl.user(f"Tool result: {tool_result(s[f'call_{step}'])}")
    drafts = s.fork(forks)
    for i, draft in enumerate(drafts):
        draft += sgl.user(f"Write final answer draft {i + 1} in one sentence.")
        draft += sgl.assistant(sgl.gen("draft", max_tokens=gen_tokens))
    drafts.join()


agent = sgl.function(agent_body)


def server_stats(backend: sgl.RuntimeEndpoint) -> dict:
    return backend.get_server_info()["stats"]


def run_case(name: str, program, backend, stats_backend, batch: list[dict], threads: int) -> dict:
    """Run the batch once; programs/s, seconds and the server's cached prompt-token share."""
    before = server_stats(stats_backend)
    start = time.perf_counter()
    states = program.run_batch(batch, backend=backend, num_threads=threads, temperature=0)
    seconds = time.perf_counter() - start
    after = server_stats(stats_backend)
    failed = [s.error() for s in states if s.error() is not None]
    prompt = after["prompt_tokens"] - before["prompt_tokens"]
    cached = after["cached_prompt_tokens"] - before["cached_prompt_tokens"]
    result = {
        "case": name,
        "programs": len(batch),
        "failed": len(failed),
        "seconds": round(seconds, 2),
        "programs_per_s": round(len(batch) / seconds, 4),
        "prompt_tokens": prompt,
        "cached_share": round(cached / max(prompt, 1), 3),
        "generated_tokens": after["generated_tokens"] - before["generated_tokens"],
    }
    if failed:
        result["first_error"] = str(failed[0])[:200]
    print(
        f"{name:9} {result['programs_per_s']:8.3f} programs/s {seconds:8.1f} s "
        f"cached {result['cached_share']:.1%} of {prompt} prompt tokens"
        + (f"  ({len(failed)} failed: {result['first_error']})" if failed else ""),
        flush=True,
    )
    return {**result, "states": states}


def program_tokens(states) -> int:
    """The largest context one program reaches (prompt + generated, over its branches)."""
    metas = states.get_meta_info("draft")
    return max(m["prompt_tokens"] + m["completion_tokens"] for m in metas)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", default="smollm2")
    parser.add_argument("--programs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--forks", type=int, default=3)
    parser.add_argument("--system-tokens", type=int, default=1500)
    parser.add_argument("--gen-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=0, help="default: one per program")
    parser.add_argument("--cases", default="cache,no_cache,openai,lpm,fcfs")
    parser.add_argument("--pool-fraction", type=float, default=0.25)
    parser.add_argument("--max-total-tokens", type=int, default=0, help="overrides the fraction")
    parser.add_argument(
        "--arrival-span",
        type=float,
        default=0.5,
        help="lpm/fcfs: programs arrive uniformly over this fraction of the cache case's time",
    )
    parser.add_argument(
        "--arrival-seconds", type=float, default=0.0, help="overrides --arrival-span"
    )
    parser.add_argument(
        "--tenants",
        type=int,
        default=1,
        help="distinct system prompts, program i using tenant i %% N (lpm's case: with a pool "
        "smaller than every tenant's prompt together, fcfs interleaves tenants and evicts)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cases = args.cases.split(",")
    threads = args.threads or args.programs
    rng = random.Random(args.seed)
    systems = [system_prompt(args.system_tokens, t) for t in range(args.tenants)]
    system = systems[0]
    # one tenant: a constant prefix run_batch can trace and cache; several: per program
    program = agent.bind(system=system) if args.tenants == 1 else agent
    batch = [
        {
            **({"system": systems[i % args.tenants]} if args.tenants > 1 else {}),
            "task": f"Task {i}: start from {rng.randint(2, 99)} and apply three tools of your "
            "choice, one per turn, then report the final number.",
            "steps": args.steps,
            "forks": args.forks,
            "gen_tokens": args.gen_tokens,
        }
        for i in range(args.programs)
    ]
    results, figures = {}, {}
    # lpm/fcfs derive their pool and arrival span from a cache run unless both are given
    calibrate = bool({"lpm", "fcfs"} & set(cases)) and not (
        args.max_total_tokens and args.arrival_seconds
    )

    if {"cache", "openai"} & set(cases) or calibrate:
        with sgl.Runtime(model_path=args.model_path) as runtime:
            endpoint = runtime.endpoint
            figures["system_tokens"] = endpoint.generate_raw(
                {"text": system, "sampling_params": {"max_new_tokens": 0}}
            )["meta_info"]["prompt_tokens"]
            if "cache" in cases or calibrate:
                results["cache"] = run_case("cache", program, endpoint, endpoint, batch, threads)
            if "openai" in cases:
                endpoint.flush_cache()
                oa = sgl.OpenAI(args.model_path, base_url=runtime.url + "/v1", api_key="none")
                results["openai"] = run_case("openai", program, oa, endpoint, batch, threads)

    if "no_cache" in cases:
        with sgl.Runtime(model_path=args.model_path, disable_radix_cache=True) as runtime:
            results["no_cache"] = run_case(
                "no_cache", program, runtime.endpoint, runtime.endpoint, batch, threads
            )

    if {"lpm", "fcfs"} & set(cases):
        pool, span = args.max_total_tokens, args.arrival_seconds
        if not pool:
            per_program = max(program_tokens(s) for s in results["cache"]["states"])
            working_set = args.tenants * figures["system_tokens"] + args.programs * (
                per_program - figures["system_tokens"]
            )
            pool = max(int(args.pool_fraction * working_set), 2 * per_program)
            figures["working_set_tokens"] = working_set
            print(f"working set ~{working_set} tokens")
        span = span or args.arrival_span * results["cache"]["seconds"]
        arriving = [{**item, "delay": span * i / args.programs} for i, item in enumerate(batch)]
        figures.update(pool_tokens=pool, arrival_span_s=round(span, 2))
        print(f"KV pool {pool} tokens, arrivals over {span:.0f} s")
        for policy in ("lpm", "fcfs"):
            if policy not in cases:
                continue
            with sgl.Runtime(
                model_path=args.model_path, schedule_policy=policy, max_total_tokens=pool
            ) as runtime:
                results[policy] = run_case(
                    policy, program, runtime.endpoint, runtime.endpoint, arriving, threads
                )

    for result in results.values():
        result.pop("states")
    speed = {name: r["programs_per_s"] for name, r in results.items()}
    if "cache" in speed and "no_cache" in speed:
        figures["cache_vs_no_cache"] = round(speed["cache"] / speed["no_cache"], 2)
        print(f"radix cache vs none: {figures['cache_vs_no_cache']}x programs/s")
    if "lpm" in speed and "fcfs" in speed:
        figures["lpm_vs_fcfs"] = round(speed["lpm"] / speed["fcfs"], 2)
        print(f"lpm vs fcfs (small pool, arrivals over time): {figures['lpm_vs_fcfs']}x")
    config = {k: v for k, v in vars(args).items() if k != "cases"}
    print(json.dumps({"bench": "agent", "config": config, **figures, "cases": results}))


if __name__ == "__main__":
    main()
