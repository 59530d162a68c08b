"""Backends that execute programs: a radixgen server (`RuntimeEndpoint`), one started here
(`Runtime`), or any OpenAI-compatible API (`OpenAI`)."""
