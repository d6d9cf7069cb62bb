#!/usr/bin/env python3
"""Auto mode with the real Claude Code (issue 38): prompt → answer latency and loopwright's CPU
per loop, at a 1 s and at the default 60 s heartbeat.

The Claude Code that scripts/install-agent-clis.sh installs runs offline against a scripted
Messages API on 127.0.0.1 (a seeded HOME: onboarding done, the key approved, the workspace
trusted). `loopwright serve` supervises one loop; the scripted model asks for N shell commands
the policy allows, one per turn, each behind Claude Code's permission prompt. The bench polls
the agent's screen through the holder's socket (every 20 ms) to see when each prompt is drawn,
and takes the time it was answered from the supervision journal. Then the agent sits quiet at
its input for the idle window. CPU counted: the daemon and the loop's holder (`auto hold`), not
Claude Code.

Usage: python3 scripts/bench-auto-claude.py [path/to/loopwright] [prompts] [idle seconds]
       (default target/release/loopwright, 10 prompts, 30 s; BENCH_HEARTBEAT=60 runs one case)
Writes only under a temporary folder and stops everything it started."""
import datetime, json, os, shutil, socket, subprocess, sys, tempfile, threading, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from auto_cpu import holders, ticks

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
bin = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(root, "target/release/loopwright")
prompts = int(sys.argv[2]) if len(sys.argv) > 2 else 10
idle = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
claude = os.path.join(root, "target/agent-clis/node_modules/.bin/claude")
hz = os.sysconf("SC_CLK_TCK")
KEY = "sk-ant-loopwright-offline-test-key"


ids = iter(range(1, 1 << 30))


def stream(blocks, stop):
    out = []
    # Each answer its own message id: Claude Code takes a repeated id for the same message.
    ev = lambda name, data: out.append(f"event: {name}\ndata: {json.dumps(data)}\n\n")
    ev("message_start", {"type": "message_start", "message": {"id": f"msg_b{next(ids)}", "type": "message", "role": "assistant",
        "model": "claude-test", "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}})
    for i, b in enumerate(blocks):
        if b["type"] == "tool_use":
            ev("content_block_start", {"type": "content_block_start", "index": i,
                "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
            ev("content_block_delta", {"type": "content_block_delta", "index": i,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}})
        else:
            ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}})
        ev("content_block_stop", {"type": "content_block_stop", "index": i})
    ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 20}})
    ev("message_stop", {"type": "message_stop"})
    return "".join(out).encode()


def command(k):
    return f"echo {k} > bench-{k}.txt"


class Api(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
            self.send_response(404)
            self.end_headers()
            return
        messages = body.get("messages", [])
        if not body.get("tools"):
            data = stream([{"type": "text", "text": '{"title": "Bench"}'}], "end_turn")
        else:
            # The turn after the tool result of command k asks for command k + 1.
            done = sum(1 for m in messages if m.get("role") == "assistant" and "toolu_b" in json.dumps(m))
            if done < prompts:
                k = done + 1
                data = stream([{"type": "tool_use", "id": f"toolu_b{k}", "name": "Bash",
                                "input": {"command": command(k), "description": f"Note {k}"}}], "tool_use")
            else:
                data = stream([{"type": "text", "text": "All noted."}], "end_turn")
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(data)


def screen(sock):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(2)
        s.connect(sock)
        s.sendall(b'{"op":"screen"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        return json.loads(data).get("screen", "")
    except (OSError, ValueError):
        return ""


def at(entry):
    text = entry["at"].rstrip("Z")
    base, _, frac = text.partition(".")
    return datetime.datetime.fromisoformat(base).replace(tzinfo=datetime.timezone.utc).timestamp() + float("0." + (frac or "0"))


def case(heartbeat):
    ws = tempfile.mkdtemp(prefix="lw-bench-claude-")
    home = tempfile.mkdtemp(prefix="lw-bench-home-")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.makedirs(f"{ws}/.loopwright/agents")
    open(f"{ws}/.loopwright/config.toml", "w").write(
        f'sandbox = "off"\n[auto]\nheartbeat_seconds = {heartbeat}\nstall_captures = 1000\nstop_grace_seconds = 1\n')
    open(f"{ws}/.loopwright/agents/claude.md", "w").write(f'---\nrunner: claude\ncommand: ["{claude}"]\n---\nClaude Code.\n')
    subprocess.run([bin, "auto", "init", "mod", "--target", "Note progress."], cwd=ws, check=True, capture_output=True)
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=ws, check=True)
    open(f"{ws}/.gitignore", "w").write(".loopwright/state/\n")
    subprocess.run(git + ["add", "-A"], cwd=ws, check=True)
    subprocess.run(git + ["commit", "-qm", "start"], cwd=ws, check=True)
    real = os.path.realpath(ws)
    json.dump({"hasCompletedOnboarding": True, "numStartups": 1,
               "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []},
               "projects": {real: {"hasTrustDialogAccepted": True, "allowedTools": []}}}, open(f"{home}/.claude.json", "w"))
    env = dict(os.environ, HOME=home, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}",
               ANTHROPIC_API_KEY=KEY, DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
               CLAUDE_CODE_DISABLE_TERMINAL_TITLE="1", LANG="C.UTF-8")
    for k in ("TMUX", "ANTHROPIC_AUTH_TOKEN", "NO_COLOR", "CI"):
        env.pop(k, None)
    daemon = subprocess.Popen([bin, "serve", "--addr", "127.0.0.1:0", "--json"], cwd=ws, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    info = json.loads(daemon.stdout.readline())
    url = info["url"].split("?")[0].rstrip("/")
    token = open(f"{ws}/.loopwright/state/serve.token").read().strip()

    def call(method, path, body=None):
        req = urllib.request.Request(url + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req).read() or b"null")

    t0 = time.time()
    d0 = ticks(daemon.pid)
    call("POST", "/api/sessions/b/task-auto", {"taskDir": "mod", "agent": "claude"})
    sock = f"{ws}/.loopwright/state/auto/b/holder.sock"
    shown = {}
    deadline = time.time() + 60 + prompts * 10
    while len(shown) < prompts and time.time() < deadline:
        text = screen(sock)
        if "Do you want to proceed?" in text:
            for k in range(1, prompts + 1):
                if k not in shown and command(k) in text:
                    shown[k] = time.time()
        time.sleep(0.02)
    while not os.path.exists(f"{ws}/bench-{prompts}.txt") and time.time() < deadline:
        time.sleep(0.05)
    busy = time.time() - t0
    pids = holders(real) or holders(ws)
    h_busy = sum(ticks(p) for p in pids)
    d_busy = ticks(daemon.pid) - d0
    # Quiet: the agent waits at its input; the supervisor only keeps its heartbeat.
    time.sleep(3)
    d1, h1 = ticks(daemon.pid), sum(ticks(p) for p in pids)
    time.sleep(idle)
    d_idle, h_idle = ticks(daemon.pid) - d1, sum(ticks(p) for p in pids) - h1
    log = call("GET", "/api/sessions/b/task-auto/log")
    answered = {}
    for e in log:
        if e["kind"] == "keys" and e["data"].get("why") == "command prompt":
            for k in range(1, prompts + 1):
                if command(k) in e["data"].get("excerpt", "") and k not in answered:
                    answered[k] = at(e)
    lat = sorted(answered[k] - shown[k] for k in shown if k in answered)
    typed = sum(1 for e in log if e["kind"] == "keys" and e["data"].get("why") == "command prompt")
    try:
        call("DELETE", "/api/sessions/b/task-auto")
    except Exception:
        pass
    time.sleep(3)
    daemon.terminate()
    daemon.wait()
    server.shutdown()
    shutil.rmtree(ws, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    p50 = lat[len(lat) // 2] if lat else float("nan")
    print(f"heartbeat {heartbeat:>4} s: {len(lat)}/{prompts} prompts answered ({typed} answers typed), "
          f"prompt drawn → answered p50 {p50:.2f} s, max {max(lat) if lat else float('nan'):.2f} s; "
          f"CPU while working ({busy:.0f} s): daemon {100 * d_busy / hz / busy:.2f} %, holder {100 * h_busy / hz / busy:.2f} %; "
          f"idle {idle:.0f} s: daemon {100 * d_idle / hz / idle:.2f} %, holder {100 * h_idle / hz / idle:.2f} % of one core")


if not os.access(claude, os.X_OK):
    sys.exit(f"Claude Code is not installed at {claude}: run scripts/install-agent-clis.sh")
for hb in ([float(os.environ["BENCH_HEARTBEAT"])] if os.environ.get("BENCH_HEARTBEAT") else (1, 60)):
    case(hb)
