// nube-run: the process nube starts inside a gVisor sandbox for every exec and /bg command.
//   nube-run <timeout-ms, 0 = none> <argv...>
// It becomes a child subreaper, runs argv in its own process group, and when argv ends (or the
// deadline passes) kills every process it left behind: the group, and anything that left the group
// (setsid) since orphans are reparented to us. Exit code: argv's, 128+N for signal N, 124 on timeout.
// SIGTERM/SIGINT/SIGHUP are forwarded to the group; SIGUSR1 kills the group and the rest (the host's
// SIGKILL after a grace period). Built static, bind-mounted read-only at /.nube/nube-run.
//   nube-run keep <status-file> <argv...>
// On the host: the parent of `runsc run --detach`. Writes argv's exit code to the status file when it
// ends, then stays the subreaper of the sandbox processes runsc leaves behind (so they are reaped the
// moment they die, whatever the host's pid 1 does) and exits when none is left.
#define _GNU_SOURCE
#include <dirent.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t self_pid;

// The same rule as the namespaces driver's filter: no new namespaces inside (unshare, setns, clone
// with a namespace flag: EPERM; clone3: ENOSYS so libc falls back to clone). gVisor would implement
// them in its own kernel, but a user namespace hands root there CAP_SYS_ADMIN (mounts and more of the
// sentry's code to reach). gVisor sets no_new_privs on every process anyway.
static void no_namespaces(void) {
  const unsigned ns = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 8),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_unshare, 5, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setns, 4, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 5, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 5),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, ns, 0, 3),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
    perror("nube-run: seccomp");
    _exit(126);
  }
}

static pid_t parent_of(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  int ppid = -1;
  if (sscanf(p + 2, "%*c %d", &ppid) != 1) return -1;
  return ppid;
}

// SIGKILL every process whose ancestry leads to us; returns how many were signalled.
static int kill_descendants(void) {
  int count = 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    pid_t pid = atoi(e->d_name);
    if (pid <= 1 || pid == self_pid) continue;
    for (pid_t p = pid, depth = 0; p > 1 && depth < 64; depth++) {
      p = parent_of(p);
      if (p == self_pid) {
        kill(pid, SIGKILL);
        count++;
        break;
      }
    }
  }
  closedir(d);
  return count;
}

static void reap_all(pid_t child) {
  kill(-child, SIGKILL);
  for (int round = 0; round < 1000; round++) {
    kill_descendants();
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
    pid_t r = waitpid(-1, NULL, WNOHANG);
    if (r < 0 && errno == ECHILD) return;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

static int keep(int argc, char **argv) {
  if (argc < 4) return 127;
  pid_t child = fork();
  if (child < 0) return 126;
  if (child == 0) {
    execvp(argv[3], argv + 3);
    fprintf(stderr, "nube-run: %s: %s\n", argv[3], strerror(errno));
    _exit(127);
  }
  int status = 0, code = 1;
  for (;;) {
    pid_t r = waitpid(-1, &status, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return code;
    if (r != child) continue;
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    FILE *f = fopen(tmp, "w");
    if (f) {
      fprintf(f, "%d\n", code);
      fclose(f);
      rename(tmp, argv[2]);
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: nube-run <timeout-ms> argv...\n");
    return 127;
  }
  self_pid = getpid();
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (!strcmp(argv[1], "keep")) return keep(argc, argv);
  long timeout_ms = atol(argv[1]);
  sigset_t set, old;
  sigemptyset(&set);
  int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1};
  for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&set, sigs[i]);
  sigprocmask(SIG_BLOCK, &set, &old);
  pid_t child = fork();
  if (child < 0) return 126;
  if (child == 0) {
    setpgid(0, 0);
    sigprocmask(SIG_SETMASK, &old, NULL);
    no_namespaces();
    execvp(argv[2], argv + 2);
    fprintf(stderr, "nube-run: %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  setpgid(child, child);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  int status = 0;
  for (;;) {
    pid_t r;
    while ((r = waitpid(-1, &status, WNOHANG)) > 0) {
      if (r == child) goto done;
    }
    struct timespec wait = {0, 200000000};
    if (timeout_ms > 0) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      long left = timeout_ms - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
      if (left <= 0) {
        reap_all(child);
        return 124;
      }
      if (left < 200) wait.tv_nsec = left * 1000000;
    }
    int sig = sigtimedwait(&set, NULL, &wait);
    if (sig == SIGUSR1) kill(-child, SIGKILL);
    else if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) kill(-child, sig);
  }
done:
  reap_all(child);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
