// GitHub's published REST description (@octokit/openapi) as a validator: every request the test
// server receives and every answer it gives is checked against the operation it is.
import { createRequire } from 'node:module';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';

const require = createRequire(import.meta.url);
const DOC_ID = 'https://api.github.com/openapi.json';

/** Loads the description once; schemas are compiled as operations are first used. */
export class OpenApi {
  constructor() {
    const doc = require('@octokit/openapi/generated/api.github.com.json');
    // GitHub's `oneOf`s overlap (a private user is also a valid public user) and their
    // `discriminator`s use `mapping`, which Ajv does not implement: read them as `anyOf`.
    this.doc = loosen(structuredClone(doc));
    this.ajv = new Ajv({ strict: false, allErrors: true, validateSchema: false });
    addFormats(this.ajv);
    // GitHub's own format: `OWNER/NAME`.
    this.ajv.addFormat('repo.nwo', /^[^/]+\/[^/]+$/);
    this.ajv.addSchema({ $id: DOC_ID, components: this.doc.components });
    this.routes = Object.entries(this.doc.paths).map(([template, item]) => ({
      template,
      regex: new RegExp('^' + template.replace(/\{[^}]+\}/g, '([^/]+)') + '$'),
      names: [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]),
      item,
    }));
    this.compiled = new Map();
  }

  /** The operation `method path` is, with its path parameters, or null. */
  find(method, path) {
    // A literal segment wins over a parameter (`/issues/comments` over `/issues/{number}`).
    const matches = this.routes
      .filter((r) => r.item[method.toLowerCase()] && r.regex.test(path))
      .sort((a, b) => a.names.length - b.names.length);
    const route = matches[0];
    if (!route) return null;
    const values = route.regex.exec(path).slice(1).map(decodeURIComponent);
    const params = Object.fromEntries(route.names.map((n, i) => [n, values[i]]));
    return { template: route.template, operation: route.item[method.toLowerCase()], params };
  }

  /** Problems of a request's JSON body (none: []). */
  checkRequest(op, body) {
    const content = this.resolve(op.operation.requestBody)?.content?.['application/json'];
    if (!content) return body === undefined ? [] : [];
    if (body === undefined) return op.operation.requestBody.required ? ['a JSON body is required'] : [];
    return this.check(`${op.template} request`, content.schema, body);
  }

  /** Problems of the query string against the operation's query parameters. */
  checkQuery(op, query) {
    const problems = [];
    const params = (op.operation.parameters || []).map((p) => this.resolve(p)).filter((p) => p.in === 'query');
    for (const [name, value] of query) {
      const p = params.find((x) => x.name === name);
      if (!p) {
        problems.push(`query parameter ${name} is not described`);
        continue;
      }
      const schema = p.schema || {};
      const typed = schema.type === 'integer' || schema.type === 'number' ? Number(value) : schema.type === 'boolean' ? value === 'true' : value;
      problems.push(...this.check(`${op.template} ?${name}`, schema, typed));
    }
    return problems;
  }

  /** Problems of an answer with `status` and JSON `body`. */
  checkResponse(op, status, body) {
    let response = this.resolve(op.operation.responses[String(status)]);
    // Any resource may be missing or refused: GitHub answers those with its basic error even
    // where an operation's description lists no such status.
    if (!response && [401, 403, 404].includes(status)) response = this.resolve({ $ref: '#/components/responses/not_found' });
    if (!response) return [`status ${status} is not described for ${op.template}`];
    const content = response.content?.['application/json'];
    if (!content) return body === undefined ? [] : [`status ${status} of ${op.template} has no JSON body`];
    return this.check(`${op.template} ${status}`, content.schema, body);
  }

  check(key, schema, value) {
    let validate = this.compiled.get(key);
    if (!validate) {
      validate = this.ajv.compile(rebase(structuredClone(schema)));
      this.compiled.set(key, validate);
    }
    if (validate(value)) return [];
    return validate.errors.slice(0, 5).map((e) => `${key}: ${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
  }

  resolve(x) {
    let out = x;
    while (out && out.$ref) {
      out = out.$ref.slice(2).split('/').reduce((o, k) => o[k.replace(/~1/g, '/').replace(/~0/g, '~')], this.doc);
    }
    return out;
  }

  /** A schema's example object from `components/examples` (a deep copy). */
  example(name) {
    const ex = this.doc.components.examples[name];
    if (!ex) throw new Error(`no example ${name}`);
    return structuredClone(ex.value);
  }
}

function loosen(node) {
  if (Array.isArray(node)) return node.map(loosen);
  if (node && typeof node === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(node)) {
      if (k === 'discriminator') continue;
      out[k === 'oneOf' ? 'anyOf' : k] = loosen(v);
    }
    // OpenAPI 3.0.3: a nullable `enum` admits null without listing it.
    if (out.nullable === true && Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
    // OpenAPI 3.0's `nullable` without a `type` (beside a `$ref` or `anyOf`): null, or the rest.
    if (out.nullable === true && out.type === undefined) {
      delete out.nullable;
      return { anyOf: [out, { type: 'null' }] };
    }
    return out;
  }
  return node;
}

function rebase(node) {
  if (Array.isArray(node)) return node.map(rebase);
  if (node && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string' && v.startsWith('#/')) node[k] = DOC_ID + v;
      else node[k] = rebase(v);
    }
  }
  return node;
}
