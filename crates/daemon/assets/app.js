// loopwright dashboard: keeps a server-rendered page live. It follows /live (one small message
// per run whose status changed) and, on a run page, /api/runs/RUN/output (the stage in flight
// and the run's journal); a run page fetches itself again when its own run changes and swaps
// the part that changed, keeping open sections, typed text and focus; other pages update a
// row or a count. Buttons and the start form call the JSON API.
(() => {
  'use strict';
  const $ = (sel, root = document) => root.querySelector(sel);
  const body = document.body;
  const page = body.dataset.page;
  const runId = body.dataset.run || null;

  // Who answers: kept in this browser, sent as `by` with every answer.
  const who = $('#who');
  if (who) {
    who.value = localStorage.getItem('loopwright.who') || '';
    who.addEventListener('change', () => localStorage.setItem('loopwright.who', who.value.trim()));
  }
  // Signed in as a person, the daemon journals their name whatever `by` says.
  const by = () => body.dataset.person || (who && who.value.trim()) || 'dashboard';

  const notice = (text, isError) => {
    const n = $('#notice');
    n.textContent = text;
    n.classList.toggle('error', Boolean(isError));
  };

  async function api(method, path, payload) {
    const res = await fetch(path, {
      method,
      credentials: 'same-origin',
      // Every change is sent as JSON: the daemon refuses any other body (no form can act).
      headers: method === 'GET' ? {} : { 'Content-Type': 'application/json' },
      body: payload === undefined ? undefined : JSON.stringify(payload),
    });
    let data = null;
    try { data = await res.json(); } catch (_) { /* an empty answer */ }
    return { ok: res.ok, status: res.status, data };
  }
  const errorText = (r) => (r.data && r.data.error && r.data.error.message) || `HTTP ${r.status}`;

  // ---- Refreshing the page's live part -------------------------------------------------
  let timer = null;
  let busy = false;
  let again = false;
  const scheduleRefresh = () => { clearTimeout(timer); timer = setTimeout(refresh, 100); };

  function focusKey(el) {
    if (!el || el === body) return null;
    if (el.id) return `#${CSS.escape(el.id)}`;
    if (el.dataset && el.dataset.autoStop) return `[data-auto-stop="${CSS.escape(el.dataset.autoStop)}"]`;
    if (el.tagName === 'SUMMARY' && el.parentElement && el.parentElement.id) return `#${CSS.escape(el.parentElement.id)} > summary`;
    if (el.dataset && el.dataset.action) {
      return `[data-action="${el.dataset.action}"]` + (el.dataset.rollback ? `[data-rollback="${el.dataset.rollback}"]` : '');
    }
    return null;
  }

  function swapLive(doc) {
    const current = $('#live');
    const next = $('#live', doc);
    if (!current || !next) return;
    // Sections the reader opened or closed stay so.
    current.querySelectorAll('details[id]').forEach((d) => {
      const twin = next.querySelector(`#${CSS.escape(d.id)}`);
      if (twin) twin.open = d.open;
    });
    // What the reader typed stays (the answer form is kept whole).
    const form = $('#respond-form', current);
    const nextForm = $('#respond-form', next);
    if (form && nextForm) nextForm.replaceWith(form);
    current.querySelectorAll('form.keys-form[id]').forEach((f) => {
      const twin = next.querySelector(`#${CSS.escape(f.id)}`);
      if (twin) twin.replaceWith(f);
    });
    const comment = $('#answer-comment', current);
    const nextComment = $('#answer-comment', next);
    if (comment && nextComment) nextComment.value = comment.value;
    const key = current.contains(document.activeElement) ? focusKey(document.activeElement) : null;
    // A live screen follows its agent (its newest rows at the bottom), unless the reader
    // scrolled up in it: then it stays where they are.
    const scrolled = new Map();
    current.querySelectorAll('pre.terminal').forEach((t) => {
      const owner = t.closest('[id]');
      if (owner && t.scrollTop + t.clientHeight < t.scrollHeight - 4) scrolled.set(owner.id, t.scrollTop);
    });
    current.replaceWith(next);
    next.querySelectorAll('pre.terminal').forEach((t) => {
      const owner = t.closest('[id]');
      t.scrollTop = owner && scrolled.has(owner.id) ? scrolled.get(owner.id) : t.scrollHeight;
    });
    localTimes(next);
    if (key) { const again = $(key); if (again) again.focus(); }
  }

  // Times the page gives in UTC (`<time datetime>`) said in the reader's zone and words.
  function localTimes(root) {
    root.querySelectorAll('time[datetime]').forEach((t) => {
      const iso = t.getAttribute('datetime');
      const ms = Date.parse(iso);
      if (Number.isNaN(ms)) return;
      const d = new Date(ms);
      const clock = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
      const day = new Date().toDateString() === d.toDateString() ? '' : `${d.toLocaleDateString([], { month: 'short', day: 'numeric' })} `;
      const s = Math.round((Date.now() - ms) / 1000);
      const span = (n) => (n < 60 ? `${n} s` : n < 3600 ? `${Math.floor(n / 60)} min` : `${Math.floor(n / 3600)} h ${Math.floor((n % 3600) / 60)} min`);
      t.textContent = `${day}${clock} (${s >= 0 ? `${span(s)} ago` : `in ${span(-s)}`})`;
      t.title = iso;
    });
  }
  localTimes(document);
  // Clocks that run: a running run's working time, a wait going on. Said as the page's server
  // says durations ("1.2 s", "3m 05s", "1h 02m").
  const spoken = (ms) => {
    const s = Math.floor(ms / 1000);
    if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
    if (s < 60) return `${(ms / 1000).toFixed(1)} s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
    return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  };
  setInterval(() => document.querySelectorAll('[data-clock-from]').forEach((c) => {
    const from = Date.parse(c.dataset.clockFrom);
    if (!Number.isNaN(from)) c.textContent = spoken(Date.now() - from);
  }), 1000);
  // A live screen opens at its newest rows.
  document.querySelectorAll('pre.terminal').forEach((t) => { t.scrollTop = t.scrollHeight; });

  function swapBadge(doc) {
    const next = $('#badge-count', doc);
    if (next) setBadge(next.textContent);
  }

  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const res = await fetch(location.pathname + location.search, { credentials: 'same-origin', cache: 'no-store' });
      const doc = new DOMParser().parseFromString(await res.text(), 'text/html');
      swapBadge(doc);
      swapLive(doc);
      if (runId) {
        body.dataset.seq = doc.body.dataset.seq || body.dataset.seq;
        body.dataset.final = doc.body.dataset.final || '';
        body.dataset.inFlight = doc.body.dataset.inFlight || '';
        followOutput();
      }
    } catch (_) {
      // The connection indicator tells; the next event tries again.
    } finally {
      busy = false;
      if (again) { again = false; scheduleRefresh(); }
    }
  }

  // ---- Live: one small message per run whose status changed ----------------------------
  // `/live` (shared by every tab, see feed-worker.js) says `{run, status, started, needs}`
  // when a run's status changes; a run page follows its own run's journal through its output
  // stream. No page fetches itself again for another run's events: a row of this page is
  // fetched alone, anything else changes a count (the badge, "N new runs — show").
  const setBadge = (n) => {
    const badge = $('#badge');
    if (!badge) return;
    $('#badge-count').textContent = String(n);
    badge.classList.toggle('badge-none', Number(n) === 0);
    badge.setAttribute('aria-label', `${n} run(s) or loop(s) ${badge.dataset.verb}`);
  };
  const rowTimers = new Map();
  const rowOf = (run) => document.getElementById(`row-${run}`);
  async function updateRow(run) {
    rowTimers.delete(run);
    const res = await fetch(`/runs/${encodeURIComponent(run)}/row`, { credentials: 'same-origin', cache: 'no-store' });
    if (!res.ok) return;
    const waiting = res.headers.get('x-waiting-count');
    if (waiting !== null) setBadge(waiting);
    const holder = document.createElement('tbody');
    holder.innerHTML = (await res.text()).trim();
    const row = holder.querySelector('tr');
    const old = rowOf(run);
    if (!row || !old) return;
    localTimes(row);
    old.replaceWith(row);
  }
  // Changes this page does not show, counted: the page says how many and offers to show them.
  let unseen = 0;
  function offer(text) {
    const link = $('#page-news');
    if (!link) return;
    unseen += 1;
    link.hidden = false;
    $('a', link).textContent = text(unseen);
  }
  const finals = ['success', 'failed', 'cancelled', 'rejected', 'interrupted'];
  function onRun(change) {
    if (change.needs !== undefined) setBadge(change.needs);
    if (page === 'runs') {
      if (rowOf(change.run)) {
        if (!rowTimers.has(change.run)) rowTimers.set(change.run, setTimeout(() => updateRow(change.run), 150));
      } else if (change.started) {
        offer((n) => `${n} new run${n === 1 ? '' : 's'} — show`);
      } else if ($('.runs-table') && $('.runs-table').dataset.filtered === 'true') {
        offer((n) => `${n} run${n === 1 ? '' : 's'} changed — show`);
      }
    } else if (page === 'run') {
      if (change.run === runId && !output) scheduleRefresh();
    } else if (page === 'stats' && finals.includes(change.status)) {
      offer((n) => `${n} run${n === 1 ? '' : 's'} ended since — show the new figures`);
    } else if (page === 'dead-letters' && change.status === 'failed') {
      offer((n) => `${n} run${n === 1 ? '' : 's'} failed since — show`);
    } else if (page === 'workers') {
      offer((n) => `${n} run${n === 1 ? '' : 's'} changed — show`);
    }
  }
  // Events this tab missed before it joined the shared stream: its own page is read again
  // (a run page), or it offers to be.
  function onStale() {
    if (page === 'run') scheduleRefresh();
    else offer(() => 'Changed since this page was shown — show');
  }

  // ---- Live events ---------------------------------------------------------------------
  const connection = $('#connection');
  const setConnection = (state, text) => { connection.dataset.state = state; connection.textContent = text; };
  function onMessage(data) {
    let change = null;
    try { change = JSON.parse(data); } catch (_) { return; }
    if (change && change.run) onRun(change);
  }
  function onCount(data) {
    try { const count = JSON.parse(data); if (count.needs !== undefined) setBadge(count.needs); } catch (_) { /* not JSON */ }
  }
  function connect() {
    const live = (state) => setConnection(state, state === 'live' ? '● live' : '○ reconnecting…');
    if (window.SharedWorker) {
      // One stream for all tabs (see feed-worker.js).
      const worker = new SharedWorker('/assets/feed-worker.js', { name: 'loopwright-live' });
      worker.port.onmessage = (m) => {
        if (m.data.type === 'state') live(m.data.state);
        else if (m.data.type === 'run') onMessage(m.data.data);
        else if (m.data.type === 'count') onCount(m.data.data);
        else if (m.data.type === 'stale') onStale();
      };
      worker.port.start();
      worker.port.postMessage({ type: 'hello', after: lastFeed() });
      window.addEventListener('pagehide', () => worker.port.postMessage({ type: 'bye' }));
      return;
    }
    const source = new EventSource('/live?after=' + encodeURIComponent(lastFeed()));
    source.onopen = () => live('live');
    source.onerror = () => live('offline');
    source.addEventListener('run', (e) => onMessage(e.data));
    source.addEventListener('count', (e) => onCount(e.data));
  }
  // Only what happens after the page was rendered matters: start at the feed position it shows.
  const lastFeed = () => body.dataset.feed || '0';

  // ---- The output of the stage in flight ----------------------------------------------
  let output = null;
  function followOutput() {
    const pre = $('#live-output');
    if (!pre || !runId) return;
    const section = pre.closest('section');
    if (body.dataset.final === 'true') {
      section.hidden = true;
      if (output) { output.close(); output = null; }
      return;
    }
    // A run a worker drives prints on that machine: its journal is followed, not its output.
    section.hidden = body.dataset.remote === 'true';
    // Between attempts (at a gate, waiting to retry) the last output stays, said to be over.
    const label = $('#output-which');
    if (!body.dataset.inFlight && label.textContent) label.textContent = label.textContent.replace(/^\((.*?)(, ended)?\)$/, '($1, ended)');
    if (output) return;
    // From the journal position the page shows: what happened since is told at once.
    output = new EventSource(`/api/runs/${encodeURIComponent(runId)}/output?after=${encodeURIComponent(body.dataset.seq || '0')}`);
    let which = '';
    output.addEventListener('output', (e) => {
      const chunk = JSON.parse(e.data);
      const name = `${chunk.stage}, attempt ${chunk.attempt}`;
      if (name !== which) {
        which = name;
        $('#output-which').textContent = `(${name})`;
        if (chunk.offset === 0 && chunk.stream === 'stdout') pre.textContent = '';
      }
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(document.createTextNode(chunk.stream === 'stderr' ? chunk.text.replace(/^/gm, '! ') : chunk.text));
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    });
    // This run's journal grew: its page is read again.
    output.addEventListener('journal', scheduleRefresh);
    output.addEventListener('end', () => { output.close(); output = null; scheduleRefresh(); });
  }

  // ---- Actions -------------------------------------------------------------------------
  // Typing guidance for the next attempt chooses "Fix with this guidance".
  document.addEventListener('input', (e) => {
    if (e.target.matches('#respond-form textarea[name="text"]') && e.target.value.trim()) {
      const fix = $('#respond-form input[value="fix"]');
      if (fix) fix.checked = true;
    }
  });
  document.addEventListener('click', async (e) => {
    const button = e.target.closest('button[data-action]');
    if (!button || !runId) return;
    const action = button.dataset.action;
    const rollback = button.dataset.rollback === 'true';
    const base = `/api/runs/${encodeURIComponent(runId)}`;
    let payload;
    if (action === 'approve' || action === 'reject') {
      const comment = $('#answer-comment');
      payload = { by: by(), comment: (comment && comment.value.trim()) || null };
      if (action === 'reject') payload.rollback = rollback;
    } else if (action === 'cancel') {
      payload = { by: by(), rollback };
    } else if (action === 'resume') {
      payload = { by: by() };
    } else if (action === 'rerun' || action === 'rerun-from') {
      const from = action === 'rerun-from' ? $('#rerun-from').value : null;
      button.disabled = true;
      notice(from ? `retrying from ${from}…` : 'running again…');
      const r = await api('POST', `${base}/rerun`, { by: by(), from });
      button.disabled = false;
      if (r.ok) { window.location.assign(`/runs/${encodeURIComponent(r.data.run_id)}`); return; }
      notice(`${action}: ${errorText(r)}`, true);
      return;
    }
    button.disabled = true;
    notice(`${action}…`);
    const r = await api('POST', `${base}/${action}`, payload);
    button.disabled = false;
    notice(r.ok ? `${action}: done (${by()})` : `${action}: ${errorText(r)}`, !r.ok);
    scheduleRefresh();
  });

  document.addEventListener('submit', async (e) => {
    const form = e.target;
    if (form.id === 'respond-form' && runId) {
      e.preventDefault();
      const data = new FormData(form);
      const text = String(data.get('text') || '').trim();
      // Guidance written is guidance meant: with Retry still selected it is sent as a fix.
      const answer = data.get('answer') === 'retry' && text ? 'fix' : data.get('answer');
      if (answer === 'fix' && !text) { notice('fix: write the guidance for the next attempt', true); return; }
      const r = await api('POST', `/api/runs/${encodeURIComponent(runId)}/respond`, { answer, text: answer === 'fix' ? text : null, by: by() });
      notice(r.ok ? `answered ${answer} (${by()})` : `respond: ${errorText(r)}`, !r.ok);
      if (r.ok) form.reset();
      scheduleRefresh();
    } else if (form.id === 'start-form') {
      e.preventDefault();
      const data = new FormData(form);
      const errors = $('#start-errors');
      errors.textContent = '';
      const pairs = (name) => {
        const out = {};
        const bad = [];
        String(data.get(name) || '').split('\n').map((l) => l.trim()).filter(Boolean).forEach((line) => {
          const at = line.indexOf('=');
          if (at < 1) bad.push(line); else out[line.slice(0, at).trim()] = line.slice(at + 1);
        });
        return { out, bad };
      };
      const vars = pairs('vars');
      const inputs = pairs('inputs');
      const bad = vars.bad.map((l) => `Variables: \`${l}\` is not KEY=VALUE`).concat(inputs.bad.map((l) => `Inputs: \`${l}\` is not KEY=VALUE`));
      if (bad.length) { showDiagnostics(errors, 'The form has mistakes', bad); return; }
      const payload = {
        pipeline: data.get('pipeline'),
        task: String(data.get('task') || '').trim() || null,
        vars: vars.out,
        inputs: inputs.out,
        approve_all: data.get('approve_all') === 'on',
        worktree: data.get('worktree') === 'on',
      };
      const button = form.querySelector('button[type="submit"]');
      button.disabled = true;
      const r = await api('POST', '/api/runs', payload);
      button.disabled = false;
      if (r.ok) {
        location.assign(`/runs/${encodeURIComponent(r.data.run_id)}`);
        return;
      }
      const diags = ((r.data && r.data.error && r.data.error.diagnostics) || []).map((d) => {
        const pos = d.position ? `:${d.position.line}:${d.position.column}` : '';
        const where = d.file ? `${d.file}${pos}: ` : '';
        const field = d.field ? `${d.stage ? `stage \`${d.stage}\`, ` : ''}field \`${d.field}\`: ` : '';
        return `${where}${field}${d.message || JSON.stringify(d)}`;
      });
      showDiagnostics(errors, errorText(r), diags);
    }
  });

  function showDiagnostics(box, title, lines) {
    box.textContent = '';
    const p = document.createElement('p');
    p.textContent = title;
    box.append(p);
    if (lines.length) {
      const ul = document.createElement('ul');
      lines.forEach((l) => { const li = document.createElement('li'); li.textContent = l; ul.append(li); });
      box.append(ul);
    }
  }

  // ---- Auto loops --------------------------------------------------------------------
  // The page is fetched again every second while it is open: the screens and the clocks of
  // the loops change without journal events. Quota countdowns tick in between.
  if (page === 'auto') {
    setInterval(scheduleRefresh, 1000);
    const left = (iso) => {
      const s = Math.max(0, Math.round((Date.parse(iso) - Date.now()) / 1000));
      return s >= 3600 ? `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`
        : s >= 60 ? `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s` : `${s} s`;
    };
    setInterval(() => document.querySelectorAll('[data-resets-at]').forEach((el) => { el.textContent = left(el.dataset.resetsAt); }), 1000);
  }
  document.addEventListener('click', async (e) => {
    const button = e.target.closest('button[data-auto-stop]');
    if (!button) return;
    const session = button.dataset.autoStop;
    button.disabled = true;
    notice(`stopping ${session}…`);
    const r = await api('DELETE', `/api/sessions/${encodeURIComponent(session)}/task-auto`);
    notice(r.ok ? `${session}: stop asked (.auto-stop, user_stop); the agent finishes its step` : `stop: ${errorText(r)}`, !r.ok);
    scheduleRefresh();
  });
  document.addEventListener('click', async (e) => {
    const button = e.target.closest('button[data-approve-checks]');
    if (!button) return;
    const session = button.dataset.approveChecks;
    button.disabled = true;
    // The list this page showed: if the agent added another meanwhile, nothing is approved.
    const box = button.closest('.needs');
    const checks = box ? [...box.querySelectorAll('.added-checks code')].map((c) => c.textContent) : [];
    const r = await api('POST', `/api/sessions/${encodeURIComponent(session)}/task-auto/checks`, { checks, by: by() });
    notice(r.ok ? `${session}: checks approved (${by()}); they run at the next look` : `approve: ${errorText(r)}`, !r.ok);
    scheduleRefresh();
  });
  // A menu's choice, by its number alone; a yes to what the policy refused is sent only with
  // the command the person typed to confirm it (the server checks it names the command).
  document.addEventListener('click', async (e) => {
    const button = e.target.closest('button[data-choice]');
    if (!button) return;
    const session = button.dataset.session;
    const send = (confirm) => api('POST', `/api/sessions/${encodeURIComponent(session)}/task-auto/keys`,
      { text: button.dataset.choice, confirm, by: by() });
    let r = await send(null);
    if (!r.ok && r.status === 409 && /confirm by repeating it/.test(errorText(r))) {
      const typed = window.prompt(`${errorText(r)}\n\nType the command to approve it:`);
      if (typed === null) { notice(`${session}: not answered`); return; }
      r = await send(typed);
    }
    notice(r.ok ? `${session}: answered ${button.textContent} (${by()})` : `answer: ${errorText(r)}`, !r.ok);
    scheduleRefresh();
  });
  document.addEventListener('submit', async (e) => {
    const form = e.target;
    if (!form.classList.contains('keys-form')) return;
    e.preventDefault();
    const data = new FormData(form);
    const session = form.dataset.session;
    const r = await api('POST', `/api/sessions/${encodeURIComponent(session)}/task-auto/keys`,
      { text: String(data.get('text') || ''), enter: data.get('enter') === 'on', by: by() });
    notice(r.ok ? `${session}: typed (${by()})` : `type: ${errorText(r)}`, !r.ok);
    scheduleRefresh();
  });
  document.addEventListener('submit', async (e) => {
    const form = e.target;
    if (form.id !== 'auto-form') return;
    e.preventDefault();
    const data = new FormData(form);
    const errors = $('#auto-errors');
    errors.textContent = '';
    const taskDir = String(data.get('taskDir') || '').trim();
    if (!taskDir) { showDiagnostics(errors, 'Name the task module (a directory with .target.md)', []); return; }
    const base = taskDir.replace(/\/+$/, '').split('/').pop() || 'auto';
    const session = String(data.get('session') || '').trim() || base.replace(/[^A-Za-z0-9_.-]/g, '-').replace(/^\.+/, '') || 'auto';
    const payload = { taskDir, agent: data.get('agent') || null };
    const max = Number(data.get('maxIterations'));
    const timeout = Number(data.get('timeoutMinutes'));
    if (data.get('maxIterations') !== '') payload.maxIterations = max;
    if (data.get('timeoutMinutes') !== '') payload.timeoutMinutes = timeout;
    const button = form.querySelector('button[type="submit"]');
    button.disabled = true;
    const r = await api('POST', `/api/sessions/${encodeURIComponent(session)}/task-auto`, payload);
    button.disabled = false;
    if (r.ok) {
      notice(`${session}: started (${r.data.agent} on ${taskDir})`);
      form.reset();
      scheduleRefresh();
      return;
    }
    showDiagnostics(errors, errorText(r), []);
  });

  connect();
  followOutput();
})();
