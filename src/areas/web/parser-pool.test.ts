// The parser pool: pages parsed in child processes, the event loop free meanwhile, a runaway parse
// abandoned and its process replaced, a dead process failing only its own parse.
import { afterAll, describe, expect, it } from 'vitest';
import { parsePage } from './html.js';
import { ParserPool } from './parser-pool.js';

const para = `<p>${'Lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(20)}<a href="/x">link</a></p>\n`;
const page = (bytes: number) =>
  `<html><head><title>Big</title></head><body><article><h1>Heading</h1>${para.repeat(Math.ceil(bytes / para.length))}</article></body></html>`;

describe('parser pool', () => {
  const pool = new ParserPool(2, 20_000);
  afterAll(() => pool.close());

  it('parses pages and structured data in child processes', async () => {
    const p = await pool.parsePage(page(2000), 'http://example.test/a/', true);
    expect(p.title).toBe('Big');
    expect(p.links).toEqual(['http://example.test/x']);
    expect(p.markdown).toContain('# Heading');
    const s = await pool.parseStructured('<html lang="es"><head><meta property="og:title" content="T"></head><h2>H</h2></html>', 'http://e.test/');
    expect(s).toMatchObject({ language: 'es', openGraph: { title: 'T' }, headings: [{ level: 2, text: 'H' }] });
  });

  it('keeps the event loop free while a 3 MB page is parsed', async () => {
    const html = page(3_000_000);
    // The same parse on this event loop, in this run: how long the loop would stall without the pool.
    const inProcessStarted = performance.now();
    parsePage(html, 'http://example.test/', true);
    const stallMs = performance.now() - inProcessStarted;
    const ticks: number[] = [];
    const started = Date.now();
    let last = started;
    const timer = setInterval(() => {
      const now = Date.now();
      ticks.push(now - last);
      last = now;
    }, 5);
    const parsed = await pool.parsePage(html, 'http://example.test/', true);
    clearInterval(timer);
    expect(parsed.markdown.length).toBeGreaterThan(1_000_000);
    // The loop ticked all along: no gap comes near the stall the parse causes in process. A ratio
    // measured in the same run, so a slower or busier machine moves both sides.
    expect(Date.now() - started).toBeGreaterThan(50);
    expect(Math.max(...ticks)).toBeLessThan(stallMs / 2);
  });

  it('abandons a parse past its time limit and serves the next one on a fresh process', async () => {
    const slow = new ParserPool(1, 100);
    try {
      await expect(slow.parsePage(page(3_000_000), 'http://example.test/', true)).rejects.toThrow(/longer than 100 ms/);
      expect((await slow.parsePage(page(1000), 'http://example.test/', false)).title).toBe('Big');
    } finally {
      await slow.close();
    }
  });

  it('fails only the parse of a process that dies, then goes on', async () => {
    const one = new ParserPool(1, 20_000);
    try {
      const first = one.parsePage(page(3_000_000), 'http://example.test/', true);
      const second = one.parsePage(page(1000), 'http://example.test/', false);
      // Should an assertion below fail, close() rejects what is left: not an unhandled rejection.
      first.catch(() => {});
      second.catch(() => {});
      // Once the only process is busy with the first parse, kill it (a loaded machine can take
      // seconds to start the process: the wait is long, the check exact).
      // biome-ignore lint/suspicious/noExplicitAny: reaching the child to simulate a crash
      for (let i = 0; i < 2000 && !(one as any).workers[0]?.job; i++) await new Promise((r) => setTimeout(r, 10));
      // biome-ignore lint/suspicious/noExplicitAny: reaching the child to simulate a crash
      expect((one as any).workers[0]?.job).toBeTruthy();
      // biome-ignore lint/suspicious/noExplicitAny: reaching the child to simulate a crash
      (one as any).workers[0].child.kill('SIGKILL');
      await expect(first).rejects.toThrow(/ended during the parse/);
      expect((await second).title).toBe('Big');
    } finally {
      await one.close();
    }
  }, 60_000);
});
