"""Brainstorming with fork/join: the shared conversation is sent once, then several branches
each generate an idea concurrently, reusing it from the radix cache; a select picks the best.

    python examples/fork_brainstorm.py --topic "a smart garden" --ideas 3
"""

import argparse

import lang as sgl


@sgl.function
def brainstorm(s, topic, num_ideas=3, max_tokens=24):
    s += sgl.system("You are a creative assistant who gives short, concrete ideas.")
    s += sgl.user(f"We are brainstorming about {topic}.")
    s += sgl.assistant("Great, let's go.")
    forks = s.fork(num_ideas)
    for i, branch in enumerate(forks):
        branch += sgl.user(f"Give idea number {i + 1} in one sentence.")
        branch += sgl.assistant(sgl.gen("idea", max_tokens=max_tokens, stop="\n"))
    forks.join()  # s["idea"] is now the list of the branches' ideas
    listing = "\n".join(f"{i + 1}. {idea.strip()}" for i, idea in enumerate(s["idea"]))
    s += sgl.user(f"Ideas:\n{listing}\nWhich idea is best? Answer with its number.")
    s += sgl.assistant(sgl.select("best", choices=[str(i + 1) for i in range(num_ideas)]))


def main(url: str, topic: str, num_ideas: int = 3, max_tokens: int = 24) -> sgl.ProgramState:
    sgl.set_default_backend(sgl.RuntimeEndpoint(url))
    return brainstorm.run(topic=topic, num_ideas=num_ideas, max_tokens=max_tokens, temperature=0.7)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("--topic", default="a smart garden")
    parser.add_argument("--ideas", type=int, default=3)
    args = parser.parse_args()
    state = main(args.url, args.topic, args.ideas)
    for i, (idea, meta) in enumerate(zip(state["idea"], state.get_meta_info("idea"))):
        print(f"{i + 1}. {idea.strip()}  ({meta['cached_tokens']} prompt tokens from the cache)")
    print("best:", state["best"])
