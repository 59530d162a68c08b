"""A batch job with the offline Engine (no server): classify many texts in chunks, with a
progress bar, constrained to a fixed set of labels.

    python examples/offline_batch.py
"""

import argparse

from tqdm import tqdm

from runtime import Engine

LABELS = ["positive", "negative", "neutral"]
REVIEWS = [
    "The battery lasts all day, I love it.",
    "It broke after two days.",
    "Arrived on Tuesday.",
    "Best purchase of the year!",
    "The screen is dim and the sound is worse.",
    "It is a phone.",
]


def prompt(engine: Engine, review: str) -> str:
    question = f"Is this review positive, negative or neutral?\nReview: {review}\nAnswer:"
    return engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )


def main(reviews: list[str] = REVIEWS, chunk: int = 4, engine: Engine | None = None) -> list[str]:
    """One label per review, in order. Each chunk is one batched `generate` call."""
    own = engine is None
    engine = engine or Engine(model_path="smollm2", log_level="warning")
    labels = []
    params = {"temperature": 0, "max_new_tokens": 4, "regex": "(" + "|".join(LABELS) + ")"}
    try:
        for start in tqdm(range(0, len(reviews), chunk), desc="classifying", unit="chunk"):
            batch = [prompt(engine, r) for r in reviews[start : start + chunk]]
            labels += [out["text"] for out in engine.generate(batch, params)]
    finally:
        if own:
            engine.shutdown()
    for review, label in zip(reviews, labels):
        print(f"{label:>8}  {review}")
    return labels


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk", type=int, default=4)
    main(chunk=parser.parse_args().chunk)
