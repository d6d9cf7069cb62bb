#!/usr/bin/env python3
"""GitHub's side of loopwright (docs/benchmarks.md, "From an issue to a pull request"), on loopback.

    cargo build --release && scripts/forge-test.sh   # (installs tests/forge/node_modules once)
    python3 scripts/bench-forge.py [--issues 100] [--bin target/release/loopwright]

Against the GitHub test server (tests/forge/github-server.mjs, every request checked against
GitHub's OpenAPI description) and a daemon in a fresh workspace whose pipeline is one shell stage:
  1. webhook received -> run started: a signed `issues.labeled` delivery per issue, one after
     another; the time to the daemon's 202 (the run journaled as queued) and to its first attempt
     (`attempt_started` in the journal, against the sending clock), p50/p99;
  2. run finished -> pull request opened: the last stage's end to `delivered` (the branch pushed
     over git's smart HTTP, the pull request found or opened, loopwright's status on the head),
     p50/p99, read from the journal's own times.

With `--idle-poll SECONDS` instead: a daemon polling GitHub every second (`poll_seconds = 1`) with
nothing to find, for SECONDS; its CPU time over the window (from /proc) and the requests GitHub
saw, with how many were answered `304 Not Modified`.
"""
import argparse
import datetime
import hashlib
import hmac
import http.client
import json
import os
import subprocess
import tempfile
import time
import urllib.request

SECRET = "bench-secret"


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def ts(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")[:26] + "+00:00" if "." in text else text.replace("Z", "+00:00"))


def post_json(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--issues", type=int, default=100)
    ap.add_argument("--bin", default="target/release/loopwright")
    ap.add_argument("--idle-poll", type=int, default=0, metavar="SECONDS")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = os.path.abspath(args.bin)
    server = subprocess.Popen(["node", os.path.join(root, "tests/forge/github-server.mjs")], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "GITHUB_TEST_TOKENS": "loopwright-bot:tok-lw:admin,carol:tok-carol:write"})
    _, api, clone = server.stdout.readline().split()
    ws = tempfile.mkdtemp(prefix="lw-bench-forge-")
    os.makedirs(os.path.join(ws, ".loopwright/pipelines"))
    with open(os.path.join(ws, ".loopwright/pipelines/fix-issue.yml"), "w") as f:
        f.write("name: fix-issue\ndescription: d\nversion: 1\nstages:\n  - id: fix\n    agent: shell\n    mode: agent\n"
                "    description: d\n    run: date +%s%N > fixed.txt\n")
    with open(os.path.join(ws, ".loopwright/config.toml"), "w") as f:
        f.write(f'sandbox = "off"\n\n[github]\nrepo = "acme/shop"\napi_url = "{api}"\ntoken_env = "LW_BENCH_TOKEN"\n'
                'sandbox = "off"\nwatch = false\n' + ("poll_seconds = 1\n" if args.idle_poll else "") +
                '\n[[github.trigger]]\non = "issue_labeled"\nlabel = "loopwright"\npipeline = "fix-issue"\n')
    with open(os.path.join(ws, ".gitignore"), "w") as f:
        f.write(".loopwright/state/\n")
    git = lambda *a: subprocess.run(["git", *a], cwd=ws, check=True, capture_output=True)
    git("init", "-q", "-b", "main")
    git("-c", "user.name=B", "-c", "user.email=b@example.com", "add", "-A")
    git("-c", "user.name=B", "-c", "user.email=b@example.com", "commit", "-qm", "init")
    auth = "Authorization: Basic " + __import__("base64").b64encode(b"loopwright-bot:tok-lw").decode()
    subprocess.run(["git", "-c", f"http.extraHeader={auth}", "push", "-q", clone, "HEAD:refs/heads/main"], cwd=ws, check=True)
    env = {**os.environ, "LW_BENCH_TOKEN": "tok-lw", "LOOPWRIGHT_GITHUB_WEBHOOK_SECRET": SECRET}
    daemon = subprocess.Popen([binary, "serve", "--addr", "127.0.0.1:0", "--json"], cwd=ws, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    host, port = json.loads(daemon.stdout.readline())["addr"].rsplit(":", 1)
    token = open(os.path.join(ws, ".loopwright/state/serve.token")).read().strip()
    accepted, sent_at, runs = [], {}, []
    if args.idle_poll:
        try:
            idle(daemon.pid, api, args.idle_poll)
        finally:
            daemon.terminate()
            daemon.wait()
            server.terminate()
            server.wait()
        return
    try:
        conn = http.client.HTTPConnection(host, int(port))
        for i in range(args.issues):
            issue = post_json(f"{api}/__test/issue", {"title": f"Issue {i}", "body": "b", "user": "dana"})
            now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = json.dumps({
                "action": "labeled",
                "issue": {"number": issue["number"], "title": issue["title"], "body": "b", "updated_at": now,
                          "user": {"login": "dana", "type": "User"}},
                "label": {"name": "loopwright"}, "sender": {"login": "carol", "type": "User"},
                "repository": {"full_name": "acme/shop"},
            }).encode()
            sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            t0 = time.time()
            conn.request("POST", "/api/github/webhook", body=body, headers={
                "Content-Type": "application/json", "X-GitHub-Event": "issues", "X-GitHub-Delivery": f"d-{i}",
                "X-Hub-Signature-256": sig})
            r = conn.getresponse()
            answer = json.loads(r.read())
            accepted.append((time.time() - t0) * 1000)
            assert answer.get("outcome") == "started", answer
            runs.append(answer["run_id"])
            sent_at[answer["run_id"]] = t0
        deadline = time.time() + 600
        started_ms, delivered_ms = [], []
        for run in runs:
            while True:
                conn.request("GET", f"/api/runs/{run}/events", headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
                r = conn.getresponse()
                events = json.loads(r.read())
                kinds = {e["event"]["type"]: e for e in events} if isinstance(events, list) else {}
                if "run_finished" in kinds or time.time() > deadline:
                    break
                time.sleep(0.2)
            first = next(e for e in events if e["event"]["type"] == "attempt_started")
            done = [e for e in events if e["event"]["type"] == "attempt_succeeded"][-1]
            delivered = next(e for e in events if e["event"]["type"] == "delivered")
            started_ms.append((ts(first["at"]).timestamp() - sent_at[run]) * 1000)
            delivered_ms.append((ts(delivered["at"]) - ts(done["at"])).total_seconds() * 1000)
        pulls = post_json(f"{api}/__test/state", {})
        assert len(pulls["pulls"]) == args.issues and not pulls["violations"], pulls["violations"]
        print(f"issues: {args.issues} (one pull request each; no request outside GitHub's API description)")
        print(f"webhook -> 202 (run queued): p50 {pct(accepted, 50):.1f} ms, p99 {pct(accepted, 99):.1f} ms")
        print(f"webhook -> first attempt started: p50 {pct(started_ms, 50):.1f} ms, p99 {pct(started_ms, 99):.1f} ms")
        print(f"last stage ended -> pull request opened (journaled): p50 {pct(delivered_ms, 50):.1f} ms, "
              f"p99 {pct(delivered_ms, 99):.1f} ms")
    finally:
        daemon.terminate()
        daemon.wait()
        server.terminate()
        server.wait()


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle(pid, api, seconds):
    """The daemon polls with nothing to find: its CPU over `seconds`, and what GitHub saw."""
    time.sleep(5)  # its first looks, which fill the ETag cache
    before = len(post_json(f"{api}/__test/state", {})["requests"])
    cpu0, t0 = cpu_seconds(pid), time.time()
    time.sleep(seconds)
    cpu, wall = cpu_seconds(pid) - cpu0, time.time() - t0
    requests = post_json(f"{api}/__test/state", {})["requests"][before:]
    unchanged = sum(1 for r in requests if r.get("status") == 304)
    print(f"idle polling every 1 s for {wall:.0f} s: daemon CPU {cpu:.2f} s ({100 * cpu / wall:.2f} % of one core); "
          f"{len(requests)} requests to GitHub, {unchanged} answered 304")


if __name__ == "__main__":
    main()
