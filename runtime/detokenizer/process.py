"""The detokenizer process: token ids from the scheduler in, text deltas to the HTTP process out."""

from __future__ import annotations

import logging
import os
import traceback

import zmq

from runtime.detokenizer.incremental import IncrementalDecoder
from runtime.ipc import child_setup, pull_socket, push_socket, wait_readable
from runtime.messages import BatchStrOut, BatchTokenOut, StrOutput
from runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


def run_detokenizer_process(
    args: ServerArgs, model_folder: str, recv_path: str, send_path: str, parent_pid: int
) -> None:
    from runtime.model.loader import load_tokenizer

    child_setup(args)
    tokenizer = load_tokenizer(model_folder)
    ctx = zmq.Context()
    recv = pull_socket(ctx, recv_path)
    send = push_socket(ctx, send_path)
    decoders: dict[str, IncrementalDecoder] = {}
    try:
        while True:
            wait_readable(recv, parent_pid)
            msg = recv.recv_pyobj()
            if not isinstance(msg, BatchTokenOut):
                send.send_pyobj(msg)
                continue
            outs = []
            for o in msg.outputs:
                dec = decoders.get(o.rid)
                if dec is None:
                    dec = decoders[o.rid] = IncrementalDecoder(
                        tokenizer, o.skip_special_tokens, o.stop_strings, o.no_stop_trim
                    )
                outs.append(StrOutput(o, dec.push(o.new_ids, o.finish_reason)))
                if o.finish_reason is not None:
                    del decoders[o.rid]
            send.send_pyobj(BatchStrOut(outs, msg.stats))
    except Exception:
        logger.error("detokenizer crashed:\n%s", traceback.format_exc())
        os._exit(1)
