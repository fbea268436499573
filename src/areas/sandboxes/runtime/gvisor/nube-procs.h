// nube-procs.h: what nube-run and nube-agent share (included by both; one translation unit each).
// The namespace seccomp rule for every command, and the sweep that kills what a command left behind.
#include <dirent.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
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

// Kill the command's group and everything else that descends from us, and reap it all. We are a
// child subreaper, so once the command is reaped every process still descending from us has an
// ancestor among our children: with none left (ECHILD) nothing is, and the slow /proc walk is only
// needed while some remain. While the command still runs (deadline, kill) its group is stopped and
// its descendants are found by ancestry first: gVisor was seen to hand the orphans of a command
// killed this way to pid 1 rather than to us.
static void reap_all(pid_t child, int running) {
  if (running) {
    kill(-child, SIGSTOP);
    kill_descendants();
  }
  kill(-child, SIGKILL);
  for (int round = 0; round < 1000; round++) {
    pid_t r;
    while ((r = waitpid(-1, NULL, WNOHANG)) > 0) {}
    if (r < 0 && errno == ECHILD) return;
    kill(-child, SIGKILL);
    kill_descendants();
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
    if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD) return;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

