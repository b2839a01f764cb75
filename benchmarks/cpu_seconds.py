"""Prints the CPU seconds (user + system) used so far by the given processes, all threads included.
A PID written as +PID also counts its exited children (cutime, cstime): for the postmaster, that adds
PostgreSQL backends that have come and gone, and its live children are added from /proc.
Usage: cpu_seconds.py PID|+PID..."""
import os
import sys

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command name: state is fields[0], so utime = 14th field overall = fields[11].
    return [int(x) for x in fields[11:15]], int(fields[1])  # utime, stime, cutime, cstime; ppid


def seconds(arg):
    pid = int(arg.lstrip("+"))
    (utime, stime, cutime, cstime), _ = stat(pid)
    total = utime + stime
    if arg.startswith("+"):
        total += cutime + cstime
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    (u, s, _, _), ppid = stat(entry)
                except (FileNotFoundError, ProcessLookupError):
                    continue
                if ppid == pid:
                    total += u + s
    return total / TICK


print(f"{sum(seconds(a) for a in sys.argv[1:]):.3f}")
