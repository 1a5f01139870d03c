#!/usr/bin/python3
"""Holds processes the way a failed node holds its own: every thread stopped (ptrace), so that
no signal they are sent is acted on (SIGTERM and SIGCONT stay pending) until SIGKILL ends them.
(A SIGSTOP, the other tests' hung process, would not hold: Slurm's kill sends SIGCONT first.)

  hold_processes.py SECONDS PID...

Seizes every thread of each PID (PTRACE_SEIZE, then PTRACE_INTERRUPT), prints "held N
process(es)" and keeps them until SECONDS passed or every one is gone; on its way out the kernel
lets the survivors go (their pending signals are delivered then). Exits 1 when a PID cannot be
held (gone, or ptrace refused: it needs root or CAP_SYS_PTRACE). Used by
tests/test_slurm_preempt.sh: a node set DOWN whose trainer processes still answered their
SIGTERM in time was a kinder failure than a node that is gone.
"""
import ctypes
import os
import sys
import time

PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
WNOHANG, WALL = 1, 0x40000000


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: hold_processes.py SECONDS PID...")
    seconds, pids = float(sys.argv[1]), [int(p) for p in sys.argv[2:]]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError as e:
            sys.exit(f"hold_processes.py: process {pid}: {e.strerror}")
        for tid in tids:
            for req in (PTRACE_SEIZE, PTRACE_INTERRUPT):
                if libc.ptrace(req, tid, None, None) != 0:
                    err = ctypes.get_errno()
                    sys.exit(f"hold_processes.py: ptrace of thread {tid} of {pid}: {os.strerror(err)}")
    print(f"held {len(pids)} process(es)", flush=True)
    end = time.monotonic() + seconds
    alive = set(pids)
    while alive and time.monotonic() < end:
        # Reap what the tracer is told of (stops, exits); a held process that is gone leaves the set.
        while True:
            try:
                pid, _ = os.waitpid(-1, WNOHANG | WALL)
            except ChildProcessError:
                break
            if pid == 0:
                break
        alive = {p for p in alive if os.path.exists(f"/proc/{p}") and not _zombie(p)}
        time.sleep(0.1)


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


if __name__ == "__main__":
    main()
