"""Server start-up and shutdown: the scheduler worker(s) and detokenizer children, then uvicorn."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import threading
import time

from runtime.ipc import freeze_heap
from runtime.model.parallel import ParallelConfig, group_init_method
from runtime.server.connections import header_timeout_protocol
from runtime.server.http_server import create_app
from runtime.server.metrics import ServerMetrics
from runtime.server.router import Router
from runtime.server.tokenizer_manager import TokenizerManager
from runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


IPC_PREFIX = "radixgen-ipc-"


STALE_IPC_SECONDS = 60.0  # younger folders are left alone (another PID namespace may own them)


def remove_stale_ipc_dirs() -> None:
    """Remove the ipc folders of servers that are gone without cleaning up (killed by SIGKILL):
    each folder's name holds its server's pid; only this user's folders, a minute old or more."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        if not name.startswith(IPC_PREFIX):
            continue
        pid = name[len(IPC_PREFIX) :].split("-", 1)[0]
        path = os.path.join(root, name)
        try:
            info = os.stat(path)
        except OSError:
            continue
        old = time.time() - info.st_mtime > STALE_IPC_SECONDS
        if (
            pid.isdigit()
            and old
            and info.st_uid == os.getuid()
            and not os.path.exists(f"/proc/{pid}")
        ):
            shutil.rmtree(path, ignore_errors=True)


class ServerProcesses:
    """The scheduler workers (one, or --dp-size of them) and the detokenizer, their ipc
    sockets, and their shutdown."""

    def __init__(self, args: ServerArgs):
        self.args = args
        if os.path.isdir("/proc"):
            remove_stale_ipc_dirs()
        self.ipc_dir = tempfile.mkdtemp(prefix=f"{IPC_PREFIX}{os.getpid()}-")
        self.paths = {
            n: os.path.join(self.ipc_dir, n) for n in ("scheduler", "detokenizer", "tokenizer")
        }
        if args.dp_size == 1:
            self.scheduler_names = ["radixgen-scheduler"]
            self.scheduler_paths = [self.paths["scheduler"]]
        else:
            self.scheduler_names = [f"radixgen-scheduler-{i}" for i in range(args.dp_size)]
            self.scheduler_paths = [
                os.path.join(self.ipc_dir, f"scheduler-{i}") for i in range(args.dp_size)
            ]
        self.children: list[mp.Process] = []
        self.tp_ranks: dict[str, tuple[int, int]] = {}  # process name -> (worker, tp rank)

    def start(self) -> dict:
        """Start the workers (loading at the same time), each with its tensor-parallel ranks,
        then the detokenizer; returns the first worker's ready message, with every worker's
        stats and KV pool size added."""
        from runtime.detokenizer.process import run_detokenizer_process
        from runtime.scheduler.process import run_scheduler_process

        ctx = mp.get_context("spawn")
        worker_args = self.args
        if self.args.dp_size > 1:  # the workers share the device: split the KV memory
            worker_args = dataclasses.replace(
                self.args, mem_fraction=self.args.mem_fraction / self.args.dp_size
            )
        pending = []
        for worker, (name, path) in enumerate(zip(self.scheduler_names, self.scheduler_paths)):
            parallel = self._parallel(worker)
            ranks = self._start_ranks(worker_args, worker, parallel)
            reader, writer = ctx.Pipe(duplex=False)
            sched = ctx.Process(
                target=run_scheduler_process,
                args=(
                    worker_args,
                    path,
                    self.paths["detokenizer"],
                    writer,
                    os.getpid(),
                    worker,
                    parallel,
                ),
                name=name,
                daemon=True,
            )
            sched.start()
            self.children.append(sched)
            pending.append((sched, reader, ranks))
        infos = [self._wait_ready(*p) for p in pending]
        info = dict(infos[0])
        info["worker_stats"] = [i["stats"] for i in infos]
        info["worker_kv_pool_sizes"] = [i["kv_pool_size"] for i in infos]
        info["worker_pids"] = [sched.pid for sched, _, _ in pending]
        info["tp_ranks"] = [
            {"worker": w, "rank": r.rank, "pid": r.proc.pid}
            for w, (_, _, ranks) in enumerate(pending)
            for r in ranks
        ]
        detok = ctx.Process(
            target=run_detokenizer_process,
            args=(
                self.args,
                info["tokenizer_folder"],
                self.paths["detokenizer"],
                self.paths["tokenizer"],
                os.getpid(),
            ),
            name="radixgen-detokenizer",
            daemon=True,
        )
        detok.start()
        self.children.append(detok)
        return info

    def _parallel(self, worker: int) -> ParallelConfig:
        """Rank 0 of data-parallel `worker`'s tensor-parallel group."""
        args = self.args
        if args.tp_size == 1:
            return ParallelConfig()
        init = group_init_method(args.dist_init_addr, worker)
        return ParallelConfig(0, args.tp_size, init, args.tp_size // args.nnodes)

    def _start_ranks(self, args: ServerArgs, worker: int, parallel: ParallelConfig):
        """This node's tensor-parallel ranks of data-parallel `worker`, rank 0 aside."""
        from runtime.scheduler.process import start_tp_ranks

        local = self.args.tp_size // self.args.nnodes
        first = self.args.node_rank * local
        suffix = f"-of-worker-{worker}" if args.dp_size > 1 else ""
        ranks = start_tp_ranks(
            args,
            parallel,
            range(max(first, 1), first + local),
            lambda rank: f"radixgen-tp-rank-{rank}{suffix}",
        )
        for r in ranks:
            self.children.append(r.proc)
            self.tp_ranks[r.proc.name] = (worker, r.rank)
        return ranks

    def start_node_ranks(self) -> list[mp.Process]:
        """--node-rank > 0: only this node's tensor-parallel ranks, once they have loaded."""
        ranks = self._start_ranks(self.args, 0, self._parallel(0))
        for r in ranks:
            r.check(wait=True)
        return [r.proc for r in ranks]

    def _wait_ready(self, sched: mp.Process, reader, ranks=()) -> dict:
        what = "the scheduler process" if self.args.dp_size == 1 else f"{sched.name}"
        while not reader.poll(1.0):
            if not sched.is_alive():
                raise RuntimeError(f"{what} exited with code {sched.exitcode} while loading")
            for r in ranks:
                r.check()
        info = reader.recv()
        if info["status"] != "ready":
            raise RuntimeError(f"{what} failed to start:\n{info['error']}")
        return info

    def worker_of(self, name: str) -> int | None:
        """The data-parallel worker a child process name belongs to (None: the detokenizer)."""
        if name in self.tp_ranks:
            return self.tp_ranks[name][0]
        return self.scheduler_names.index(name) if name in self.scheduler_names else None

    def watch(self, on_death) -> None:
        """Call on_death(name, exitcode) from a thread when a child dies."""

        def loop():
            while True:
                for child in self.children:
                    if not child.is_alive():
                        on_death(child.name, child.exitcode)
                        return
                time.sleep(0.5)

        threading.Thread(target=loop, daemon=True, name="child-watchdog").start()

    def stop(self) -> None:
        for child in self.children:
            if child.is_alive():
                child.terminate()
        for child in self.children:
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
        shutil.rmtree(self.ipc_dir, ignore_errors=True)


def serve_node_ranks(procs: ServerProcesses) -> int:
    """--node-rank > 0: run this node's tensor-parallel ranks until they exit (rank 0's node
    stopped, or a rank died) or until Ctrl-C / SIGTERM; 1 if a rank failed."""
    args = procs.args
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        try:
            ranks = procs.start_node_ranks()
        except RuntimeError as exc:
            logger.error("%s", exc)
            return 1
        logger.info(
            "node %d of %d: tensor-parallel ranks %s running, serving through node 0 at %s",
            args.node_rank,
            args.nnodes,
            ", ".join(str(procs.tp_ranks[p.name][1]) for p in ranks),
            args.dist_init_addr,
        )
        while not stop.wait(0.5):
            dead = [p for p in ranks if not p.is_alive()]
            if dead:
                logger.error(
                    "%s exited (code %s): the tensor-parallel group is gone; stopping this node",
                    dead[0].name,
                    dead[0].exitcode,
                )
                return 1
        return 0
    finally:
        procs.stop()


RESPONSE_GRACE = 5.0  # seconds to write the 503s after --shutdown-timeout before uvicorn cancels


def http_server(config, tm: TokenizerManager, shutdown_timeout: float):
    """uvicorn's server that, once a stop has waited `shutdown_timeout` seconds for requests in
    flight, ends the ones left with 503 (streams with a last abort event), so each gets an
    answer instead of being cancelled by uvicorn with a traceback."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            timer = asyncio.get_running_loop().call_later(shutdown_timeout, end_requests)
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()

    def end_requests() -> None:
        message = (
            f"the server shut down before the request finished "
            f"(--shutdown-timeout {shutdown_timeout:g} s)"
        )
        ended = tm.end_all(message)
        if ended:
            logger.warning("%d requests still running at --shutdown-timeout: ended (503)", ended)

    return Server(config)


def launch_server(args: ServerArgs) -> int:
    """Start the children, then serve HTTP until Ctrl-C, SIGTERM, or a child's death; returns
    the exit code: 0 after a stop, 1 when a child process died."""
    import uvicorn

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s: %(message)s")
    procs = ServerProcesses(args)
    if args.node_rank > 0:
        return serve_node_ranks(procs)
    try:
        logger.info("ipc sockets in %s", procs.ipc_dir)
        try:
            info = procs.start()
        except RuntimeError as exc:  # the model did not load: the child said why
            logger.error("%s", exc)
            return 1
        metrics = ServerMetrics(args.dp_size)
        router = Router(
            args.dp_size,
            args.load_balance_method,
            min(info["worker_kv_pool_sizes"]),
            cache_enabled=not args.disable_radix_cache,
        )
        tm = TokenizerManager(
            info["tokenizer_folder"],
            procs.scheduler_paths,
            procs.paths["tokenizer"],
            metrics,
            info["context_length"],
            args.chat_template,
            router,
        )
        for worker, stats in enumerate(info["worker_stats"]):  # live from the start
            tm.update_stats(worker, stats)
        app = create_app(args, info, tm, metrics)

        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            loop="uvloop",
            http=header_timeout_protocol(args.header_read_timeout),
            timeout_graceful_shutdown=args.shutdown_timeout + RESPONSE_GRACE,
        )
        server = http_server(config, tm, args.shutdown_timeout)
        freeze_heap("server")

        crashed = []

        def on_death(name, code):
            if server.should_exit:  # stopping anyway: the children end with us
                return
            crashed.append(name)
            worker = procs.worker_of(name)
            if name in procs.tp_ranks:
                rank = procs.tp_ranks[name][1]
                logger.error(
                    "%s process (tensor-parallel rank %d of %d%s) died (exit code %s); the "
                    "server shuts down",
                    name,
                    rank,
                    args.tp_size,
                    f", data-parallel worker {worker}" if args.dp_size > 1 else "",
                    code,
                )
                tm.fail_worker(worker, f"tensor-parallel rank {rank} died (exit code {code})")
            elif worker is not None and args.dp_size > 1:
                logger.error(
                    "%s process (data-parallel worker %d of %d) died (exit code %s); its "
                    "requests fail and the server shuts down",
                    name,
                    worker,
                    args.dp_size,
                    code,
                )
                tm.fail_worker(worker, f"data-parallel worker {worker} died (exit code {code})")
            else:
                logger.error("%s process died (exit code %s); shutting the server down", name, code)
            server.should_exit = server.force_exit = True

        procs.watch(on_death)
        logger.info("ready on http://%s:%d", args.host, args.port)
        # uvicorn re-raises the signal that stopped it once it returns; let that land on a
        # no-op so the cleanup below still runs.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: None)
        server.run()
        return 1 if crashed else 0
    finally:
        procs.stop()
