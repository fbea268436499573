import { createServer } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { clientErrorHandler } from './http-errors.js';

// Node's parser errors answered in the API's error shape. nube runs Node's default timeouts (a request
// has 60 s to send its headers); this server shortens them so the 408 shows in a test.

describe('clientErrorHandler', () => {
  it('answers 408 RequestTimeout in the one shape when the headers never finish arriving', async () => {
    const server = createServer({ headersTimeout: 300, requestTimeout: 600, connectionsCheckingInterval: 50 }, (_q, r) => r.end('ok'));
    server.on('clientError', clientErrorHandler);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const { port } = server.address() as AddressInfo;
      const answer = await new Promise<string>((resolve) => {
        const s = connect(port, '127.0.0.1', () => s.write('GET / HTTP/1.1\r\nHost: x\r\n'));
        let got = '';
        s.on('data', (d) => {
          got += d;
        });
        s.on('error', () => {});
        s.on('close', () => resolve(got));
      });
      expect(answer).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
      const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
      expect(body).toEqual({ error: 'the request took too long to arrive', code: 'RequestTimeout' });
    } finally {
      server.close();
    }
  });
});
