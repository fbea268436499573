// Plain HTTP and HTTPS requests to nube's listeners with a chosen Host (and SNI name), so no DNS is
// involved; the HTTPS one verifies the chain against the given CA and reports the served certificate.
import type { X509Certificate } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { TLSSocket } from 'node:tls';

export interface Got {
  status: number;
  body: string;
  cert?: X509Certificate;
}

export function httpGet(port: number, host: string, path = '/'): Promise<Got> {
  return new Promise((resolve, reject) => {
    const r = httpRequest({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    r.on('error', reject);
    r.end();
  });
}

export function httpsGet(port: number, host: string, ca: string, path = '/'): Promise<Got> {
  return new Promise((resolve, reject) => {
    const r = httpsRequest({ host: '127.0.0.1', port, path, servername: host, ca, headers: { host }, agent: false }, (res) => {
      const raw = (res.socket as TLSSocket).getPeerX509Certificate();
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, cert: raw }));
    });
    r.on('error', reject);
    r.end();
  });
}

export const until = async <T>(f: () => Promise<T>, ok: (v: T) => boolean, ms = 60_000): Promise<T> => {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (ok(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 200));
  }
};

/** The serial number of the certificate served for `host`, read without verifying the chain. */
export function httpsGetCert(port: number, host: string): Promise<string | null> {
  return new Promise((resolve) => {
    const r = httpsRequest({ host: '127.0.0.1', port, path: '/', servername: host, rejectUnauthorized: false, headers: { host }, agent: false }, (res) => {
      const c = (res.socket as TLSSocket).getPeerX509Certificate();
      res.resume();
      resolve(c?.serialNumber ?? null);
    });
    r.on('error', () => resolve(null));
    r.end();
  });
}
