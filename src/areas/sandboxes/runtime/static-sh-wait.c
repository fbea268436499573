// The static sh's wait mode (scripts/install-static-sh.sh). An exec's costliest step is the execve
// itself: a new address space, the binary mapped, its first pages faulted in. A command prepared
// ahead (nube-helper.c: a session's child already in the sandbox's namespaces and cgroups, its
// seccomp filter loaded; nube-agent.c: a gVisor worker's parked command child) can take that step
// before its command is known: it becomes this shell, started as
//
//   nube-sh-wait FORMAT FD DEV INO SIZE MTIME_S MTIME_NS CTIME_S CTIME_NS
//
// with an empty environment (nothing of the host's or the agent's reaches the command), and waits
// here, before dash's main, for the request on FD: [u32 length, little-endian][NUL-terminated
// fields]. FORMAT h (nube-helper's): "d:CWD", "e:K=V" (the environment), "a:ARG" (argv), and fields
// it ignores ("i:", "m:", read by the session). FORMAT a (nube-agent's): timeout, cwd, argc,
// argv..., envc, env... Then it does what the prepared child would have done, with that child's
// error messages and exit codes: chdir, and for argv[0] = /bin/sh while /bin/sh is still the file
// found to be Debian's dash (that identity is the arguments: same device, inode, size, mtime and
// ctime) it runs as that dash with the request's argv and environment; for anything else it executes
// argv as given (execvp), so a /bin/sh changed since runs as it is now. Started any other way, this
// binary is plain dash.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "static-sh-wait.h"

extern char **environ;
/* dash's own main, linked into the same static program. */
extern int main(int argc, char **argv);

#define MAX_REQUEST (16u << 20)

static void set_comm(const char *argv0) {
  const char *base = strrchr(argv0, '/');
  prctl(PR_SET_NAME, base ? base + 1 : argv0);
}

/* What ps and /proc/PID/cmdline show of this process is the wait argv's memory: the command's argv
   goes there (as much as that room holds, NUL-padded), so `ps` shows `/bin/sh -c …` as for any sh. */
static void show_argv(char **wait_argv, char **args) {
  char *start = wait_argv[0], *end = wait_argv[SH_WAIT_ARGC - 1] + strlen(wait_argv[SH_WAIT_ARGC - 1]);
  size_t room = (size_t)(end - start), at = 0;
  for (int i = 0; args[i] && at < room; i++) {
    size_t n = strlen(args[i]) + 1;
    if (n > room - at) n = room - at;
    memcpy(start + at, args[i], n);
    at += n;
  }
  memset(start + at, 0, room - at + 1);
}

/* Where the two prepared children differ: their messages and exit codes. */
struct style {
  const char *prefix;
  int bad, no_cwd, not_found, cannot_run;
};
static const struct style HELPER = {"", 125, 126, 127, 126}, AGENT = {"nube: ", 127, 127, 127, 127};

/* FORMAT h: prefixed fields in any order. */
static int parse_helper(char *req, uint32_t len, const char **cwd, char **args, char **env) {
  size_t na = 0, ne = 0;
  for (char *p = req; p < req + len; p += strlen(p) + 1) {
    if (!strncmp(p, "d:", 2)) *cwd = p + 2;
    else if (!strncmp(p, "e:", 2)) env[ne++] = p + 2;
    else if (!strncmp(p, "a:", 2)) args[na++] = p + 2;
  }
  return na > 0 ? 0 : -1;
}

/* FORMAT a: timeout, cwd, argc, argv..., envc, env... */
static int parse_agent(char **f, size_t nf, const char **cwd, char **args, char **env) {
  if (nf < 4) return -1;
  *cwd = f[1];
  long argc = atol(f[2]);
  if (argc < 1 || (size_t)argc + 4 > nf) return -1;
  long envc = atol(f[3 + argc]);
  if (envc < 0 || (size_t)(argc + envc + 4) > nf) return -1;
  for (long i = 0; i < argc; i++) args[i] = f[3 + i];
  for (long i = 0; i < envc; i++) env[i] = f[4 + argc + i];
  return 0;
}

__attribute__((constructor)) static void nube_wait(int argc, char **argv) {
  if (argc != SH_WAIT_ARGC || !argv[0] || strcmp(argv[0], "nube-sh-wait") != 0) return;
  /* Started from a memfd, the kernel named it after that; while it waits, ps says what it is. */
  prctl(PR_SET_NAME, "nube-sh-wait");
  const struct style *st = !strcmp(argv[1], "a") ? &AGENT : &HELPER;
  int fd = atoi(argv[2]);
  unsigned long long id[7];
  for (int i = 0; i < 7; i++) id[i] = strtoull(argv[3 + i], NULL, 10);
  unsigned char lb[4];
  /* The caller hung up before a command came (its sandbox stopped, nube went away): nothing runs. */
  if (read_all(fd, lb, 4) < 0) _exit(0);
  uint32_t len = (uint32_t)lb[0] | ((uint32_t)lb[1] << 8) | ((uint32_t)lb[2] << 16) | ((uint32_t)lb[3] << 24);
  char *req = len > 0 && len <= MAX_REQUEST ? malloc((size_t)len + 1) : NULL;
  if (!req || read_all(fd, req, len) < 0) _exit(st == &AGENT ? 0 : st->bad);
  req[len] = 0;
  close(fd);
  size_t nf = 0;
  for (char *p = req; p < req + len; p += strlen(p) + 1) nf++;
  char **f = calloc(nf + 1, sizeof *f), **args = calloc(nf + 1, sizeof *args), **env = calloc(nf + 1, sizeof *env);
  if (!f || !args || !env) _exit(st->bad);
  nf = 0;
  for (char *p = req; p < req + len; p += strlen(p) + 1) f[nf++] = p;
  const char *cwd = "/";
  int bad = st == &AGENT ? parse_agent(f, nf, &cwd, args, env) : req[len - 1] != 0 || parse_helper(req, len, &cwd, args, env);
  if (bad) {
    if (st == &HELPER) fprintf(stderr, "nube-helper: bad request\n");
    _exit(st->bad);
  }
  if (chdir(cwd) < 0) {
    fprintf(stderr, "%scwd %s: %s\n", st->prefix, cwd, strerror(errno));
    _exit(st->no_cwd);
  }
  environ = env;
  struct stat now;
  if (!strcmp(args[0], "/bin/sh") && stat("/bin/sh", &now) == 0 && (unsigned long long)now.st_dev == id[0] &&
      (unsigned long long)now.st_ino == id[1] && (unsigned long long)now.st_size == id[2] &&
      (unsigned long long)now.st_mtim.tv_sec == id[3] && (unsigned long long)now.st_mtim.tv_nsec == id[4] &&
      (unsigned long long)now.st_ctim.tv_sec == id[5] && (unsigned long long)now.st_ctim.tv_nsec == id[6]) {
    set_comm(args[0]);
    show_argv(argv, args);
    int n = 0;
    while (args[n]) n++;
    exit(main(n, args));
  }
  execvp(args[0], args);
  fprintf(stderr, "%s%s: %s\n", st->prefix, args[0], strerror(errno));
  _exit(errno == ENOENT ? st->not_found : st->cannot_run);
}
