// A form submission's body as a browser (or a script) sends it: urlencoded, multipart with files, or a
// flat JSON object. Read from the raw request with hard limits: fields and files are counted while
// they arrive, and whatever passes a limit is a 413 (or 400) in words, never a partial submission.
import type { IncomingMessage } from 'node:http';
import { Busboy, type BusboyInstance } from '@fastify/busboy';
import { ApiError, errors } from '../../platform/errors.js';

export const FORM_LIMITS = {
  /** Fields of one submission (files not counted). */
  fields: 100,
  fieldNameBytes: 200,
  /** One field's value. */
  fieldBytes: 64 * 1024,
  /** All fields' names and values together (what is stored and sent in form.submitted). */
  fieldsBytes: 256 * 1024,
  files: 5,
  fileBytes: 10 * 1024 * 1024,
  /** The whole request body. */
  bodyBytes: 25 * 1024 * 1024,
};

export type Fields = Record<string, string | string[]>;

export interface UploadedFile {
  field: string;
  name: string;
  contentType: string;
  data: Buffer;
}

export interface Submission {
  fields: Fields;
  files: UploadedFile[];
}

const tooLarge = (what: string) => new ApiError(413, 'PayloadTooLarge', what);

/** An empty set of fields: no prototype, so a field named `__proto__` is a field like any other. */
export const noFields = (): Fields => Object.create(null) as Fields;

/** Adds a value; a name sent twice (checkboxes) becomes a list. */
function add(fields: Fields, name: string, value: string): void {
  const had = fields[name];
  if (had === undefined) fields[name] = value;
  else if (Array.isArray(had)) had.push(value);
  else fields[name] = [had, value];
}

class Counter {
  count = 0;
  bytes = 0;
  take(name: string, value: string): void {
    // PostgreSQL text cannot hold NUL; nobody types it into a form.
    if (name.includes('\u0000') || value.includes('\u0000'))
      throw errors.badRequest('a field holds a NUL character', [
        { path: ['body', name], message: 'NUL character' },
      ]);
    if (name === '')
      throw errors.badRequest('a field has no name', [{ path: ['body'], message: 'empty field name' }]);
    // JSON tools (and this API's own schemas) treat this name as an object's prototype, not a key.
    if (name === '__proto__')
      throw errors.badRequest('a field may not be named __proto__', [
        { path: ['body', name], message: 'reserved name' },
      ]);
    if (++this.count > FORM_LIMITS.fields)
      throw tooLarge(`a submission holds at most ${FORM_LIMITS.fields} fields`);
    if (Buffer.byteLength(name) > FORM_LIMITS.fieldNameBytes)
      throw tooLarge(`a field name is at most ${FORM_LIMITS.fieldNameBytes} bytes`);
    if (Buffer.byteLength(value) > FORM_LIMITS.fieldBytes)
      throw tooLarge(`field "${name.slice(0, 60)}" is over ${FORM_LIMITS.fieldBytes / 1024} KiB`);
    this.bytes += Buffer.byteLength(name) + Buffer.byteLength(value);
    if (this.bytes > FORM_LIMITS.fieldsBytes)
      throw tooLarge(`a submission's fields are at most ${FORM_LIMITS.fieldsBytes / 1024} KiB together`);
  }
}

/** The submission in `req`'s body; the body is read to its end (or the request destroyed) either way. */
export async function readSubmission(req: IncomingMessage): Promise<Submission> {
  const length = Number(req.headers['content-length'] ?? 0);
  if (length > FORM_LIMITS.bodyBytes)
    throw tooLarge(`a submission is at most ${FORM_LIMITS.bodyBytes / 2 ** 20} MiB`);
  const type = (req.headers['content-type'] ?? '').toLowerCase();
  if (type.startsWith('application/json')) return readJson(req);
  if (type.startsWith('application/x-www-form-urlencoded') || type.startsWith('multipart/form-data'))
    return readForm(req);
  throw errors.unsupportedMediaType(
    'send the form as application/x-www-form-urlencoded, multipart/form-data or application/json',
  );
}

async function readAll(req: IncomingMessage, max: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > max) {
      req.resume();
      throw tooLarge(`a submission's fields are at most ${max / 1024} KiB together`);
    }
    parts.push(c as Buffer);
  }
  return Buffer.concat(parts);
}

async function readJson(req: IncomingMessage): Promise<Submission> {
  // Names, quotes and commas on top of the values: a little more than the fields' own limit.
  const raw = await readAll(req, FORM_LIMITS.fieldsBytes + 16 * 1024);
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    throw errors.badRequest('the body is not JSON', [{ path: ['body'], message: 'invalid JSON' }]);
  }
  if (!body || typeof body !== 'object' || Array.isArray(body))
    throw errors.badRequest('send the fields as one JSON object', [
      { path: ['body'], message: 'expected an object' },
    ]);
  const fields = noFields();
  const counter = new Counter();
  for (const [name, v] of Object.entries(body)) {
    const values = Array.isArray(v) ? v : [v];
    for (const one of values) {
      if (typeof one !== 'string' && typeof one !== 'number' && typeof one !== 'boolean')
        throw errors.badRequest('field values are strings, numbers, booleans or lists of them', [
          { path: ['body', name], message: 'not a string, number or boolean' },
        ]);
      counter.take(name, String(one));
      add(fields, name, String(one));
    }
  }
  return { fields, files: [] };
}

function readForm(req: IncomingMessage): Promise<Submission> {
  return new Promise((resolve, reject) => {
    const fields = noFields();
    const files: UploadedFile[] = [];
    const counter = new Counter();
    let failure: unknown;
    let received = 0;
    const fail = (e: unknown) => {
      failure ??= e;
    };
    let bb: BusboyInstance;
    try {
      bb = new Busboy({
        headers: req.headers as { 'content-type': string },
        limits: {
          fieldNameSize: FORM_LIMITS.fieldNameBytes,
          fieldSize: FORM_LIMITS.fieldBytes + 1,
          fields: FORM_LIMITS.fields + 1,
          files: FORM_LIMITS.files + 1,
          fileSize: FORM_LIMITS.fileBytes,
          parts: FORM_LIMITS.fields + FORM_LIMITS.files + 2,
        },
      });
    } catch {
      reject(
        errors.badRequest('the multipart body has no boundary', [{ path: ['body'], message: 'no boundary' }]),
      );
      return;
    }
    bb.on('field', (name, value, nameTruncated, valueTruncated) => {
      if (failure) return;
      try {
        if (nameTruncated) throw tooLarge(`a field name is at most ${FORM_LIMITS.fieldNameBytes} bytes`);
        if (valueTruncated)
          throw tooLarge(`field "${name.slice(0, 60)}" is over ${FORM_LIMITS.fieldBytes / 1024} KiB`);
        counter.take(name, value);
        add(fields, name, value);
      } catch (e) {
        fail(e);
      }
    });
    bb.on('file', (field, stream, filename, _encoding, mimeType) => {
      const parts: Buffer[] = [];
      stream.on('data', (c: Buffer) => {
        if (!failure) parts.push(c);
      });
      stream.on('limit', () =>
        fail(
          tooLarge(`file "${String(filename).slice(0, 100)}" is over ${FORM_LIMITS.fileBytes / 2 ** 20} MiB`),
        ),
      );
      stream.on('end', () => {
        if (failure) return;
        const data = Buffer.concat(parts);
        // A file input left empty still sends a part, with no name and no bytes.
        if (!filename && data.length === 0) return;
        if (files.length >= FORM_LIMITS.files)
          return fail(tooLarge(`a submission holds at most ${FORM_LIMITS.files} files`));
        if (field.includes('\u0000') || String(filename).includes('\u0000'))
          return fail(
            errors.badRequest('a file name holds a NUL character', [
              { path: ['body', 'files'], message: 'NUL character' },
            ]),
          );
        files.push({
          field,
          name: String(filename || 'upload').slice(0, 255),
          contentType: /^[\w.+-]+\/[\w.+-]+$/.test(mimeType) ? mimeType : 'application/octet-stream',
          data,
        });
      });
    });
    bb.on('fieldsLimit', () => fail(tooLarge(`a submission holds at most ${FORM_LIMITS.fields} fields`)));
    bb.on('filesLimit', () => fail(tooLarge(`a submission holds at most ${FORM_LIMITS.files} files`)));
    bb.on('partsLimit', () => fail(tooLarge('a submission has too many parts')));
    bb.on('error', (e) =>
      reject(
        failure ??
          errors.badRequest(`the form body is malformed: ${(e as Error).message}`, [
            { path: ['body'], message: 'malformed' },
          ]),
      ),
    );
    bb.on('finish', () => (failure ? reject(failure) : resolve({ fields, files })));
    req.on('data', (c: Buffer) => {
      received += c.length;
      if (received > FORM_LIMITS.bodyBytes && !failure)
        fail(tooLarge(`a submission is at most ${FORM_LIMITS.bodyBytes / 2 ** 20} MiB`));
    });
    req.on('error', (e) => reject(e));
    // A client that goes away mid-body: the parser would wait for the rest forever.
    req.on('close', () => {
      if (!req.complete) reject(errors.badRequest('the request ended before its body did'));
    });
    req.pipe(bb);
  });
}
