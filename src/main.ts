#!/usr/bin/env node
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, Option } from 'commander';
import { AccountRepo } from './areas/account/repo.js';
import { AccountService, generateOwnerKey } from './areas/account/service.js';
import { makeRuntime } from './areas/sandboxes/index.js';
import { cleanup, formatCleanup } from './areas/sandboxes/leftovers.js';
import { backup, restore } from './backup.js';
import { ConfigError, type Config, loadConfig, PLAN_NAMES, type PlanName } from './config.js';
import { doctor, formatReport } from './doctor.js';
import { ALL_MIGRATIONS } from './migrations.js';
import { NodeRegistry, type NodeState } from './platform/nodes.js';
import { Usage } from './platform/usage.js';
import { buildServer } from './server.js';
import { auditKey, verifyChains } from './areas/audit/chain.js';
import { openStore } from './store/db.js';
import { migrateToLatest, migrationPlan, NewerStoreError } from './store/migrate.js';
import { DEFAULT_PATHS, install as installService, packageRoot, passThrough, uninstall as uninstallService } from './systemd-service.js';
import { VERSION } from './version.js';

function config(env: Record<string, string | undefined> = process.env): Config {
  try {
    return loadConfig(env);
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(`nube: ${e.message}`);
      process.exit(2);
    }
    throw e;
  }
}

/** The account service straight on the store (local SQLite, or DATABASE_URL of a running deployment). */
async function withAccounts<T>(fn: (svc: AccountService) => Promise<T>): Promise<T> {
  const cfg = config();
  const store = openStore({ databaseUrl: cfg.databaseUrl, dataDir: cfg.dataDir });
  try {
    await migrateToLatest(store.db, ALL_MIGRATIONS);
    return await fn(new AccountService(new AccountRepo(store.db, store.dialect), new Usage(store.db), 0));
  } finally {
    await store.close();
  }
}

const program = new Command().name('nube').description('Self-hostable cloud for AI agents').version(VERSION);

program
  .command('serve', { isDefault: true })
  .description('start the API server (configuration from NUBE_* environment variables)')
  .action(async () => {
    const nube = await buildServer(config());
    const address = await nube.listen();
    if (nube.ownerKeyToPrint) {
      process.stdout.write(
        `\nCreated the owner account. Its API key is shown only this once:\n\n  ${nube.ownerKeyToPrint}\n\nexport NUBE_API_KEY=${nube.ownerKeyToPrint}\n\n`,
      );
    }
    nube.app.log.info(`nube ${VERSION} listening on ${address}`);
    let stopping = false;
    const stop = async (signal: string) => {
      if (stopping) return;
      stopping = true;
      nube.app.log.info({ signal }, 'shutting down: finishing in-flight requests and jobs');
      await nube.close();
      process.exit(0);
    };
    process.on('SIGTERM', () => void stop('SIGTERM'));
    process.on('SIGINT', () => void stop('SIGINT'));
  });

program
  .command('migrate')
  .description('apply metadata store migrations and exit; --dry-run lists what an upgrade would apply')
  .option('--dry-run', 'list the migrations this version would apply, apply none')
  .action(async (opts: { dryRun?: boolean }) => {
    if (!opts.dryRun) return withAccounts(async () => console.log('migrations applied'));
    const cfg = config();
    const store = openStore({ databaseUrl: cfg.databaseUrl, dataDir: cfg.dataDir });
    try {
      const plan = await migrationPlan(store.db, ALL_MIGRATIONS);
      if (plan.unknown.length) {
        console.error(`nube: ${new NewerStoreError(plan.unknown).message}`);
        process.exitCode = 1;
        return;
      }
      console.log(plan.pending.length ? `${plan.pending.length} migration(s) to apply, in this order:` : 'the metadata store is up to date: nothing to apply');
      for (const name of plan.pending) console.log(`  ${name}`);
    } finally {
      await store.close();
    }
  });

program
  .command('backup')
  .description(
    'copy the installation while nube runs: metadata store, secret, blobs, databases, template recipes; a manifest with checksums is written last',
  )
  .requiredOption('--to <dir|s3://bucket/prefix>', 'an empty or new directory, or an S3 prefix (NUBE_S3_* connection) holding no backup')
  .action(async (opts: { to: string }) => {
    const m = await backup(config(), opts.to, (line) => console.log(line));
    console.log(`backup of nube ${m.version} complete in ${opts.to}`);
  });

program
  .command('restore')
  .description('restore a backup onto an empty data dir (and, on PostgreSQL, an empty DATABASE_URL database); checks every file first, writes nothing on a refusal')
  .requiredOption('--from <dir|s3://bucket/prefix>', 'a directory or S3 prefix `nube backup` wrote')
  .action(async (opts: { from: string }) => {
    // Loading the configuration would create a secret in the data dir, which must stay empty until
    // the checks pass: the backup's own secret (or the operator's NUBE_SECRET) is the one to use.
    const given = process.env.NUBE_SECRET || null;
    const cfg = config({ ...process.env, NUBE_SECRET: given ?? 'unused-the-backup-brings-its-secret' });
    await restore(cfg, given, opts.from, (line) => console.log(line));
  });

const accounts = program.command('accounts').description('owner accounts');
accounts
  .command('create')
  .description('create an owner account and print its first API key (shown once)')
  .addOption(new Option('--plan <plan>', 'plan').choices(PLAN_NAMES).default('byte'))
  .option('--name <name>', 'account name', 'owner')
  .action((opts: { plan: PlanName; name: string }) =>
    withAccounts(async (svc) => {
      const { account, secret } = await svc.createAccount({ name: opts.name, plan: opts.plan });
      console.log(JSON.stringify({ accountId: account.id, plan: account.plan, apiKey: secret }, null, 2));
    }),
  );
accounts
  .command('list')
  .description('list owner accounts')
  .action(() => withAccounts(async (svc) => console.log(JSON.stringify(await svc.listAccounts(), null, 2))));

const keys = program.command('keys').description('API keys');
keys
  .command('create')
  .description('create an API key for an account (default: the first account); prints it once')
  .option('--account <id>', 'account id')
  .option('--name <name>', 'key name', 'cli')
  .option('--format <format>', 'nube (nube_sk_live_...) or e2b (e2b_<hex>, taken as is by E2B\'s SDKs)', 'nube')
  .action((opts: { account?: string; name: string; format: string }) =>
    withAccounts(async (svc) => {
      if (opts.format !== 'nube' && opts.format !== 'e2b') throw new Error('--format is nube or e2b');
      const accountId = opts.account ?? (await svc.listAccounts())[0]?.id;
      if (!accountId) throw new Error('no account yet: run `nube accounts create` or start the server once');
      const { key, secret } = await svc.createKey(accountId, opts.name, generateOwnerKey(opts.format));
      console.log(JSON.stringify({ id: key.id, accountId, apiKey: secret }, null, 2));
    }),
  );
keys
  .command('list')
  .description('list API keys (never their secrets)')
  .option('--account <id>', 'only this account')
  .action((opts: { account?: string }) =>
    withAccounts(async (svc) => console.log(JSON.stringify(await svc.listKeys(opts.account), null, 2))),
  );
keys
  .command('revoke <keyId>')
  .description('revoke an API key')
  .action((keyId: string) =>
    withAccounts(async (svc) => {
      await svc.revokeKey(keyId);
      console.log(`revoked ${keyId}`);
    }),
  );

const audit = program.command('audit').description('the audit log');
audit
  .command('verify')
  .description("check every account's hash chain (or one's); exits 1 naming the first edited or removed entry")
  .option('--account <id>', 'only this account')
  .action(async (opts: { account?: string }) => {
    const cfg = config();
    const store = openStore({ databaseUrl: cfg.databaseUrl, dataDir: cfg.dataDir });
    try {
      await migrateToLatest(store.db, ALL_MIGRATIONS);
      const r = await verifyChains(store.db, auditKey(cfg.secret), opts.account);
      for (const p of r.problems) {
        const at = p.entryId ? `entry ${p.entryId} (seq ${p.seq})` : `after entry ${p.seq - 1}`;
        console.error(`account ${p.accountId || '(none: refused credentials)'}: ${at}: ${p.reason}`);
      }
      console.log(`${r.problems.length ? 'BROKEN' : 'ok'}: ${r.entries} entries checked in ${r.accounts} chains, ${r.problems.length} broken`);
      if (r.problems.length) process.exitCode = 1;
    } finally {
      await store.close();
    }
  });

/** The node registry straight on the store (the deployment's DATABASE_URL), without starting a node. */
async function withNodes<T>(fn: (nodes: NodeRegistry) => Promise<T>): Promise<T> {
  const cfg = config();
  const store = openStore({ databaseUrl: cfg.databaseUrl, dataDir: cfg.dataDir });
  try {
    await migrateToLatest(store.db, ALL_MIGRATIONS);
    return await fn(new NodeRegistry(store.db, cfg.nodes, { driver: cfg.sandboxes.driver, version: VERSION }, console));
  } finally {
    await store.close();
  }
}

const nodes = program.command('nodes').description('the nodes of a many-host nube (processes holding sandboxes and databases)');
nodes
  .command('list')
  .description('list nodes: state (active, cordoned, draining), up or down, capacity and what each holds')
  .action(() => withNodes(async (reg) => console.log(JSON.stringify(await reg.list(), null, 2))));
const setState = (state: NodeState, done: string) => (id: string) =>
  withNodes(async (reg) => {
    if (!(await reg.setState(id, state))) {
      console.error(`nube: no node ${id} (see nube nodes list)`);
      process.exitCode = 1;
      return;
    }
    console.log(`${done} ${id}`);
  });
nodes.command('cordon <id>').description('place no new sandbox or database on a node').action(setState('cordoned', 'cordoned'));
nodes
  .command('drain <id>')
  .description('place nothing new on a node and move its databases to other nodes (the node itself moves them, one at a time)')
  .option('--wait', 'wait until the node holds no database (as its heartbeats report)')
  .action((id: string, opts: { wait?: boolean }) =>
    withNodes(async (reg) => {
      if (!(await reg.setState(id, 'draining'))) {
        console.error(`nube: no node ${id} (see nube nodes list)`);
        process.exitCode = 1;
        return;
      }
      console.log(`draining ${id}`);
      while (opts.wait) {
        const node = (await reg.list()).find((n) => n.id === id);
        if (!node || node.databases === 0) break;
        if (node.status === 'down') {
          console.error(`nube: node ${id} is down; its databases are restored elsewhere by the other nodes`);
          process.exitCode = 1;
          break;
        }
        console.log(`${node.databases} database(s) left on ${id}`);
        await new Promise((r) => setTimeout(r, 2000));
      }
    }),
  );
nodes.command('uncordon <id>').description('let a cordoned or draining node take new resources again').action(setState('active', 'uncordoned'));

program
  .command('templates')
  .description('sandbox templates')
  .command('build <name>')
  .description('build a sandbox template (base, code-interpreter) with mmdebstrap, printing its progress')
  .option('--force', 'rebuild even when a build of the current recipe exists')
  .action(async (name: string, opts: { force?: boolean }) => {
    const { runtime } = makeRuntime(config());
    try {
      const t = await runtime.buildTemplate(
        name,
        (line, p) => process.stdout.write(`${p ? `[${String(p.percent).padStart(3)} %] ` : ''}${line}\n`),
        { force: opts.force },
      );
      console.log(JSON.stringify(t, null, 2));
    } finally {
      await runtime.close();
    }
  });

program
  .command('doctor')
  .description('check the host and the configuration; prints what to fix, exits 1 when something blocks nube or its sandboxes')
  .option('--json', 'print the findings as JSON')
  .action(async (opts: { json?: boolean }) => {
    const { reports, exitCode } = await doctor();
    process.stdout.write(opts.json ? `${JSON.stringify(reports, null, 2)}\n` : formatReport(reports));
    process.exitCode = exitCode;
  });

program
  .command('cleanup')
  .description(
    'remove what a stopped nube left on the host (store mount, bridge, nft table, empty cgroups, run dir) when no sandbox needs it; refuses while nube runs on the data dir or its sandboxes run',
  )
  .option('--force', "kill this data dir's running sandboxes first (their files stay: nube starts them again when it starts)")
  .option('--json', 'print the result as JSON')
  .action(async (opts: { force?: boolean; json?: boolean }) => {
    const r = await cleanup(config(), !!opts.force);
    process.stdout.write(opts.json ? `${JSON.stringify(r, null, 2)}\n` : formatCleanup(r));
    process.exitCode = r.refused || r.failed.length ? 1 : 0;
  });

const service = program.command('service').description('nube as a systemd service (unit nube.service, configuration in /etc/nube/env)');
service
  .command('install')
  .description("write the unit and /etc/nube/env (this shell's NUBE_* configuration; an existing file is kept), enable and start it")
  .option('--no-start', 'write the files only')
  .option('--unit-dir <dir>', 'where systemd reads units', DEFAULT_PATHS.unitDir)
  .option('--environment-file <file>', 'the environment file', DEFAULT_PATHS.envFile)
  .action((opts: { start: boolean; unitDir: string; environmentFile: string }) => {
    const r = installService({
      root: packageRoot(dirname(fileURLToPath(import.meta.url))),
      env: process.env,
      dataDir: config().dataDir,
      paths: { unitDir: opts.unitDir, envFile: opts.environmentFile },
      start: opts.start,
    });
    console.log(`wrote ${r.unitFile}`);
    console.log(r.keptEnv ? `kept ${r.envFile} as it was (edit it, then: systemctl restart nube)` : `wrote ${r.envFile} (mode 600)`);
    if (r.started) console.log('nube.service is enabled and started: nube service status, nube service logs');
    else {
      console.log(`not started: ${r.notStarted}`);
      if (opts.start) process.exitCode = 1;
    }
  });
service
  .command('status')
  .description('systemctl status nube.service')
  .action(() => {
    process.exitCode = passThrough('status');
  });
service
  .command('logs')
  .description("nube.service's log from the journal")
  .option('-f, --follow', 'keep printing new lines')
  .action((opts: { follow?: boolean }) => {
    process.exitCode = passThrough('logs', opts.follow);
  });
service
  .command('uninstall')
  .description('stop and disable nube.service and remove its unit (sandboxes keep running); --purge removes /etc/nube/env too')
  .option('--purge', 'remove the environment file too')
  .option('--unit-dir <dir>', 'where systemd reads units', DEFAULT_PATHS.unitDir)
  .option('--environment-file <file>', 'the environment file', DEFAULT_PATHS.envFile)
  .action((opts: { purge?: boolean; unitDir: string; environmentFile: string }) => {
    const { removed } = uninstallService({ purge: opts.purge, paths: { unitDir: opts.unitDir, envFile: opts.environmentFile } });
    console.log(removed.length ? `removed ${removed.join(', ')}` : 'nothing to remove');
  });

program.parseAsync().catch((e: unknown) => {
  console.error(`nube: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
