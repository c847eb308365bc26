"""The framework tests' forked Python processes (tests/support/prefork.py) behave, to the test
that starts them, as `sys.executable` would: arguments, environment, directory, pipes, exit
status, signals, and a SIGKILL that ends the program."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from tests.support import prefork

TIMEOUT = 30


def run(*args: str, **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [prefork.python(), *args], capture_output=True, text=True, timeout=TIMEOUT, **options
    )  # type: ignore[call-overload]


def test_a_program_gets_its_arguments_environment_directory_and_pipes(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text(
        "import json, os, sys\n"
        "print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'env': os.environ.get('ONLY'),"
        " 'path0': sys.path[0], 'stdin': sys.stdin.read()}))\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(7)\n",
        "utf-8",
    )
    done = run(str(script), "a b", "ç", input="from the pipe", cwd=tmp_path, env={"ONLY": "this"})
    assert done.returncode == 7, done
    assert done.stderr == "to stderr\n"
    shown = json.loads(done.stdout)
    assert shown == {
        "argv": [str(script), "a b", "ç"],
        "cwd": str(tmp_path),
        "env": "this",
        "path0": str(tmp_path),
        "stdin": "from the pipe",
    }


def test_a_module_runs_as_main_and_an_uncaught_error_exits_1_with_its_traceback(
    tmp_path: Path,
) -> None:
    (tmp_path / "boom.py").write_text("raise RuntimeError('boom')\n", "utf-8")
    done = run("-m", "boom", cwd=tmp_path)
    assert done.returncode == 1
    assert "RuntimeError: boom" in done.stderr and "Traceback" in done.stderr


def test_threads_finish_and_atexit_handlers_run_before_the_program_ends() -> None:
    code = (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\n"
    )
    done = run("-c", code)
    assert done.returncode == 0, done
    assert done.stdout.splitlines() == ["thread done", "atexit ran"]


def test_signals_reach_the_program_and_its_death_by_signal_is_the_launchers() -> None:
    handles = subprocess.Popen(
        [prefork.python(), "-u", "-c",
         "import signal, sys, time\n"
         "signal.signal(signal.SIGTERM, lambda *_: (print('terminated'), sys.exit(3)))\n"
         "print('ready')\n"
         "time.sleep(30)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert handles.stdout is not None and handles.stdout.readline() == "ready\n"
    handles.terminate()
    assert handles.wait(TIMEOUT) == 3
    assert handles.stdout.read() == "terminated\n"

    dies = subprocess.Popen([prefork.python(), "-c", "import time; time.sleep(30)"])
    time.sleep(0.2)
    dies.send_signal(signal.SIGUSR1)  # its default action: the process ends
    assert dies.wait(TIMEOUT) == -signal.SIGUSR1


def test_a_signal_ignored_where_the_program_was_started_stays_ignored() -> None:
    code = (
        "import signal; print(signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN,"
        " signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL)"
    )
    done = subprocess.run(  # a shell that ignores SIGUSR2 starts the program
        ["sh", "-c", 'trap "" USR2; exec "$0" "$@"', prefork.python(), "-c", code],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert done.stdout.split() == ["True", "True"], done


def test_sigkill_of_the_launcher_kills_the_program(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    proc = subprocess.Popen(
        [prefork.python(), "-c",
         f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"]
    )  # fmt: skip
    deadline = time.monotonic() + TIMEOUT
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    program = int(pid_file.read_text())
    proc.kill()
    assert proc.wait(TIMEOUT) == -signal.SIGKILL
    while _alive(program):
        assert time.monotonic() < deadline, "the program outlived its launcher's SIGKILL"
        time.sleep(0.02)


def test_passed_descriptors_and_programs_started_with_sys_executable(tmp_path: Path) -> None:
    read, write = os.pipe()
    code = (
        "import os, subprocess, sys\n"
        f"os.write({write}, b'through the passed pipe')\n"
        "child = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True,"
        " text=True)\n"
        "print(sys.executable, child.stdout.strip())\n"
    )
    try:
        done = run("-c", code, pass_fds=(write,))
        os.close(write)
        assert os.read(read, 100) == b"through the passed pipe"
    finally:
        os.close(read)
    assert done.returncode == 0, done
    assert done.stdout.split() == [prefork.python(), "42"]
    assert sys.executable != prefork.python()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:  # gone (FileNotFoundError), or exiting as it is read (ProcessLookupError)
        return False


def test_a_launcher_gone_before_reading_its_answer_leaves_the_server_serving(
    tmp_path: Path,
) -> None:
    """A launcher that dies before it has read the server's answer resets its connection;
    the server kills that program and goes on serving."""
    pid_file = tmp_path / "pid"
    request = json.dumps({
        "args": ["-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid()));"
                       " time.sleep(60)"],
        "cwd": str(tmp_path), "env": {}, "fds": [0, 1, 2], "ignored": [],
    }).encode()  # fmt: skip
    with open(os.devnull, "r+b") as null, socket.socket(socket.AF_UNIX) as launcher:
        launcher.connect(str(Path(prefork.python()).with_name("prefork.sock")))
        socket.send_fds(launcher, [struct.pack("!Q", len(request))], [null.fileno()] * 3)
        launcher.sendall(request)
        deadline = time.monotonic() + TIMEOUT
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.1)  # the answer ("pid N") is in this end's buffer, unread, when it closes
    program = int(pid_file.read_text())
    while _alive(program):
        assert time.monotonic() < deadline, "the program outlived its launcher"
        time.sleep(0.02)
    assert run("-c", "print('still here')").stdout == "still here\n"
