"""Generate a few continuations with the default model through the offline Engine."""

from runtime import Engine


def main() -> None:
    engine = Engine(model_path="smollm2", log_level="warning")
    prompts = ["The capital of France is", "The three primary colors are", "def add(a, b):"]
    outs = engine.generate(prompts, {"max_new_tokens": 24, "temperature": 0})
    for prompt, out in zip(prompts, outs):
        print(f"{prompt} -> {out['text']!r}")
    chat = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    print("chat ->", repr(engine.generate(chat, {"max_new_tokens": 32, "temperature": 0})["text"]))
    engine.shutdown()


if __name__ == "__main__":
    main()
