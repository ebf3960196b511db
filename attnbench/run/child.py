"""A child process over a socket pair, for the isolated worker and the compile processes: `python -c COMMAND FD`, not
multiprocessing's spawn (which re-imports the parent's __main__), exchanging pickled messages."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import attnbench
from attnbench.gpu import harness

STDERR_TAIL_LINES = 5
STDERR_TAIL_CHARS = 400
# For importing torch and the backends.
START_TIMEOUT_S = 300.0


class ChildDied(Exception):
    """The child process ended without answering; the message says how."""


class ChildProcess:
    def __init__(self, process: subprocess.Popen, conn: Connection, stderr_path: Path) -> None:
        self.process = process
        self.conn = conn
        self.stderr_path = stderr_path

    @classmethod
    def start(cls, command: str, config: Any, python: str | None = None) -> ChildProcess:
        """`python`: another environment's interpreter (attnbench.run.ab), importing its own attnbench."""
        fd, name = tempfile.mkstemp(prefix="attnbench-worker-", suffix=".log")
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        if python is None:
            package_root = str(Path(attnbench.__file__).resolve().parent.parent)  # a checkout not installed
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        env.update(config.env)
        if config.device == "cuda":  # the worker does not count this process as another user of its GPU
            env[harness.HARNESS_GPUS_VAR] = ",".join(harness.contexts_held_here())
        try:
            process = subprocess.Popen(
                [python or sys.executable, "-c", command, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
                start_new_session=True,  # Ctrl-C reaches the parent only; it stops after this measurement
            )
        finally:
            os.close(fd)
            theirs.close()
        worker = cls(process, Connection(ours.detach()), Path(name))
        worker.send(("config", config))
        message = worker.receive(START_TIMEOUT_S)
        if message is None:
            worker.kill()
            raise ChildDied(f"did not start within {START_TIMEOUT_S:g} s")
        return worker

    def send(self, message: tuple) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            raise ChildDied(self.death()) from None

    def receive(self, timeout_s: float | None) -> Any:
        """None when `timeout_s` passes first; ChildDied when it ended."""
        try:
            if not self.conn.poll(timeout_s):
                return None
            return self.conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            raise ChildDied(self.death()) from None

    def death(self) -> str:
        try:
            code = self.process.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            how = "stopped answering"
        elif code < 0:
            how = f"was killed by signal {signal_name(-code)}"
        else:
            how = f"exited with code {code}"
        tail = self.stderr_tail()
        self._remove_log()
        return how + (f"; last stderr: {tail}" if tail else "; it wrote nothing to stderr")

    def stderr_tail(self) -> str:
        try:
            text = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
        if fatal:  # faulthandler's report: the error, then the stack innermost first
            tail = " | ".join(lines[fatal[-1]:fatal[-1] + STDERR_TAIL_LINES])
            return tail[:STDERR_TAIL_CHARS]
        tail = " | ".join(lines[-STDERR_TAIL_LINES:])
        return tail if len(tail) <= STDERR_TAIL_CHARS else "…" + tail[-STDERR_TAIL_CHARS:]

    def kill(self) -> None:
        """The child and its whole session: ninja puts each nvcc in a process group of its own."""
        for pid in (self.process.pid, *session_members(self.process.pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()
        self.conn.close()
        self._remove_log()

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def _remove_log(self) -> None:
        self.stderr_path.unlink(missing_ok=True)


def session_members(session: int) -> list[int]:
    """The processes in `session` (Linux's /proc)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[3] == str(session) and entry.name != str(session):
            members.append(int(entry.name))
    return members


def child_main(fd: int, main: Callable[[Connection, Any], None]) -> None:
    """Ctrl-C is the parent's (it stops the child between tasks); a segfault leaves its Python stack in stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable()
    conn = Connection(fd)
    try:
        _, config = conn.recv()
    except (EOFError, OSError):
        return
    main(conn, config)


def requests(conn: Connection) -> Iterator[tuple]:
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        yield message


def signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)


def join_threads(target: Callable[[Any], None], items: list[Any], name: str, on_interrupt: Callable[[], None]) -> None:
    """`target(item)` for each item on its own daemon thread, joined; on an interrupt while joining (a second
    Ctrl-C), `on_interrupt()` runs before it is raised again."""
    threads = [threading.Thread(target=target, args=(item,), name=f"{name}-{i}", daemon=True)
               for i, item in enumerate(items)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        on_interrupt()
        raise
