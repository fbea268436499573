// Runs a TypeScript file of this repository inside a User-mode Linux kernel (Debian's
// `user-mode-linux`, no hardware virtualization needed) whose only cgroup hierarchy is the unified
// one: a real cgroup v2 kernel with memory, cpu and pids free, on a host whose own controllers are
// bound to v1. The guest's root is the host's filesystem (hostfs, as root: what it writes lands on
// the host), with its own proc, sys, cgroup2, devtmpfs (the kernel mounts it) and a private /tmp.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

export const UML_KERNEL = '/usr/bin/linux.uml';

export function umlAvailable(): boolean {
  return existsSync(UML_KERNEL);
}

/**
 * Why the guest could not run on this host, when the kernel says so: Debian 12's UML (6.1) cannot set
 * the floating-point state of its processes on hosts whose CPUs have a larger xsave area (AMX, on
 * newer Xeons), and its init dies at once. Nothing nube can change; the guest works elsewhere.
 */
export function umlHostProblem(console: string): string | null {
  if (console.includes('ptrace set fp regs failed')) {
    return "this host's CPU (xsave state with AMX) is not supported by Debian 12's user-mode-linux 6.1: the guest's init dies at start";
  }
  return null;
}

const REPO = fileURLToPath(new URL('../../../../../../', import.meta.url));
const shq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Boots the guest, runs `node --import tsx <script>` in the repo with `env`, powers off; its console output. */
export async function runInUml(script: string, env: Record<string, string>, o: { memMb?: number; timeoutMs?: number } = {}) {
  // Outside /tmp: the guest mounts its own /tmp over the host's.
  const dir = await mkdtemp('/var/tmp/nube-uml-');
  const init = `${dir}/init`;
  const exports = Object.entries(env)
    .map(([k, v]) => `export ${k}=${shq(v)}`)
    .join('\n');
  await writeFile(
    init,
    `#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs tmp /tmp
${exports}
cd ${shq(REPO)}
node --import tsx ${shq(script)} 2>&1
poweroff -f
`,
  );
  await chmod(init, 0o755);
  try {
    return await new Promise<string>((resolve, reject) => {
      const args = [`mem=${o.memMb ?? 1024}M`, 'root=/dev/root', 'rootfstype=hostfs', 'rootflags=/', 'rw', `init=${init}`];
      const child = spawn(UML_KERNEL, args, { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir });
      let text = '';
      child.stdout.on('data', (c: Buffer) => {
        text += c.toString();
      });
      child.stderr.on('data', (c: Buffer) => {
        text += c.toString();
      });
      const timer = setTimeout(() => child.kill('SIGKILL'), o.timeoutMs ?? 300_000);
      child.on('error', reject);
      child.on('close', () => {
        clearTimeout(timer);
        resolve(text);
      });
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
