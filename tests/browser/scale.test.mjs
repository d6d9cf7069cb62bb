// The dashboard at a team's scale, in a real browser: thousands of runs in the journal (made
// by `loopwright bench --list-runs N --seed-only`), other runs finishing several a second, and
// pages left open on them. An open page must not fetch itself again for other runs' events;
// the list keeps its waiting row where it is and its first page at its size.
// LOOPWRIGHT_SCALE_RUNS sets how many runs are made first (default 3000).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { callApi, launchChromium, waitFor } from './support.mjs';

const root = path.resolve(import.meta.dirname, '../..');
const bin = process.env.LOOPWRIGHT_BIN || path.join(root, 'target/debug/loopwright');
const seeded = Number(process.env.LOOPWRIGHT_SCALE_RUNS || 3000);
const LOAD_SECONDS = 30;

let ws;
let daemon;
let base;
let token;
let browser;
let context;
const api = (method, route, body) => callApi(base, token, method, route, body);

function write(rel, text) {
  const file = path.join(ws, rel);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
}

before(async () => {
  ws = fs.mkdtempSync(path.join(os.tmpdir(), 'loopwright-scale-'));
  write('.loopwright/pipelines/gate.yml', fs.readFileSync(path.join(root, 'tests/fixtures/gate.yml'), 'utf8'));
  write('.loopwright/pipelines/quick.yml', 'name: quick\ndescription: One quick step\nversion: 1\nstages:\n'
    + '  - id: step\n    agent: shell\n    mode: plan\n    description: A quick step\n    run: echo done\n');
  write('.loopwright/agents/dev.md', '---\nname: dev\nrunner: command\ncommand: ["sh", "-c", "echo tried"]\n---\nYou try.\n');
  write('.loopwright/pipelines/stuck.yml', 'name: stuck\ndescription: A check that never passes\nversion: 1\nstages:\n'
    + '  - id: implement\n    agent: dev\n    mode: agent\n    description: Try\n    skill: closed-loop-execution\n'
    + '    closed_loop:\n      max_retries: 1\n    checks:\n      - name: floor\n        type: custom\n'
    + '        command: \'echo "coverage gate: total 50% is under the floor of 80%"; exit 1\'\n');
  execFileSync('git', ['init', '-q', '-b', 'main'], { cwd: ws });
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', 'add', '-A'], { cwd: ws });
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-qm', 'initial'], { cwd: ws });
  execFileSync(bin, ['bench', '--list-runs', String(seeded), '--seed-only'], { cwd: ws, stdio: 'ignore' });
  daemon = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--json', '--max-runs', '4'], { cwd: ws, stdio: ['ignore', 'pipe', 'inherit'] });
  const first = await new Promise((resolve, reject) => {
    readline.createInterface({ input: daemon.stdout }).once('line', resolve);
    daemon.once('exit', (code) => reject(new Error(`serve exited with ${code}`)));
  });
  const started = JSON.parse(first);
  base = `http://${started.addr}`;
  token = fs.readFileSync(path.join(ws, '.loopwright/state/serve.token'), 'utf8').trim();
  browser = await launchChromium();
  context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  await page.goto(started.url);
  await page.close();
});

after(async () => {
  await browser?.close();
  if (daemon && daemon.exitCode === null) {
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.once('exit', r));
  }
  fs.rmSync(ws, { recursive: true, force: true });
});

const status = async (run) => (await api('GET', `/api/runs/${run}`)).body.status;

/** A page that counts what it fetches after it loaded: (path, bytes) of each response. */
async function watched(route) {
  const page = await context.newPage();
  await page.goto(`${base}${route}`);
  await page.locator('#connection', { hasText: 'live' }).waitFor();
  const fetched = [];
  page.on('response', async (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith('/assets/') || u.pathname === '/favicon.ico') return;
    const body = await r.body().catch(() => Buffer.alloc(0));
    fetched.push({ path: u.pathname + u.search, bytes: body.length });
  });
  return { page, fetched };
}

/** The bytes `/live` sends a page while `during` runs (what every open page receives). */
async function liveBytes(during) {
  const feed = (await api('GET', '/api/runs?limit=1')).body;
  assert.ok(Array.isArray(feed));
  const controller = new AbortController();
  const res = await fetch(`${base}/live`, { headers: { Authorization: `Bearer ${token}` }, signal: controller.signal });
  let bytes = 0;
  const reading = (async () => {
    try { for await (const chunk of res.body) bytes += chunk.length; } catch { /* aborted */ }
  })();
  // The stream replays the journal from its start first: only what comes during the load counts.
  await new Promise((r) => setTimeout(r, 3000));
  const replayed = bytes;
  await during();
  controller.abort();
  await reading;
  return bytes - replayed;
}

test('open pages stay small while other runs finish several a second, and the waiting row stays first', async () => {
  // A run that waits for a person, and a dead letter: what the pages are about.
  const gate = (await api('POST', '/api/runs', { pipeline: 'gate', task: 'Ship the release', worktree: true })).body.run_id;
  await waitFor('the gate', async () => (await status(gate)) === 'waiting');
  const stuck = (await api('POST', '/api/runs', { pipeline: 'stuck' })).body.run_id;
  await waitFor('the dead letter', async () => (await status(stuck)) === 'failed', 60);
  const done = (await api('POST', '/api/runs', { pipeline: 'quick' })).body.run_id;
  await waitFor('a finished run', async () => (await status(done)) === 'success');

  const pages = {
    run: await watched(`/runs/${done}`),
    stats: await watched('/stats'),
    letters: await watched('/dead-letters'),
    list: await watched('/'),
  };
  const rowsBefore = await pages.list.page.locator('#runs-rows tr').evaluateAll((rows) => rows.map((r) => r.id));
  assert.equal(rowsBefore.length, 50);
  assert.equal(rowsBefore[0], `row-${gate}`, 'the run waiting for a person comes first');

  // Runs started and finished for 30 s, through the API, as a busy team's would.
  const started = [];
  const bytes = await liveBytes(async () => {
    // 4.5 a second, on a schedule.
    const from = Date.now();
    for (let i = 0; i < LOAD_SECONDS * 4.5; i += 1) {
      const due = from + (i * 1000) / 4.5 - Date.now();
      if (due > 0) await new Promise((r) => setTimeout(r, due));
      started.push((await api('POST', '/api/runs', { pipeline: 'quick' })).body.run_id);
    }
  });
  const finished = await waitFor('the runs to end', async () => {
    const rows = (await api('GET', `/api/runs?pipeline=quick&limit=${started.length + 10}`)).body;
    const ended = rows.filter((r) => started.includes(r.run_id) && r.status === 'success').length;
    return ended === started.length && ended;
  }, 120);
  assert.equal(finished, started.length);

  // No page fetched itself again; the list fetched no row (none of its runs changed) and
  // offers the new runs instead of inserting them.
  for (const [name, { fetched }] of Object.entries(pages)) {
    assert.deepEqual(fetched, [], `${name} fetched ${JSON.stringify(fetched.slice(0, 5))}`);
  }
  await pages.list.page.locator('#page-news', { hasText: `${started.length} new runs — show` }).waitFor();
  const rowsAfter = await pages.list.page.locator('#runs-rows tr').evaluateAll((rows) => rows.map((r) => r.id));
  assert.deepEqual(rowsAfter, rowsBefore, 'page 1 kept its rows, the waiting one where it was');
  assert.match(await pages.stats.page.innerText('#page-news'), /^\d+ runs ended since — show the new figures$/);
  // The dead letters are grouped: the check's own words, with their count.
  assert.match(await pages.letters.page.innerText('.letter-groups li'), /^×1 [\w-]+: coverage gate: total 50% is under the floor of 80%/);
  const waiting = (await fetch(`${base}/api/runs?status=waiting&limit=1`, { headers: { Authorization: `Bearer ${token}` } })).headers.get('x-total-count');
  assert.equal(await pages.run.page.innerText('#badge-count'), waiting);
  console.log(`# ${started.length} runs in ${LOAD_SECONDS} s (${(started.length / LOAD_SECONDS).toFixed(1)}/s) over ${seeded} seeded: `
    + `/live sent each open page ${(bytes / 1024).toFixed(1)} KB; pages fetched nothing else`);
  // What a page receives grows with the runs that change, not with their work: at 4 runs a
  // second for 30 s, at most 50 KB (SPEC's bound, as bytes per run).
  assert.ok(bytes / started.length <= (50 * 1024) / (4 * LOAD_SECONDS), `${bytes} bytes for ${started.length} runs`);
});
