/*
 * A resident session ("r:1" in the head: "t:PID", "c:CGROUP"..., "x:EXEC_CGROUP"..., "r:1"): one
 * connection kept for many commands of one sandbox, and one process inside it, the zygote, that
 * makes their processes. Included by nube-helper.c.
 *
 * Per command the caller sends a request of its own ("d:", "m:", "i:", "e:", "a:" fields, then
 * stdin) and gets frames 'o', 'e' and the final 's' status ("exit C" /
 * "signal S", + " timeout"; no "pid" line); the connection then waits for the next. A hang-up, a
 * bad request, or a zygote or waiting process that died (the sandbox stopped, or root inside killed
 * it) ends the session; when that happens before a command's status, nothing of that command ran,
 * and the caller runs it in a session of its own.
 *
 * Why: the session per exec it replaced (prepared ahead, one per command) cost a fork of serve, seven opens of the target's namespaces,
 * their setns, a chroot, the seccomp filter's load, a read of /bin/sh to compare it with the
 * reference dash and three cgroup migrations, on a 2-core host as much CPU as the command itself.
 * The zygote does all of that once: it joins the sandbox's cgroups and "EXEC_CGROUP-z", enters the
 * namespaces and root, becomes root inside and loads the filter. For each command it clones a child
 * with CLONE_PARENT, so this session is its parent (it reaps it and owns its deadline as for any
 * other command) and CLONE_PIDFD (the pidfd is handed back here). The child joins the exec cgroups
 * (through descriptors the session opened: the zygote is chrooted) and waits for its command as a
 * prepared child does (await_command: the static sh's wait mode). /bin/sh is compared once and then
 * only stat'ed. The next command's child is made as soon as the previous command's status is sent.
 *
 * The zygote is not dumpable (its credentials changed), so root inside can neither trace it nor
 * open its descriptors or memory; it holds its socket to this session, the exec cgroups' procs
 * files and the static sh. Its command line is rewritten to "nube-zygote" (ps inside shows it).
 */

/* argv's strings of `serve`, rewritten in the zygote (set by main). */
static char *args_start;
static size_t args_len;

/* One byte and up to n descriptors over a unix socket; 0 or -1. */
static int send_fds(int s, char tag, const int *fds, int n) {
  char buf[CMSG_SPACE(4 * sizeof(int))];
  memset(buf, 0, sizeof buf);
  struct iovec iov = {&tag, 1};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n > 0) {
    m.msg_control = buf;
    m.msg_controllen = CMSG_SPACE(n * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
  }
  ssize_t w;
  do w = sendmsg(s, &m, MSG_NOSIGNAL); while (w < 0 && errno == EINTR);
  return w == 1 ? 0 : -1;
}

/* The byte, with exactly n descriptors (CLOEXEC) into fds; -1 at EOF, on an error or another count. */
static int recv_fds(int s, char *tag, int *fds, int n) {
  char buf[CMSG_SPACE(4 * sizeof(int))];
  struct iovec iov = {tag, 1};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf, .msg_controllen = sizeof buf};
  ssize_t r;
  do r = recvmsg(s, &m, MSG_CMSG_CLOEXEC); while (r < 0 && errno == EINTR);
  if (r != 1) return -1;
  int got = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    int *in = (int *)CMSG_DATA(c);
    for (int i = 0; i < k; i++) {
      if (got < n) fds[got++] = in[i];
      else close(in[i]);
    }
  }
  if (got == n) return 0;
  for (int i = 0; i < got; i++) close(fds[i]);
  return -1;
}

/* Inside the sandbox: per message (stdin, stdout, stderr and ctl of the next command), a child that
   joins the exec cgroups and waits for its command; its pidfd goes back. Ends when the session does. */
static void zygote_loop(int zs, const struct entry *e, const int *xfds, int nx) {
  struct stat sh_seen, now;
  int sh_known = 0, sh_ok = 0;
  for (;;) {
    int fds[4];
    char tag;
    if (recv_fds(zs, &tag, fds, 4) < 0) _exit(0);
    if (!sh_known || stat("/bin/sh", &now) < 0 || !same_file(&now, &sh_seen)) {
      sh_ok = sh_is_ref(&sh_seen);
      sh_known = 1;
    }
    int pidfd = -1;
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_PARENT | CLONE_PIDFD | SIGCHLD, 0, &pidfd, 0, 0);
    if (pid == 0) {
      close(zs);
      setpgid(0, 0);
      signal(SIGPIPE, SIG_DFL);
      for (int k = 0; k < nx; k++) {
        if (write(xfds[k], "0", 1) < 0) _exit(125);
        close(xfds[k]);
      }
      if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0) _exit(125);
      await_command(fds[3], e, sh_ok, &sh_seen);
    }
    for (int k = 0; k < 4; k++) close(fds[k]);
    if (pid < 0 || send_fds(zs, 'p', &pidfd, 1) < 0) _exit(0);
    close(pidfd);
  }
}

/* A pidfd's process id as this process sees it (its /proc is the host's). */
static pid_t pidfd_pid(int pidfd) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
  if (read_small(path, buf, sizeof buf) <= 0) return -1;
  char *p = strstr(buf, "\nPid:");
  return p ? (pid_t)atoi(p + 5) : -1;
}

static void resident_session(int conn, struct entry *e, struct opened *o) {
  char what[4300];
  const char *zdirs[2 * MAX_CG];
  int nz = 0, xfds[MAX_CG];
  for (int k = 0; k < e->ncg; k++) zdirs[nz++] = e->cgroups[k];
  for (int k = 0; k < e->nexec; k++) {
    char *z = NULL;
    if (asprintf(&z, "%s-z", e->exec_cgroups[k]) < 0) session_fail(conn, "out of memory");
    if (mkdir(z, 0755) < 0 && errno != EEXIST) {
      snprintf(what, sizeof what, "mkdir %s: %s", z, strerror(errno));
      session_fail(conn, what);
    }
    zdirs[nz++] = z;
    snprintf(what, sizeof what, "%s/cgroup.procs", e->exec_cgroups[k]);
    xfds[k] = open(what, O_WRONLY | O_CLOEXEC);
    if (xfds[k] < 0) session_fail(conn, "open exec cgroup");
  }
  int zs[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, zs) < 0) session_fail(conn, "socketpair");
  pid_t zygote = fork();
  if (zygote < 0) session_fail(conn, "fork");
  if (zygote == 0) {
    close(conn);
    close(zs[0]);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    prctl(PR_SET_NAME, "nube-zygote");
    if (args_start && args_len > 12) {
      memset(args_start, 0, args_len);
      memcpy(args_start, "nube-zygote", 12);
    }
    join_cgroups(zdirs, nz);
    enter_namespaces(o);
    if (load_filter() < 0) die("seccomp filter");
    zygote_loop(zs[1], e, xfds, e->nexec);
    _exit(0);
  }
  close(zs[1]);
  close_target(o);
  /* A zygote that does not answer (root inside stopped it) ends the session: the command waiting for
     it then runs in a session of its own. */
  struct timeval patience = {5, 0};
  setsockopt(zs[0], SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  for (int k = 0; k < e->nexec; k++) close(xfds[k]);
  pid_t child = -1;
  for (;;) {
    int in[2], out[2], er[2], ctl[2];
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0 ||
        pipe2(ctl, O_CLOEXEC) < 0)
      break;
    int theirs[4] = {in[0], out[1], er[1], ctl[0]};
    int sent = send_fds(zs[0], 'c', theirs, 4);
    for (int k = 0; k < 4; k++) close(theirs[k]);
    int pidfd = -1;
    char tag;
    size_t in_left = 0;
    int ready = sent == 0 && recv_fds(zs[0], &tag, &pidfd, 1) == 0 && (child = pidfd_pid(pidfd)) > 0;
    /* pass_rest closes ctl's end either way. */
    if (!ready) close(ctl[1]);
    if (!ready || pass_rest(conn, pidfd, ctl[1], e, &in_left) < 0) {
      close(in[1]);
      close(out[0]);
      close(er[0]);
      break;
    }
    int ended = relay_command(conn, child, pidfd, in[1], out[0], er[0], in_left, e);
    close(pidfd);
    child = -1;
    if (ended < 0) break;
  }
  /* The caller hung up, or the sandbox went: what waits is killed and everything reaped. */
  if (child > 0) end_waiting(child, e);
  close(zs[0]);
  kill(zygote, SIGKILL);
  waitpid(zygote, NULL, 0);
  close(conn);
  remove_exec_cgroups(e);
  for (int k = e->ncg; k < nz; k++) rmdir(zdirs[k]);
  _exit(0);
}
