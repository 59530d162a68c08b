"""What the radix cache saves, in numbers: a multi-turn chat behind a long system prompt, each
turn showing how many of its prompt tokens were already cached, then the same first turn timed
with a warm cache and after `/flush_cache`.

    python examples/prefix_caching.py --url http://127.0.0.1:30000
"""

import argparse
import time

import httpx
from openai import OpenAI


def system_prompt(rules: int) -> str:
    """A shop's support instructions: about 20 tokens a rule."""
    return "You are the support assistant of a bicycle shop. " + " ".join(
        f"Rule {i}: answer politely, mention the warranty of {i} months when it applies."
        for i in range(1, rules + 1)
    )


QUESTIONS = ["My chain squeaks.", "Is it under warranty?", "When can I bring it in?"]


def chat_turns(
    client: OpenAI, model: str, system: str, questions: list[str], max_tokens: int
) -> list[dict]:
    """One request per turn; each turn's prompt is the previous one plus the new messages."""
    messages, turns = [{"role": "system", "content": system}], []
    for question in questions:
        messages.append({"role": "user", "content": question})
        reply = client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=0
        )
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        usage = reply.usage
        turns.append(
            {"prompt": usage.prompt_tokens, "cached": usage.prompt_tokens_details.cached_tokens}
        )
        print(
            f"turn {len(turns)}: {turns[-1]['cached']} of {usage.prompt_tokens} prompt tokens cached"
        )
    return turns


def first_token_seconds(client: OpenAI, model: str, system: str) -> float:
    start = time.perf_counter()
    client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi"}],
        max_tokens=1,
    )
    return time.perf_counter() - start


def main(url: str, questions: list[str] = QUESTIONS, max_tokens: int = 24, rules: int = 40) -> dict:
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    model = client.models.list().data[0].id
    system = system_prompt(rules)
    httpx.post(f"{url}/flush_cache", timeout=30).raise_for_status()
    turns = chat_turns(client, model, system, questions, max_tokens)
    warm = first_token_seconds(client, model, system)
    httpx.post(f"{url}/flush_cache", timeout=30).raise_for_status()
    cold = first_token_seconds(client, model, system)
    print(f"first token: {cold:.3f} s after a flush, {warm:.3f} s with the prefix cached")
    return {"turns": turns, "cold_s": cold, "warm_s": warm}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    main(parser.parse_args().url)
