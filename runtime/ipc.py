"""ZeroMQ sockets and child-process set-up shared by the scheduler and detokenizer processes."""

from __future__ import annotations

import gc
import logging
import os
import signal

import zmq

from runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


def pull_socket(ctx: zmq.Context, path: str) -> zmq.Socket:
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 0)  # never drop messages in a burst
    sock.bind(f"ipc://{path}")
    return sock


def push_socket(ctx: zmq.Context, path: str) -> zmq.Socket:
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(f"ipc://{path}")
    return sock


def child_setup(args: ServerArgs) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s: %(message)s")
    if args.cpu_threads is not None:  # fewer threads than cores wins on a shared CPU
        import torch

        torch.set_num_threads(args.cpu_threads)


def freeze_heap(process: str) -> int:
    """Move every object alive now (modules, the model, the tokenizer, compiled grammars) out of
    the cyclic collector's reach, after start-up: with torch loaded, a full collection walks
    them all (150-280 ms here) and finds nothing to free, a pause in the middle of a decode
    step. Later objects are collected as before. Returns how many were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("%s: %d start-up objects frozen out of the cyclic collector", process, frozen)
    return frozen


def wait_readable(sock: zmq.Socket, parent_pid: int) -> None:
    """Block until `sock` has a message; exit if the parent process has gone away."""
    while not sock.poll(1000):
        if os.getppid() != parent_pid:
            logger.error("the server process is gone; exiting")
            os._exit(1)
