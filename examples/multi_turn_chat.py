"""A multi-turn chat: each turn's question goes in a user message, the model's reply in an
assistant message; `state.messages()` returns the conversation.

    python examples/multi_turn_chat.py --url http://127.0.0.1:30000
"""

import argparse

import lang as sgl

QUESTIONS = [
    "What is the capital of France?",
    "What is a famous tower there?",
    "How tall is it, roughly?",
]


@sgl.function
def multi_turn_chat(s, questions, max_tokens=48):
    s += sgl.system("You are a helpful assistant. Answer in one sentence.")
    for i, question in enumerate(questions):
        with s.user():
            s += question
        with s.assistant():
            s += sgl.gen(f"answer_{i}", max_tokens=max_tokens)


def main(url: str, questions: list[str] = QUESTIONS, max_tokens: int = 48) -> sgl.ProgramState:
    sgl.set_default_backend(sgl.RuntimeEndpoint(url))
    return multi_turn_chat.run(questions=questions, max_tokens=max_tokens, temperature=0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    args = parser.parse_args()
    for message in main(args.url).messages():
        print(f"{message['role']:>9}: {message['content']}")
