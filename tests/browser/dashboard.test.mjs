// The dashboard in a real browser: Debian's chromium driven by playwright-core, against a real
// `loopwright serve` in a temporary workspace. Run by scripts/browser-test.sh (which installs
// both); screenshots go to target/screenshots/, or to docs/ with LOOPWRIGHT_SCREENSHOTS=docs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { callApi, launchChromium, waitFor } from './support.mjs';

const root = path.resolve(import.meta.dirname, '../..');
const bin = process.env.LOOPWRIGHT_BIN || path.join(root, 'target/debug/loopwright');
const shots = process.env.LOOPWRIGHT_SCREENSHOTS === 'docs' ? path.join(root, 'docs') : path.join(root, 'target/screenshots');
const SLEEP = 3017; // a stage's `sleep`, unique enough to find its process

let ws;
let daemon;
let base;
let token;
let browser;
// A notification target on 127.0.0.1: records every request's JSON body.
let receiver;
const notified = [];

function write(rel, text) {
  const file = path.join(ws, rel);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
}

function setUpWorkspace() {
  ws = fs.mkdtempSync(path.join(os.tmpdir(), 'loopwright-browser-'));
  write('.loopwright/pipelines/gate.yml', fs.readFileSync(path.join(root, 'tests/fixtures/gate.yml'), 'utf8'));
  // The agent writes a check script; the check fails (not executable) and the closed loop
  // escalates at once (permission-error); told to "make it executable", it does.
  write('.loopwright/agents/dev.md', '---\nname: dev\nrunner: command\ncommand: ["sh", ".loopwright/agents/dev.sh"]\n---\nYou fix code.\n');
  write('.loopwright/agents/dev.sh', `prompt=$(cat)
mkdir -p scripts
printf '#!/bin/sh\\necho checked\\n' > scripts/check.sh
case "$prompt" in *"make it executable"*) chmod +x scripts/check.sh;; esac
echo wrote the check
`);
  write('.loopwright/pipelines/fixit.yml', `name: fixit
description: An agent stage whose check needs a person's hint
version: 1
stages:
  - id: implement
    description: Write the check script
    agent: dev
    mode: agent
    skill: closed-loop-execution
    checks:
      - name: script_runs
        type: command
        command: ./scripts/check.sh
`);
  write('.loopwright/pipelines/diamond.yml', `name: diamond
description: Two reviews at once
version: 1
stages:
  - id: plan
    agent: shell
    mode: plan
    description: Plan
    run: "echo planned"
  - id: security
    agent: shell
    mode: plan
    needs: [plan]
    description: Review for security
    run: "sleep 1; echo safe"
  - id: performance
    agent: shell
    mode: plan
    needs: [plan]
    description: Review for performance
    run: "sleep 1; echo fast"
  - id: verdict
    agent: shell
    mode: plan
    needs: [security, performance]
    description: Decide
    run: "echo ship it"
`);
  write('.loopwright/pipelines/slow.yml', `name: slow
description: A long stage
version: 1
stages:
  - id: wait
    agent: shell
    mode: plan
    description: Wait a long time
    run: "echo started sleeping; sleep ${SLEEP}"
`);
  write('.loopwright/pipelines/stuck.yml', `name: stuck
description: A closed loop that gives up
version: 1
stages:
  - id: implement
    description: Frobnicate the widget
    agent: dev
    mode: agent
    skill: closed-loop-execution
    closed_loop:
      max_retries: 1
    checks:
      - name: widget
        type: custom
        command: echo 'widget frobnication incomplete for slot 7'; exit 1
`);
  write('.loopwright/pipelines/broken.yml', 'name: broken\ndescription: d\nversion: 1\nstages:\n  - id: Bad-Id\n    agent: shell\n    run: echo hi\n');
  // Auto mode: the scripted interactive agent of the CLI tests, busy until told to stop.
  write('.loopwright/config.toml', '[auto]\nheartbeat_seconds = 0.2\nstall_captures = 25\nstop_grace_seconds = 3\n\n'
    + `[[notify]]\nurl = "http://127.0.0.1:${receiver.address().port}/hook"\nevents = ["needs_human"]\npipelines = ["notified"]\nas = "dana"\n`);
  write('.loopwright/pipelines/notified.yml', fs.readFileSync(path.join(root, 'tests/fixtures/gate.yml'), 'utf8').replace('name: gate', 'name: notified'));
  write('.loopwright/pipelines/two.yml', `name: two
description: Two steps
version: 1
stages:
  - id: first
    agent: shell
    mode: plan
    description: The first step
    run: echo one
  - id: second
    agent: shell
    mode: plan
    description: The second step
    run: echo two
`);
  const spin = [];
  for (let i = 0; i < 400; i++) spin.push({ do: 'spin', seconds: 0.3 }, { do: 'check_stop' });
  write('scenario.json', JSON.stringify({ task_dir: path.join(ws, 'mod'), log: path.join(ws, 'agent.log'), runs: [spin] }));
  write('.loopwright/agents/fake.md', `---\nrunner: command\ncommand: ["python3", "${path.join(root, 'crates/cli/tests/all/fake_agent.py')}", "${path.join(ws, 'scenario.json')}"]\n---\nA scripted agent.\n`);
  // A second agent: a long output (the live screen must open at its newest rows), then Claude
  // Code's Bash prompt for a command the policy refuses, kept on screen until a key comes.
  const menuPrompt = ' Bash command\n\n   rm -rf canary\n\u001b[38;5;246m   Remove the old folder\u001b[39m\n\n'
    + ' Do you want to proceed?\n ❯ 1. Yes\n   2. Yes, and always allow access to canary/ from this project\n   3. No\n\n Esc to cancel · Tab to amend\n';
  const output = Array.from({ length: 60 }, (_, i) => `  ⎿  output line ${i + 1}`).join('\n');
  write('menu.json', JSON.stringify({ task_dir: path.join(ws, 'menu'), log: path.join(ws, 'menu.log'),
    runs: [[{ do: 'print', text: output }, { do: 'prompt', name: 'rm', keep: true, text: menuPrompt, timeout: 300 }, { do: 'idle' }]] }));
  write('.loopwright/agents/menu.md', `---\nrunner: command\ncommand: ["python3", "${path.join(root, 'crates/cli/tests/all/fake_agent.py')}", "${path.join(ws, 'menu.json')}"]\n---\nA scripted agent at a menu.\n`);
  write('canary/keep.txt', 'keep\n');
  execFileSync(bin, ['auto', 'init', 'menu', '--target', 'Tidy the old folder.'], { cwd: ws });
  execFileSync(bin, ['auto', 'init', 'mod', '--target', 'Add a greeting file.'], { cwd: ws });
  execFileSync(bin, ['auto', 'init', 'empty'], { cwd: ws });
  execFileSync('git', ['init', '-q', '-b', 'main'], { cwd: ws });
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', 'add', '-A'], { cwd: ws });
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-qm', 'initial'], { cwd: ws });
}

async function startDaemon() {
  daemon = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--json'], { cwd: ws, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: daemon.stdout });
  const first = await new Promise((resolve, reject) => {
    lines.once('line', resolve);
    daemon.once('exit', (code) => reject(new Error(`serve exited with ${code}`)));
  });
  const started = JSON.parse(first);
  base = `http://${started.addr}`;
  token = fs.readFileSync(path.join(ws, '.loopwright/state/serve.token'), 'utf8').trim();
  return started.url;
}

const api = (method, route, body) => callApi(base, token, method, route, body);


function sleepers() {
  const found = [];
  for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
      const state = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1][0];
      if (cmd === `sleep ${SLEEP}` && state !== 'Z') found.push(Number(pid));
    } catch { /* gone meanwhile */ }
  }
  return found;
}

async function shot(page, name) {
  fs.mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, name), fullPage: false });
}

/** Starts a run through the form on the runs page; resolves on the run page. */
async function startThroughForm(page, pipeline, task) {
  await page.goto(`${base}/`);
  await page.selectOption('#start-form select[name="pipeline"]', pipeline);
  await page.fill('#start-form textarea[name="task"]', task);
  await Promise.all([page.waitForURL(/\/runs\/\d{8}-\d{6}-[0-9a-f]+$/), page.click('#start-form button[type="submit"]')]);
  const run = page.url().split('/runs/')[1];
  // Marks this page load: a reload would lose it.
  await page.evaluate(() => { window.loadedOnce = true; });
  return run;
}

const notReloaded = (page) => page.evaluate(() => window.loadedOnce === true);

/** A test that, when it fails, prints what each of its pages shows and the runs' statuses. */
function browserTest(name, body) {
  test(name, async () => {
    const pages = [];
    try {
      await body(async () => {
        const page = await browser.mainContext.newPage();
        pages.push(page);
        return page;
      });
    } catch (e) {
      for (const page of pages) {
        const text = await page.evaluate(() => document.body.innerText).catch(() => '?');
        console.error(`--- ${page.url()}\n${text.slice(0, 3000)}`);
      }
      console.error('--- runs', JSON.stringify((await api('GET', '/api/runs')).body));
      throw e;
    } finally {
      await Promise.all(pages.map((p) => p.close()));
    }
  });
}

before(async () => {
  receiver = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      try { notified.push(JSON.parse(body)); } catch { notified.push({ unreadable: body }); }
      res.end('ok');
    });
  });
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  setUpWorkspace();
  const url = await startDaemon();
  browser = await launchChromium();
  // The printed URL carries the token once; the browser keeps the cookie.
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  await page.goto(url);
  assert.equal(new URL(page.url()).search, '', 'the token is not left in the address bar');
  browser.mainContext = context;
});

after(async () => {
  await browser?.close();
  receiver?.close();
  if (daemon && daemon.exitCode === null) {
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.once('exit', r));
  }
  fs.rmSync(ws, { recursive: true, force: true });
});

browserTest('a gate: started through the form, waiting with the badge, approved with a click, finished green without a reload', async (newPage) => {
  const page = await newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(`${base}/`);
  await page.fill('#who', 'alice');
  await page.dispatchEvent('#who', 'change');
  const run = await startThroughForm(page, 'gate', 'Ship the release');
  await page.getByText('waits for approval').waitFor();
  assert.match(await page.textContent('#run-status'), /waiting/);
  assert.ok(await notReloaded(page), 'the run page updated itself');
  // The gate's buttons under the headline, the change so far beside them.
  assert.ok((await page.locator('button[data-action="approve"]').boundingBox()).y < 800, 'Approve is on the first screen');
  assert.match(await page.innerText('#gate-diff'), /No committed change yet|diff --git/);

  // The runs page: the waiting run first, the badge in the header.
  const list = await newPage();
  await list.goto(`${base}/`);
  assert.equal((await list.textContent('#badge')).replace(/\s+/g, ' ').trim(), '⚑ 1 need you');
  const firstRow = list.locator('tbody tr').first();
  assert.equal(await firstRow.getAttribute('data-run'), run);
  // What waits, and since when, its clock ticking; time waiting is not time worked.
  assert.match(await firstRow.locator('.row-why').innerText(), /^gate at ship, waiting (\d+ ms|\d+\.\d s|\d+m \d\ds)$/);
  const clock = firstRow.locator('.row-why .clock');
  const before = await clock.innerText();
  await waitFor('the waiting clock to tick', async () => (await clock.innerText()) !== before, 5);
  await shot(list, 'dashboard-runs.png');
  await list.setViewportSize({ width: 390, height: 844 });
  assert.ok(await list.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'no sideways scrolling at phone width');
  await shot(list, 'dashboard-runs-phone.png');

  // The approve button is reachable from the keyboard.
  await page.bringToFront();
  await page.locator('body').focus();
  let reached = false;
  for (let i = 0; i < 40 && !reached; i += 1) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate(() => document.activeElement?.dataset?.action === 'approve');
  }
  assert.ok(reached, 'Tab reaches Approve');
  await shot(page, 'dashboard-run-gate.png');
  await page.click('button[data-action="approve"]');
  await page.locator('#run-status', { hasText: 'success' }).waitFor();
  assert.ok(await notReloaded(page), 'finished without a reload');
  assert.equal(await page.locator('.stage-row.status-success').count(), 2);

  // The runs page followed along: the badge is back to none.
  await list.locator('#badge-count', { hasText: '0' }).waitFor();
  const events = (await api('GET', `/api/runs/${run}/events`)).body;
  const granted = events.filter((e) => e.event.type === 'approval_granted');
  assert.deepEqual(granted.map((e) => [e.event.stage, e.event.by, e.event.via]), [['ship', 'alice', 'dashboard']]);
  // Who answered, and through what, is shown on the run page and in the run's result.
  await page.locator('#answers li', { hasText: 'alice approved ship via dashboard' }).waitFor();
  const answered = (await api('GET', `/api/runs/${run}`)).body.answers.map((a) => [a.stage, a.by, a.answer, a.via]);
  assert.deepEqual(answered, [['ship', 'alice', 'approved', 'dashboard']]);
  assert.deepEqual(errors, []);

  // A gate rejected with a comment: the run's header says who and why, not just "cancelled".
  const other = await api('POST', '/api/runs', { pipeline: 'gate' });
  await waitFor('the second gate', async () => (await api('GET', `/api/runs/${other.body.run_id}`)).body.status === 'waiting');
  const rejected = await api('POST', `/api/runs/${other.body.run_id}/reject`, { by: 'carol', comment: 'Not on a Friday' });
  assert.equal(rejected.status, 200, JSON.stringify(rejected.body));
  const why = await newPage();
  await why.goto(`${base}/runs/${other.body.run_id}`);
  assert.equal(await why.innerText('#ended-by'), 'Rejected by carol at ship: Not on a Friday');
  assert.equal(await why.innerText('#run-status'), '⊘ rejected');
  assert.match(await why.innerText('#answers'), /carol rejected ship via api — Not on a Friday/);
  // `rejected` is its own status: the list's filter finds it and its row says who and why.
  assert.equal((await api('GET', `/api/runs/${other.body.run_id}`)).body.status, 'rejected');
  await why.goto(`${base}/?status=rejected`);
  const rows = await why.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => tr.querySelector('td').innerText));
  assert.deepEqual(rows, ['⊘ rejected\nrejected at ship by carol: Not on a Friday']);

  // The finished run opened afresh: no box for the output of a stage in flight, no stream.
  const done = await newPage();
  const streams = [];
  done.on('request', (r) => { if (r.url().includes(`/api/runs/${run}/output`)) streams.push(r.url()); });
  await done.goto(`${base}/runs/${run}`);
  assert.equal(await done.getAttribute('body', 'data-final'), 'true');
  await done.waitForTimeout(1000);
  assert.ok(await done.locator('section.live-output').isHidden(), 'a finished run shows a live-output box');
  assert.deepEqual(streams, [], 'a finished run opened an output stream');
});

browserTest('an escalation answered with fix and a hint, and the run goes on', async (newPage) => {
  const page = await newPage();
  const run = await startThroughForm(page, 'fixit', 'Add the check script');
  await page.getByText('is escalated to you').waitFor();
  // The escalation report is rendered: headings and tables, no Markdown marks left.
  await page.locator('.report.rendered h2', { hasText: 'Task Escalation Required' }).waitFor();
  assert.ok(await page.locator('.report.rendered table').count() > 0, 'the attempt history is a table');
  assert.doesNotMatch(await page.innerText('.report.rendered'), /\*\*Task:\*\*|^## /m);
  // No command lines: the page answers with its own form, right under the headline.
  assert.doesNotMatch(await page.innerText('main'), /loopwright respond/);
  const formAt = async () => (await page.locator('#respond-form button[type="submit"]').boundingBox()).y;
  assert.ok(await formAt() < 800, `the answer form's button is at ${await formAt()} px at 1280×800`);
  await shot(page, 'dashboard-run-escalation.png');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'the escalation is wider than a phone');
  assert.ok(await (async () => (await page.locator('#respond-form legend').boundingBox()).y)() < 844, 'the answer form starts on the first screen of a phone');
  await shot(page, 'dashboard-run-escalation-phone.png');
  await page.setViewportSize({ width: 1280, height: 800 });
  // Guidance typed with "Retry" still selected is the fix the person meant, not dropped.
  assert.ok(await page.isChecked('#respond-form input[value="retry"]'));
  await page.fill('#respond-form textarea[name="text"]', 'make it executable with chmod +x');
  assert.ok(await page.isChecked('#respond-form input[value="fix"]'), 'typing guidance chose "Fix"');
  await page.click('#respond-form button[type="submit"]');
  await page.locator('#run-status', { hasText: 'success' }).waitFor();
  assert.ok(await notReloaded(page));
  const events = (await api('GET', `/api/runs/${run}/events`)).body;
  const answers = events.filter((e) => e.event.type === 'escalation_answered').map((e) => e.event);
  assert.equal(answers.length, 1);
  assert.deepEqual(answers[0].answer, { answer: 'fix', text: 'make it executable with chmod +x' });
  assert.equal(answers[0].by, 'alice');
  assert.match(await page.innerText('#answers'), /alice answered implement: fix via dashboard — make it executable with chmod \+x/);
  // Every attempt of the closed loop says how long it took.
  const attempts = (await api('GET', `/api/runs/${run}/stages/implement/attempts`)).body;
  assert.ok(attempts.length >= 2, JSON.stringify(attempts));
  for (const a of attempts) assert.ok(a.duration_ms > 0, `attempt ${a.number} took ${a.duration_ms} ms`);
  // The hint reached the next attempt's prompt, shown on the page.
  await page.locator('#attempt-implement-2').evaluate((d) => { d.open = true; });
  await page.locator('#attempt-implement-2 details').first().evaluate((d) => { d.open = true; });
  assert.match(await page.textContent('#attempt-implement-2'), /make it executable with chmod \+x/);
  // Every attempt and phase in words: no raw JSON anywhere on the page, attempts not named by
  // their journal events.
  await page.evaluate(() => document.querySelectorAll('details').forEach((d) => { d.open = true; }));
  const text = await page.innerText('main');
  assert.doesNotMatch(text, /\{"/, `raw JSON on the run page: ${(text.match(/.{0,200}\{".{0,200}/s) || [''])[0]}`);
  assert.match(await page.innerText('#attempt-implement-1 > summary'), /Attempt 1 — failed; escalated to a person/);
});

browserTest('a running stage: its output live, cancelled with a click, its process gone', async (newPage) => {
  const page = await newPage();
  await startThroughForm(page, 'slow', 'Wait');
  await page.locator('#live-output', { hasText: 'started sleeping' }).waitFor();
  assert.match(await page.textContent('#output-which'), /wait, attempt 1/);
  await waitFor('the stage process', () => sleepers().length === 1);
  // The stage in flight shows how long it has run so far, its bar the longest.
  await page.waitForTimeout(1200);
  const viewer = await newPage();
  await viewer.goto(page.url());
  const row = viewer.locator('.stage-row.status-running');
  assert.match(await row.locator('.num').textContent(), /1 attempt · [1-9]\.\d s/);
  assert.equal(await row.locator('.bar').evaluate((b) => b.classList.contains('w100')), true);
  await viewer.close();
  await shot(page, 'dashboard-run-running.png');
  await page.fill('#who', 'bob');
  await page.dispatchEvent('#who', 'change');
  await page.click('button[data-action="cancel"][data-rollback="false"]');
  await page.locator('#run-status', { hasText: 'cancelled' }).waitFor();
  assert.ok(await notReloaded(page));
  await waitFor('the stage process to be gone', () => sleepers().length === 0, 10);
  // The header says who ended it, not only "cancelled".
  await page.locator('#ended-by', { hasText: 'Cancelled by bob' }).waitFor();
  // The run ended with the stage in flight: the stage says so, not "running".
  await page.reload();
  assert.equal(await page.locator('.stage-row.status-running').count(), 0);
});

browserTest('an invalid pipeline: the form shows where and what', async (newPage) => {
  const page = await newPage();
  await page.goto(`${base}/`);
  await page.selectOption('#start-form select[name="pipeline"]', 'broken');
  await page.click('#start-form button[type="submit"]');
  const errors = page.locator('#start-errors li').first();
  await errors.waitFor();
  assert.match(await errors.textContent(), /broken\.yml:\d+:\d+: .*Bad-Id/);
  assert.equal(new URL(page.url()).pathname, '/');
});

browserTest('dead letters and stats', async (newPage) => {
  const started = await api('POST', '/api/runs', { pipeline: 'stuck' });
  assert.equal(started.status, 202);
  await waitFor('the run to fail', async () => (await api('GET', `/api/runs/${started.body.run_id}`)).body.status === 'failed');
  await waitFor('its dead letter', async () => (await api('GET', '/api/dead-letters')).body.some((l) => l.run_id === started.body.run_id));
  const page = await newPage();
  await page.goto(`${base}/dead-letters`);
  // Grouped by how they failed, each group with its count; the letter on its own page.
  assert.match(await page.innerText('.letter-groups li'), /^×1 \w+: \S/);
  await page.locator('tbody a[href^="/dead-letters/"]').first().click();
  await page.locator('.report.rendered').waitFor();
  assert.match(await page.textContent('main'), /widget frobnication incomplete/);
  // What to do comes first, rendered; the record's fields are apart, closed, at the end.
  const letter = page.locator('main');
  assert.ok(await letter.locator('.report.rendered h2, .report.rendered h1').count() > 0, 'the dead letter is rendered');
  assert.equal(await letter.locator('details.fields').getAttribute('open'), null);
  assert.doesNotMatch(await letter.locator('.report.rendered').innerText(), /^task_id:/m);
  await page.goto(`${base}/dead-letters`);
  await page.setViewportSize({ width: 390, height: 844 });
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'dead letters wider than a phone');
  await shot(page, 'dashboard-dead-letters-phone.png');
  await page.setViewportSize({ width: 1280, height: 800 });
  await shot(page, 'dashboard-dead-letters.png');
  await page.goto(`${base}/stats`);
  assert.match(await page.textContent('main'), /Attempts by failure pattern/);
  assert.match(await page.textContent('main'), /Strategy effectiveness/);
  await shot(page, 'dashboard-stats.png');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'stats wider than a phone');
  await shot(page, 'dashboard-stats-phone.png');
});

browserTest('auto mode: a loop started from the panel with the defaults shown, its screen live, stopped with a click', async (newPage) => {
  const page = await newPage();
  await page.goto(`${base}/auto`);
  assert.equal(await page.inputValue('#auto-form input[name="maxIterations"]'), '20');
  assert.equal(await page.inputValue('#auto-form input[name="timeoutMinutes"]'), '30');
  // A module whose target is empty is refused, and the form says why.
  await page.fill('#auto-form input[name="taskDir"]', 'empty');
  await page.selectOption('#auto-form select[name="agent"]', 'fake');
  await page.click('#auto-form button[type="submit"]');
  await page.locator('#auto-errors', { hasText: 'fill .target.md first' }).waitFor();
  await page.fill('#auto-form input[name="taskDir"]', 'mod');
  await page.fill('#auto-form input[name="maxIterations"]', '5');
  await page.click('#auto-form button[type="submit"]');
  await page.locator('#loop-mod [data-field="status"]', { hasText: 'running' }).waitFor();
  await page.locator('#loop-mod pre.terminal', { hasText: 'Working' }).waitFor();
  assert.match(await page.textContent('#loop-mod [data-field="iteration"]'), /0 \/ 5/);
  assert.match(await page.textContent('#loop-mod [data-field="elapsed"]'), /\/ 30m 00s/);
  const started = await api('GET', '/api/sessions/mod/task-auto');
  assert.equal(started.status, 200);
  assert.deepEqual([started.body.status, started.body.max_iterations, started.body.agent], ['running', 5, 'fake']);
  await shot(page, 'dashboard-auto.png');
  // The journal in words and times in the reader's: no raw timestamps, no JSON.
  await page.locator('#log-mod > summary').click();
  await page.locator('#log-mod .said', { hasText: 'loop started with fake' }).waitFor();
  const text = await page.innerText('#loop-mod');
  assert.doesNotMatch(text, /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/, 'a raw timestamp on the auto page');
  assert.doesNotMatch(text, /\{"/, 'JSON on the auto page');
  assert.match(await page.innerText('#loop-mod p.task time'), /\d\d:\d\d:\d\d( [AP]M)? \(\d+ (s|min) ago\)/);
  // Readable on a phone: nothing wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth),
    `the auto page is ${await page.evaluate(() => document.documentElement.scrollWidth)} px wide at 390`);
  await shot(page, 'dashboard-auto-phone.png');
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.click('#loop-mod button[data-auto-stop="mod"]');
  await page.locator('#loop-mod [data-field="status"]', { hasText: 'stopped' }).waitFor();
  assert.match(await page.textContent('#loop-mod [data-field="stop-reason"]'), /user_stop/);
  assert.equal(await page.locator('#loop-mod button[data-auto-stop]').count(), 0);
  const ended = await api('GET', '/api/sessions/mod/task-auto');
  assert.deepEqual([ended.body.status, ended.body.stop_reason], ['stopped', 'user_stop']);
  assert.ok(fs.readFileSync(path.join(ws, 'agent.log'), 'utf8').includes('"saw_stop"'), 'the agent saw .auto-stop');
  // The ended loop links its summary: the report, as `auto report --markdown` prints it.
  await page.click('#loop-mod a[href="/auto/mod/report"]');
  await page.locator('pre.report', { hasText: '# Auto loop `mod`: stopped' }).waitFor();
  assert.match(await page.innerText('pre.report'), /## Steps\n\nNo step reported\./);
  await page.setViewportSize({ width: 390, height: 844 });
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'the summary is wider than a phone');
});

browserTest('auto mode: a menu is answered with its own choices; a yes to a refused command needs it typed', async (newPage) => {
  const started = await api('POST', '/api/sessions/menu/task-auto', { taskDir: 'menu', agent: 'menu' });
  assert.equal(started.status, 201, JSON.stringify(started.body));
  const page = await newPage();
  await page.goto(`${base}/auto`);
  const card = page.locator('#loop-menu');
  await card.locator('[data-field="status"]', { hasText: 'needs you' }).waitFor();
  // The menu's own choices, as the CLI labels them, and no text box that Enter would turn
  // into the highlighted "Yes".
  const choices = card.locator('.choices button[data-choice]');
  await choices.first().waitFor();
  assert.deepEqual(await choices.allInnerTexts(),
    ['1. Yes', '2. Yes, and always allow access to canary/ from this project', '3. No']);
  assert.equal(await card.locator('form.keys-form').count(), 0);
  // The live screen opens at its newest rows (the prompt), not at the top of the output.
  const terminal = card.locator('pre.terminal');
  // Read in one go in the page: the card is replaced by a fresh one every second.
  const atBottom = () => page.evaluate(() => {
    const t = document.querySelector('#loop-menu pre.terminal');
    return t.scrollHeight > t.clientHeight && t.scrollTop + t.clientHeight >= t.scrollHeight - 4;
  });
  assert.ok(await atBottom(), 'the live screen opened at its top');
  await page.waitForTimeout(1500);
  assert.ok(await atBottom(), 'a refresh scrolled the live screen back to its top');
  // Drawn with glyphs the page's font has: Claude Code's ⎿ would be a box.
  assert.match(await terminal.innerText(), /└  output line 60/);
  await page.evaluate(() => document.querySelector('#loop-menu .needs').scrollIntoView());
  await shot(page, 'dashboard-auto-menu.png');
  // On a phone the choices are within a screen of the "Needs you" heading, not below the excerpt.
  await page.setViewportSize({ width: 390, height: 844 });
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'the auto page is wider than a phone');
  const reach = await page.evaluate(() => document.querySelector('#loop-menu .choices').getBoundingClientRect().bottom
    - document.querySelector('#loop-menu .needs').getBoundingClientRect().top);
  assert.ok(reach < 700, `the choices end ${reach} px below the heading`);
  await page.evaluate(() => document.querySelector('#loop-menu .needs').scrollIntoView());
  await shot(page, 'dashboard-auto-menu-phone.png');
  await page.setViewportSize({ width: 1280, height: 800 });
  // "Yes": the page asks for the command; cancelled, nothing is typed.
  const dialogs = [];
  const answerWith = (typed) => page.once('dialog', (d) => { dialogs.push(d.message()); typed === null ? d.dismiss() : d.accept(typed); });
  answerWith(null);
  await choices.nth(0).click();
  await page.locator('#notice', { hasText: 'menu: not answered' }).waitFor();
  assert.match(dialogs[0], /approves `rm -rf canary`, which the policy refused/);
  // Another command typed: refused by the server, said on the page, nothing typed.
  answerWith('rm -rf other');
  await choices.nth(0).click();
  await page.locator('#notice', { hasText: 'confirm by repeating it' }).waitFor();
  const log = () => fs.readFileSync(path.join(ws, 'menu.log'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  assert.deepEqual(log().filter((e) => e.kind === 'answer'), [], 'a key reached the agent');
  // "No": typed alone, journaled with the person's name.
  await choices.nth(2).click();
  await page.locator('#notice', { hasText: 'menu: answered 3. No' }).waitFor();
  for (let i = 0; i < 50 && !log().some((e) => e.kind === 'answer'); i++) await page.waitForTimeout(100);
  assert.deepEqual(log().filter((e) => e.kind === 'answer').map((e) => e.keys), ['3']);
  assert.equal(fs.readFileSync(path.join(ws, 'canary/keep.txt'), 'utf8'), 'keep\n');
  const journal = await api('GET', '/api/sessions/menu/task-auto/log');
  assert.equal(journal.status, 200);
  const typed = journal.body.filter((e) => e.kind === 'keys' && e.data.why.startsWith('typed by')).map((e) => [e.data.keys, e.data.why]);
  assert.equal(typed.length, 1, JSON.stringify(typed));
  assert.match(typed[0][1], /^typed by .+: choice 3 \(No\)$/);
  const stopped = await api('DELETE', '/api/sessions/menu/task-auto');
  assert.equal(stopped.status, 200);
});

/** A fresh browser (no cookie) at `width`×`height`, signed in with `personToken` when given. */
async function freshPage(width = 1280, height = 800, personToken = null) {
  const context = await browser.newContext({ viewport: { width, height } });
  const page = await context.newPage();
  if (personToken) await page.goto(`${base}/?token=${personToken}`);
  return page;
}

const fitsWidth = (page) => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);

function person(name, role) {
  const out = execFileSync(bin, ['serve', 'token', 'create', name, '--role', role, '--json'], { cwd: ws });
  return JSON.parse(out).token;
}

browserTest('people: signed in with their own tokens, a viewer reads and cannot answer, an approver answers as themselves', async () => {
  const vic = person('vic', 'viewer');
  const carol = person('carol', 'approver');
  const started = await api('POST', '/api/runs', { pipeline: 'gate', task: 'Ship 1.4' });
  await waitFor('the gate', async () => (await api('GET', `/api/runs/${started.body.run_id}`)).body.status === 'waiting');
  const run = started.body.run_id;

  const viewer = await freshPage(1280, 800, vic);
  assert.equal((await viewer.innerText('#signed-in')).replace(/\s+/g, ' ').trim(), 'Signed in as vic viewer');
  assert.equal(await viewer.locator('#who').count(), 0, 'no free-text name box once signed in');
  assert.equal(await viewer.locator('#start-form').count(), 0, 'a viewer is offered no start form');
  await viewer.goto(`${base}/runs/${run}`);
  await viewer.locator('#read-only').waitFor();
  assert.equal(await viewer.locator('button[data-action]').count(), 0, 'a viewer sees buttons');
  // Told whom the run waits for, never that it waits for them.
  assert.match(await viewer.innerText('#run-headline'), /^Stage ship waits for an approver \(([a-z]+, )*carol(, [a-z]+)*\)/);
  assert.doesNotMatch(await viewer.innerText('main'), /your approval|escalated to you/);
  assert.match(await viewer.innerText('#badge'), /waiting$/);
  const refused = await viewer.evaluate(async (path) => {
    const r = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    return [r.status, (await r.json()).error.message];
  }, `/api/runs/${run}/approve`);
  assert.deepEqual(refused, [403, 'vic is a viewer: this needs the approver role (`loopwright serve token create NAME --role approver`)']);
  await viewer.setViewportSize({ width: 390, height: 844 });
  assert.ok(await fitsWidth(viewer), 'the run page is wider than a phone');
  await viewer.context().close();

  const approver = await freshPage(1280, 800, carol);
  await approver.goto(`${base}/runs/${run}`);
  assert.equal((await approver.innerText('#signed-in')).replace(/\s+/g, ' ').trim(), 'Signed in as carol approver');
  assert.match(await approver.innerText('#run-headline'), /Stage ship waits for your approval: Ship once a person approves/);
  await shot(approver, 'dashboard-signed-in.png');
  await approver.setViewportSize({ width: 390, height: 844 });
  assert.ok(await fitsWidth(approver), 'the gate is wider than a phone');
  await shot(approver, 'dashboard-signed-in-phone.png');
  await approver.setViewportSize({ width: 1280, height: 800 });
  await approver.fill('#answer-comment', 'looks right');
  await approver.click('button[data-action="approve"]');
  await approver.locator('#run-status', { hasText: 'success' }).waitFor();
  const events = (await api('GET', `/api/runs/${run}/events`)).body;
  const granted = events.filter((e) => e.event.type === 'approval_granted').map((e) => [e.event.by, e.event.comment]);
  assert.deepEqual(granted, [['carol', 'looks right']]);
  await approver.locator('#answers').waitFor();
  assert.match(await approver.innerText('#answers'), /carol approved ship via dashboard — .?looks right/);
  await approver.context().close();
});

browserTest('a failed closed loop says why at the top: the check, its lines, the category, the strategy, what next', async (newPage) => {
  const started = await api('POST', '/api/runs', { pipeline: 'stuck', task: 'Frobnicate' });
  await waitFor('the run to fail', async () => (await api('GET', `/api/runs/${started.body.run_id}`)).body.status === 'failed');
  const page = await newPage();
  await page.goto(`${base}/runs/${started.body.run_id}`);
  const why = await page.innerText('#run-headline');
  assert.match(why, /Stage implement: the check widget failed/);
  assert.equal(await page.innerText('#run-headline .why-title code'), 'widget');
  assert.match(why, /widget frobnication incomplete for slot 7/);
  assert.match(why, /Category: .+; it calls for .+/);
  assert.match(why, /attempts?; (no fix strategy ran|fix strategies tried: .+)/);
  assert.match(why, /dead letters|re-run/);
  // The closed loop's phases read as sentences; nothing is JSON; nothing is wider than the window.
  await page.evaluate(() => document.querySelectorAll('details').forEach((d) => { d.open = true; }));
  assert.match(await page.innerText('ol.phases'), /Evaluate\. Checks: widget failed \(exit 1\)\./);
  assert.doesNotMatch(await page.innerText('main'), /\{"/);
  assert.ok(await fitsWidth(page), `the failed run is ${await page.evaluate(() => document.documentElement.scrollWidth)} px wide at 1280`);
  await shot(page, 'dashboard-run-failed.png');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.ok(await fitsWidth(page), `the failed run is ${await page.evaluate(() => document.documentElement.scrollWidth)} px wide at 390`);
  await shot(page, 'dashboard-run-failed-phone.png');
});

browserTest('a re-run and a retry from a stage, from the run page', async (newPage) => {
  const started = await api('POST', '/api/runs', { pipeline: 'two', task: 'Two steps', vars: { complexity: 'low' } });
  const first = started.body.run_id;
  await waitFor('the run', async () => (await api('GET', `/api/runs/${first}`)).body.status === 'success');
  const page = await newPage();
  await page.goto(`${base}/runs/${first}`);
  await page.fill('#who', 'erin');
  await page.dispatchEvent('#who', 'change');
  await Promise.all([page.waitForURL((u) => !u.pathname.endsWith(first)), page.click('button[data-action="rerun"]')]);
  const second = page.url().split('/runs/')[1];
  await page.locator('#run-status', { hasText: 'success' }).waitFor();
  await page.selectOption('#rerun-from', 'second');
  await Promise.all([page.waitForURL((u) => !u.pathname.endsWith(second)), page.click('button[data-action="rerun-from"]')]);
  const third = page.url().split('/runs/')[1];
  await page.locator('#run-status', { hasText: 'success' }).waitFor();
  const startOf = async (run) => (await api('GET', `/api/runs/${run}/events`)).body[0].event;
  const [s2, s3] = [await startOf(second), await startOf(third)];
  assert.deepEqual([s2.rerun_of, s2.start_from, s2.by, s2.vars], [first, null, 'erin', { complexity: 'low' }]);
  assert.deepEqual([s3.rerun_of, s3.start_from, s3.by], [second, 'second', 'erin']);
  assert.match(await page.innerText('#answers'), new RegExp(`erin re-ran: run ${second} from stage second`));
  // The first stage was not run again: the retried run ran the second alone.
  const result = (await api('GET', `/api/runs/${third}`)).body;
  assert.deepEqual(result.stages_executed.map((s) => [s.id, s.status]), [['second', 'success']]);
});

browserTest('a notification: received by a webhook, its approve link opened, confirmed as its person, refused the second time', async () => {
  const started = await api('POST', '/api/runs', { pipeline: 'notified', task: 'Ship 2.0' });
  const run = started.body.run_id;
  const note = await waitFor('the notification', () => notified.find((n) => n.run_id === run && n.event === 'needs_human'));
  assert.deepEqual([note.pipeline, note.stage, note.task, note.actions.map((a) => a.label)], ['notified', 'ship', 'Ship 2.0', ['Approve', 'Reject']]);
  assert.match(note.headline, /Stage ship waits for your approval/);
  const approve = note.actions[0].url;
  // Opened on a phone that never signed in: the link is its own credential.
  const phone = await freshPage(390, 844);
  await phone.goto(approve);
  assert.match(await phone.innerText('#confirm'), /Stage ship waits for your approval/);
  assert.equal(await phone.innerText('#confirm-button'), 'Approve as dana');
  assert.ok(await fitsWidth(phone), 'the confirmation page is wider than a phone');
  await shot(phone, 'dashboard-link-phone.png');
  await phone.click('#confirm-button');
  await phone.locator('#link-result', { hasText: 'Done: Approve — answered as dana' }).waitFor();
  await waitFor('the run to finish', async () => (await api('GET', `/api/runs/${run}`)).body.status === 'success');
  const events = (await api('GET', `/api/runs/${run}/events`)).body;
  assert.deepEqual(events.filter((e) => e.event.type === 'approval_granted').map((e) => e.event.by), ['dana']);
  await phone.goto(approve);
  assert.match(await phone.innerText('#refused'), /This link was already used/);
  await phone.goto(note.actions[1].url);
  assert.match(await phone.innerText('#refused'), /This link was already used/);
  await phone.setViewportSize({ width: 1280, height: 800 });
  await shot(phone, 'dashboard-link-used.png');
  await phone.context().close();
});

browserTest('500 runs: the list pages on the server, counts, searches by task text and updates rows in place', async (newPage) => {
  execFileSync(bin, ['bench', '--list-runs', '500', '--seed-only'], { cwd: ws, stdio: 'ignore' });
  const total = Number((await fetch(`${base}/api/runs?limit=1`, { headers: { Authorization: `Bearer ${token}` } })).headers.get('x-total-count'));
  assert.ok(total >= 500, `${total} runs`);
  const page = await newPage();
  await page.goto(`${base}/`);
  assert.equal(await page.innerText('#runs-count'), `Runs 1–50 of ${total}`);
  assert.equal(await page.locator('#runs-rows tr').count(), 50);
  await page.click('a[rel="next"]');
  await page.locator('#runs-count', { hasText: `Runs 51–100 of ${total}` }).waitFor();
  await page.fill('input[name="q"]', 'parser, part 357');
  await page.click('.filters button[type="submit"]');
  await page.locator('#runs-count', { hasText: 'Runs 1–1 of 1 matching' }).waitFor();
  assert.match(await page.innerText('#runs-rows'), /refactor the parser, part 357/);
  // Who acted is a column, and a search.
  await page.goto(`${base}/?by=carol`);
  assert.match(await page.innerText('#runs-rows tr:first-child td.people'), /carol/);
  // A run started meanwhile is offered, not inserted: page 1 keeps its rows and size.
  await page.goto(`${base}/`);
  const before = await page.locator('#runs-rows tr').evaluateAll((rows) => rows.map((r) => r.id));
  const started = await api('POST', '/api/runs', { pipeline: 'gate', task: 'A new run in place' });
  const run = started.body.run_id;
  await page.locator('#page-news', { hasText: '1 new run — show' }).waitFor();
  assert.deepEqual(await page.locator('#runs-rows tr').evaluateAll((rows) => rows.map((r) => r.id)), before);
  // Found by its task, its row changes in place as its run goes on.
  await page.goto(`${base}/?q=${encodeURIComponent('A new run in place')}`);
  await page.locator(`#row-${run} .status`, { hasText: 'waiting' }).waitFor();
  // A row changes in place when its run does; the list is not fetched again.
  await page.evaluate(() => { window.loadedOnce = true; });
  const listLoads = [];
  page.on('request', (r) => { const u = new URL(r.url()); if (u.pathname === '/' && r.resourceType() !== 'document') listLoads.push(u.href); });
  assert.equal((await api('POST', `/api/runs/${run}/approve`, { by: 'carol' })).status, 200);
  await page.locator(`#row-${run} .status`, { hasText: 'success' }).waitFor();
  assert.ok(await notReloaded(page), 'the list was reloaded');
  assert.deepEqual(listLoads, [], 'the whole list was fetched for an event');
  assert.match(await page.innerText(`#row-${run}`), /A new run in place/);
  await shot(page, 'dashboard-runs-many.png');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.ok(await fitsWidth(page), 'the list is wider than a phone');
  await shot(page, 'dashboard-runs-many-phone.png');
});

browserTest('the run page draws a graph of stages, the branches side by side, live and on a phone', async (newPage) => {
  const page = await newPage();
  const run = await startThroughForm(page, 'diamond', 'Review the change both ways');
  // The two reviews run at once: both are drawn running before either has ended.
  await waitFor('both reviews running', async () => (await page.locator('.graph .node-running').count()) === 2, 20);
  await waitFor('the run to succeed', async () => /success/.test(await page.textContent('#run-status')), 30);
  assert.ok(await notReloaded(page), 'the run page updated itself');
  const nodes = await page.locator('.graph .node').evaluateAll((els) => els.map((el) => {
    const box = el.getBoundingClientRect();
    return { id: el.querySelector('a').textContent.trim(), cls: el.className, x: Math.round(box.left), y: Math.round(box.top), text: el.innerText.replace(/\s+/g, ' ').trim() };
  }));
  const at = Object.fromEntries(nodes.map((n) => [n.id, n]));
  assert.deepEqual(nodes.map((n) => n.id), ['plan', 'security', 'performance', 'verdict']);
  assert.ok(nodes.every((n) => n.cls.includes('node-success')), JSON.stringify(nodes));
  // A column per depth: the reviews side by side after the plan, the verdict after both.
  assert.ok(at.plan.x < at.security.x && at.security.x === at.performance.x && at.security.y < at.performance.y, JSON.stringify(nodes));
  assert.ok(at.verdict.x > at.security.x, JSON.stringify(nodes));
  assert.match(at.verdict.text, /needs security, performance/);
  await shot(page, 'dashboard-run-graph.png');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'no sideways scrolling of the page at phone width');
  await shot(page, 'dashboard-run-graph-phone.png');
  await page.setViewportSize({ width: 1280, height: 800 });
  const journal = (await api('GET', `/api/runs/${run}/events`)).body;
  const kinds = journal.map((r) => `${r.event.type} ${r.event.stage ?? ''}`.trim());
  const started = (s) => kinds.indexOf(`attempt_started ${s}`);
  const ended = (s) => kinds.indexOf(`attempt_succeeded ${s}`);
  assert.ok(started('performance') < ended('security') && started('security') < ended('performance'), kinds.join('\n'));
});
