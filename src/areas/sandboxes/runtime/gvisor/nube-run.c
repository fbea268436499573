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
#include "nube-procs.h"

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
        reap_all(child, 1);
        return 124;
      }
      if (left < 200) wait.tv_nsec = left * 1000000;
    }
    int sig = sigtimedwait(&set, NULL, &wait);
    if (sig == SIGUSR1) kill(-child, SIGKILL);
    else if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) kill(-child, sig);
  }
done:
  reap_all(child, 0);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
