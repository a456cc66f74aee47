"""The `harness` command line with a probe or a fault built in, for the fault tests.

    python -m tests.faults.inject [--heartbeat FILE] [--stall append|checkpoint|saved --marker FILE] -- ARGS
    python -m tests.faults.inject --fork-server EXITS

`--heartbeat FILE`: a thread ticks every 10 ms, and asyncio runs in debug mode so that every callback
of the event loop slower than 0.1 s is logged. At exit FILE gets the longest gap between two ticks (the
interpreter stalled: the GIL held, a blocking call in C) and the slowest event-loop callback.

`--stall append`: the first trajectory line is written half, fsynced, then the process hangs; `--stall
checkpoint`: the first checkpoint's optimizer file is written half, then the process hangs; `--stall
saved`: the process hangs right after its first checkpoint is complete, before anything else is written.
The marker file appears when the hang begins, so a test can `kill -9` the process at that point, which a
random kill hits only by luck.

`--fork-server EXITS` imports the harness once (torch and transformers take seconds), then, for each line
of its input (a JSON object: `argv`, this program's arguments, and `log`, a file for the output), forks a
process that runs them as above, prints its pid, and writes its exit status to EXITS/PID when it ends. A
restart after a kill then costs the run's own start-up, not the interpreter's: the process is the same
`harness` command line, started by fork instead of exec.
"""

from __future__ import annotations

import argparse
import atexit
import io
import json
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

from harness import cli
from harness.rollouts import store


class Heartbeat:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.max_gap_s = 0.0
        self.slowest_callback_s = 0.0
        self.slow_callbacks = 0
        threading.Thread(target=self._tick, daemon=True).start()
        os.environ["PYTHONASYNCIODEBUG"] = "1"  # read by asyncio.run, which the runner calls later
        handler = logging.Handler(logging.WARNING)
        handler.emit = self._record  # type: ignore[method-assign]
        logging.getLogger("asyncio").addHandler(handler)
        atexit.register(self.write)

    def _tick(self) -> None:
        last = time.monotonic()
        while True:
            time.sleep(0.01)
            now = time.monotonic()
            self.max_gap_s = max(self.max_gap_s, now - last)
            last = now

    def _record(self, record: logging.LogRecord) -> None:
        # asyncio logs 'Executing %s took %.3f seconds' for every callback slower than 0.1 s in debug mode
        if record.msg.startswith("Executing") and isinstance(record.args, tuple):
            self.slow_callbacks += 1
            self.slowest_callback_s = max(self.slowest_callback_s, float(record.args[-1]))

    def write(self) -> None:
        figures = {
            "max_gap_s": self.max_gap_s,
            "slowest_callback_s": self.slowest_callback_s,
            "slow_callbacks": self.slow_callbacks,
        }
        self.path.write_text(json.dumps(figures))


def hang(marker: Path) -> None:
    marker.write_text(str(os.getpid()))
    while True:
        time.sleep(60)


def stall_appends(marker: Path) -> None:
    """The first trajectory line is written half, then the process hangs."""
    original = store.append_line

    def append_line(path: Path, text: str) -> int:
        if path.name != "trajectories.jsonl":
            return original(path, text)
        data = text.encode() + b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, data[: len(data) // 2])
        os.fsync(fd)
        hang(marker)
        return 0

    store.append_line = append_line  # type: ignore[assignment]


def stall_checkpoints(marker: Path) -> None:
    """The optimizer file of the first checkpoint is written half (the weights are complete), then the
    process hangs: a kill in the middle of a checkpoint save."""
    import torch

    original = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if not (isinstance(f, Path) and f.name == "optimizer.pt" and f.parent.name.startswith(".step-")):
            return original(obj, f, *args, **kwargs)
        buffer = io.BytesIO()
        original(obj, buffer, *args, **kwargs)
        with f.open("wb") as out:
            out.write(buffer.getvalue()[: buffer.tell() // 2])
            out.flush()
            os.fsync(out.fileno())
        hang(marker)

    torch.save = save


def stall_after_saves(marker: Path) -> None:
    from harness.training import train

    original = train.save_checkpoint

    def save_checkpoint(*args: Any, **kwargs: Any) -> Path:
        original(*args, **kwargs)
        hang(marker)
        raise AssertionError("unreachable")

    train.save_checkpoint = save_checkpoint


STALLS = {"append": stall_appends, "checkpoint": stall_checkpoints, "saved": stall_after_saves}


def serve_forks(exits: Path) -> None:
    import harness.training.train  # noqa: F401  (the slow imports, once)

    exits.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=reap_children, args=(exits,), daemon=True).start()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run_child(request["argv"], Path(request["log"]))
        print(pid, flush=True)


def reap_children(exits: Path) -> None:
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            time.sleep(0.01)
            continue
        tmp = exits / f".{pid}"
        tmp.write_text(str(os.waitstatus_to_exitcode(status)))
        tmp.rename(exits / str(pid))


def run_child(argv: list[str], log: Path) -> NoReturn:
    """The forked process: output to `log`, no input, then `main(argv)` and the exit handlers, as at exit."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    code = 1
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.inject")
    parser.add_argument("--heartbeat", type=Path, default=None)
    parser.add_argument("--stall", choices=sorted(STALLS), default=None)
    parser.add_argument("--marker", type=Path, default=None)
    parser.add_argument("--fork-server", type=Path, default=None)
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if options.fork_server is not None:
        serve_forks(options.fork_server)
        return 0
    if options.heartbeat is not None:
        Heartbeat(options.heartbeat)
    if options.stall is not None:
        if options.marker is None:
            parser.error("--stall needs --marker")
        STALLS[options.stall](options.marker)
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
