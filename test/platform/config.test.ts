import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';

const base = { NUBE_DATA_DIR: '/tmp/nube-config-test', NUBE_SECRET: 'x'.repeat(40) };

describe('configuration', () => {
  it('has embedded defaults', () => {
    const c = loadConfig(base);
    expect(c).toMatchObject({ host: '127.0.0.1', port: 7070, ownerPlan: 'tera', databaseUrl: undefined, redisUrl: undefined });
  });

  it.each([
    ['NUBE_PORT', 'eighty'],
    ['NUBE_PORT', '70000'],
    ['NUBE_OWNER_KEY', 'nube_sk_live_short'],
    ['NUBE_OWNER_KEY', `sk_live_${'a'.repeat(40)}`],
    ['NUBE_OWNER_PLAN', 'giga'],
    ['DATABASE_URL', 'mysql://localhost/x'],
    ['REDIS_URL', 'http://localhost'],
    ['NUBE_SANDBOX_DRIVER', 'firecracker'],
    ['NUBE_SITES_HOST', 'Sites.Example.com'],
    ['NUBE_PDF_PAGES', '0'],
    ['NUBE_PDF_MAX_MEMORY_MB', '10'],
    ['NUBE_DATABASE_EXECUTORS_MIN', '0'],
    ['NUBE_DATABASE_QUEUE_PER_OWNER', 'many'],
    ['NUBE_DATABASE_EXECUTOR_IDLE_MS', '10'],
    ['NUBE_DATABASE_QUEUE_WAIT_MS', '-1'],
  ])('a bad %s stops the start with a message naming it', (name, value) => {
    expect(() => loadConfig({ ...base, [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, [name]: value })).toThrow(name);
  });

  it('accepts a well-formed owner key and plan', () => {
    const key = `nube_sk_live_${'A1b2'.repeat(8)}`;
    expect(loadConfig({ ...base, NUBE_OWNER_KEY: key, NUBE_OWNER_PLAN: 'byte' })).toMatchObject({ ownerKey: key, ownerPlan: 'byte' });
  });

  it('picks the sandbox driver with one setting (namespaces by default)', () => {
    expect(loadConfig(base).sandboxes.driver).toBe('namespaces');
    expect(loadConfig({ ...base, NUBE_SANDBOX_DRIVER: 'gvisor' }).sandboxes.driver).toBe('gvisor');
  });

  it('puts sites under sites.<public host name>, or sites.localhost without one', () => {
    expect(loadConfig(base).sites.host).toBe('sites.localhost');
    expect(loadConfig({ ...base, NUBE_PUBLIC_URL: 'http://10.0.0.5:7070' }).sites.host).toBe('sites.localhost');
    expect(loadConfig({ ...base, NUBE_PUBLIC_URL: 'https://Nube.Example.com' }).sites.host).toBe('sites.nube.example.com');
    expect(loadConfig({ ...base, NUBE_PUBLIC_URL: 'https://nube.example.com', NUBE_SITES_HOST: 'pages.example.org' }).sites.host).toBe('pages.example.org');
    expect(loadConfig(base).pdf).toEqual({ chromiumPath: '/usr/bin/chromium', pages: 2, maxMemoryBytes: 1024 ** 3, timeoutMs: 30_000 });
  });

  it('reads the LLM upstream and gateway port (no upstream, port 7071 by default); a bad URL names the variable', () => {
    expect(loadConfig(base).llm).toEqual({ upstream: undefined, gatewayPort: 7071 });
    const c = loadConfig({ ...base, NUBE_LLM_BASE_URL: 'http://127.0.0.1:8000/v1/', NUBE_LLM_API_KEY: 'k', NUBE_LLM_MODEL: 'm', NUBE_LLM_GATEWAY_PORT: '0' });
    expect(c.llm).toEqual({ upstream: { baseUrl: 'http://127.0.0.1:8000/v1', apiKey: 'k', model: 'm' }, gatewayPort: 0 });
    expect(() => loadConfig({ ...base, NUBE_LLM_BASE_URL: 'ftp://x' })).toThrow(/NUBE_LLM_BASE_URL/);
    expect(() => loadConfig({ ...base, NUBE_LLM_GATEWAY_PORT: '70000' })).toThrow(/NUBE_LLM_GATEWAY_PORT/);
  });

  it('reads the database executor pool (counts from the cores unless set); a maximum below the minimum names both', () => {
    expect(loadConfig(base).databases).toEqual({
      executorsMin: undefined,
      executorsMax: undefined,
      executorsPerOwner: undefined,
      queuePerOwner: 1000,
      executorIdleMs: 30_000,
      queueWaitMs: 60_000,
      libsqlStreamIdleMs: 10_000,
      libsqlStreamsPerOwner: 64,
      shipMs: 1000,
    });
    const c = loadConfig({
      ...base,
      NUBE_DATABASE_EXECUTORS_MIN: '2',
      NUBE_DATABASE_EXECUTORS_MAX: '8',
      NUBE_DATABASE_EXECUTORS_PER_OWNER: '3',
      NUBE_DATABASE_QUEUE_PER_OWNER: '50',
      NUBE_DATABASE_EXECUTOR_IDLE_MS: '5000',
      NUBE_DATABASE_QUEUE_WAIT_MS: '20000',
      NUBE_LIBSQL_STREAM_IDLE_MS: '2500',
      NUBE_LIBSQL_STREAMS_PER_OWNER: '8',
      NUBE_DATABASE_SHIP_MS: '250',
    });
    expect(c.databases).toEqual({
      executorsMin: 2,
      executorsMax: 8,
      executorsPerOwner: 3,
      queuePerOwner: 50,
      executorIdleMs: 5000,
      queueWaitMs: 20_000,
      libsqlStreamIdleMs: 2500,
      libsqlStreamsPerOwner: 8,
      shipMs: 250,
    });
    expect(() => loadConfig({ ...base, NUBE_DATABASE_EXECUTORS_MIN: '4', NUBE_DATABASE_EXECUTORS_MAX: '2' })).toThrow(
      /NUBE_DATABASE_EXECUTORS_MAX must be at least NUBE_DATABASE_EXECUTORS_MIN/,
    );
  });
});
