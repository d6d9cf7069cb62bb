"""What the auto-mode benches count: CPU ticks of a process and the PTY holders (`loopwright
auto hold`) of a workspace's loops. Imported by scripts/bench-auto.py, scripts/bench-auto-cpu.py and
scripts/bench-auto-claude.py (Python puts a script's own folder on its path)."""
import os


def ticks(pid):
    """User + system CPU ticks of `pid` so far (0 once it is gone)."""
    try:
        f = open(f"/proc/{pid}/stat").read().split(") ")[1].split()
        return int(f[11]) + int(f[12])
    except FileNotFoundError:
        return 0


def holders(ws):
    """The pids of the holders whose session folder lies in workspace `ws`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 3 and cmd[1:3] == [b"auto", b"hold"] and cmd[3].decode(errors="replace").startswith(ws):
            out.append(int(pid))
    return out
