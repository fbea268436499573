/*
 * nube-helper: the small privileged launcher of the namespaces sandbox driver.
 *
 *   nube-helper bpf <file>            write the seccomp filter as raw BPF (for bwrap --seccomp)
 *   nube-helper enter [opts] -- argv  run argv inside the namespaces of a sandbox
 *   nube-helper cg DIR... -- argv     join cgroups, then exec argv (starts a sandbox's init)
 *   nube-helper serve SOCKET [SHDIR]  the spawner: `enter` per connection on a unix socket (below),
 *                                     or the start of a sandbox (launch.c)
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
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

extern char **environ;
#include <linux/sched.h>
#include "../../static-sh-wait.h"

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

/*
 * The filter as a BPF program, generated once per process (serve: once for all its sessions, which
 * inherit it). libseccomp would regenerate the program at every seccomp_load; loading the exported
 * program does what seccomp_load does with the default attributes: no_new_privs, then
 * SECCOMP_SET_MODE_FILTER without flags.
 */
static struct sock_fprog filter_prog;

static void prepare_filter(void) {
  if (filter_prog.filter) return;
  scmp_filter_ctx ctx = build_filter();
  int fd = memfd_create("nube-seccomp", MFD_CLOEXEC);
  if (fd < 0) die("memfd_create");
  if (seccomp_export_bpf(ctx, fd) < 0) die("seccomp_export_bpf");
  seccomp_release(ctx);
  off_t size = lseek(fd, 0, SEEK_END);
  if (size <= 0 || size % sizeof(struct sock_filter)) die("seccomp program size");
  struct sock_filter *code = malloc((size_t)size);
  if (!code || pread(fd, code, (size_t)size, 0) != size) die("read seccomp program");
  close(fd);
  filter_prog.len = (unsigned short)(size / sizeof(struct sock_filter));
  filter_prog.filter = code;
}

static int load_filter(void) {
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &filter_prog);
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n < 0 ? -1 : 0;
}

/* A small file (a /proc one) read whole into buf, NUL-terminated: its length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t r = read(fd, buf, len - 1);
  close(fd);
  if (r >= 0) buf[r] = 0;
  return r;
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

/*
 * Kill everything still in an exec cgroup (children that left the process group with setsid), until it
 * is empty. It is not removed here: rmdir takes the cgroup mutex, which a migration elsewhere on the
 * host (the next prepared session joining its cgroups) holds for an RCU grace period, so removal comes
 * after the command's status has gone out (remove_exec_cgroups).
 */
static void sweep(const char *dir) {
  char path[4096], buf[4096];
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  for (int round = 0; round < 50; round++) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    int any = 0;
    size_t have = 0;
    ssize_t r;
    /* One pid per line; a line cut by the buffer's end is kept for the next read. */
    while ((r = read(fd, buf + have, sizeof buf - 1 - have)) > 0) {
      have += (size_t)r;
      buf[have] = 0;
      char *p = buf, *nl;
      while ((nl = strchr(p, '\n'))) {
        int pid = atoi(p);
        if (pid > 0) { kill(pid, SIGKILL); any = 1; }
        p = nl + 1;
      }
      have = strlen(p);
      memmove(buf, p, have);
    }
    close(fd);
    if (!any) return;
    usleep(2000);
  }
}

static volatile sig_atomic_t timed_out = 0, stop_asked = 0;
static void on_alarm(int sig) { (void)sig; timed_out = 1; }
static void on_stop(int sig) { (void)sig; stop_asked = 1; }

/* A command to run inside a sandbox: from the command line (enter) or from a request (serve). */
struct entry {
  int target, ncg, nexec;
  int resident; /* serve: "r:1", a resident session: the commands come in requests of their own (resident.c) */
  long timeout_ms;
  const char *cwd;
  const char *cgroups[MAX_CG], *exec_cgroups[MAX_CG];
  char **cmd;
  char **env; /* NULL: the helper's own environment */
};

/* The target's namespaces and root, opened before the fork (the pid namespace is joined for children). */
struct opened {
  int fds[6], rootfd;
};

static const char *ns_names[] = {"ipc", "uts", "net", "pid", "mnt", "user"};
static const int ns_types[] = {CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWNS, CLONE_NEWUSER};

/* 0, or -1 with errno set and `what` naming the step that failed. */
static int open_target(int target, struct opened *o, char *what, size_t len) {
  char path[4096];
  for (int k = 0; k < 6; k++) o->fds[k] = -1;
  o->rootfd = -1;
  for (int k = 0; k < 6; k++) {
    snprintf(path, sizeof path, "/proc/%d/ns/%s", target, ns_names[k]);
    o->fds[k] = open(path, O_RDONLY | O_CLOEXEC);
    if (o->fds[k] < 0) { snprintf(what, len, "%s", path); return -1; }
  }
  snprintf(path, sizeof path, "/proc/%d/root", target);
  o->rootfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (o->rootfd < 0) { snprintf(what, len, "%s", path); return -1; }
  prepare_filter();
  /* The pid namespace of the caller never changes; only children are born inside it. */
  if (setns(o->fds[3], CLONE_NEWPID) < 0) { snprintf(what, len, "setns pid"); return -1; }
  return 0;
}

static void close_target(struct opened *o) {
  for (int k = 0; k < 6; k++) if (o->fds[k] >= 0) close(o->fds[k]);
  if (o->rootfd >= 0) close(o->rootfd);
}

/* In the forked child: join the cgroups, enter the namespaces and root, become root inside, load the
   seccomp filter and exec. Never returns; failures exit 125 (setup), 126 (cwd, exec) or 127. */
static int parse_request(char *buf, size_t len, struct entry *e, size_t *stdin_len);

/*
 * The static sh (scripts/install-static-sh.sh: Debian's dash 0.5.12-2 linked statically, no loader and
 * no relocations at start): `serve SOCKET DIR` loads DIR/sh into a sealed memfd and DIR/dash.ref
 * (Debian's own /bin/dash) into memory. A command whose argv[0] is /bin/sh runs the static build when
 * the sandbox's /bin/sh is that same dash byte for byte (compared inside the sandbox by each command's
 * process, a prepared one while it waits, then still the same file at the exec: so a /bin/sh the
 * sandbox changed or relinked is the one that runs), with the same argv.
 */
static int static_sh = -1;
static unsigned char *sh_ref;
static size_t sh_ref_len;

static unsigned char *read_whole(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > (8 << 20)) { if (fd >= 0) close(fd); return NULL; }
  unsigned char *b = malloc((size_t)st.st_size);
  if (b && read_all(fd, b, (size_t)st.st_size) < 0) { free(b); b = NULL; }
  close(fd);
  *len = (size_t)st.st_size;
  return b;
}

/* Absent or unreadable files leave the static sh off: every command then runs as it would anyway. */
static void load_static_sh(const char *dir) {
  char path[4096];
  size_t len = 0;
  snprintf(path, sizeof path, "%s/sh", dir);
  unsigned char *sh = read_whole(path, &len);
  snprintf(path, sizeof path, "%s/dash.ref", dir);
  sh_ref = sh ? read_whole(path, &sh_ref_len) : NULL;
  if (!sh || !sh_ref) { free(sh); free(sh_ref); sh_ref = NULL; return; }
  int fd = (int)syscall(SYS_memfd_create, "nube-sh", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd >= 0 && write(fd, sh, len) == (ssize_t)len &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0) {
    static_sh = fd;
  } else if (fd >= 0) {
    close(fd);
  }
  free(sh);
}

/* Inside the sandbox: is its /bin/sh Debian's dash, byte for byte? Its identity goes into `seen`.
   (Non-blocking: a FIFO made /bin/sh must not hold the command up; only a regular file of the
   reference's size is read.) */
static int sh_is_ref(struct stat *seen) {
  if (static_sh < 0) return 0;
  int fd = open("/bin/sh", O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return 0;
  int same = 0;
  if (fstat(fd, seen) == 0 && S_ISREG(seen->st_mode) && (size_t)seen->st_size == sh_ref_len) {
    unsigned char *b = malloc(sh_ref_len);
    same = b && read_all(fd, b, sh_ref_len) == 0 && memcmp(b, sh_ref, sh_ref_len) == 0;
    free(b);
  }
  close(fd);
  return same;
}

/* Still the file that was compared: same device, inode, size, mtime and ctime (a write or a chmod
   changes ctime, a replacement the inode). */
static int same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
         a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
         a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* execvp, or the static sh for /bin/sh when /bin/sh is the reference dash: still the file found to be
   it ahead (`ref`, its identity; a stat) or, when that is not so (none was found, or it changed since),
   compared now; falling back to execvp if the kernel refuses the memfd. */
static void exec_command(char **cmd, const struct stat *ref) {
  struct stat now;
  if (static_sh >= 0 && !strcmp(cmd[0], "/bin/sh") &&
      ((ref && stat("/bin/sh", &now) == 0 && same_file(&now, ref)) || sh_is_ref(&now))) {
    syscall(SYS_execveat, static_sh, "", cmd, environ, AT_EMPTY_PATH);
  }
  execvp(cmd[0], cmd);
}

/* Join these cgroups (the calling process); a failure exits 125 with the path named. */
static void join_cgroups(const char *const *dirs, int n) {
  char path[4096];
  for (int k = 0; k < n; k++) {
    snprintf(path, sizeof path, "%s/cgroup.procs", dirs[k]);
    if (write_file(path, "0") < 0) die(path);
  }
}

/* Enter the target's namespaces (all but pid, joined for children already) and root, and become root
   inside. After this the process holds nothing of the host's but what it already had open. */
static void enter_namespaces(struct opened *o) {
  for (int k = 0; k < 6; k++) {
    if (k == 3) continue;
    if (k == 5) {
      if (fchdir(o->rootfd) < 0) die("fchdir root");
      if (chroot(".") < 0) die("chroot");
    }
    if (setns(o->fds[k], ns_types[k]) < 0) die(ns_names[k]);
  }
  if (setgroups(0, NULL) < 0) die("setgroups");
  if (setgid(0) < 0) die("setgid");
  if (setuid(0) < 0) die("setuid");
}

/* A prepared command (inside the sandbox, its seccomp filter loaded, stdio its own pipes): waits for
   the rest of its request (cwd, env, argv) on ctl and runs it. When /bin/sh was found to be Debian's
   dash (sh_ok, its identity in sh_seen), the static sh's execve is made now, before the command is
   known (its wait mode, static-sh-wait.c: it reads the rest of the request from ctl itself, then runs
   as that dash or executes what was asked), with an empty environment: nothing of the host's is in
   the waiting process, which root inside may inspect. Never returns. */
static void await_command(int ctl, const struct entry *e, int sh_ok, struct stat *sh_seen) {
  if (sh_ok) {
    struct sh_wait w;
    char **wait_argv = sh_wait_argv(&w, "h", ctl, sh_seen);
    char *no_env[] = {NULL};
    if (fcntl(ctl, F_SETFD, 0) == 0) syscall(SYS_execveat, static_sh, "", wait_argv, no_env, AT_EMPTY_PATH);
    /* Refused (execveat failed): the command is read and run here, as without the static sh. */
    fcntl(ctl, F_SETFD, FD_CLOEXEC);
  }
  unsigned char lb[4];
  if (read_all(ctl, lb, 4) < 0) _exit(125);
  size_t len = lb[0] | (lb[1] << 8) | (lb[2] << 16) | ((size_t)lb[3] << 24);
  char *req = len > 0 && len <= (16u << 20) ? malloc(len + 1) : NULL;
  if (!req || read_all(ctl, req, len) < 0) _exit(125);
  req[len] = 0;
  close(ctl);
  struct entry rest = *e;
  size_t ignored = 0;
  rest.cmd = NULL;
  rest.env = NULL;
  rest.resident = 0;
  if (req[len - 1] != 0 || parse_request(req, len - 1, &rest, &ignored) < 0) {
    fprintf(stderr, "nube-helper: bad request\n");
    _exit(125);
  }
  if (chdir(rest.cwd) < 0) {
    fprintf(stderr, "cwd %s: %s\n", rest.cwd, strerror(errno));
    _exit(126);
  }
  if (rest.env) environ = rest.env;
  exec_command(rest.cmd, sh_ok ? sh_seen : NULL);
  fprintf(stderr, "%s: %s\n", rest.cmd[0], strerror(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

static void enter_child(const struct entry *e, struct opened *o) {
  setpgid(0, 0);
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  join_cgroups(e->cgroups, e->ncg);
  join_cgroups(e->exec_cgroups, e->nexec);
  enter_namespaces(o);
  if (chdir(e->cwd) < 0) {
    fprintf(stderr, "cwd %s: %s\n", e->cwd, strerror(errno));
    _exit(126);
  }
  if (load_filter() < 0) die("seccomp filter");
  if (e->env) environ = e->env;
  exec_command(e->cmd, NULL);
  fprintf(stderr, "%s: %s\n", e->cmd[0], strerror(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

/* The final status line: "exit C" or "signal S", plus " timeout" when the deadline killed it. */
static int status_line(int st, int timed, char *line, size_t len) {
  if (WIFEXITED(st)) {
    snprintf(line, len, "exit %d%s\n", WEXITSTATUS(st), timed ? " timeout" : "");
    return WEXITSTATUS(st);
  }
  snprintf(line, len, "signal %d%s\n", WTERMSIG(st), timed ? " timeout" : "");
  return 128 + WTERMSIG(st);
}

static void kill_all(pid_t child, const struct entry *e) {
  kill(-child, SIGKILL);
  for (int k = 0; k < e->nexec; k++) sweep(e->exec_cgroups[k]);
}

/* Remove the exec cgroups once the command's status has been sent (see sweep). */
static void remove_exec_cgroups(const struct entry *e) {
  for (int k = 0; k < e->nexec; k++) {
    for (int round = 0; round < 50 && rmdir(e->exec_cgroups[k]) < 0 && errno == EBUSY; round++) {
      sweep(e->exec_cgroups[k]);
      usleep(2000);
    }
  }
}

static int cmd_enter(int argc, char **argv) {
  struct entry e = {.cwd = "/"};
  int status_fd = -1;
  const char *status_file = NULL, *pid_file = NULL;
  int i = 2;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) { i++; break; }
    if (i + 1 >= argc) { fprintf(stderr, "nube-helper: %s needs a value\n", a); return 125; }
    const char *v = argv[++i];
    if (!strcmp(a, "--target")) e.target = atoi(v);
    else if (!strcmp(a, "--cgroup") && e.ncg < MAX_CG) e.cgroups[e.ncg++] = v;
    else if (!strcmp(a, "--exec-cgroup") && e.nexec < MAX_CG) e.exec_cgroups[e.nexec++] = v;
    else if (!strcmp(a, "--cwd")) e.cwd = v;
    else if (!strcmp(a, "--timeout-ms")) e.timeout_ms = atol(v);
    else if (!strcmp(a, "--status-fd")) status_fd = atoi(v);
    else if (!strcmp(a, "--status-file")) status_file = v;
    else if (!strcmp(a, "--pid-file")) pid_file = v;
    else { fprintf(stderr, "nube-helper: unknown option %s\n", a); return 125; }
  }
  if (e.target <= 0 || i >= argc) { fprintf(stderr, "nube-helper: enter needs --target and a command\n"); return 125; }
  e.cmd = &argv[i];

  struct opened o;
  char what[4096];
  if (open_target(e.target, &o, what, sizeof what) < 0) die(what);
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) enter_child(&e, &o);
  setpgid(child, child); /* also from the parent, so a kill right after fork finds the group */
  close_target(&o);
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
  if (e.timeout_ms > 0) {
    struct itimerval it = {0};
    it.it_value.tv_sec = e.timeout_ms / 1000;
    it.it_value.tv_usec = (e.timeout_ms % 1000) * 1000;
    setitimer(ITIMER_REAL, &it, NULL);
  }
  int st = 0, killed = 0;
  for (;;) {
    pid_t r = waitpid(child, &st, 0);
    if (r == child) break;
    if (r < 0 && errno != EINTR) die("waitpid");
    if ((timed_out || stop_asked) && !killed) {
      kill_all(child, &e);
      killed = 1;
    }
  }
  /* A background child started by the shell dies when the shell ends. */
  if (e.nexec > 0) kill_all(child, &e);
  int code = status_line(st, timed_out, line, sizeof line);
  if (status_fd >= 0 && write(status_fd, line, strlen(line)) < 0) { /* caller gone */ }
  if (status_file) write_status_file(status_file, line);
  remove_exec_cgroups(&e);
  return code;
}

/*
 * serve: a long-lived spawner, so that nube (a large process) never forks per exec. It listens on a
 * unix socket (no access for group or others; callers must have our uid) and forks a small session per connection, which
 * does what `enter` does and relays the command's output.
 *   request:  u32 LE length, then that many bytes of NUL-terminated fields "t:PID", "c:CGROUP"...,
 *             "x:EXEC_CGROUP"... (created here), "d:CWD", "m:TIMEOUT_MS", "i:STDIN_LENGTH",
 *             "e:NAME=VALUE"..., "a:ARG"... ; then STDIN_LENGTH bytes of stdin.
 *   response: frames of type byte + u32 LE length + data: 'o' stdout, 'e' stderr, 's' status
 *             ("pid P\n" at start, "exit C" / "signal S" (+ " timeout") at the end), then EOF.
 * A caller that closes the connection early gets its command killed (group and exec cgroups).
 * A head with "r:1" and no "a:" opens a resident session instead (resident.c): many commands, one
 * request each, over the same connection.
 */
static int send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Header and data in one sendmsg (one wake-up of the reader); the rest, if the socket took part of it. */
static int send_frame(int fd, char type, const void *data, size_t len) {
  unsigned char h[5] = {(unsigned char)type, len & 0xff, (len >> 8) & 0xff, (len >> 16) & 0xff, (len >> 24) & 0xff};
  struct iovec iov[2] = {{h, 5}, {(void *)data, len}};
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
  ssize_t w;
  do w = sendmsg(fd, &m, MSG_NOSIGNAL); while (w < 0 && errno == EINTR);
  if (w < 0) return -1;
  if ((size_t)w < 5) {
    if (send_all(fd, h + w, 5 - (size_t)w) < 0) return -1;
    w = 5;
  }
  size_t sent = (size_t)w - 5;
  return sent < len ? send_all(fd, (const char *)data + sent, len - sent) : 0;
}

static void session_fail(int conn, const char *msg) {
  char text[4300];
  snprintf(text, sizeof text, "nube-helper: %s\n", msg);
  send_frame(conn, 'e', text, strlen(text));
  send_frame(conn, 's', "exit 125\n", 9);
  _exit(0);
}

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Parse the request fields into e; the arrays point into buf. */
static int parse_request(char *buf, size_t len, struct entry *e, size_t *stdin_len) {
  size_t nargs = 0, nenv = 0;
  for (size_t p = 0; p < len; p += strlen(buf + p) + 1) {
    if (buf[p] == 'a') nargs++;
    else if (buf[p] == 'e') nenv++;
  }
  e->cmd = calloc(nargs + 1, sizeof(char *));
  e->env = calloc(nenv + 1, sizeof(char *));
  if (!e->cmd || !e->env) return -1;
  nargs = nenv = 0;
  for (size_t p = 0; p < len; p += strlen(buf + p) + 1) {
    char *f = buf + p, *v = f + 2;
    if (strlen(f) < 2 || f[1] != ':') return -1;
    switch (f[0]) {
      case 't': e->target = atoi(v); break;
      case 'c': if (e->ncg < MAX_CG) e->cgroups[e->ncg++] = v; break;
      case 'x': if (e->nexec < MAX_CG) e->exec_cgroups[e->nexec++] = v; break;
      case 'd': e->cwd = v; break;
      case 'm': e->timeout_ms = atol(v); break;
      case 'i': *stdin_len = (size_t)atol(v); break;
      case 'e': e->env[nenv++] = v; break;
      case 'a': e->cmd[nargs++] = v; break;
      case 'r': e->resident = 1; break;
      default: return -1;
    }
  }
  return e->target > 0 && (nargs > 0 || e->resident) ? 0 : -1;
}

#include "launch.c"

/*
 * A resident session's command request, read from conn while the waiting child (pidfd) lives: "d:",
 * "m:", "i:", "e:", "a:" fields (no target), then stdin. The session keeps the deadline (into e) and
 * the stdin length (in_left); the child gets the whole request through ctl (closed here) and reads it
 * itself. 0, or -1 when the caller hung up, the request was bad or the child died first.
 */
static int pass_rest(int conn, int pidfd, int ctl, struct entry *e, size_t *in_left) {
  for (;;) {
    struct pollfd w[2] = {{conn, POLLIN, 0}, {pidfd, POLLIN, 0}};
    if (poll(w, pidfd >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (w[1].revents || (w[0].revents & (POLLHUP | POLLERR))) return -1;
    if (w[0].revents & POLLIN) break;
  }
  unsigned char lb[4];
  if (read_all(conn, lb, 4) < 0) return -1;
  size_t len = lb[0] | (lb[1] << 8) | (lb[2] << 16) | ((size_t)lb[3] << 24);
  char *rest = len > 0 && len <= (16u << 20) ? malloc(len + 4) : NULL;
  char *copy = rest ? malloc(len + 1) : NULL;
  int rc = -1;
  if (copy && read_all(conn, rest + 4, len) == 0) {
    memcpy(rest, lb, 4);
    memcpy(copy, rest + 4, len);
    copy[len] = 0;
    struct entry r = *e;
    r.resident = 0;
    r.cmd = NULL;
    r.env = NULL;
    r.timeout_ms = 0;
    *in_left = 0;
    if (copy[len - 1] == 0 && parse_request(copy, len - 1, &r, in_left) == 0 &&
        write(ctl, rest, len + 4) == (ssize_t)(len + 4)) {
      e->timeout_ms = r.timeout_ms;
      rc = 0;
    }
    free(r.cmd);
    free(r.env);
  }
  free(rest);
  free(copy);
  close(ctl);
  return rc;
}

/* A waiting child that will not get its command: killed and reaped at once, with what it left. */
static void end_waiting(pid_t child, const struct entry *e) {
  kill(-child, SIGKILL);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  kill_all(child, e);
}

/*
 * Relay one started command (child, its pidfd or -1, the session's ends of its stdin, stdout and
 * stderr pipes, closed here): in_left bytes of stdin from conn to the command, its output to conn as
 * frames, the deadline (e->timeout_ms) on its process group and exec cgroups, then the final status
 * frame once it and whatever it left are gone. Returns 0 when the caller got the status, -1 when it
 * had gone (the command was killed then).
 */
static int relay_command(int conn, pid_t child, int pidfd, int infd, int outfd, int errfd, size_t in_left,
                         const struct entry *e) {
  static char inbuf[65536], outbuf[65536];
  fcntl(infd, F_SETFL, O_NONBLOCK);
  if (in_left == 0) { close(infd); infd = -1; }
  size_t pend_off = 0, pend_len = 0;
  int gone = 0, exited = 0, killed = 0, timed = 0, st = 0;
  long deadline = e->timeout_ms > 0 ? now_ms() + e->timeout_ms : 0;
  while (!exited || outfd >= 0 || errfd >= 0) {
    struct pollfd p[5] = {
      {gone ? -1 : conn, in_left > 0 && pend_len == 0 ? POLLIN : (in_left == 0 ? POLLIN : 0), 0},
      {infd >= 0 && pend_len > 0 ? infd : -1, POLLOUT, 0},
      {outfd, POLLIN, 0},
      {errfd, POLLIN, 0},
      {exited || pidfd < 0 ? -1 : pidfd, POLLIN, 0},
    };
    int wait_ms = -1;
    if (deadline && !killed) wait_ms = (int)(deadline - now_ms() > 0 ? deadline - now_ms() : 0);
    else if (pidfd < 0 && !exited) wait_ms = 10; /* no pidfd (old kernel): poll waitpid */
    int rc = poll(p, 5, wait_ms);
    if (rc < 0 && errno != EINTR) break;
    if (deadline && !killed && now_ms() >= deadline) {
      timed = 1;
      kill_all(child, e);
      killed = 1;
    }
    if (rc <= 0) goto reap;
    if (p[0].revents) {
      if (in_left > 0 && (p[0].revents & POLLIN)) {
        ssize_t r = read(conn, inbuf, in_left < sizeof inbuf ? in_left : sizeof inbuf);
        if (r > 0) {
          in_left -= (size_t)r;
          pend_off = 0;
          pend_len = infd >= 0 ? (size_t)r : 0; /* stdin closed by the command: drop the rest */
        } else if (r == 0 || errno != EINTR) gone = 1;
      } else if (in_left == 0) {
        ssize_t r = read(conn, outbuf, sizeof outbuf); /* nothing more is expected: EOF = caller gone */
        if (r == 0 || (r < 0 && errno != EINTR) || (p[0].revents & (POLLHUP | POLLERR))) gone = 1;
      } else gone = 1; /* hang-up while stdin was still coming */
      if (gone && !killed) { kill_all(child, e); killed = 1; }
    }
    if (p[1].revents) {
      ssize_t w = write(infd, inbuf + pend_off, pend_len);
      if (w > 0) { pend_off += (size_t)w; pend_len -= (size_t)w; }
      else if (w < 0 && errno != EAGAIN && errno != EINTR) { close(infd); infd = -1; pend_len = 0; }
    }
    if (infd >= 0 && pend_len == 0 && in_left == 0) { close(infd); infd = -1; }
    for (int k = 2; k <= 3; k++) {
      if (!p[k].revents) continue;
      int *fd = k == 2 ? &outfd : &errfd;
      ssize_t r = read(*fd, outbuf, sizeof outbuf);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r <= 0) { close(*fd); *fd = -1; continue; }
      if (!gone && send_frame(conn, k == 2 ? 'o' : 'e', outbuf, (size_t)r) < 0) gone = 1;
      if (gone && !killed) { kill_all(child, e); killed = 1; }
    }
  reap:
    if (!exited && waitpid(child, &st, WNOHANG) == child) {
      exited = 1;
      /* A background child started by the shell dies when the shell ends. */
      kill_all(child, e);
      if (infd >= 0) { close(infd); infd = -1; }
    }
  }
  if (infd >= 0) close(infd);
  if (outfd >= 0) close(outfd);
  if (errfd >= 0) close(errfd);
  /* Read the stdin the command did not take, so the caller's write completes before we answer. */
  while (!gone && in_left > 0) {
    ssize_t r = read(conn, inbuf, in_left < sizeof inbuf ? in_left : sizeof inbuf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) { gone = 1; break; }
    in_left -= (size_t)r;
  }
  char line[128];
  status_line(st, timed, line, sizeof line);
  if (!gone && send_frame(conn, 's', line, strlen(line)) < 0) gone = 1;
  return gone ? -1 : 0;
}

static void resident_session(int conn, struct entry *e, struct opened *o);

static void session(int conn) {
  signal(SIGCHLD, SIG_DFL); /* the server ignores it to reap sessions; we wait for our child */
  signal(SIGPIPE, SIG_IGN); /* a command that closes stdin early must not kill the session */
  unsigned char lb[4];
  if (read_all(conn, lb, 4) < 0) _exit(0);
  size_t len = lb[0] | (lb[1] << 8) | (lb[2] << 16) | ((size_t)lb[3] << 24);
  if (len == 0 || len > (16u << 20)) session_fail(conn, "bad request length");
  char *req = malloc(len + 1);
  if (!req || read_all(conn, req, len) < 0) _exit(0);
  req[len] = 0;
  if (len >= 3 && req[len - 1] == 0 && !strncmp(req, "L:", 2)) launch_session(conn, req, len - 1);
  if (len >= 3 && req[len - 1] == 0 && !strncmp(req, "V:", 2)) claim_binds(conn, req, len - 1);
  struct entry e = {.cwd = "/"};
  size_t in_left = 0;
  if (req[len - 1] != 0 || parse_request(req, len - 1, &e, &in_left) < 0) session_fail(conn, "bad request");
  char what[4096];
  for (int k = 0; k < e.nexec; k++) {
    if (mkdir(e.exec_cgroups[k], 0755) < 0 && errno != EEXIST) {
      snprintf(what, sizeof what, "mkdir %s: %s", e.exec_cgroups[k], strerror(errno));
      session_fail(conn, what);
    }
  }
  struct opened o;
  if (open_target(e.target, &o, what, sizeof what) < 0) {
    char msg[4300];
    snprintf(msg, sizeof msg, "%s: %s", what, strerror(errno));
    for (int k = 0; k < e.nexec; k++) rmdir(e.exec_cgroups[k]);
    session_fail(conn, msg);
  }
  if (e.resident) resident_session(conn, &e, &o);
  int in[2], out[2], er[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0) session_fail(conn, "pipe");
  pid_t child = fork();
  if (child < 0) session_fail(conn, "fork");
  if (child == 0) {
    if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(er[1], 2) < 0) _exit(125);
    enter_child(&e, &o);
  }
  setpgid(child, child);
  close(in[0]);
  close(out[1]);
  close(er[1]);
  close_target(&o);
  int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
  char line[32];
  snprintf(line, sizeof line, "pid %d\n", child);
  send_frame(conn, 's', line, strlen(line));
  relay_command(conn, child, pidfd, in[1], out[0], er[0], in_left, &e);
  /* The caller has its answer; the session lingers for the removal. */
  close(conn);
  remove_exec_cgroups(&e);
  _exit(0);
}

#include "resident.c"

static int cmd_serve(const char *path, const char *static_sh_dir) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof addr.sun_path) { fprintf(stderr, "nube-helper: socket path too long\n"); return 125; }
  strcpy(addr.sun_path, path);
  signal(SIGCHLD, SIG_IGN); /* sessions are reaped by the kernel */
  prepare_filter(); /* once: every session inherits the program */
  if (static_sh_dir) load_static_sh(static_sh_dir);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("socket");
  unlink(path);
  mode_t old = umask(077);
  if (bind(s, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind");
  umask(old);
  if (listen(s, 512) < 0) die("listen");
  /* Ready; the caller holds our stdin: when it closes (nube exits), we exit. */
  if (write(1, "ready\n", 6) < 0) die("write ready");
  for (;;) {
    struct pollfd p[2] = {{s, POLLIN, 0}, {0, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (p[1].revents) {
      char b[64];
      ssize_t r = read(0, b, sizeof b);
      if (r <= 0) break;
    }
    if (!(p[0].revents & POLLIN)) continue;
    int conn = accept4(s, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) continue;
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.uid != geteuid()) {
      close(conn);
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(s);
      session(conn);
    }
    close(conn);
  }
  unlink(path);
  return 0;
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
  if (argc >= 3 && !strcmp(argv[1], "serve")) {
    args_start = argv[0];
    args_len = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) + 1 - argv[0]);
    return cmd_serve(argv[2], argc >= 4 ? argv[3] : NULL);
  }
  fprintf(stderr, "usage: nube-helper bpf FILE | enter [options] -- command... | cg DIR... -- command... | serve SOCKET [STATIC_SH_DIR]\n");
  return 125;
}
