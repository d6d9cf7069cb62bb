// A stateful GitHub-compatible server for loopwright's forge tests: one repository's issues,
// comments, pull requests, reviews, check runs, statuses, Actions job logs, collaborators'
// permissions, App installation tokens and rate limits, with a real git repository behind it
// served over smart HTTP (`git http-backend`, pushes need a token).
//
// Every request it receives and every answer it gives is checked against GitHub's published
// OpenAPI description (openapi.mjs); what does not conform is kept in `violations` (read at
// `GET /__test/state`) and answered 500, so a test sees it. Objects are GitHub's own examples
// from that description with the state's values written over them.
//
// Run alone: `node github-server.mjs` prints `listening URL` and a JSON line of its settings;
// the tests drive it through `/__test/*`.
import http from 'node:http';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, execFileSync } from 'node:child_process';
import { OpenApi } from './openapi.mjs';
import { payload, deliver } from './webhooks.mjs';

const api = new OpenApi();

export class GitHubServer {
  constructor({ owner = 'acme', repo = 'shop', appPublicKey = null } = {}) {
    this.owner = owner;
    this.repo = repo;
    this.full = `${owner}/${repo}`;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lw-github-'));
    this.gitDir = path.join(this.dir, owner, `${repo}.git`);
    git(['init', '--quiet', '--bare', '-b', 'main', this.gitDir]);
    git(['config', 'http.receivepack', 'true'], this.gitDir);
    this.users = new Map();
    this.tokens = new Map();
    this.permissions = new Map();
    this.app = { id: 4242, slug: 'loopwright-test', installationId: 99, publicKey: appPublicKey };
    this.issues = new Map();
    this.issueEvents = [];
    this.comments = [];
    this.pulls = new Map();
    this.reviews = [];
    this.checkRuns = [];
    this.statuses = [];
    this.jobLogs = new Map();
    this.protection = new Map();
    this.nextId = 1000;
    this.nextNumber = 1;
    this.limited = [];
    this.pauses = [];
    this.violations = [];
    this.requests = [];
    this.addUser('loopwright-bot', 'admin');
    this.addUser('github-actions[bot]', 'none', 'Bot');
  }

  addUser(login, permission, type = 'User') {
    if (!this.users.has(login)) this.users.set(login, { login, id: this.nextId++, type });
    if (permission) this.permissions.set(login, permission);
    return this.users.get(login);
  }

  async start(port = 0) {
    this.server = http.createServer((req, res) => this.handle(req, res).catch((e) => {
      this.violations.push(`server error on ${req.method} ${req.url}: ${e.stack}`);
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ message: String(e) }));
    }));
    await new Promise((r) => this.server.listen(port, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
    return this.url;
  }

  async stop() {
    await new Promise((r) => this.server.close(r));
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  // ---- the repository's git side --------------------------------------------------------

  /** A commit on `branch` (made in the bare repository) with `files`; its sha. */
  commit(branch, files, message = 'change') {
    const work = fs.mkdtempSync(path.join(this.dir, 'work-'));
    const env = { ...process.env, GIT_DIR: this.gitDir, GIT_WORK_TREE: work, GIT_INDEX_FILE: path.join(work, '.index') };
    const run = (args) => execFileSync('git', args, { env, encoding: 'utf8' }).trim();
    const parent = this.sha(branch);
    if (parent) run(['read-tree', parent]);
    for (const [name, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(work, name)), { recursive: true });
      fs.writeFileSync(path.join(work, name), text);
      run(['update-index', '--add', name]);
    }
    const tree = run(['write-tree']);
    const args = ['-c', 'user.name=Test', '-c', 'user.email=test@example.com', 'commit-tree', tree, '-m', message];
    if (parent) args.push('-p', parent);
    const sha = run(args);
    run(['update-ref', `refs/heads/${branch}`, sha]);
    fs.rmSync(work, { recursive: true, force: true });
    return sha;
  }

  sha(branch) {
    try {
      return execFileSync('git', ['rev-parse', '--verify', '--quiet', `refs/heads/${branch}`], { cwd: this.gitDir, encoding: 'utf8' }).trim();
    } catch {
      return null;
    }
  }

  /** The clone URL loopwright pushes to. */
  cloneUrl() {
    return `${this.url}/git/${this.full}.git`;
  }

  // ---- HTTP -----------------------------------------------------------------------------

  async handle(req, res) {
    const url = new URL(req.url, this.url);
    const body = await readBody(req);
    if (url.pathname.startsWith('/__test/')) return this.control(req, res, url, body);
    if (url.pathname.startsWith('/git/')) return this.gitHttp(req, res, url, body);
    if (url.pathname.startsWith('/__blobs/')) {
      const text = this.jobLogs.get(Number(url.pathname.split('/').pop()));
      res.writeHead(text === undefined ? 404 : 200, { 'content-type': 'text/plain' });
      return res.end(text ?? 'gone');
    }
    const entry = { method: req.method, path: url.pathname + url.search, status: 0, auth: authKind(req) };
    this.requests.push(entry);
    const send = (status, json, headers = {}) => {
      entry.status = status;
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...this.rateHeaders(), ...headers });
      res.end(json === undefined ? '' : JSON.stringify(json));
    };
    if (url.pathname === '/graphql') return this.graphql(req, body, send);
    const op = api.find(req.method, url.pathname);
    if (!op) {
      this.violations.push(`${req.method} ${url.pathname}: no such operation in GitHub's API`);
      return send(404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' });
    }
    let json;
    if (body.length) {
      try {
        json = JSON.parse(body.toString('utf8'));
      } catch {
        this.violations.push(`${req.method} ${url.pathname}: a body that is not JSON`);
        return send(400, { message: 'Problems parsing JSON' });
      }
    }
    const problems = [...api.checkRequest(op, json), ...api.checkQuery(op, url.searchParams)];
    if (problems.length) {
      this.violations.push(...problems.map((p) => `request ${req.method} ${url.pathname}: ${p}`));
      return send(422, { message: 'Validation Failed', documentation_url: 'https://docs.github.com/rest' });
    }
    if (this.limited.length && !url.pathname.includes('/access_tokens')) {
      const limit = this.limited.shift();
      entry.limited = true;
      const status = limit.status || 403;
      return send(status, { message: 'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.', documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api' }, { 'retry-after': String(limit.retryAfter) });
    }
    const who = this.authenticate(req, op);
    if (who.error) return this.answer(op, send, 401, { message: who.error, documentation_url: 'https://docs.github.com/rest' });
    // A test's pause around one operation (`before` it is done, or `after`, before its answer
    // is sent): the window a crash is tried in.
    const pause = this.pauses.findIndex((x) => x.method === req.method && x.path === url.pathname);
    const held = pause >= 0 ? this.pauses.splice(pause, 1)[0] : null;
    if (held?.when === 'before') await sleep(held.ms);
    const [status, out, headers] = this.route(op, req.method, url, json, who);
    if (held?.when === 'after') {
      entry.held = true;
      await sleep(held.ms);
    }
    if (req.method === 'GET' && status === 200) {
      const etag = `W/"${crypto.createHash('sha1').update(JSON.stringify(out)).digest('hex')}"`;
      if (req.headers['if-none-match'] === etag) {
        entry.status = 304;
        entry.notModified = true;
        res.writeHead(304, { etag, ...this.rateHeaders() });
        return res.end();
      }
      return this.answer(op, send, status, out, { etag, ...headers });
    }
    return this.answer(op, send, status, out, headers);
  }

  answer(op, send, status, out, headers = {}) {
    const problems = status === 302 ? [] : api.checkResponse(op, status, out);
    if (problems.length) {
      this.violations.push(...problems.map((p) => `response: ${p}`));
      return send(500, { message: 'the test server answered outside GitHub API description', problems });
    }
    return send(status, out, headers);
  }

  rateHeaders() {
    const used = this.requests.filter((r) => !r.notModified).length;
    return {
      'x-ratelimit-limit': '5000',
      'x-ratelimit-remaining': String(Math.max(0, 5000 - used)),
      'x-ratelimit-used': String(used),
      'x-ratelimit-reset': String(Math.floor(Date.now() / 1000) + 3600),
      'x-ratelimit-resource': 'core',
    };
  }

  /** Who sends the request: `{ login }`, `{ app: true }` (its JWT) or `{ error }`. */
  authenticate(req, op) {
    const header = req.headers.authorization || '';
    const token = header.replace(/^(Bearer|token) /i, '');
    if (op.template === '/app' || op.template === '/app/installations/{installation_id}/access_tokens') {
      return this.verifyJwt(token) ? { app: true } : { error: 'A JSON web token could not be decoded' };
    }
    const login = this.tokens.get(token);
    if (!login) return { error: 'Bad credentials' };
    return { login };
  }

  verifyJwt(token) {
    if (!this.app.publicKey) return false;
    const [h, c, s] = token.split('.');
    if (!s) return false;
    const ok = crypto.verify('RSA-SHA256', Buffer.from(`${h}.${c}`), this.app.publicKey, Buffer.from(s, 'base64url'));
    if (!ok) return false;
    const claims = JSON.parse(Buffer.from(c, 'base64url').toString());
    const header = JSON.parse(Buffer.from(h, 'base64url').toString());
    const now = Math.floor(Date.now() / 1000);
    return header.alg === 'RS256' && String(claims.iss) === String(this.app.id) && claims.iat <= now && claims.exp > now && claims.exp - claims.iat <= 600;
  }

  // ---- the operations -------------------------------------------------------------------

  route(op, method, url, json, who) {
    const p = op.params;
    const key = `${method} ${op.template}`;
    if (p.owner !== undefined && `${p.owner}/${p.repo}`.toLowerCase() !== this.full.toLowerCase()) {
      return [404, notFound()];
    }
    switch (key) {
      case 'GET /user':
        return [200, this.privateUser(who.login)];
      case 'GET /app':
        return [200, this.integration()];
      case 'POST /app/installations/{installation_id}/access_tokens': {
        if (Number(p.installation_id) !== this.app.installationId) return [404, notFound()];
        const token = `ghs_${crypto.randomBytes(12).toString('hex')}`;
        const bot = `${this.app.slug}[bot]`;
        this.addUser(bot, 'write', 'Bot');
        this.tokens.set(token, bot);
        const out = api.example('installation-token');
        out.token = token;
        out.expires_at = new Date(Date.now() + 3600e3).toISOString().replace(/\.\d+Z$/, 'Z');
        delete out.repositories;
        return [201, out];
      }
      case 'GET /repos/{owner}/{repo}': {
        const out = api.example('full-repository');
        Object.assign(out, { name: this.repo, full_name: this.full, owner: this.simpleUser(this.owner), clone_url: this.cloneUrl(), default_branch: 'main', private: true, visibility: 'private', has_discussions: false });
        return [200, out];
      }
      case 'GET /repos/{owner}/{repo}/collaborators/{username}/permission': {
        const user = this.users.get(p.username);
        if (!user) return [404, notFound()];
        const role = this.permissions.get(p.username) || 'none';
        const legacy = { admin: 'admin', maintain: 'write', write: 'write', triage: 'read', read: 'read', none: 'none' }[role];
        return [200, { permission: legacy, role_name: role, user: this.collaborator(user, role) }];
      }
      case 'GET /repos/{owner}/{repo}/issues/{issue_number}': {
        const issue = this.issues.get(Number(p.issue_number));
        if (issue) return [200, this.issueJson(issue)];
        // Every pull request is an issue too, with its `pull_request` links.
        const pull = this.pulls.get(Number(p.issue_number));
        return pull ? [200, this.pullIssueJson(pull)] : [404, notFound()];
      }
      case 'GET /repos/{owner}/{repo}/issues/{issue_number}/comments': {
        const n = Number(p.issue_number);
        if (!this.issues.has(n) && !this.pulls.has(n)) return [404, notFound()];
        return this.page(url, this.comments.filter((c) => c.issue === n).map((c) => this.commentJson(c)));
      }
      case 'POST /repos/{owner}/{repo}/issues/{issue_number}/comments': {
        const n = Number(p.issue_number);
        if (!this.issues.has(n) && !this.pulls.has(n)) return [404, notFound()];
        const now = isoNow();
        const c = { id: this.nextId++, issue: n, body: json.body, user: who.login, created_at: now, updated_at: now };
        this.comments.push(c);
        return [201, this.commentJson(c)];
      }
      case 'GET /repos/{owner}/{repo}/issues/comments': {
        let all = [...this.comments];
        if (url.searchParams.get('direction') === 'desc') all.reverse();
        return this.page(url, all.map((c) => this.commentJson(c)));
      }
      case 'GET /repos/{owner}/{repo}/issues/events':
        return this.page(url, [...this.issueEvents].reverse().map((e) => this.issueEventJson(e)));
      case 'PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}': {
        const c = this.comments.find((x) => x.id === Number(p.comment_id));
        if (!c) return [404, notFound()];
        if (c.user !== who.login) return [403, forbidden()];
        c.body = json.body;
        c.updated_at = isoNow();
        return [200, this.commentJson(c)];
      }
      case 'GET /repos/{owner}/{repo}/pulls': {
        let pulls = [...this.pulls.values()];
        const state = url.searchParams.get('state') || 'open';
        if (state !== 'all') pulls = pulls.filter((x) => x.state === state);
        const head = url.searchParams.get('head');
        if (head) {
          const [owner, ref] = head.split(':');
          pulls = pulls.filter((x) => x.headRef === ref && x.headRepo.split('/')[0] === owner);
        }
        return this.page(url, pulls.reverse().map((x) => this.pullJson(x, true)));
      }
      case 'POST /repos/{owner}/{repo}/pulls': {
        const sha = this.sha(json.head);
        if (!sha) return [422, validationFailed('head', 'invalid')];
        if (!this.sha(json.base)) return [422, validationFailed('base', 'invalid')];
        if ([...this.pulls.values()].some((x) => x.state === 'open' && x.headRef === json.head && x.headRepo === this.full)) {
          return [422, validationFailed('PullRequest', 'custom', `A pull request already exists for ${this.owner}:${json.head}.`)];
        }
        const n = this.nextNumber++;
        const pull = {
          number: n, id: this.nextId++, title: json.title, body: json.body ?? null, headRef: json.head, headRepo: this.full,
          base: json.base, user: who.login, draft: !!json.draft, state: 'open', merged: false, mergedAt: null,
          created_at: isoNow(), updated_at: isoNow(),
        };
        this.pulls.set(n, pull);
        return [201, this.pullJson(pull)];
      }
      case 'GET /repos/{owner}/{repo}/pulls/{pull_number}': {
        const pull = this.pulls.get(Number(p.pull_number));
        return pull ? [200, this.pullJson(pull)] : [404, notFound()];
      }
      case 'PATCH /repos/{owner}/{repo}/pulls/{pull_number}': {
        const pull = this.pulls.get(Number(p.pull_number));
        if (!pull) return [404, notFound()];
        for (const k of ['title', 'body', 'state']) if (json[k] !== undefined) pull[k] = json[k];
        pull.updated_at = isoNow();
        return [200, this.pullJson(pull)];
      }
      case 'GET /repos/{owner}/{repo}/pulls/{pull_number}/reviews': {
        const n = Number(p.pull_number);
        if (!this.pulls.has(n)) return [404, notFound()];
        return this.page(url, this.reviews.filter((r) => r.pull === n).map((r) => this.reviewJson(r)));
      }
      case 'PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge': {
        const pull = this.pulls.get(Number(p.pull_number));
        if (!pull) return [404, notFound()];
        if (pull.state !== 'open') return [405, { message: 'Pull Request is not mergeable', documentation_url: 'https://docs.github.com/rest' }];
        const head = this.sha(pull.headRef);
        if (json?.sha && json.sha !== head) return [409, { message: 'Head branch was modified. Review and try the merge again.', documentation_url: 'https://docs.github.com/rest' }];
        // What protects the base is enforced as GitHub enforces it.
        const unmet = this.unmetProtection(pull, head);
        if (unmet) return [405, { message: unmet, documentation_url: 'https://docs.github.com/rest' }];
        const merged = this.mergeInto(pull, head, json?.merge_method || 'merge');
        pull.state = 'closed';
        pull.merged = true;
        pull.mergedAt = isoNow();
        pull.mergeMethod = json?.merge_method || 'merge';
        pull.mergedHead = json?.sha ?? null;
        return [200, { sha: merged, merged: true, message: 'Pull Request successfully merged' }];
      }
      case 'GET /repos/{owner}/{repo}/commits/{ref}/check-runs': {
        let runs = this.checkRuns.filter((r) => r.head_sha === p.ref);
        const name = url.searchParams.get('check_name');
        if (name) runs = runs.filter((r) => r.name === name);
        return [200, { total_count: runs.length, check_runs: runs.map((r) => this.checkRunJson(r)) }];
      }
      case 'GET /repos/{owner}/{repo}/check-runs/{check_run_id}': {
        const run = this.checkRuns.find((r) => r.id === Number(p.check_run_id));
        return run ? [200, this.checkRunJson(run)] : [404, notFound()];
      }
      case 'POST /repos/{owner}/{repo}/check-runs': {
        if (!who.login.endsWith('[bot]')) return [403, forbidden('You must authenticate via a GitHub App.')];
        const run = { id: this.nextId++, app: this.app.slug, ...json, output: json.output || {} };
        this.checkRuns.push(run);
        return [201, this.checkRunJson(run)];
      }
      case 'PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}': {
        const run = this.checkRuns.find((r) => r.id === Number(p.check_run_id));
        if (!run) return [404, notFound()];
        if (run.app !== this.app.slug) return [403, forbidden()];
        Object.assign(run, json);
        return [200, this.checkRunJson(run)];
      }
      case 'GET /repos/{owner}/{repo}/commits/{ref}/status': {
        const statuses = latestStatuses(this.statuses.filter((s) => s.sha === p.ref));
        const state = statuses.some((s) => s.state === 'failure' || s.state === 'error') ? 'failure'
          : statuses.length && statuses.every((s) => s.state === 'success') ? 'success' : 'pending';
        const out = api.example('combined-commit-status');
        Object.assign(out, { state, sha: p.ref, total_count: statuses.length, statuses: statuses.map((s) => this.statusJson(s)), repository: this.minimalRepo() });
        return [200, out];
      }
      case 'POST /repos/{owner}/{repo}/statuses/{sha}': {
        const s = { id: this.nextId++, sha: p.sha, creator: who.login, created_at: isoNow(), ...json };
        this.statuses.push(s);
        return [201, this.statusJson(s)];
      }
      case 'GET /repos/{owner}/{repo}/actions/jobs/{job_id}/logs': {
        const id = Number(p.job_id);
        if (!this.jobLogs.has(id)) return [404, notFound()];
        return [302, undefined, { location: `${this.url}/__blobs/job/${id}` }];
      }
      case 'GET /repos/{owner}/{repo}/branches/{branch}/protection': {
        const rule = this.protection.get(p.branch);
        if (!rule) return [404, { message: 'Branch not protected', documentation_url: 'https://docs.github.com/rest' }];
        const out = api.example('branch-protection');
        out.required_status_checks.contexts = rule.contexts;
        out.required_status_checks.checks = rule.contexts.map((c) => ({ context: c, app_id: null }));
        if (!rule.reviews) delete out.required_pull_request_reviews;
        // GitHub's own example lists teams and apps its schema does not admit: they are left out.
        delete out.restrictions;
        if (rule.reviews) for (const k of ['dismissal_restrictions', 'bypass_pull_request_allowances']) delete out.required_pull_request_reviews[k];
        return [200, out];
      }
      default:
        this.violations.push(`${key}: described by GitHub, not kept by the test server`);
        return [404, notFound()];
    }
  }

  graphql(req, body, send) {
    const who = this.tokens.get((req.headers.authorization || '').replace(/^(Bearer|token) /i, ''));
    if (!who) return send(401, { message: 'Bad credentials' });
    const q = JSON.parse(body.toString('utf8'));
    if (/enablePullRequestAutoMerge\(input: \{pullRequestId: \$id, expectedHeadOid: \$head, mergeMethod: \$method\}\)/.test(q.query)) {
      const target = [...this.pulls.values()].find((x) => nodeId('PR', x.id) === q.variables?.id);
      if (!target || !['MERGE', 'SQUASH', 'REBASE'].includes(q.variables?.method)) {
        this.violations.push(`graphql: not an enablePullRequestAutoMerge of a known pull request: ${body}`);
        return send(200, { errors: [{ message: 'Could not resolve to a node' }] });
      }
      if (q.variables.head !== this.sha(target.headRef)) return send(200, { errors: [{ message: 'Head sha didn\'t match expected head sha' }] });
      target.autoMerge = { by: who, method: q.variables.method.toLowerCase(), head: q.variables.head, enabledAt: isoNow() };
      return send(200, { data: { enablePullRequestAutoMerge: { pullRequest: { autoMergeRequest: { enabledAt: target.autoMerge.enabledAt } } } } });
    }
    const m = /markPullRequestReadyForReview\(input: \{pullRequestId: \$id\}\)/.test(q.query);
    const pull = [...this.pulls.values()].find((x) => nodeId('PR', x.id) === q.variables?.id);
    if (!m || !pull) {
      this.violations.push(`graphql: not a markPullRequestReadyForReview of a known pull request: ${body}`);
      return send(200, { errors: [{ message: 'Could not resolve to a node' }] });
    }
    pull.draft = false;
    return send(200, { data: { markPullRequestReadyForReview: { pullRequest: { isDraft: false } } } });
  }

  mergeInto(pull, head, method) {
    const base = this.sha(pull.base);
    const tree = execFileSync('git', ['rev-parse', `${head}^{tree}`], { cwd: this.gitDir, encoding: 'utf8' }).trim();
    const parents = method === 'merge' ? ['-p', base, '-p', head] : ['-p', base];
    const sha = execFileSync('git', ['-c', 'user.name=GitHub', '-c', 'user.email=noreply@github.com', 'commit-tree', tree, ...parents, '-m', `${pull.title} (#${pull.number})`], { cwd: this.gitDir, encoding: 'utf8' }).trim();
    execFileSync('git', ['update-ref', `refs/heads/${pull.base}`, sha], { cwd: this.gitDir });
    return sha;
  }

  page(url, items) {
    const per = Number(url.searchParams.get('per_page') || 30);
    const n = Number(url.searchParams.get('page') || 1);
    const slice = items.slice((n - 1) * per, n * per);
    const headers = {};
    if (n * per < items.length) {
      const next = new URL(url);
      next.searchParams.set('page', String(n + 1));
      headers.link = `<${this.url}${next.pathname}${next.search}>; rel="next"`;
    }
    return [200, slice, headers];
  }

  // ---- objects, from GitHub's examples ------------------------------------------------

  simpleUser(login) {
    const user = this.users.get(login) || this.addUser(login, null);
    const out = api.example('simple-user');
    Object.assign(out, { login, id: user.id, node_id: nodeId('U', user.id), type: user.type, url: `${this.url}/users/${login}`, html_url: `https://github.com/${login}` });
    return out;
  }

  privateUser(login) {
    const out = api.example('private-user');
    const user = this.users.get(login);
    Object.assign(out, { login, id: user.id, node_id: nodeId('U', user.id), type: user.type });
    return out;
  }

  collaborator(user, role) {
    const out = { ...this.simpleUser(user.login), role_name: role };
    out.permissions = { pull: role !== 'none', triage: ['triage', 'write', 'maintain', 'admin'].includes(role), push: ['write', 'maintain', 'admin'].includes(role), maintain: ['maintain', 'admin'].includes(role), admin: role === 'admin' };
    return out;
  }

  integration() {
    const out = api.example('integration');
    Object.assign(out, { id: this.app.id, slug: this.app.slug, name: 'loopwright test' });
    return out;
  }

  minimalRepo() {
    const out = api.example('minimal-repository');
    Object.assign(out, { name: this.repo, full_name: this.full, owner: this.simpleUser(this.owner) });
    return out;
  }

  pullIssueJson(pull) {
    const out = this.issueJson({ number: pull.number, id: pull.id, title: pull.title, body: pull.body ?? null, user: pull.user, labels: [], created_at: pull.created_at, updated_at: pull.updated_at });
    out.html_url = `https://github.com/${this.full}/pull/${pull.number}`;
    out.pull_request = { url: `${this.url}/repos/${this.full}/pulls/${pull.number}`, html_url: out.html_url, diff_url: `${out.html_url}.diff`, patch_url: `${out.html_url}.patch`, merged_at: pull.mergedAt };
    return out;
  }

  issueJson(issue) {
    const out = api.example('issue');
    Object.assign(out, {
      id: issue.id, node_id: nodeId('I', issue.id), number: issue.number, title: issue.title, body: issue.body,
      user: this.simpleUser(issue.user), labels: issue.labels.map((name, i) => ({ id: i + 1, node_id: nodeId('L', i + 1), url: `${this.url}/labels/${name}`, name, description: null, color: 'f29513', default: false })),
      state: 'open', updated_at: issue.updated_at, created_at: issue.created_at, comments: this.comments.filter((c) => c.issue === issue.number).length,
      html_url: `https://github.com/${this.full}/issues/${issue.number}`, url: `${this.url}/repos/${this.full}/issues/${issue.number}`,
      assignee: null, assignees: [], milestone: null, closed_by: null, closed_at: null,
    });
    delete out.pull_request;
    return out;
  }

  commentJson(c) {
    const out = api.example('issue-comment');
    Object.assign(out, {
      id: c.id, node_id: nodeId('IC', c.id), body: c.body, user: this.simpleUser(c.user), created_at: c.created_at, updated_at: c.updated_at,
      html_url: `https://github.com/${this.full}/issues/${c.issue}#issuecomment-${c.id}`, issue_url: `${this.url}/repos/${this.full}/issues/${c.issue}`,
      url: `${this.url}/repos/${this.full}/issues/comments/${c.id}`, author_association: c.user === 'loopwright-bot' ? 'OWNER' : 'COLLABORATOR',
    });
    return out;
  }

  pullJson(pull, simple = false) {
    const out = api.example(simple ? 'pull-request-simple' : 'pull-request');
    const head = this.sha(pull.headRef) || '0000000000000000000000000000000000000000';
    const base = this.sha(pull.base) || '0000000000000000000000000000000000000000';
    const headRepo = { ...out.head.repo, full_name: pull.headRepo, name: pull.headRepo.split('/')[1], owner: this.simpleUser(pull.headRepo.split('/')[0]) };
    const baseRepo = { ...out.base.repo, full_name: this.full, name: this.repo, owner: this.simpleUser(this.owner) };
    Object.assign(out, {
      id: pull.id, node_id: nodeId('PR', pull.id), number: pull.number, title: pull.title, body: pull.body, state: pull.state, draft: pull.draft,
      user: this.simpleUser(pull.user), html_url: `https://github.com/${this.full}/pull/${pull.number}`, url: `${this.url}/repos/${this.full}/pulls/${pull.number}`,
      head: { ...out.head, ref: pull.headRef, sha: head, label: `${pull.headRepo.split('/')[0]}:${pull.headRef}`, repo: headRepo, user: this.simpleUser(pull.headRepo.split('/')[0]) },
      base: { ...out.base, ref: pull.base, sha: base, label: `${this.owner}:${pull.base}`, repo: baseRepo, user: this.simpleUser(this.owner) },
      merged_at: pull.mergedAt, closed_at: pull.state === 'closed' ? (pull.closedAt ||= pull.mergedAt || isoNow()) : null, created_at: pull.created_at, updated_at: pull.updated_at,
      assignee: null, assignees: [], requested_reviewers: [], requested_teams: [], labels: [], milestone: null, auto_merge: pull.autoMerge ? { enabled_by: this.simpleUser(pull.autoMerge.by), merge_method: pull.autoMerge.method, commit_title: pull.title, commit_message: '' } : null,
    });
    if (!simple) Object.assign(out, { merged: pull.merged, mergeable: pull.state === 'open' ? true : null, merged_by: pull.merged ? this.simpleUser('loopwright-bot') : null, merge_commit_sha: null });
    return out;
  }

  reviewJson(r) {
    const out = api.example('pull-request-review');
    Object.assign(out, { id: r.id, node_id: nodeId('PRR', r.id), user: this.simpleUser(r.user), body: r.body, state: r.state, commit_id: r.commit_id, submitted_at: r.submitted_at, author_association: 'COLLABORATOR' });
    return out;
  }

  checkRunJson(r) {
    const out = api.example('check-run');
    const app = r.app === 'github-actions' ? { ...out.app, id: 15368, slug: 'github-actions', name: 'GitHub Actions' } : { ...out.app, id: this.app.id, slug: this.app.slug, name: 'loopwright test' };
    Object.assign(out, {
      id: r.id, node_id: nodeId('CR', r.id), name: r.name, head_sha: r.head_sha, status: r.status || 'completed', conclusion: r.conclusion ?? null,
      details_url: r.details_url ?? null, html_url: `https://github.com/${this.full}/runs/${r.id}`, url: `${this.url}/repos/${this.full}/check-runs/${r.id}`,
      output: { title: r.output?.title ?? null, summary: r.output?.summary ?? null, text: r.output?.text ?? null, annotations_count: r.output?.annotations?.length || 0, annotations_url: `${this.url}/repos/${this.full}/check-runs/${r.id}/annotations` },
      app, pull_requests: [], external_id: '', check_suite: { id: r.id + 1 }, completed_at: r.status === 'in_progress' ? null : (r.completed_at ||= isoNow()),
    });
    delete out.deployment;
    return out;
  }

  issueEventJson(e) {
    const out = api.example('issue-event-items')[0];
    const issue = this.issues.get(e.issue);
    Object.assign(out, {
      id: e.id, node_id: nodeId('IE', e.id), url: `${this.url}/repos/${this.full}/issues/events/${e.id}`, actor: this.simpleUser(e.actor),
      event: e.event, commit_id: null, commit_url: null, created_at: e.created_at, issue: this.issueJson(issue),
      label: { name: e.label, color: 'f29513' },
    });
    return out;
  }

  statusJson(s) {
    const out = api.example('status');
    Object.assign(out, { id: s.id, node_id: nodeId('S', s.id), state: s.state, description: s.description ?? null, target_url: s.target_url ?? null, context: s.context || 'default', creator: this.simpleUser(s.creator), created_at: s.created_at, updated_at: s.created_at, url: `${this.url}/repos/${this.full}/statuses/${s.sha}` });
    return out;
  }

  // ---- what tests do on GitHub's side ----------------------------------------------------

  openIssue({ title, body, user = 'dana', labels = [] }) {
    const n = this.nextNumber++;
    const now = isoNow();
    const issue = { number: n, id: this.nextId++, title, body, user, labels, created_at: now, updated_at: now };
    this.addUser(user, null);
    this.issues.set(n, issue);
    return issue;
  }

  /** A finished CI job on `sha`: a GitHub Actions check run whose job log is `log`. */
  finishJob({ sha, name = 'test', conclusion, log = '' }) {
    const run = { id: this.nextId++, app: 'github-actions', name, head_sha: sha, status: 'completed', conclusion, details_url: `https://github.com/${this.full}/actions/runs/1/job/1`, output: { title: null, summary: null } };
    this.checkRuns.push(run);
    this.jobLogs.set(run.id, log);
    return run;
  }

  /** Why protection keeps `pull` from merging at `head`, or nothing. */
  unmetProtection(pull, head) {
    const rule = this.protection.get(pull.base);
    if (!rule) return null;
    const approved = this.reviews.some((r) => r.pull === pull.number && r.state === 'APPROVED' && r.commit_id === head);
    if (rule.reviews && !approved) return 'At least 1 approving review is required by reviewers with write access.';
    const passed = new Set([
      ...this.checkRuns.filter((r) => r.head_sha === head && r.conclusion === 'success').map((r) => r.name),
      ...latestStatuses(this.statuses.filter((x) => x.sha === head)).filter((x) => x.state === 'success').map((x) => x.context),
    ]);
    const missing = rule.contexts.find((c) => !passed.has(c));
    return missing ? `Required status check "${missing}" is expected.` : null;
  }

  review({ pull, user, state, body = '', commit }) {
    const r = { id: this.nextId++, pull, user, state, body, commit_id: commit || this.sha(this.pulls.get(pull).headRef), submitted_at: isoNow() };
    this.reviews.push(r);
    return r;
  }

  async control(req, res, url, body) {
    const json = body.length ? JSON.parse(body.toString('utf8')) : {};
    const reply = (x) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(x ?? {}));
    };
    switch (url.pathname) {
      case '/__test/state':
        return reply({ violations: this.violations, requests: this.requests, comments: this.comments, pulls: [...this.pulls.values()], statuses: this.statuses, checkRuns: this.checkRuns, reviews: this.reviews, branches: this.branches() });
      case '/__test/user':
        this.addUser(json.login, json.permission, json.type);
        if (json.token) this.tokens.set(json.token, json.login);
        return reply(this.users.get(json.login));
      case '/__test/label': {
        // A person labels an issue: the label is on it, an event says so, it was updated.
        const issue = this.issues.get(json.issue);
        const now = isoNow();
        issue.labels.push(json.label);
        issue.updated_at = now;
        this.addUser(json.by, null);
        this.issueEvents.push({ id: this.nextId++, issue: json.issue, event: 'labeled', label: json.label, actor: json.by, created_at: now });
        return reply({ at: now });
      }
      case '/__test/comment': {
        const now = isoNow();
        this.addUser(json.by, null);
        const c = { id: this.nextId++, issue: json.issue, body: json.body, user: json.by, created_at: now, updated_at: now };
        this.comments.push(c);
        return reply(c);
      }
      case '/__test/issue':
        return reply(this.openIssue(json));
      case '/__test/commit':
        return reply({ sha: this.commit(json.branch, json.files || { 'README.md': `${json.branch}\n` }, json.message) });
      case '/__test/pull': {
        const n = this.nextNumber++;
        const pull = { number: n, id: this.nextId++, title: json.title || 'a change', body: json.body ?? null, headRef: json.head, headRepo: json.headRepo || this.full, base: json.base || 'main', user: json.user, draft: !!json.draft, state: 'open', merged: false, mergedAt: null, created_at: isoNow(), updated_at: isoNow() };
        this.pulls.set(n, pull);
        return reply(pull);
      }
      case '/__test/job':
        return reply(this.finishJob(json));
      case '/__test/status':
        this.statuses.push({ id: this.nextId++, sha: json.sha, creator: json.creator || 'ci-bot', created_at: isoNow(), state: json.state, context: json.context, description: json.description });
        return reply({});
      case '/__test/review':
        return reply(this.review(json));
      case '/__test/rate-limit':
        for (let i = 0; i < (json.count || 1); i++) this.limited.push({ status: json.status, retryAfter: json.retryAfter ?? 1 });
        return reply({});
      case '/__test/deliver': {
        // A delivery built from GitHub's examples (checked against its schemas), signed and sent;
        // `resend` sends exactly the body of an earlier one again.
        let body;
        try {
          body = json.raw ?? payload(json.event, json.action, json.overrides || {});
        } catch (e) {
          this.violations.push(`webhook: ${e.message}`);
          return reply({ status: 0, error: e.message });
        }
        return reply(await deliver(json.url, { event: json.event, body, secret: json.secret, delivery: json.delivery, signature: json.signature }));
      }
      case '/__test/pause':
        this.pauses.push({ method: json.method, path: json.path, when: json.when || 'after', ms: json.ms ?? 30000 });
        return reply({});
      case '/__test/protection':
        this.protection.set(json.branch, { contexts: json.contexts || [], reviews: !!json.reviews });
        return reply({});
      default:
        res.writeHead(404);
        return res.end();
    }
  }

  branches() {
    const out = execFileSync('git', ['for-each-ref', '--format=%(refname:short) %(objectname)', 'refs/heads'], { cwd: this.gitDir, encoding: 'utf8' });
    return Object.fromEntries(out.trim().split('\n').filter(Boolean).map((l) => l.split(' ')));
  }

  /** Git's smart HTTP through `git http-backend`; every request needs a token, a push one with write. */
  gitHttp(req, res, url, body) {
    const rest = url.pathname.slice('/git'.length);
    const basic = (req.headers.authorization || '').replace(/^Basic /, '');
    const [, password] = Buffer.from(basic, 'base64').toString().split(':');
    const login = this.tokens.get(password || '');
    const push = url.searchParams.get('service') === 'git-receive-pack' || rest.endsWith('/git-receive-pack');
    const role = login && this.permissions.get(login);
    if (!login || (push && !['write', 'maintain', 'admin'].includes(role))) {
      res.writeHead(401, { 'www-authenticate': 'Basic realm="GitHub"' });
      return res.end();
    }
    const child = spawn('git', ['http-backend'], {
      env: {
        ...process.env, GIT_PROJECT_ROOT: this.dir, GIT_HTTP_EXPORT_ALL: '1', PATH_INFO: rest, REQUEST_METHOD: req.method,
        QUERY_STRING: url.search.slice(1), CONTENT_TYPE: req.headers['content-type'] || '', CONTENT_LENGTH: String(body.length),
        HTTP_CONTENT_ENCODING: req.headers['content-encoding'] || '', REMOTE_USER: login, REMOTE_ADDR: '127.0.0.1', GIT_PROTOCOL: req.headers['git-protocol'] || '',
      },
    });
    const chunks = [];
    child.stdout.on('data', (c) => chunks.push(c));
    // git may answer and exit before it reads the request's body (a GET has none): its answer is
    // on stdout all the same, and the closed pipe is not an error of the server's.
    child.stdin.on('error', () => {});
    child.stdin.end(body);
    return new Promise((resolve) => child.on('close', () => {
      const out = Buffer.concat(chunks);
      const split = out.indexOf('\r\n\r\n');
      const head = out.subarray(0, split).toString();
      const headers = {};
      let status = 200;
      for (const line of head.split('\r\n')) {
        const [k, ...v] = line.split(': ');
        if (k.toLowerCase() === 'status') status = Number(v.join(': ').split(' ')[0]);
        else headers[k] = v.join(': ');
      }
      res.writeHead(status, headers);
      res.end(out.subarray(split + 4));
      resolve();
    }));
  }
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

function latestStatuses(all) {
  const by = new Map();
  for (const s of all) by.set(s.context, s);
  return [...by.values()];
}

function nodeId(kind, id) {
  return Buffer.from(`${kind}_${id}`).toString('base64');
}

function isoNow() {
  return new Date().toISOString().replace(/\.\d+Z$/, 'Z');
}

function notFound() {
  return { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' };
}

function forbidden(message = 'Resource not accessible by integration') {
  return { message, documentation_url: 'https://docs.github.com/rest' };
}

function validationFailed(field, code, message) {
  return { message: 'Validation Failed', documentation_url: 'https://docs.github.com/rest', errors: [{ resource: 'PullRequest', field, code, ...(message ? { message } : {}) }] };
}

function authKind(req) {
  const h = req.headers.authorization || '';
  return h.startsWith('Bearer ghs_') ? 'installation' : h.split('.').length === 3 ? 'jwt' : h ? 'token' : 'none';
}

function git(args, cwd) {
  execFileSync('git', args, { cwd, stdio: 'ignore' });
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

// Run alone: a server for a test in another language, controlled over HTTP.
if (import.meta.url === `file://${process.argv[1]}`) {
  const publicKey = process.env.GITHUB_APP_PUBLIC_KEY_FILE ? fs.readFileSync(process.env.GITHUB_APP_PUBLIC_KEY_FILE, 'utf8') : null;
  const server = new GitHubServer({ appPublicKey: publicKey });
  if (process.env.GITHUB_TEST_TOKENS) {
    for (const pair of process.env.GITHUB_TEST_TOKENS.split(',')) {
      const [login, token, permission] = pair.split(':');
      server.addUser(login, permission || 'write');
      server.tokens.set(token, login);
    }
  }
  const url = await server.start(Number(process.env.PORT || 0));
  process.stdout.write(`listening ${url} ${server.cloneUrl()}\n`);
  process.on('SIGTERM', async () => {
    await server.stop();
    process.exit(0);
  });
}
