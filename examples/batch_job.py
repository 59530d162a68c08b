"""A batch job: one program per input, run concurrently by `run_batch` with a progress bar;
the constant instructions are cached once and shared by every program.

    python examples/batch_job.py --url http://127.0.0.1:30000 --threads 8
"""

import argparse

import lang as sgl

REVIEWS = [
    "The battery lasts two days and the screen is gorgeous.",
    "It broke after a week and support never answered.",
    "Does the job. Nothing special, nothing bad.",
    "Best purchase of the year, I use it every day!",
]

INSTRUCTIONS = (
    "You classify product reviews as positive, negative or neutral, "
    "then summarise each review in a few words."
)


@sgl.function
def classify(s, review, max_tokens=16):
    s += sgl.system(INSTRUCTIONS)
    s += sgl.user(f"Review: {review}\nSentiment?")
    s += sgl.assistant(sgl.select("sentiment", choices=["positive", "negative", "neutral"]))
    s += sgl.user("Summary in a few words?")
    s += sgl.assistant(sgl.gen("summary", max_tokens=max_tokens, stop="\n"))


def main(
    url: str, reviews: list[str] = REVIEWS, threads: int = 8, max_tokens: int = 16
) -> list[sgl.ProgramState]:
    sgl.set_default_backend(sgl.RuntimeEndpoint(url))
    batch = [{"review": review, "max_tokens": max_tokens} for review in reviews]
    return classify.run_batch(batch, num_threads=threads, progress_bar=True, temperature=0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    for review, state in zip(REVIEWS, main(args.url, threads=args.threads)):
        print(f"{state['sentiment']:>8} | {state['summary'].strip()} | {review}")
