"""Chat with the server through the official `openai` client, whole and streamed.

python -m runtime.launch_server --model-path smollm2 --port 30000   # in another shell
python examples/openai_client.py --url http://127.0.0.1:30000
"""

import argparse

from openai import OpenAI

MESSAGES = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "Name three primary colors."},
]


def main(url: str, max_tokens: int = 32) -> tuple[str, list[str]]:
    """The whole reply and the pieces of the same reply streamed (greedy, so they agree)."""
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")  # --api-key KEY: pass it here
    model = client.models.list().data[0].id
    reply = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=max_tokens, temperature=0
    )
    text = reply.choices[0].message.content
    print(f"whole ({reply.usage.completion_tokens} tokens): {text}")
    pieces = []
    stream = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=max_tokens, temperature=0, stream=True
    )
    print("streamed: ", end="")
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
            print(pieces[-1], end="", flush=True)
    print()
    return text, pieces


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    main(parser.parse_args().url)
