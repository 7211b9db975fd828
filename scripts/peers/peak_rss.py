#!/usr/bin/env python3
"""Runs a command and records its peak resident memory (the child's ru_maxrss, from os.wait4).

Usage: peak_rss.py OUT.json -- COMMAND [ARG ...]. Writes {"peak_rss_mb", "exit_code", "wall_seconds"};
the command's stdout and stderr pass through, and its exit code is this script's. Counts the
child and the children it waited for, not the whole machine; the same measure as getrusage(2).
"""
import json, os, subprocess, sys, time

if len(sys.argv) < 4 or sys.argv[2] != "--":
    sys.exit(__doc__)
t0 = time.monotonic()
child = subprocess.Popen(sys.argv[3:])
_, status, usage = os.wait4(child.pid, 0)
child.returncode = code = os.waitstatus_to_exitcode(status)
with open(sys.argv[1], "w") as f:
    # Linux reports ru_maxrss in KiB.
    json.dump({"peak_rss_mb": usage.ru_maxrss / 1024, "exit_code": code, "wall_seconds": time.monotonic() - t0}, f)
sys.exit(code if code >= 0 else 128 - code)
