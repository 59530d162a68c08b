"""Options shared by the CLI (`launch_server`), the offline Engine and the scheduler."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field

from runtime.model.loader import DEFAULT_MODEL

SCHEDULE_POLICIES = ("lpm", "dfs-weight", "fcfs", "lof", "random")
ATTENTION_BACKENDS = ("torch", "triton")
DTYPES = ("auto", "bfloat16", "float16", "float32")
JSON_WHITESPACE = ("bounded", "compact", "any")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
DEVICES = ("auto", "cpu", "cuda")
QUANTIZATIONS = ("auto", "none", "int8", "int4")
LOAD_BALANCE_METHODS = ("cache_aware", "round_robin", "shortest_queue")
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8_e4m3", "fp8_e5m2")
OVERLAP_SCHEDULES = ("auto", "on", "off")
MAX_CUDA_GRAPH_BS = 1024


def _opt(default, help: str, **extra):
    return field(default=default, metadata={"help": help, **extra})


MAX_DP_SIZE = 64
MAX_TP_SIZE = 64


@dataclass
class ServerArgs:
    """Every option of the runtime; the CLI flag is the field name with dashes."""

    model_path: str = _opt(
        DEFAULT_MODEL, "Model alias (smollm2), .gguf file, or Hugging Face folder."
    )
    tokenizer_path: str | None = _opt(
        None, "Folder (or model path) of the tokenizer, if not the model's own."
    )
    chat_template: str | None = _opt(
        None, "Chat template replacing the tokenizer's: a Jinja file, a JSON file, or the text."
    )
    served_model_name: str | None = _opt(
        None, "Model name of the OpenAI API (default: the model path's base name)."
    )
    host: str = _opt("127.0.0.1", "Address the HTTP server listens on.")
    port: int = _opt(30000, "Port the HTTP server listens on.")
    dtype: str = _opt(
        "auto",
        "Weights and activations dtype; auto: bfloat16 on CUDA and CPUs with native bf16, else float32.",
        choices=DTYPES,
    )
    quantization: str = _opt(
        "auto",
        "Weights of the decoder layers on the CPU: int8 or int4 (groups of 32); auto keeps a "
        "GGUF file's precision and codes (int4 for 4-bit files, int8 for other quantized "
        "ones and for the layers of a 4-bit file holding a matrix of more bits, such as Q6_K; "
        "float files, Hugging Face folders and CUDA: none, the --dtype weights).",
        choices=QUANTIZATIONS,
    )
    enable_deterministic_inference: bool = _opt(
        False,
        "Batch-invariant decode for quantized weights on the CPU kernels: a request's tokens "
        "do not depend on what it is batched with (decode batches of up to 16 rows). Turns "
        "off the bf16 tiles quantized weights run on where the "
        "CPU has them (AMX or AVX-512 BF16; much faster for batches), and keeps each weight "
        "kind's products on one kernel whatever the row count.",
    )
    device: str = _opt("auto", "cpu or cuda; auto picks cuda when available.", choices=DEVICES)
    attention_backend: str | None = _opt(
        None,
        "Attention implementation (default: triton on CUDA, torch on CPU).",
        choices=ATTENTION_BACKENDS,
    )
    kv_cache_dtype: str = _opt(
        "auto",
        "How the KV cache stores keys and values: auto (the model's dtype), bfloat16 (two "
        "bytes per value: half of a float32 model's cache, values rounded to bf16; the CPU's "
        "native decode kernels read it at about float32's speed) or one byte per value, fp8_e4m3 / fp8_e5m2 (twice the tokens of bf16 in the same memory; values "
        "rounded to fp8 and clamped to its range, scale 1.0). On the CPU fp8 turns off the "
        "native decode kernels, so it saves memory at a cost in speed.",
        choices=KV_CACHE_DTYPES,
    )
    disable_cuda_graph: bool = _opt(
        False,
        "On CUDA, run decode steps eagerly instead of replaying CUDA graphs captured at start "
        "(no effect on the CPU).",
    )
    cuda_graph_max_bs: int = _opt(
        160,
        "Largest decode batch run as a CUDA graph; graphs are captured at start for batch "
        "sizes 1, 2, 4, 8, then every 8 up to this, and a batch runs in the smallest that "
        "holds it (larger batches run eagerly).",
    )
    schedule_policy: str = _opt("lpm", "Order of the waiting queue.", choices=SCHEDULE_POLICIES)
    disable_radix_cache: bool = _opt(
        False, "Free KV when a request ends instead of caching prefixes."
    )
    chunked_prefill_size: int = _opt(
        1024, "Longest prompt piece prefilled in one step (-1: whole prompts)."
    )
    max_prefill_tokens: int = _opt(4096, "Token budget for prefill in one step.")
    max_running_requests: int = _opt(128, "Most requests decoding at once.")
    max_total_tokens: int | None = _opt(
        None, "Size of the KV pool in tokens (default: from --mem-fraction)."
    )
    mem_fraction: float = _opt(0.25, "Fraction of free memory given to the KV pool.")
    context_length: int | None = _opt(None, "Longest sequence (default: the model's).")
    random_seed: int = _opt(0, "Seed for unseeded sampling.")
    api_key: str | None = _opt(
        None, "Require 'Authorization: Bearer KEY' on every endpoint but /health."
    )
    log_level: str = _opt("info", "Logging level.", choices=LOG_LEVELS)
    max_request_bytes: int = _opt(
        16 << 20, "Largest HTTP request body in bytes; larger bodies get 413 before parsing."
    )
    grammar_compile_timeout: float = _opt(
        10.0, "Seconds a json_schema / regex / ebnf constraint may take to compile (else 400)."
    )
    shutdown_timeout: float = _opt(
        10.0,
        "Seconds SIGTERM waits for requests in flight; those still running then end with 503.",
    )
    header_read_timeout: float = _opt(
        30.0, "Seconds a client may take to send a request's headers (else 408, closed)."
    )
    cpu_threads: int | None = _opt(
        None, "Threads for the model's CPU kernels (torch.set_num_threads); default: torch's."
    )
    log_interval: float = _opt(
        5.0, "Seconds between throughput log lines while requests run (0: none)."
    )
    overlap_schedule: str = _opt(
        "auto",
        "on: the host prepares step N+1 while the model runs step N (N+1's sampling, not its "
        "forward, waits for N's tokens where a grammar or penalties need them; planning waits "
        "for N only where the next decode would need a retraction; past 64 running requests "
        "each step lands first; never with --tp-size > 1); off: each step ends before the "
        "next is planned; auto: on with CUDA, off on the CPU (whose cores the model's "
        "kernels already use).",
        choices=OVERLAP_SCHEDULES,
    )
    disable_jump_forward: bool = _opt(
        False, "Decode text a grammar forces token by token instead of appending it at once."
    )
    json_whitespace: str = _opt(
        "bounded",
        "Whitespace JSON constraints allow between tokens: bounded (runs of at most 8 "
        "characters), compact (exactly ', ' and ': ') or any.",
        choices=JSON_WHITESPACE,
    )
    json_number_digits: int = _opt(
        20,
        "Longest run of digits (integer part, fraction, exponent) JSON constraints allow in a "
        "number the schema leaves unbounded (0: no limit).",
    )
    dp_size: int = _opt(
        1,
        "Data parallelism: independent scheduler workers, each with its own model copy and "
        "radix cache, behind the one HTTP server (--mem-fraction is split between them; "
        "--max-total-tokens is each one's).",
    )
    load_balance_method: str = _opt(
        "cache_aware",
        "How --dp-size workers share requests: cache_aware (the worker holding the longest "
        "prefix, unless the match is short or the worker busy), round_robin or shortest_queue.",
        choices=LOAD_BALANCE_METHODS,
    )
    tp_size: int = _opt(
        1,
        "Tensor parallelism: ranks that each hold a share of every layer's heads and MLP "
        "columns and of the KV pool (torch.distributed: gloo on CPU, NCCL on CUDA); rank 0 "
        "schedules. Float weights only (--quantization auto or none).",
    )
    nnodes: int = _opt(
        1, "Machines the --tp-size ranks span (each runs this command with its --node-rank)."
    )
    node_rank: int = _opt(
        0, "This machine's place among --nnodes: 0 serves HTTP, the others only run ranks."
    )
    dist_init_addr: str | None = _opt(
        None,
        "host:port of node 0 where the tensor-parallel ranks meet (needed with --nnodes > 1; "
        "default: a free port on this machine). With --dp-size, worker i uses port + i.",
    )

    def __post_init__(self):
        for f in dataclasses.fields(self):  # an Engine keyword is not parsed like a flag
            value = getattr(self, f.name)
            if f.type in ("bool", bool) and not isinstance(value, bool):
                raise ValueError(f"{f.name} must be True or False, got {value!r}")
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(
                f"schedule_policy must be one of {SCHEDULE_POLICIES}, got {self.schedule_policy!r}"
            )
        if self.attention_backend not in (None, *ATTENTION_BACKENDS):
            raise ValueError(
                f"attention_backend must be one of {ATTENTION_BACKENDS}, got {self.attention_backend!r}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        for name, allowed in (
            ("device", DEVICES),
            ("log_level", LOG_LEVELS),
            ("quantization", QUANTIZATIONS),
            ("load_balance_method", LOAD_BALANCE_METHODS),
            ("kv_cache_dtype", KV_CACHE_DTYPES),
            ("overlap_schedule", OVERLAP_SCHEDULES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not 0 < self.mem_fraction <= 1:
            raise ValueError(f"mem_fraction must lie in (0, 1], got {self.mem_fraction}")
        if self.chunked_prefill_size != -1 and self.chunked_prefill_size < 1:
            raise ValueError("chunked_prefill_size must be -1 (no chunking) or at least 1")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError("cpu_threads must be at least 1")
        if self.max_prefill_tokens < 1:
            raise ValueError("max_prefill_tokens must be at least 1")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must lie in [0, 65535], got {self.port}")
        if self.context_length is not None and self.context_length < 2:
            raise ValueError("context_length must be at least 2")
        if self.max_total_tokens is not None and self.max_total_tokens < 16:
            raise ValueError("max_total_tokens must be at least 16")
        if self.max_running_requests < 1:
            raise ValueError("max_running_requests must be at least 1")
        if self.max_request_bytes < 1024:
            raise ValueError("max_request_bytes must be at least 1024")
        if not self.grammar_compile_timeout > 0:
            raise ValueError("grammar_compile_timeout must be a positive number of seconds")
        if self.json_whitespace not in JSON_WHITESPACE:
            raise ValueError(
                f"json_whitespace must be one of {JSON_WHITESPACE}, got {self.json_whitespace!r}"
            )
        if not self.shutdown_timeout >= 0:
            raise ValueError("shutdown_timeout must be a number of seconds >= 0")
        if self.json_number_digits < 0:
            raise ValueError("json_number_digits must be 0 (no limit) or a number of digits")
        if not self.header_read_timeout > 0:
            raise ValueError("header_read_timeout must be a positive number of seconds")
        if not 1 <= self.cuda_graph_max_bs <= MAX_CUDA_GRAPH_BS:
            raise ValueError(
                f"cuda_graph_max_bs must lie in [1, {MAX_CUDA_GRAPH_BS}], "
                f"got {self.cuda_graph_max_bs}"
            )
        if self.dp_size < 1:
            raise ValueError("dp_size must be at least 1")
        if self.dp_size > MAX_DP_SIZE:  # each worker is a process holding a whole model copy
            raise ValueError(f"dp_size must be at most {MAX_DP_SIZE}, got {self.dp_size}")
        self._check_distributed()

    def _check_distributed(self) -> None:
        if not 1 <= self.tp_size <= MAX_TP_SIZE:
            raise ValueError(f"tp_size must lie in [1, {MAX_TP_SIZE}], got {self.tp_size}")
        if not 1 <= self.nnodes <= self.tp_size:
            raise ValueError(
                f"nnodes must lie in [1, tp_size={self.tp_size}] (the nodes split the "
                f"tensor-parallel ranks), got {self.nnodes}"
            )
        if self.tp_size % self.nnodes:
            raise ValueError(
                f"nnodes {self.nnodes} must divide tp_size {self.tp_size} "
                "(each node runs the same number of ranks)"
            )
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(
                f"node_rank must lie in [0, nnodes={self.nnodes}), got {self.node_rank}"
            )
        if self.nnodes > 1 and self.dp_size > 1:
            raise ValueError("dp_size > 1 runs on one node: give --nnodes 1 with it")
        if self.nnodes > 1 and self.dist_init_addr is None:
            raise ValueError("dist_init_addr (host:port of node 0) is needed with --nnodes > 1")
        if self.dist_init_addr is not None:
            host, _, port = self.dist_init_addr.rpartition(":")
            valid = host and port.isascii() and port.isdigit()  # not "²", which int() refuses
            if not valid or not 0 < int(port) + self.dp_size - 1 <= 65535:
                raise ValueError(f"dist_init_addr must be host:port, got {self.dist_init_addr!r}")

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        for f in dataclasses.fields(ServerArgs):
            flag = "--" + f.name.replace("_", "-")
            help_text = f.metadata["help"]
            if f.type in ("bool", bool):
                parser.add_argument(flag, action="store_true", help=help_text)
                continue
            kind = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
            parser.add_argument(
                flag,
                type=kind,
                default=f.default,
                choices=f.metadata.get("choices"),
                help=help_text,
            )
        parser.add_argument(
            "--mem-fraction-static", dest="mem_fraction", type=float, help=argparse.SUPPRESS
        )

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> ServerArgs:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(
            **{
                k: v
                for k, v in vars(args).items()
                if k in names and v is not None or k == "api_key"
            }
        )


def options_markdown() -> str:
    """docs/options.md: every option with its flag, default and meaning (`python -m
    runtime.server_args` prints it; a test keeps the page equal to it)."""
    lines = [
        "# Server options",
        "",
        "Every option of `python -m runtime.launch_server` (also `radixgen serve`) and, as a",
        "keyword argument of the same name, of the offline `Engine`"
        ' (`Engine(model_path="smollm2", disable_radix_cache=True)`).',
        "Generated from `runtime/server_args.py` by `python -m runtime.server_args`.",
        "",
        "| flag | default | meaning |",
        "|---|---|---|",
    ]
    for f in dataclasses.fields(ServerArgs):
        flag = "--" + f.name.replace("_", "-")
        default = "off" if f.default is False else ("none" if f.default is None else f.default)
        meaning = f.metadata["help"]
        if f.metadata.get("choices"):
            meaning += " One of: " + ", ".join(f"`{c}`" for c in f.metadata["choices"]) + "."
        lines.append(f"| `{flag}` | `{default}` | {meaning} |")
    lines += [
        "",
        "`--mem-fraction-static` is accepted as another name of `--mem-fraction` (SGLang's).",
        "A bad value ends the command with exit code 2 and one line naming the flag, before the",
        "model loads.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(options_markdown(), end="")
