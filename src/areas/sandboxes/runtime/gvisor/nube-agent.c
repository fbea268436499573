// nube-agent: the init of every gVisor sandbox and the way nube runs commands in it without a
// `runsc exec` per command.
//   nube-agent <socket>
// pid 1 only reaps (it is every orphan's parent) and forks the agent (pid 2). The agent keeps
// PARKED workers connected to <socket>, a unix socket nube listens on, on the host, reached through
// runsc's `--host-uds=open` (the sandbox can connect to host sockets in its mounts, never create one).
// A worker has already forked its command child, which waits on a pipe: a request then costs one
// execve in here. Each worker serves one request on its connection, then exits; the agent forks a
// new one as soon as one is taken. Frames both ways: [type u8][length u32 LE][payload].
//   nube -> worker: 'R' request (NUL-separated: timeout-ms, cwd, argc, argv..., envc, env...),
//                   'i' stdin bytes, 'e' end of stdin.
//   nube closing the connection (an abort, or nube gone) kills the command and what it left.
//   worker -> nube: 'o' stdout bytes, 'r' stderr bytes, 'x' exit (i32 LE code, u8 timed out).
//   nube-agent <socket> <static sh> <reference dash>: a request for /bin/sh runs the static sh
// instead while /bin/sh is the reference byte for byte (see check_static_sh).
// The command runs as nube-run runs it (own process group, the namespace seccomp rule, everything it
// leaves behind killed when it ends or at the deadline). Nothing here is trusted by nube beyond the
// data of this sandbox: it checks every frame, and falls back to `runsc exec` when no worker comes.
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include "../static-sh-wait.h"
#include "nube-procs.h"

#define PARKED 2
#define MAX_REQUEST (1 << 20)
#define CHUNK 65536

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      struct pollfd pf = {fd, POLLOUT, 0};
      poll(&pf, 1, -1);
      continue;
    }
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

// The static sh (scripts/install-static-sh.sh: Debian's dash 0.5.12-2 linked statically) stands in
// for /bin/sh while /bin/sh is Debian's dash 0.5.12-2 byte for byte (compared once, at start, with
// the reference copy from Debian's package) and the very same file since (its identity is checked
// before each use): the same shell, without the dynamic loader's work, which on gVisor's ptrace
// platform is a quarter of a `sh -c` (each page touched and each call made is a trap into the
// sentry). A /bin/sh the user replaced, relinked or edited is run as it is.
static const char *static_sh;
static struct stat sh_id;

static int same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
         a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
         a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

// A regular file of exactly `size` bytes into buf (opened non-blocking: a FIFO at /bin/sh does not
// hold the agent up), its identity into st.
static int read_file(const char *path, char *buf, off_t size, struct stat *st) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  int ok = fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_size == size && read_all(fd, buf, (size_t)size) == 0;
  close(fd);
  return ok ? 0 : -1;
}

static void check_static_sh(const char *sh, const char *reference) {
  struct stat rs, ss;
  if (stat(reference, &rs) || !S_ISREG(rs.st_mode) || rs.st_size <= 0 || rs.st_size > (1 << 24)) return;
  char *a = malloc((size_t)rs.st_size), *b = malloc((size_t)rs.st_size);
  if (a && b && read_file(reference, a, rs.st_size, &rs) == 0 && read_file("/bin/sh", b, rs.st_size, &ss) == 0 &&
      memcmp(a, b, (size_t)rs.st_size) == 0 && access(sh, X_OK) == 0) {
    static_sh = sh;
    sh_id = ss;
  }
  free(a);
  free(b);
}

// The prepared command: in its own group, the seccomp rule loaded, its stdio and signals set, it waits
// for the request and then becomes the command: a request costs it one read, a chdir and the execve.
// Every descriptor but 0-2 is close-on-exec.
static void command_child(int req, int in, int out, int err, sigset_t *old) {
  setpgid(0, 0);
  no_namespaces();
  dup2(in, 0);
  dup2(out, 1);
  dup2(err, 2);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, old, NULL);
  // While /bin/sh is the static sh's dash, the execve is made now, before the request: the static sh's
  // wait mode (static-sh-wait.c) reads it from `req` itself and runs as that dash or executes what was
  // asked, as below. In gVisor a new process's first steps are its dearest part of a command.
  if (static_sh) {
    struct sh_wait w;
    char **wait_argv = sh_wait_argv(&w, "a", req, &sh_id);
    char *no_env[] = {NULL};
    if (fcntl(req, F_SETFD, 0) == 0) execve(static_sh, wait_argv, no_env);
    fcntl(req, F_SETFD, FD_CLOEXEC);
  }
  // [len u32][fields]: one read while it fits the pipe (the worker writes it in one write).
  static char head[65536];
  ssize_t got = 0;
  while (got < 4) {
    ssize_t r = read(req, head + got, sizeof head - (size_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) _exit(0);
    got += r;
  }
  uint32_t len;
  memcpy(&len, head, 4);
  if (len > MAX_REQUEST) _exit(0);
  char *buf = (size_t)got - 4 >= len ? head + 4 : malloc(len + 1);
  if (!buf) _exit(126);
  if (buf != head + 4) {
    memcpy(buf, head + 4, (size_t)got - 4);
    if (read_all(req, buf + got - 4, len - ((size_t)got - 4))) _exit(0);
  }
  buf[len] = 0;
  // Fields: timeout, cwd, argc, argv..., envc, env...; each NUL-terminated, all inside buf.
  static char *fields[2 * 4096 + 8];
  size_t nf = 0;
  for (char *p = buf; p < buf + len && nf < sizeof fields / sizeof fields[0]; p += strlen(p) + 1) fields[nf++] = p;
  if (nf < 4) _exit(127);
  char *cwd = fields[1];
  long argc = atol(fields[2]);
  if (argc < 1 || (size_t)argc + 4 > nf) _exit(127);
  long envc = atol(fields[3 + argc]);
  if (envc < 0 || (size_t)(argc + envc + 4) > nf) _exit(127);
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  char **envp = calloc((size_t)envc + 1, sizeof *envp);
  if (!argv || !envp) _exit(126);
  for (long i = 0; i < argc; i++) argv[i] = fields[3 + i];
  for (long i = 0; i < envc; i++) envp[i] = fields[4 + argc + i];
  if (chdir(cwd)) {
    fprintf(stderr, "nube: cwd %s: %s\n", cwd, strerror(errno));
    _exit(127);
  }
  if (static_sh && strcmp(argv[0], "/bin/sh") == 0) {
    struct stat now;
    if (stat("/bin/sh", &now) == 0 && same_file(&now, &sh_id)) execve(static_sh, argv, envp);
  }
  environ = envp;
  execvp(argv[0], argv);
  fprintf(stderr, "nube: %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

static int pipe_cloexec(int p[2]) {
  return pipe2(p, O_CLOEXEC);
}

// What nube sent and the worker has not used yet: frames are taken from here, the socket is read
// into it (as much as there is: a request and its stdin usually come in one read).
static char *rbuf;
static size_t rstart, rend;
#define RCAP (MAX_REQUEST + 5 + CHUNK + 5)

// The next whole frame in the buffer: 1 (type, len, payload set), 0 when it is not all here yet, -1
// when it is malformed (longer than max).
static int buffered_frame(char *type, uint32_t *len, char **payload, uint32_t max) {
  if (rend - rstart < 5) return 0;
  unsigned char *h = (unsigned char *)rbuf + rstart;
  uint32_t n = h[1] | (h[2] << 8) | (h[3] << 16) | ((uint32_t)h[4] << 24);
  if (n > max) return -1;
  if (rend - rstart < 5 + (size_t)n) return 0;
  *type = (char)h[0];
  *len = n;
  *payload = rbuf + rstart + 5;
  return 1;
}

// One read from the socket into the buffer (moving what is left to its start first). -1 when nube
// closed it or it failed.
static int fill(int s) {
  if (rstart) {
    memmove(rbuf, rbuf + rstart, rend - rstart);
    rend -= rstart;
    rstart = 0;
  }
  for (;;) {
    ssize_t r = read(s, rbuf + rend, RCAP - rend);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    rend += (size_t)r;
    return 0;
  }
}

// A whole frame in one write; `f` holds the payload from f + 5 on.
static int send_frame(int s, char type, char *f, uint32_t len) {
  f[0] = type;
  f[1] = (char)(len & 255), f[2] = (char)((len >> 8) & 255), f[3] = (char)((len >> 16) & 255), f[4] = (char)(len >> 24);
  return write_all(s, f, 5 + (size_t)len);
}

// Read what a (non-blocking) output pipe holds into a frame and send it. 0 at its end (or a failure),
// 1 when it is still open (nothing more now), -1 when nube is gone.
static int pump(int fd, int s, char type, char *frame) {
  for (;;) {
    ssize_t got = read(fd, frame + 5, CHUNK);
    if (got > 0) {
      if (send_frame(s, type, frame, (uint32_t)got)) return -1;
      if (got < CHUNK) return 1;
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) return 1;
    return 0;
  }
}

// One worker: connect, prepare the command, serve one request. Tells the agent (notify) when taken.
static void worker(const char *path, int notify) {
  self_pid = getpid();
  // A write to a connection nube closed fails (EPIPE) instead of ending us before the sweep.
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strncpy(a.sun_path, path, sizeof a.sun_path - 1);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) _exit(3);
  int req[2], in[2], out[2], err[2];
  if (pipe_cloexec(req) || pipe_cloexec(in) || pipe_cloexec(out) || pipe_cloexec(err)) _exit(4);
  // The command's end is seen on a signalfd (no handler to run, no interrupted call).
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, &old);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) _exit(4);
  pid_t child = fork();
  if (child < 0) _exit(5);
  if (child == 0) {
    close(req[1]);
    close(in[1]);
    close(out[0]);
    close(err[0]);
    close(s);
    close(sfd);
    command_child(req[0], in[0], out[1], err[1], &old);
  }
  setpgid(child, child);
  close(req[0]);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  char *chunk = malloc(5 + CHUNK);  // an output frame (stdout or stderr), payload from chunk + 5
  rbuf = malloc(RCAP);
  if (!chunk || !rbuf) _exit(4);
  char type, *payload;
  uint32_t len;
  int got;
  while ((got = buffered_frame(&type, &len, &payload, MAX_REQUEST)) == 0) {
    if (fill(s)) _exit(0);
  }
  if (got < 0 || type != 'R') _exit(0);
  // The command gets [len][fields] in one write (the pipe holds 64 KB; a larger request is written
  // in parts, which the child reads to the end).
  memcpy(payload - 4, &len, 4);  // over the frame's length bytes, read already
  if (write_all(req[1], payload - 4, (size_t)len + 4)) _exit(0);
  long timeout_ms = 0;  // the first field
  for (uint32_t i = 0; i < len && payload[i] >= '0' && payload[i] <= '9' && timeout_ms < 100000000000L; i++) {
    timeout_ms = timeout_ms * 10 + (payload[i] - '0');
  }
  rstart += 5 + len;
  // (Each call below the request is a ptrace stop, ~50 us here: none is spent that can be left out.)
  write_all(notify, &self_pid, sizeof self_pid);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  size_t in_off = 0;  // bytes of the first buffered 'i' frame already written to the command
  int stdin_open = 1, out_open = 1, err_open = 1, exited = 0, timed_out = 0, first = 1;
  int status = 0;
  for (;;) {
    // stdin: write what is buffered, frame by frame, as far as the pipe takes it (once it is closed,
    // what comes is dropped).
    while ((got = buffered_frame(&type, &len, &payload, CHUNK)) != 0) {
      if (got < 0 || (type != 'i' && type != 'e')) {
        reap_all(child, !exited);
        _exit(0);
      }
      if (!stdin_open) {
        rstart += 5 + len;
        continue;
      }
      if (type == 'e') {
        rstart += 5;
        close(in[1]);
        stdin_open = 0;
        continue;
      }
      ssize_t w = len > in_off ? write(in[1], payload + in_off, len - in_off) : 0;
      if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
      if (w < 0) {  // the command closed its stdin: the rest is dropped
        close(in[1]);
        stdin_open = 0;
        break;
      }
      in_off += (size_t)w;
      if (in_off < len) break;
      rstart += 5 + len;
      in_off = 0;
    }
    if (exited) {
      // Everything that could write the pipes is gone: what is left in them is read now.
      if (out_open && pump(out[0], s, 'o', chunk) < 0) _exit(0);
      if (err_open && pump(err[0], s, 'r', chunk) < 0) _exit(0);
      break;
    }
    // Whether a frame is waiting on the command's stdin (then the socket is not read: backpressure).
    int stdin_blocked = stdin_open && buffered_frame(&type, &len, &payload, CHUNK) > 0;
    struct pollfd pf[5];
    int n = 0, i_sock = -1, i_in = -1, i_out = -1, i_err = -1, i_sig;
    // nube closing the connection is seen once the command has taken its stdin, ended, or at the
    // deadline (gVisor reports no POLLHUP for it here).
    if (!stdin_blocked) pf[i_sock = n++] = (struct pollfd){s, POLLIN, 0};
    if (stdin_blocked) pf[i_in = n++] = (struct pollfd){in[1], POLLOUT, 0};
    if (out_open) pf[i_out = n++] = (struct pollfd){out[0], POLLIN, 0};
    if (err_open) pf[i_err = n++] = (struct pollfd){err[0], POLLIN, 0};
    pf[i_sig = n++] = (struct pollfd){sfd, POLLIN, 0};
    long wait_ms = -1;
    if (timeout_ms > 0 && first) {
      wait_ms = timeout_ms;  // `start` was just read
      first = 0;
    } else if (timeout_ms > 0) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      long left = timeout_ms - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
      if (left <= 0) {
        reap_all(child, 1);
        exited = 1;
        timed_out = 1;
        continue;
      }
      wait_ms = left;
    }
    struct timespec ts = {wait_ms / 1000, (wait_ms % 1000) * 1000000};
    int r = ppoll(pf, (nfds_t)n, wait_ms < 0 ? NULL : &ts, NULL);
    if (r <= 0) continue;
    if (i_sock >= 0 && pf[i_sock].revents) {
      if (fill(s)) {
        // nube is gone: end the command as a lost `runsc exec` client would not, but promptly.
        reap_all(child, 1);
        _exit(0);
      }
    }
    if (i_out >= 0 && pf[i_out].revents && (out_open = pump(out[0], s, 'o', chunk)) < 0) _exit(0);
    if (i_err >= 0 && pf[i_err].revents && (err_open = pump(err[0], s, 'r', chunk)) < 0) _exit(0);
    if (pf[i_sig].revents) {
      struct signalfd_siginfo si;
      read(sfd, &si, sizeof si);  // signals of a kind coalesce: one read empties it
      pid_t w;
      while ((w = waitpid(-1, &status, WNOHANG)) > 0) {
        if (w == child) {
          exited = 1;
          reap_all(child, 0);
          break;
        }
      }
    }
  }
  int code = timed_out ? 124 : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  char x[10] = {0, 0, 0, 0, 0, (char)(code & 255), (char)((code >> 8) & 255), (char)((code >> 16) & 255), (char)((code >> 24) & 255), (char)timed_out};
  send_frame(s, 'x', x, 5);
  // Until nube has it: leaving at once could lose the last frame on the way out of the sentry (seen:
  // an exit status that never arrived). nube closes the connection when it has read it.
  shutdown(s, SHUT_WR);
  struct timeval tv = {5, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (read(s, chunk, CHUNK) > 0) {}
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
}

static void backoff(long *ms, struct timespec *next) {
  *ms = *ms ? (*ms * 2 > 2000 ? 2000 : *ms * 2) : 50;
  clock_gettime(CLOCK_MONOTONIC, next);
  next->tv_nsec += (*ms % 1000) * 1000000;
  next->tv_sec += *ms / 1000 + next->tv_nsec / 1000000000;
  next->tv_nsec %= 1000000000;
}

// The agent: keeps PARKED workers waiting. A taken worker is replaced once no command is running
// (the fork then does not compete with the command for the CPU), or at once when none is left
// parked. A worker that could not connect (nube not listening, e.g. while it restarts) is replaced
// after a backoff that grows to 2 s.
static void agent(const char *path) {
  prctl(PR_SET_NAME, "nube-agent");
  int notify[2];
  if (pipe2(notify, O_CLOEXEC)) _exit(1);
  fcntl(notify[0], F_SETFL, O_NONBLOCK);
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, &old);
  pid_t parked[PARKED] = {0};
  int busy = 0;
  long backoff_ms = 0;
  struct timespec next = {0, 0};
  for (;;) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long until = (next.tv_sec - now.tv_sec) * 1000 + (next.tv_nsec - now.tv_nsec) / 1000000;
    int nparked = 0;
    for (int i = 0; i < PARKED; i++) nparked += parked[i] != 0;
    for (int i = 0; i < PARKED && until <= 0 && (busy == 0 || nparked == 0); i++) {
      if (parked[i]) continue;
      pid_t w = fork();
      if (w == 0) {
        close(notify[0]);
        sigprocmask(SIG_SETMASK, &old, NULL);
        worker(path, notify[1]);
      }
      if (w > 0) parked[i] = w, nparked++;
      else backoff(&backoff_ms, &next);  // past the pids limit: try again later
    }
    struct pollfd pf = {notify[0], POLLIN, 0};
    struct timespec ts = {until / 1000, (until % 1000) * 1000000};
    ppoll(&pf, 1, nparked < PARKED && until > 0 ? &ts : NULL, &old);
    // Takes first: a worker tells before it can end, so one reaped below was taken or never was.
    pid_t taken;
    while (read(notify[0], &taken, sizeof taken) == sizeof taken) {
      for (int i = 0; i < PARKED; i++) {
        if (parked[i] != taken) continue;
        parked[i] = 0;
        busy++;
      }
      backoff_ms = 0;
      next = (struct timespec){0, 0};
    }
    int st;
    pid_t w;
    while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
      int was_parked = 0;
      for (int i = 0; i < PARKED; i++) {
        if (parked[i] != w) continue;
        parked[i] = 0;  // ended before a request: nube is not there (yet)
        was_parked = 1;
        backoff(&backoff_ms, &next);
      }
      if (!was_parked && busy > 0) busy--;
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 4) {
    fprintf(stderr, "usage: nube-agent <socket> [<static sh> <reference dash>]\n");
    return 127;
  }
  // Before any worker is forked: they and their commands inherit what it found.
  if (argc == 4) check_static_sh(argv[2], argv[3]);
  signal(SIGCHLD, on_child);
  pid_t a = fork();
  if (a == 0) agent(argv[1]);
  // pid 1: reap every orphan that ends up here, forever (an init that exits ends the sandbox).
  for (;;) {
    if (wait(NULL) < 0 && errno == ECHILD) pause();
  }
}
