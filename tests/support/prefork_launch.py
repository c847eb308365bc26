"""The launcher behind tests/support/prefork.py's `python` command: hands this process's argv,
environment, working directory and open file descriptors to the fork server, which forks the
program from an interpreter that has imported the agent frameworks already, then stands for
that program: signals sent here are passed on, and this process ends as the program ended
(its exit code, or killed by the same signal). If this process is killed with SIGKILL, the
fork server kills the program.

Run as `python -I -S prefork_launch.py SOCKET [python arguments...]`: the standard library
only, no site, so it starts in a few milliseconds.
"""

import contextlib
import json
import os
import signal
import socket
import struct
import sys

# What a shell or a test sends a process it wants to stop or poke.
FORWARDED = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
)


def main() -> None:
    path, args = sys.argv[1], sys.argv[2:]
    program: list[int] = []  # its pid, once the server has said it
    pending: list[int] = []  # signals that arrived before that

    def forward(signum: int, _frame: object) -> None:
        if program:
            with contextlib.suppress(ProcessLookupError):  # it ended as the signal came
                os.kill(program[0], signum)
        else:
            pending.append(signum)

    # Ignored ones stay ignored in the program, as they would across fork and exec.
    ignored = [int(n) for n in signal.valid_signals() if _ignored(n)]
    for signum in FORWARDED:
        signal.signal(signum, forward)

    # Every descriptor this process inherited is the program's too (0-2, and any pass_fds).
    fds = sorted(int(name) for name in os.listdir("/proc/self/fd"))
    fds = [fd for fd in fds if _is_open(fd)]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.connect(path)
    except OSError as exc:
        sys.stderr.write(f"prefork: no fork server answers at {path}: {exc}\n")
        sys.exit(125)
    body = json.dumps(
        {"args": args, "cwd": os.getcwd(), "env": dict(os.environ), "fds": fds,
         "ignored": ignored}
    ).encode()
    socket.send_fds(server, [struct.pack("!Q", len(body))], fds)
    server.sendall(body)
    # The program holds them now; this process keeps no end of a pipe open past the program's
    # own (stderr stays, for the line below if the server goes away).
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd != 2:
            os.dup2(null, fd)

    answers = server.makefile("r", encoding="ascii")
    said = answers.readline().split()
    if said[:1] != ["pid"]:
        sys.stderr.write(f"prefork: the fork server refused: {' '.join(said) or 'no answer'}\n")
        sys.exit(126)
    program.append(int(said[1]))
    for signum in pending:
        with contextlib.suppress(ProcessLookupError):
            os.kill(program[0], signum)

    said = answers.readline().split()
    if said[:1] != ["exit"]:
        sys.stderr.write("prefork: the fork server went away before the program ended\n")
        sys.exit(125)
    status = int(said[1])
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    sys.exit(os.waitstatus_to_exitcode(status))


def _ignored(signum: int) -> bool:
    try:
        return signal.getsignal(signum) == signal.SIG_IGN
    except ValueError:  # not a signal this platform names
        return False


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:  # the listdir's own descriptor, closed by now
        return False
    return True


if __name__ == "__main__":
    main()
