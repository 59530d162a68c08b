"""radixgen's serving engine: model executor, KV pools, prefix cache, scheduler and servers."""


def __getattr__(name):
    # Imported on first use so `import runtime` stays light.
    if name == "Engine":
        from runtime.engine import Engine

        return Engine
    if name == "ServerArgs":
        from runtime.server_args import ServerArgs

        return ServerArgs
    raise AttributeError(name)


__all__ = ["Engine", "ServerArgs"]
