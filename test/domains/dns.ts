// A tiny authoritative DNS server over UDP for the domain tests: TXT answers from `txt`, A answers
// 127.0.0.1 for every name in `a` (pebble connects there for HTTP-01), anything else an empty NOERROR.
import { createSocket, type Socket } from 'node:dgram';

export interface TestDns {
  port: number;
  txt: Map<string, string[]>;
  a: Set<string>;
  close(): void;
}

function rr(type: number, data: Buffer): Buffer {
  const a = Buffer.alloc(12);
  a.writeUInt16BE(0xc00c, 0);
  a.writeUInt16BE(type, 2);
  a.writeUInt16BE(1, 4);
  a.writeUInt32BE(5, 6);
  a.writeUInt16BE(data.length, 10);
  return Buffer.concat([a, data]);
}

export function startDns(): Promise<TestDns> {
  const txt = new Map<string, string[]>();
  const a = new Set<string>();
  const s: Socket = createSocket('udp4');
  s.on('message', (q, from) => {
    let i = 12;
    const labels: string[] = [];
    while (q[i]! > 0) {
      labels.push(q.toString('latin1', i + 1, i + 1 + q[i]!));
      i += q[i]! + 1;
    }
    const qEnd = i + 5;
    const qtype = q.readUInt16BE(i + 1);
    const name = labels.join('.').toLowerCase();
    const answers: Buffer[] = [];
    if (qtype === 16) for (const t of txt.get(name) ?? []) answers.push(rr(16, Buffer.concat([Buffer.from([t.length]), Buffer.from(t, 'latin1')])));
    if (qtype === 1 && a.has(name)) answers.push(rr(1, Buffer.from([127, 0, 0, 1])));
    const head = Buffer.alloc(12);
    head.writeUInt16BE(q.readUInt16BE(0), 0);
    head.writeUInt16BE(0x8400, 2);
    head.writeUInt16BE(1, 4);
    head.writeUInt16BE(answers.length, 6);
    // The question may carry an EDNS OPT record after it: answer the question alone.
    s.send(Buffer.concat([head, q.subarray(12, qEnd), ...answers]), from.port, from.address);
  });
  return new Promise((resolve) =>
    s.bind(0, '127.0.0.1', () => resolve({ port: s.address().port, txt, a, close: () => s.close() })),
  );
}
