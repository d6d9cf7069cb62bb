#!/usr/bin/env python3
"""The cost of making a sandbox for one process, as loopwright builds it: `true` run plain,
in bubblewrap with the workspace read-only (plan mode), and in bubblewrap over an overlay
layer mounted by `unshare -Urm` (agent mode). Prints median and p95 of 40 runs each, in ms.
Needs bubblewrap (scripts/sandbox-test.sh installs it)."""
import statistics
import subprocess
import tempfile
import time
import os

def timed(argv, n=40):
    xs = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        xs.append((time.perf_counter() - start) * 1000)
    xs.sort()
    return statistics.median(xs), xs[int(len(xs) * 0.95)]

with tempfile.TemporaryDirectory() as root:
    ws, home, upper, work = (os.path.join(root, d) for d in ("ws", "home", "upper", "work"))
    for d in (ws, home, upper, work):
        os.makedirs(d)
    base = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-pid", "--die-with-parent", "--unshare-ipc", "--unshare-uts", "--unshare-net",
            "--bind", home, home, "--setenv", "HOME", home]
    script = ('ws=$0 upper=$1 work=$2; shift 2; mount -t overlay overlay -o '
              '"lowerdir=$ws,upperdir=$upper,workdir=$work,userxattr" "$ws" && exec "$@"')
    rows = [
        ("plain", ["true"]),
        ("sandbox, workspace read-only", base + ["--ro-bind", ws, ws, "--chdir", ws, "--", "true"]),
        ("sandbox over a layer", ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private",
                                  "sh", "-c", script, ws, upper, work] + base + ["--bind", ws, ws, "--chdir", ws, "--", "true"]),
    ]
    for name, argv in rows:
        median, p95 = timed(argv)
        print(f"{name:<30} median {median:6.1f} ms   p95 {p95:6.1f} ms")
