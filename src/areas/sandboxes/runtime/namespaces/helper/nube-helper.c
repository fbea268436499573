/*
 * nube-helper: the small privileged launcher of the namespaces sandbox driver.
 *
 *   nube-helper bpf <file>            write the seccomp filter as raw BPF (for bwrap --seccomp)
 *   nube-helper enter [opts] -- argv  run argv inside the namespaces of a sandbox
 *   nube-helper cg DIR... -- argv     join cgroups, then exec argv (starts a sandbox's init)
 *
 * Why C and not nsenter: one process does what would otherwise take a shell, nsenter and a cgroup
 * write (exec round trip ~2 ms), and it applies the same seccomp filter as the sandbox's init, which
 * a process entered with setns would otherwise escape. The parent stays on the host side to wait, so
 * it can enforce the deadline on the whole process group and sweep children left behind.
 *
 * enter options:
 *   --target PID        a process inside the sandbox (its namespaces and root are entered)
 *   --cgroup DIR        join this cgroup (repeatable)
 *   --exec-cgroup DIR   join, and when the command ends kill what is left in it and rmdir it
 *   --cwd DIR           working directory inside (default /)
 *   --timeout-ms N      kill the process group (and the exec cgroups) after N ms
 *   --status-fd N       write "pid P\n" at start and "exit C" / "signal S" (+ " timeout") at the end
 *   --status-file F     write the final status to F (atomically, via F.tmp) - survives nube restarts
 *   --pid-file F        write the pid of the command (= its process group) to F
 * The environment of the command is the helper's own environment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>
#include <linux/sched.h>

#define MAX_CG 16

static void die(const char *what) {
  fprintf(stderr, "nube-helper: %s: %s\n", what, strerror(errno));
  _exit(125);
}

/* Syscalls that have no business in an agent's sandbox and widen the kernel attack surface. */
static const char *blocked[] = {
  "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
  "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
  "fspick", "mount_setattr", "swapon", "swapoff", "acct", "open_by_handle_at", "name_to_handle_at",
  "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "unshare", "setns",
  "lookup_dcookie", "quotactl", "syslog", "iopl", "ioperm", "settimeofday", "clock_settime",
  "adjtimex", "clock_adjtime", "reboot", NULL,
};

static scmp_filter_ctx build_filter(void) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) die("seccomp_init");
  for (int i = 0; blocked[i]; i++) {
    int nr = seccomp_syscall_resolve_name(blocked[i]);
    if (nr == __NR_SCMP_ERROR) continue;
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) < 0) die(blocked[i]);
  }
  /* New namespaces from inside: clone with namespace flags is refused; clone3 answers ENOSYS so
     libc falls back to clone, whose flags (unlike clone3's struct) a filter can inspect. */
  unsigned long ns = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS |
                     CLONE_NEWIPC | CLONE_NEWCGROUP;
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                       SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)) < 0)
    die("clone rule");
  for (unsigned long bit = 1; bit; bit <<= 1) {
    if (!(ns & bit) || bit == CLONE_NEWUSER) continue;
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, bit, bit)) < 0)
      die("clone rule");
  }
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) < 0) die("clone3 rule");
  return ctx;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n < 0 ? -1 : 0;
}

static void write_status_file(const char *path, const char *text) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (write(fd, text, strlen(text)) < 0) { close(fd); return; }
  fsync(fd);
  close(fd);
  rename(tmp, path);
}

/* Kill everything still in an exec cgroup (children that left the process group with setsid). */
static void sweep(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  for (int round = 0; round < 50; round++) {
    FILE *f = fopen(path, "re");
    if (!f) return;
    int pid, any = 0;
    while (fscanf(f, "%d", &pid) == 1) { kill(pid, SIGKILL); any = 1; }
    fclose(f);
    if (!any) break;
    usleep(2000);
  }
  rmdir(dir);
}

static volatile sig_atomic_t timed_out = 0, stop_asked = 0;
static void on_alarm(int sig) { (void)sig; timed_out = 1; }
static void on_stop(int sig) { (void)sig; stop_asked = 1; }

static int cmd_enter(int argc, char **argv) {
  int target = 0, status_fd = -1, ncg = 0, nexec = 0;
  long timeout_ms = 0;
  const char *cwd = "/", *status_file = NULL, *pid_file = NULL;
  const char *cgroups[MAX_CG], *exec_cgroups[MAX_CG];
  int i = 2;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) { i++; break; }
    if (i + 1 >= argc) { fprintf(stderr, "nube-helper: %s needs a value\n", a); return 125; }
    const char *v = argv[++i];
    if (!strcmp(a, "--target")) target = atoi(v);
    else if (!strcmp(a, "--cgroup") && ncg < MAX_CG) cgroups[ncg++] = v;
    else if (!strcmp(a, "--exec-cgroup") && nexec < MAX_CG) exec_cgroups[nexec++] = v;
    else if (!strcmp(a, "--cwd")) cwd = v;
    else if (!strcmp(a, "--timeout-ms")) timeout_ms = atol(v);
    else if (!strcmp(a, "--status-fd")) status_fd = atoi(v);
    else if (!strcmp(a, "--status-file")) status_file = v;
    else if (!strcmp(a, "--pid-file")) pid_file = v;
    else { fprintf(stderr, "nube-helper: unknown option %s\n", a); return 125; }
  }
  if (target <= 0 || i >= argc) { fprintf(stderr, "nube-helper: enter needs --target and a command\n"); return 125; }
  char **cmd = &argv[i];

  static const char *names[] = {"ipc", "uts", "net", "pid", "mnt", "user"};
  static const int types[] = {CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWNS, CLONE_NEWUSER};
  int fds[6];
  char path[4096];
  for (int k = 0; k < 6; k++) {
    snprintf(path, sizeof path, "/proc/%d/ns/%s", target, names[k]);
    fds[k] = open(path, O_RDONLY | O_CLOEXEC);
    if (fds[k] < 0) die(path);
  }
  snprintf(path, sizeof path, "/proc/%d/root", target);
  int rootfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) die(path);
  scmp_filter_ctx filter = build_filter();
  /* The pid namespace of the caller never changes; only children are born inside it. */
  if (setns(fds[3], CLONE_NEWPID) < 0) die("setns pid");

  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    setpgid(0, 0);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    for (int k = 0; k < ncg; k++) {
      snprintf(path, sizeof path, "%s/cgroup.procs", cgroups[k]);
      if (write_file(path, "0") < 0) die(path);
    }
    for (int k = 0; k < nexec; k++) {
      snprintf(path, sizeof path, "%s/cgroup.procs", exec_cgroups[k]);
      if (write_file(path, "0") < 0) die(path);
    }
    for (int k = 0; k < 6; k++) {
      if (k == 3) continue;
      if (k == 5) {
        if (fchdir(rootfd) < 0) die("fchdir root");
        if (chroot(".") < 0) die("chroot");
      }
      if (setns(fds[k], types[k]) < 0) die(names[k]);
    }
    if (setgroups(0, NULL) < 0) die("setgroups");
    if (setgid(0) < 0) die("setgid");
    if (setuid(0) < 0) die("setuid");
    if (chdir(cwd) < 0) {
      fprintf(stderr, "cwd %s: %s\n", cwd, strerror(errno));
      _exit(126);
    }
    if (seccomp_load(filter) < 0) die("seccomp_load");
    execvp(cmd[0], cmd);
    fprintf(stderr, "%s: %s\n", cmd[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  setpgid(child, child); /* also from the parent, so a kill right after fork finds the group */
  for (int k = 0; k < 6; k++) close(fds[k]);
  close(rootfd);
  seccomp_release(filter);
  char line[128];
  if (pid_file) {
    snprintf(line, sizeof line, "%d\n", child);
    write_status_file(pid_file, line);
  }
  if (status_fd >= 0) {
    snprintf(line, sizeof line, "pid %d\n", child);
    if (write(status_fd, line, strlen(line)) < 0) { /* the caller went away; keep going */ }
  }
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  if (timeout_ms > 0) {
    struct itimerval it = {0};
    it.it_value.tv_sec = timeout_ms / 1000;
    it.it_value.tv_usec = (timeout_ms % 1000) * 1000;
    setitimer(ITIMER_REAL, &it, NULL);
  }
  int st = 0, killed = 0;
  for (;;) {
    pid_t r = waitpid(child, &st, 0);
    if (r == child) break;
    if (r < 0 && errno != EINTR) die("waitpid");
    if ((timed_out || stop_asked) && !killed) {
      kill(-child, SIGKILL);
      for (int k = 0; k < nexec; k++) sweep(exec_cgroups[k]);
      killed = 1;
    }
  }
  /* A background child started by the shell dies when the shell ends. */
  if (nexec > 0) {
    kill(-child, SIGKILL);
    for (int k = 0; k < nexec; k++) sweep(exec_cgroups[k]);
  }
  int code;
  if (WIFEXITED(st)) {
    code = WEXITSTATUS(st);
    snprintf(line, sizeof line, "exit %d%s\n", code, timed_out ? " timeout" : "");
  } else {
    code = 128 + WTERMSIG(st);
    snprintf(line, sizeof line, "signal %d%s\n", WTERMSIG(st), timed_out ? " timeout" : "");
  }
  if (status_fd >= 0 && write(status_fd, line, strlen(line)) < 0) { /* caller gone */ }
  if (status_file) write_status_file(status_file, line);
  return code;
}

static int cmd_bpf(const char *out) {
  scmp_filter_ctx ctx = build_filter();
  int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die(out);
  if (seccomp_export_bpf(ctx, fd) < 0) die("seccomp_export_bpf");
  close(fd);
  seccomp_release(ctx);
  return 0;
}

static int cmd_cg(int argc, char **argv) {
  int i = 2;
  char path[4096];
  for (; i < argc && strcmp(argv[i], "--"); i++) {
    snprintf(path, sizeof path, "%s/cgroup.procs", argv[i]);
    if (write_file(path, "0") < 0) die(path);
  }
  if (i + 1 >= argc) { fprintf(stderr, "nube-helper: cg needs -- command\n"); return 125; }
  execvp(argv[i + 1], &argv[i + 1]);
  die(argv[i + 1]);
  return 125;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "cg")) return cmd_cg(argc, argv);
  if (argc >= 3 && !strcmp(argv[1], "bpf")) return cmd_bpf(argv[2]);
  if (argc >= 2 && !strcmp(argv[1], "enter")) return cmd_enter(argc, argv);
  fprintf(stderr, "usage: nube-helper bpf FILE | nube-helper enter [options] -- command...\n");
  return 125;
}
