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
// The command runs as nube-run runs it (own process group, the namespace seccomp rule, everything it
// leaves behind killed when it ends or at the deadline). Nothing here is trusted by nube beyond the
// data of this sandbox: it checks every frame, and falls back to `runsc exec` when no worker comes.
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
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

static int read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int send_frame(int fd, char type, const void *data, uint32_t len) {
  unsigned char h[5] = {(unsigned char)type, len & 255, (len >> 8) & 255, (len >> 16) & 255, len >> 24};
  if (write_all(fd, h, 5)) return -1;
  return len ? write_all(fd, data, len) : 0;
}

// A frame header from nube; -1 on EOF or a malformed one.
static int read_header(int fd, char *type, uint32_t *len, uint32_t max) {
  unsigned char h[5];
  if (read_all(fd, h, 5)) return -1;
  *type = (char)h[0];
  *len = h[1] | (h[2] << 8) | (h[3] << 16) | ((uint32_t)h[4] << 24);
  return *len > max ? -1 : 0;
}

// The prepared command: in its own group with the seccomp rule loaded, waits for the request, then
// becomes the command. Every descriptor but 0-2 is close-on-exec.
static void command_child(int req, int in, int out, int err, sigset_t *old) {
  setpgid(0, 0);
  no_namespaces();
  uint32_t len;
  if (read_all(req, &len, 4) || len > MAX_REQUEST) _exit(0);
  char *buf = malloc(len + 1);
  if (!buf || read_all(req, buf, len)) _exit(0);
  buf[len] = 0;
  // Fields: timeout, cwd, argc, argv..., envc, env...; each NUL-terminated, all inside buf.
  char *fields[2 * 4096 + 8];
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
  dup2(in, 0);
  dup2(out, 1);
  dup2(err, 2);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, old, NULL);
  if (chdir(cwd)) {
    fprintf(stderr, "nube: cwd %s: %s\n", cwd, strerror(errno));
    _exit(127);
  }
  environ = envp;
  execvp(argv[0], argv);
  fprintf(stderr, "nube: %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

static int pipe_cloexec(int p[2]) {
  return pipe2(p, O_CLOEXEC);
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
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, &old);
  pid_t child = fork();
  if (child < 0) _exit(5);
  if (child == 0) {
    close(req[1]);
    close(in[1]);
    close(out[0]);
    close(err[0]);
    close(s);
    command_child(req[0], in[0], out[1], err[1], &old);
  }
  setpgid(child, child);
  close(req[0]);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  char type;
  uint32_t len;
  if (read_header(s, &type, &len, MAX_REQUEST) || type != 'R') _exit(0);
  pid_t me = getpid();
  write_all(notify, &me, sizeof me);
  close(notify);
  char *buf = malloc(len + 1);
  if (!buf || read_all(s, buf, len)) _exit(0);
  buf[len] = 0;
  long timeout_ms = atol(buf);
  if (write_all(req[1], &len, 4) || write_all(req[1], buf, len)) _exit(0);
  close(req[1]);
  free(buf);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  char *pending = malloc(CHUNK), *chunk = malloc(CHUNK);
  size_t pend_off = 0, pend_len = 0;
  int stdin_open = 1, stdin_eof = 0, out_open = 1, err_open = 1, exited = 0, timed_out = 0;
  int status = 0;
  for (;;) {
    if (stdin_open && stdin_eof && pend_len == 0) {
      close(in[1]);
      stdin_open = 0;
    }
    if (exited && !out_open && !err_open) break;
    struct pollfd pf[4];
    int n = 0, i_sock = -1, i_in = -1, i_out = -1, i_err = -1;
    // Not read while stdin is pending (backpressure): nube closing the connection is seen once the
    // command has taken its stdin, ended, or at the deadline (gVisor reports no POLLHUP for it here).
    pf[i_sock = n++] = (struct pollfd){s, pend_len == 0 ? POLLIN : 0, 0};
    if (stdin_open && pend_len) pf[i_in = n++] = (struct pollfd){in[1], POLLOUT, 0};
    if (out_open) pf[i_out = n++] = (struct pollfd){out[0], POLLIN, 0};
    if (err_open) pf[i_err = n++] = (struct pollfd){err[0], POLLIN, 0};
    long wait_ms = -1;
    if (timeout_ms > 0 && !exited) {
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
    int r = ppoll(pf, (nfds_t)n, wait_ms < 0 ? NULL : &ts, &old);
    if (!exited) {
      pid_t w;
      while ((w = waitpid(-1, &status, WNOHANG)) > 0) {
        if (w == child) {
          exited = 1;
          reap_all(child, 0);
          break;
        }
      }
    }
    if (r <= 0) continue;
    if (pf[i_sock].revents) {
      if (!(pf[i_sock].events & POLLIN) || read_header(s, &type, &len, CHUNK) || read_all(s, pending, len)) {
        // nube is gone: end the command as a lost `runsc exec` client would not, but promptly.
        reap_all(child, !exited);
        _exit(0);
      }
      if (type == 'i') pend_off = 0, pend_len = len;
      else if (type == 'e') stdin_eof = 1;
    }
    if (i_in >= 0 && pf[i_in].revents) {
      ssize_t w = write(in[1], pending + pend_off, pend_len);
      if (w > 0) pend_off += (size_t)w, pend_len -= (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR) pend_len = 0, stdin_eof = 1;
    }
    int fds[2] = {i_out, i_err};
    for (int k = 0; k < 2; k++) {
      if (fds[k] < 0 || !pf[fds[k]].revents) continue;
      ssize_t got = read(pf[fds[k]].fd, chunk, CHUNK);
      if (got > 0) {
        if (send_frame(s, k ? 'r' : 'o', chunk, (uint32_t)got)) {
          reap_all(child, !exited);
          _exit(0);
        }
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(pf[fds[k]].fd);
        if (k) err_open = 0;
        else out_open = 0;
      }
    }
  }
  int code = timed_out ? 124 : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  unsigned char x[5] = {code & 255, (code >> 8) & 255, (code >> 16) & 255, (code >> 24) & 255, (unsigned char)timed_out};
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
  if (argc != 2) {
    fprintf(stderr, "usage: nube-agent <socket>\n");
    return 127;
  }
  signal(SIGCHLD, on_child);
  pid_t a = fork();
  if (a == 0) agent(argv[1]);
  // pid 1: reap every orphan that ends up here, forever (an init that exits ends the sandbox).
  for (;;) {
    if (wait(NULL) < 0 && errno == ECHILD) pause();
  }
}
