// Webhook deliveries as GitHub sends them: a payload from @octokit/webhooks-examples with a
// test's values written over it, checked against @octokit/webhooks-schemas, signed with the
// webhook's secret (HMAC SHA-256 of the exact body) and POSTed with GitHub's headers.
import crypto from 'node:crypto';
import { createRequire } from 'node:module';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';

const require = createRequire(import.meta.url);
const examples = require('@octokit/webhooks-examples/api.github.com/index.json');
const schema = require('@octokit/webhooks-schemas');

const ajv = new Ajv({ strict: false, allErrors: true, validateSchema: false });
addFormats(ajv);
ajv.addSchema({ ...schema, $id: 'webhooks' });

/** The payload of `event` (`action`) with `overrides` merged in, or throws what does not conform. */
export function payload(event, action, overrides = {}) {
  const entry = examples.find((e) => e.name === event);
  if (!entry) throw new Error(`no example of ${event}`);
  const name = action ? `${event}$${action}` : `${event}_event`;
  const validate = ajv.getSchema(`webhooks#/definitions/${name}`);
  if (!validate) throw new Error(`no schema ${name}`);
  // Some of GitHub's examples predate fields its schemas now require: the first that conforms
  // with the test's values is sent.
  const candidates = entry.examples.filter((x) => (action ? x.action === action : true));
  if (!candidates.length) throw new Error(`no example of ${event}.${action}`);
  let problems = '';
  for (const example of candidates) {
    const body = merge(structuredClone(example), overrides);
    if (validate(body)) return body;
    problems = validate.errors.slice(0, 5).map((e) => `${e.instancePath} ${e.message}`).join('; ');
  }
  throw new Error(`${name} does not conform: ${problems}`);
}

/** The `X-Hub-Signature-256` of `body` with `secret`. */
export function sign(secret, body) {
  return `sha256=${crypto.createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** POSTs a delivery: `{ status, body }` of the answer. `signature` may be given to forge one. */
export async function deliver(url, { event, body, secret, delivery = crypto.randomUUID(), signature }) {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const headers = {
    'content-type': 'application/json',
    'user-agent': 'GitHub-Hookshot/test',
    'x-github-event': event,
    'x-github-delivery': delivery,
    'x-github-hook-id': '1',
  };
  const sig = signature === undefined ? sign(secret, text) : signature;
  if (sig) headers['x-hub-signature-256'] = sig;
  const res = await fetch(url, { method: 'POST', headers, body: text });
  const answer = await res.text();
  let json;
  try {
    json = JSON.parse(answer);
  } catch {
    json = answer;
  }
  return { status: res.status, body: json, delivery, sent: text };
}

function merge(target, source) {
  for (const [k, v] of Object.entries(source)) {
    if (v && typeof v === 'object' && !Array.isArray(v) && target[k] && typeof target[k] === 'object' && !Array.isArray(target[k])) {
      merge(target[k], v);
    } else {
      target[k] = v;
    }
  }
  return target;
}
