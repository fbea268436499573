// `nube doctor` check for file storage: each region's local directory is writable, or each S3 bucket
// answers a listing with the configured credentials.
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Config } from '../../platform/config-shape.js';
import { type CheckResult, canWrite, type DoctorCheck, errorText, fail, ok } from '../../platform/doctor.js';
import { storesFromConfig } from './blobs.js';

export function fileChecks(config: Config): DoctorCheck[] {
  return [{ name: 'file storage', run: () => (config.files.blob.backend === 's3' ? s3(config) : local(config)) }];
}

async function local(config: Config): Promise<CheckResult[]> {
  if (config.files.blob.backend !== 'local') return [];
  const out: CheckResult[] = [];
  for (const [region, dir] of Object.entries(config.files.blob.dirs)) {
    // Region directories are made at the first upload: the nearest existing parent must be writable.
    let at = dir;
    while (!existsSync(at) && dirname(at) !== at) at = dirname(at);
    const w = await canWrite(at);
    if (!w.ok) out.push(fail(`${region}: ${at} is not writable (${w.why})`, 'make it writable by the user running nube, or set NUBE_BLOB_DIR elsewhere'));
  }
  const root = dirname(Object.values(config.files.blob.dirs)[0]!);
  return out.length ? out : [ok(`local, under ${root}: writable`)];
}

async function s3(config: Config): Promise<CheckResult[]> {
  if (config.files.blob.backend !== 's3') return [];
  const { endpoint, buckets } = config.files.blob;
  const stores = storesFromConfig(config);
  const where = endpoint ?? 'AWS S3';
  try {
    // One listing per bucket (regions sharing a bucket share the answer).
    const byBucket = new Map<string, string[]>();
    for (const [region, b] of Object.entries(buckets)) byBucket.set(b.bucket, [...(byBucket.get(b.bucket) ?? []), region]);
    return await Promise.all(
      [...byBucket].map(async ([bucket, regions]): Promise<CheckResult> => {
        try {
          for await (const _ of stores.at(regions[0]).list('nube-doctor/')) break;
          return ok(`S3 bucket ${bucket} at ${where} (${regions.join(', ')}): listed`);
        } catch (e) {
          return s3Failure(bucket, where, e);
        }
      }),
    );
  } finally {
    stores.close();
  }
}

function s3Failure(bucket: string, where: string, e: unknown): CheckResult {
  const name = (e as { name?: string; Code?: string }).name ?? '';
  const code = (e as { code?: string }).code ?? '';
  const found = `S3 bucket ${bucket} at ${where}: ${name && name !== 'Error' ? `${name}: ` : ''}${errorText(e)}`;
  if (name === 'CredentialsProviderError') return fail(found, 'set NUBE_S3_ACCESS_KEY_ID and NUBE_S3_SECRET_ACCESS_KEY (or give this host an instance role)');
  if (name === 'NoSuchBucket') return fail(found, `create bucket ${bucket}, or set NUBE_S3_BUCKET to an existing one`);
  if (/AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|Forbidden/.test(name)) {
    return fail(found, 'check NUBE_S3_ACCESS_KEY_ID / NUBE_S3_SECRET_ACCESS_KEY and the bucket policy (list, get, put, delete)');
  }
  if (/ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT/.test(`${code} ${errorText(e)}`)) {
    return fail(found, `start the S3 service or correct NUBE_S3_ENDPOINT (${where})`);
  }
  return fail(found, 'check NUBE_S3_ENDPOINT, the bucket and the credentials');
}
