"""The detokenizer process: token ids from the scheduler in, text deltas to the HTTP process out."""

from __future__ import annotations

import logging
import os
import traceback

import zmq

from runtime.detokenizer.incremental import IncrementalDecoder
from runtime.faults import inject
from runtime.ipc import child_setup, freeze_heap, pull_socket, push_socket, wait_readable
from runtime.messages import BatchStrOut, BatchTokenOut, ReqOutput, StrOutput
from runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


def run_detokenizer_process(
    args: ServerArgs, tokenizer_folder: str, recv_path: str, send_path: str, parent_pid: int
) -> None:
    from runtime.model.loader import load_tokenizer

    child_setup(args)
    tokenizer = load_tokenizer(tokenizer_folder)
    freeze_heap("detokenizer")
    ctx = zmq.Context()
    recv = pull_socket(ctx, recv_path)
    send = push_socket(ctx, send_path)
    decoders: dict[str, IncrementalDecoder] = {}
    failed: set[str] = set()  # requests whose decoding broke: their later outputs are dropped
    try:
        while True:
            wait_readable(recv, parent_pid)
            msg = recv.recv_pyobj()
            if not isinstance(msg, BatchTokenOut):
                send.send_pyobj(msg)
                continue
            outs = []
            for o in msg.outputs:
                if o.rid in failed:
                    if o.finish_reason is not None:
                        failed.discard(o.rid)
                    continue
                try:
                    outs.append(StrOutput(o, _decode(decoders, tokenizer, o)))
                except Exception as exc:
                    logger.exception("detokenizing %s failed", o.rid)
                    decoders.pop(o.rid, None)
                    if o.finish_reason is None:
                        failed.add(o.rid)
                    o.error, o.error_status = f"internal error while detokenizing: {exc}", 500
                    o.finish_reason = {"type": "abort", "message": o.error}
                    outs.append(StrOutput(o, ""))
            send.send_pyobj(BatchStrOut(outs, msg.stats, msg.worker))
    except Exception:
        logger.error("detokenizer crashed:\n%s", traceback.format_exc())
        os._exit(1)


def _decode(decoders: dict[str, IncrementalDecoder], tokenizer, o: ReqOutput) -> str:
    """The text delta of one output, through the request's own incremental decoder."""
    inject("detokenize", o.rid)
    dec = decoders.get(o.rid)
    if dec is None:
        dec = decoders[o.rid] = IncrementalDecoder(
            tokenizer, o.skip_special_tokens, o.stop_strings, o.no_stop_trim
        )
    delta = dec.push(o.new_ids, o.finish_reason, o.output_offset)
    if o.finish_reason is not None:
        del decoders[o.rid]
    return delta
