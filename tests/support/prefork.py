"""Python processes for the agent frameworks' tests, forked from one that has imported the
frameworks already.

A Python program that imports `agents` spends 3-4 s of CPU on it, one that imports `mcp`
1.3 s; the framework tests start hundreds of such processes (agent programs, MCP gateways,
MCP servers), and that import was most of their CPU. `python()` names a command that stands
for `sys.executable` in those tests: a launcher (prefork_launch.py, standard library only,
a few milliseconds) hands its argv, environment, working directory and every open file
descriptor to a fork server, which forks a child and runs the program in it. The child is a
process of its own, as the program's user would have it: its own pid, environment, working
directory, the launcher's standard streams (the same pipes, not copies), signals passed on
by the launcher, its exit status reported through it, and SIGKILL of the launcher kills it.
`sys.executable` in the child is the same command, so the processes a program starts with
it are forked too. What it is not is a fresh interpreter: nothing here tests start-up.

One fork server serves a whole pytest run (every xdist worker), started by the first test
that asks for it and ended when the run's controlling process ends.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import importlib
import io
import json
import os
import runpy
import selectors
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LAUNCHER = Path(__file__).with_name("prefork_launch.py")
START_TIMEOUT = 120.0

# What the framework tests' programs import; loaded once, in the server. (Import errors are
# ignored: a package a run did not install is imported by the program itself, and fails there.)
PRELOAD = [
    "asyncio",
    "aiohttp",
    "aiohttp.web",
    "anyio",
    "mcp",
    "mcp.client.stdio",
    "mcp.server.lowlevel",
    "mcp.server.mcpserver",
    "mcp.server.stdio",
    "mcp_types",
    "signoff_client",
    "signoff_client.mcp",
    "signoff_client.mcp.cli",
    "agents",
    "agents.testing",
    "signoff_client.openai_agents",
    "langgraph.graph",
    "langgraph.checkpoint.sqlite",
    "signoff_client.langgraph",
]


# -- what a test uses ---------------------------------------------------------------------------


@cache
def python() -> str:
    """The command that runs a Python program forked from the preloaded server, used as
    `sys.executable` would be: `[python(), "script.py", ...]`, `[python(), "-m", "mod"]`."""
    folder = _run_folder()
    with open(folder / "prefork.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shim = folder / "python"
        if not _answers(folder / "prefork.sock"):
            _start_server(folder)
            command = [sys.executable, "-I", "-S", str(LAUNCHER), str(folder / "prefork.sock")]
            shim.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n', "utf-8")
            shim.chmod(0o755)
    return str(shim)


def _run_folder() -> Path:
    """A folder every test process of this run shares (a socket path must stay short)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    base = Path(tempfile.gettempdir())
    if len(str(base)) > 60:
        base = Path("/tmp")
    if run is None:
        return Path(tempfile.mkdtemp(prefix="signoff-prefork-", dir=base))
    folder = base / f"signoff-prefork-{run[:16]}"
    folder.mkdir(exist_ok=True)
    return folder


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _start_server(folder: Path) -> None:
    from tests.support.cli import REPO_ROOT, base_env

    # It lives as long as the run: under xdist the controller (this worker's parent).
    watched = os.getppid() if "PYTEST_XDIST_WORKER" in os.environ else os.getpid()
    ready = folder / "prefork.ready"
    ready.unlink(missing_ok=True)
    log = folder / "prefork.log"
    with open(log, "w") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.support.prefork", str(folder), str(watched)],
            cwd=REPO_ROOT,
            env=base_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while not ready.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"the prefork server did not start:\n{log.read_text()}")
        time.sleep(0.05)


# -- the server ---------------------------------------------------------------------------------


@dataclass
class Program:
    """What a launcher asked to run, as `python ARGS` would."""

    args: list[str]
    cwd: str
    env: dict[str, str]
    fds: list[int]  # the launcher's descriptor numbers, in the order they were sent
    ignored: list[int]  # the signals the launcher was started with ignored


def serve(folder: Path, watched: int) -> tuple[Program, list[int]]:
    """Preload, then fork a child per connection; returns only in a child, with its program
    and the descriptors it received. The server itself ends with the watched process."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.collect()
    gc.freeze()  # the children's collections never walk what was preloaded

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    path = folder / "prefork.sock"
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(128)
    run_ended = os.pidfd_open(watched)

    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    selector.register(run_ended, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # pid -> its launcher's connection
    (folder / "prefork.ready").touch()

    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                try:
                    program, fds = _receive(conn)
                except (OSError, ValueError) as exc:
                    conn.close()
                    print(f"prefork: a launcher's request was unreadable: {exc}", file=sys.stderr)
                    continue
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    for fd in (wake_r, wake_w, run_ended):
                        os.close(fd)
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    listener.close()
                    for other in children.values():
                        other.close()
                    conn.close()
                    return program, fds
                for fd in fds:  # the child has them; a pipe must not stay open here
                    os.close(fd)
                try:
                    conn.sendall(f"pid {pid}\n".encode())
                except OSError:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                children[pid] = conn
                selector.register(conn, selectors.EVENT_READ)
            elif key.fileobj == wake_r:
                while True:
                    try:
                        os.read(wake_r, 512)
                    except BlockingIOError:
                        break
                _reap(children, selector)
            elif key.fileobj == run_ended:
                for pid in children:
                    _kill(pid)
                shutil.rmtree(folder, ignore_errors=True)
                sys.exit(0)
            else:  # a launcher closed its end: it was killed; so is its program
                conn = key.fileobj
                assert isinstance(conn, socket.socket)
                if not _still_open(conn):
                    selector.unregister(conn)
                    for pid, held in children.items():
                        if held is conn:
                            _kill(pid)


def _still_open(conn: socket.socket) -> bool:
    """Whether a launcher's connection is still open (it sends nothing after its request: a
    readable connection is one that ended, with a reset if the launcher died before reading
    all the server said)."""
    try:
        return bool(conn.recv(1))
    except OSError:
        return False


def _receive(conn: socket.socket) -> tuple[Program, list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, 8, 256)
    if len(header) != 8:
        raise ValueError("short header")
    size = struct.unpack("!Q", header)[0]
    body = bytearray()
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("short body")
        body += chunk
    return Program(**json.loads(body)), fds


def _reap(children: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        try:
            conn.sendall(f"exit {status}\n".encode())
        except OSError:
            pass
        if conn.fileno() >= 0:
            try:
                selector.unregister(conn)
            except KeyError:  # already unregistered when its launcher went away
                pass
        conn.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- the child: become the program --------------------------------------------------------------


def become(program: Program, received: list[int], python: Path) -> None:
    """Take the launcher's descriptors, environment, directory and arguments, run the program
    as `python ARGS` would, and end this process with its exit status. `python` is its
    `sys.executable`: the command that launched it."""
    # Out of the way first (a received descriptor may sit on a number another one needs).
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1024) for fd in received]
    for fd in received:
        os.close(fd)
    for target, fd in zip(program.fds, high, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    _close_all_but(set(program.fds))
    _signal_dispositions(set(program.ignored))

    os.chdir(program.cwd)
    os.environ.clear()
    os.environ.update(program.env)
    options, rest = _options(program.args)
    unbuffered = "-u" in options or bool(program.env.get("PYTHONUNBUFFERED"))
    _standard_streams(program.env.get("PYTHONIOENCODING", ""), unbuffered)
    sys.executable = str(python)
    _exit(_run(options, rest, program))


def _run(options: dict[str, str], rest: list[str], program: Program) -> int:
    """Run the program; its exit code, as the interpreter would make it."""
    try:
        if "-m" in options:
            sys.argv = [options["-m"], *rest]
            sys.path[0:1] = [program.cwd, *_pythonpath(program.env)]
            runpy.run_module(options["-m"], run_name="__main__", alter_sys=True)
        elif "-c" in options:
            sys.argv = ["-c", *rest]
            sys.path[0:1] = ["", *_pythonpath(program.env)]
            exec(compile(options["-c"], "<string>", "exec"), {"__name__": "__main__"})
        else:
            script = os.path.abspath(rest[0])
            sys.argv = rest
            sys.path[0:1] = [os.path.dirname(os.path.realpath(script)), *_pythonpath(program.env)]
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        _exit(-signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _exit(code: int) -> None:
    """End the way the interpreter does (threads joined, atexit handlers run, streams
    flushed), except for tearing down every module: that would write to nearly every page
    shared with the server (about 0.1 s of CPU a process) and show the program nothing.
    A negative code is a signal the process ends by (SIGINT after a KeyboardInterrupt)."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _signal_dispositions(ignored: set[int]) -> None:
    """What a new interpreter would start with: the launcher's ignored signals ignored,
    SIGINT raising KeyboardInterrupt, SIGPIPE and SIGXFSZ ignored, the rest as the system
    has them."""
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if signum in ignored or signum in (signal.SIGPIPE, signal.SIGXFSZ):
            handler: signal.Handlers | object = signal.SIG_IGN
        elif signum == signal.SIGINT:
            handler = signal.default_int_handler
        else:
            handler = signal.SIG_DFL
        try:
            signal.signal(signum, handler)  # type: ignore[arg-type]
        except (OSError, ValueError):  # one the system does not let a process set
            pass


def _options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """The interpreter options the tests' commands use (-u, -m MOD, -c CODE), then the rest."""
    options: dict[str, str] = {}
    args = list(args)
    while args and args[0].startswith("-") and args[0] != "-":
        option = args.pop(0)
        if option == "-u":
            options["-u"] = ""
        elif option in ("-m", "-c"):
            options[option] = args.pop(0)
            return options, args
        else:
            sys.stderr.write(f"prefork: unsupported interpreter option {option}\n")
            sys.exit(2)
    if not args:
        sys.stderr.write("prefork: no program to run (a script, -m MODULE or -c CODE)\n")
        sys.exit(2)
    return options, args


def _pythonpath(env: dict[str, str]) -> list[str]:
    """PYTHONPATH's entries not already on the path (the server's own came from its start)."""
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]


def _standard_streams(io_encoding: str, unbuffered: bool) -> None:
    # The server's own streams were set up by this interpreter from the same locale.
    default = sys.__stdout__ or io.TextIOWrapper(io.BytesIO())
    encoding, _, errors = io_encoding.partition(":")
    encoding = encoding or default.encoding
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            setattr(sys, name, None)
            setattr(sys, f"__{name}__", None)
            continue
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        buffered: io.RawIOBase | io.BufferedIOBase
        if fd == 0:
            buffered = io.BufferedReader(raw)
        else:
            buffered = raw if unbuffered else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(
            buffered,  # type: ignore[arg-type]
            encoding=encoding,
            errors=errors or ("backslashreplace" if fd == 2 else default.errors),
            line_buffering=fd == 2 or raw.isatty(),
            write_through=unbuffered and fd != 0,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _close_all_but(kept: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in kept:
            try:
                os.close(fd)
            except OSError:  # the listdir's own descriptor
                pass


if __name__ == "__main__":
    _folder = Path(sys.argv[1])
    become(*serve(_folder, int(sys.argv[2])), python=_folder / "python")
