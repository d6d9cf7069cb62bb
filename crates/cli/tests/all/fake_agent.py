#!/usr/bin/env python3
"""A scripted interactive agent CLI for auto-mode tests.

It behaves like an agent in a terminal: it reads its first message (typed as a bracketed paste,
or given as an argument), draws a spinner with a busy footer, walks the loop writing
`.auto-signal` files, asks permission prompts in each real CLI's wording and reads the key it
gets, prints quota messages with a reset time a few seconds ahead, hangs without output, runs a
busy child process, ignores `.auto-stop` for a while, and exits with a resume banner.

Usage: fake_agent.py SCENARIO.json [first message]

The scenario is {"task_dir": DIR, "log": FILE, "runs": [[action, ...], ...]}: the Nth start of
the agent (a restart is a new start) plays runs[N-1] (the last one again when there are fewer).
Every key and line received, every action and the environment's resume id are appended to the
log as JSON lines, so a test can check what the supervisor typed and when.
"""

import json
import os
import select
import subprocess
import sys
import termios
import time
import tty
import datetime

SPIN = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def leave_loop(task):
    """The protocol's cleanup at loop exit: the transient files go."""
    for name in (".auto-signal", ".auto-stop"):
        try:
            os.remove(os.path.join(task, name))
        except FileNotFoundError:
            pass


def main():
    scenario_path = sys.argv[1]
    with open(scenario_path) as f:
        sc = json.load(f)
    task = sc["task_dir"]
    log_path = sc["log"]
    counter = scenario_path + ".starts"
    starts = int(open(counter).read()) if os.path.exists(counter) else 0
    starts += 1
    with open(counter, "w") as f:
        f.write(str(starts))
    runs = sc["runs"]
    actions = runs[min(starts, len(runs)) - 1]

    def log(kind, **data):
        data.update(kind=kind, at=time.time(), start=starts)
        with open(log_path, "a") as f:
            f.write(json.dumps(data) + "\n")

    log("started", resume=os.environ.get("LOOPWRIGHT_AUTO_RESUME", ""), argv=len(sys.argv), term=os.environ.get("TERM"))
    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    tty.setraw(fd)
    out = sys.stdout

    def write(text):
        out.write(text.replace("\n", "\r\n"))
        out.flush()

    def read_available(timeout):
        r, _, _ = select.select([fd], [], [], timeout)
        if not r:
            return b""
        return os.read(fd, 65536)

    def read_until(pred, timeout=600):
        buf = b""
        end = time.time() + timeout
        while time.time() < end:
            chunk = read_available(0.05)
            if chunk:
                buf += chunk
                if pred(buf):
                    return buf
        return buf

    try:
        # The first message: an argument, or a bracketed paste ended by Enter.
        if len(sys.argv) > 2:
            log("first_message", chars=len(sys.argv[2]), via="argument")
        else:
            write("fake-agent ready\n› ")
            buf = read_until(lambda b: b"\x1b[201~" in b and b.endswith(b"\r"), 30)
            text = buf.decode("utf-8", "replace")
            log("first_message", chars=len(text), via="typed", has_protocol="auto-signal" in text)
        write("\x1b[2J\x1b[H")
        # A cursor position query, as TUIs send at start: the holder must answer it.
        write("\x1b[6n")
        reply = read_until(lambda b: b.endswith(b"R"), 5)
        log("cursor_reply", ok=reply.startswith(b"\x1b[") and reply.endswith(b"R"))

        iteration = 0
        for a in actions:
            do = a["do"]
            log("action", do=do)
            if do == "spin":
                end = time.time() + a.get("seconds", 1)
                i = 0
                while time.time() < end:
                    write("\r%s Working… (%ds · esc to interrupt)   " % (SPIN[i % len(SPIN)], i // 10))
                    i += 1
                    time.sleep(0.1)
                write("\n")
            elif do == "signal":
                iteration += 1
                sig = {
                    "step": a["step"],
                    "result": a["result"],
                    "next": a["next"],
                    "checkpoint": a.get("checkpoint", ""),
                    "iteration": a.get("iteration", iteration),
                    "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
                if "raw" in a:
                    text = a["raw"]
                else:
                    text = json.dumps(sig)
                tmp = os.path.join(task, ".auto-signal.tmp")
                with open(tmp, "w") as f:
                    f.write(text)
                os.rename(tmp, os.path.join(task, ".auto-signal"))
                write("● %s → %s (next %s)\n" % (a["step"], a["result"], a["next"]))
                time.sleep(a.get("pause", 0.3))
            elif do == "index":
                path = os.path.join(task, ".index.md")
                body = open(path).read()
                lines = body.split("\n")
                lines = ["status: " + a["status"] if l.startswith("status:") else l for l in lines]
                open(path, "w").write("\n".join(lines))
            elif do == "write":
                with open(a["path"], "w") as f:
                    f.write(a["text"])
            elif do == "burst":
                # Rewrites the signal file as fast as it can: large garbage and the same valid
                # signal, alternately.
                same = json.dumps({"step": "exec", "result": "(done)", "next": "check", "checkpoint": "post-exec",
                                   "iteration": 1, "timestamp": "2026-01-01T00:00:00Z"})
                for i in range(a.get("count", 3000)):
                    text = ("x" * 60000 + str(i)) if i % 2 else same
                    tmp = os.path.join(task, ".auto-signal.tmp")
                    with open(tmp, "w") as f:
                        f.write(text)
                    os.rename(tmp, os.path.join(task, ".auto-signal"))
                write("burst done\n")
            elif do == "fifo":
                if os.path.exists(a["path"]):
                    os.remove(a["path"])
                os.mkfifo(a["path"])
            elif do == "link":
                if os.path.lexists(a["path"]):
                    os.remove(a["path"])
                os.symlink(a["target"], a["path"])
            elif do == "print":
                write(a["text"] + "\n")
            elif do == "prompt":
                # `redraw`: the screen is cleared and the prompt drawn in the same write, as a
                # TUI replaces one permission prompt by the next in one frame.
                log("asked", prompt=a.get("name", ""))
                write(("\x1b[2J\x1b[H" if a.get("redraw") else "") + a["text"])
                got = read_until(lambda b: len(b) >= len(a.get("expect", "x")), a.get("timeout", 30))
                log("answer", prompt=a.get("name", ""), keys=got.decode("utf-8", "replace"))
                if not a.get("keep"):
                    write("\x1b[2J\x1b[H⎿  answered %r\n" % got.decode("utf-8", "replace"))
            elif do == "quota":
                reset = datetime.datetime.now().astimezone() + datetime.timedelta(seconds=a.get("in_seconds", 3))
                if a.get("next_minute"):
                    # Claude gives the time to the minute: the next minute's start — or the one
                    # after, when the next is so close that the menu's answer could come after it.
                    now = datetime.datetime.now().astimezone()
                    reset = (now + datetime.timedelta(minutes=1)).replace(second=0, microsecond=0)
                    if (reset - now).total_seconds() < 5:
                        reset += datetime.timedelta(minutes=1)
                    log("reset_at", reset=reset.timestamp())
                hour = reset.strftime("%I").lstrip("0") or "12"
                text = a["text"].replace("{time}", "%s:%s%s" % (hour, reset.strftime("%M"), reset.strftime("%p").lower()))
                text = text.replace("{seconds}", str(a.get("in_seconds", 3)))
                write(text + "\n")
                got = b""
                while not got.endswith(b"\r"):
                    chunk = read_until(lambda b: True, a.get("timeout", 120))
                    if not chunk:
                        break
                    got += chunk
                    log("quota_key", keys=chunk.decode("utf-8", "replace"))
                log("quota_answer", keys=got.decode("utf-8", "replace"))
                write("\x1b[2J\x1b[H(resumed)\n")
            elif do == "hang":
                end = time.time() + a.get("seconds", 5)
                while time.time() < end:
                    got = read_available(0.05)
                    if got:
                        log("input", keys=got.decode("utf-8", "replace"))
            elif do == "wait_input":
                write(a.get("text", "") + "\n› ")
                got = read_until(lambda b: b.endswith(b"\r"), a.get("timeout", 60))
                log("input", keys=got.decode("utf-8", "replace"))
                write("\n")
            elif do == "busy_child":
                script = "end=$(($(date +%s)+" + str(a.get("seconds", 3)) + ")); while [ $(date +%s) -lt $end ]; do :; done"
                p = subprocess.Popen(["sh", "-c", script])
                write("Running the tests…\n")
                p.wait()
                write("tests done\n")
            elif do == "check_stop":
                if os.path.exists(os.path.join(task, ".auto-stop")):
                    log("saw_stop")
                    if not a.get("ignore"):
                        leave_loop(task)
                        write("Loop stopped (.auto-stop).\n› ")
                        read_until(lambda b: False, 600)
                        return
            elif do == "loop_end":
                time.sleep(a.get("pause", 0.3))
                leave_loop(task)
                write("Loop complete.\n› ")
            elif do == "idle":
                write("› ")
                while True:
                    got = read_until(lambda b: b.endswith(b"\r"), a.get("seconds", 600))
                    if not got:
                        break
                    log("input", keys=got.decode("utf-8", "replace"))
            elif do == "exit":
                if a.get("banner"):
                    sid = os.environ.get("LOOPWRIGHT_AUTO_RESUME") or a["banner"]
                    write("\nResume this session with:\nclaude --resume %s\n" % sid)
                log("exit", code=a.get("code", 0))
                termios.tcsetattr(fd, termios.TCSADRAIN, old)
                os._exit(a.get("code", 0))
        # Out of actions: sit idle like an interactive CLI.
        write("› ")
        while True:
            got = read_until(lambda b: b.endswith(b"\r"), 3600)
            if got:
                log("input", keys=got.decode("utf-8", "replace"))
    finally:
        try:
            termios.tcsetattr(fd, termios.TCSADRAIN, old)
        except termios.error:
            pass


if __name__ == "__main__":
    main()
