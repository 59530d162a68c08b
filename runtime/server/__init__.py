"""The HTTP process: FastAPI app, OpenAI-compatible layer, tokenizer manager, metrics, start-up."""
