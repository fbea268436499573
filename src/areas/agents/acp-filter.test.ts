import { describe, expect, it } from 'vitest';
import { filterClientMessage } from './acp-filter.js';

describe('ACP client filter', () => {
  it('passes ACP agent methods with their known fields only', () => {
    const out = filterClientMessage(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'session/new', params: { cwd: '/w', mcpServers: [], extra: 1, _meta: { x: 1 } } }));
    expect(out).toEqual({ forward: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'session/new', params: { cwd: '/w', mcpServers: [] } }) });
  });
  it("refuses nube's control notifications and other extension methods", () => {
    expect(filterClientMessage(JSON.stringify({ jsonrpc: '2.0', method: '_nube/gateway', params: { url: 'http://evil/v1' } }))).toEqual({ drop: true });
    const r = filterClientMessage(JSON.stringify({ jsonrpc: '2.0', id: 'a', method: '_nube/gateway', params: {} }));
    expect('reply' in r && JSON.parse(r.reply)).toMatchObject({ id: 'a', error: { code: -32601 } });
    expect(filterClientMessage(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'constructor' }))).toMatchObject({ reply: expect.stringContaining('-32601') });
  });
  it('passes responses, refuses batches and garbage', () => {
    expect(filterClientMessage(JSON.stringify({ jsonrpc: '2.0', id: 7, result: { outcome: { outcome: 'cancelled' } }, junk: 1 }))).toEqual({
      forward: JSON.stringify({ jsonrpc: '2.0', id: 7, result: { outcome: { outcome: 'cancelled' } } }),
    });
    expect(filterClientMessage('[{"jsonrpc":"2.0","id":1,"method":"initialize"}]')).toMatchObject({ reply: expect.stringContaining('-32600') });
    expect(filterClientMessage('{')).toMatchObject({ reply: expect.stringContaining('-32700') });
    expect(filterClientMessage(JSON.stringify({ jsonrpc: '2.0', id: {}, method: 'initialize' }))).toMatchObject({ reply: expect.stringContaining('bad id') });
  });
});
