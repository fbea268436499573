/*
 * launch: start a sandbox in one spawner request (included by nube-helper.c; `serve` dispatches a
 * request whose first field is "L:1" here). Everything a start needs on the host is done by this one
 * small process, without nube forking itself or any program but nft and bwrap:
 *
 *   M:MERGED  o:OVERLAY-OPTIONS        mount(2) the overlay (the caller prepared upper/work/etc files)
 *   n:NETNS  v:VETH  b:BRIDGE  h:MAC  A:ADDR/PREFIX  g:GATEWAY
 *                                      netns in /run/netns (as `ip netns add`), veth pair by netlink
 *                                      (host end on the bridge, isolated port, up; eth0 inside with a
 *                                      fixed MAC, address, default route; lo up) and the netns sysctls
 *   d:KIND:BYTES:ID:DIR                the sandbox's disk dir and its limit (disk.c), done first
 *   (V:1 requests: volumes into a running sandbox, claim_binds below)
 *   B:r|w<TAB>SRC<TAB>DST              a volume: SRC bind-mounted on DST (a directory in the merged
 *                                      overlay, no symlink on the way), nosuid, nodev, read-only for r;
 *                                      after the overlay, so bwrap's recursive bind of / carries it
 *   f:NFT-SCRIPT                       `nft -f -`, run while the rest goes on; waited for before answering
 *   c:CGROUP...  u:UIDMAP  l:LOG  s:SECCOMP-FILE  a:ARG...
 *                                      the init: joins the cgroups, enters the netns, a new user namespace
 *                                      mapped by us (no newuidmap), execs argv (bwrap) with the seccomp
 *                                      file on fd 3, detached; answered once bwrap's pid 1 has forked its
 *                                      command (its setup is over), found by polling /proc every 0.25 ms
 *
 * Order: nft is started first and waited for last; the overlay is mounted; the network runs in a child
 * of its own while the init's fork joins its cgroups (cgroup migrations wait for RCU grace periods,
 * time and not CPU, so the two overlap); the init enters the netns once the network child says it
 * exists; the answer waits for the init's readiness, the network and nft.
 *
 * Answer: an 'o' frame "init PID INNER-PID START-TIME\n" (or "ok\n" without an init), then 's' "exit 0";
 * a failure is 'e' (what failed) + 's' "exit 125", after undoing nothing: the caller tears down.
 */
#include <stdarg.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/mount.h>
#include "disk.c"

#define MAX_BINDS 16

struct launch {
  const char *merged, *overlay;
  const char *netns, *veth, *bridge, *mac, *addr, *gateway;
  const char *nft;
  char *disk;
  char *binds[MAX_BINDS];
  int nbinds;
  const char *uidmap, *log, *seccomp;
  const char *cgroups[MAX_CG];
  int ncg;
  char **argv;
};

static void launch_fail(int conn, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* In the network child: where its failure goes (the session reports it), instead of the connection. */
static int launch_errfd = -1;

static void launch_fail(int conn, const char *fmt, ...) {
  char msg[4300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (launch_errfd >= 0) {
    if (write(launch_errfd, msg, strlen(msg)) < 0) { /* the session sees the exit status anyway */ }
    _exit(1);
  }
  session_fail(conn, msg);
  _exit(0);
}

/* --- rtnetlink, just what a veth pair needs --- */
struct nlbuf {
  char buf[4096];
  size_t len;
  int msgs;
};

static struct nlmsghdr *nl_msg(struct nlbuf *b, int type, int flags, const void *body, size_t n) {
  b->len = NLMSG_ALIGN(b->len);
  struct nlmsghdr *h = (struct nlmsghdr *)(b->buf + b->len);
  memset(h, 0, NLMSG_HDRLEN);
  h->nlmsg_type = type;
  h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
  h->nlmsg_seq = ++b->msgs;
  h->nlmsg_len = NLMSG_HDRLEN + n;
  memcpy(NLMSG_DATA(h), body, n);
  b->len += h->nlmsg_len;
  return h;
}

static struct rtattr *nl_attr(struct nlbuf *b, struct nlmsghdr *h, int type, const void *data, size_t n) {
  size_t at = NLMSG_ALIGN(b->len);
  struct rtattr *a = (struct rtattr *)(b->buf + at);
  a->rta_type = type;
  a->rta_len = RTA_LENGTH(n);
  if (n) memcpy(RTA_DATA(a), data, n);
  b->len = at + RTA_ALIGN(a->rta_len);
  h->nlmsg_len = (char *)b->buf + b->len - (char *)h;
  return a;
}

static void nl_end(struct nlbuf *b, struct rtattr *nest) { nest->rta_len = (char *)b->buf + b->len - (char *)nest; }

/* Send every message of b on a NETLINK_ROUTE socket and read their acks: 0, or -errno of the first error. */
static int nl_send(int fd, struct nlbuf *b, int *failed_seq) {
  if (b->len > sizeof b->buf - 256) return -EMSGSIZE;
  if (send(fd, b->buf, b->len, 0) < 0) return -errno;
  int acked = 0, err = 0;
  char rb[8192];
  while (acked < b->msgs) {
    ssize_t r = recv(fd, rb, sizeof rb, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    for (struct nlmsghdr *h = (struct nlmsghdr *)rb; NLMSG_OK(h, (size_t)r); h = NLMSG_NEXT(h, r)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;
      struct nlmsgerr *e = NLMSG_DATA(h);
      acked++;
      if (e->error && !err) {
        err = e->error;
        *failed_seq = (int)h->nlmsg_seq;
      }
    }
  }
  return err;
}

static int nl_open(void) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return -1;
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static int parse_mac(const char *s, unsigned char mac[6]) {
  unsigned v[6];
  if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return -1;
  for (int i = 0; i < 6; i++) mac[i] = (unsigned char)v[i];
  return 0;
}

static void write_sysctl(int conn, const char *path, const char *value) {
  if (write_file(path, value) < 0) launch_fail(conn, "%s: %s", path, strerror(errno));
}

/* As `ip netns add`: /run/netns a shared mount, an empty file, the new netns bound onto it. */
static int make_netns(int conn, const char *name, int host_ns) {
  mkdir("/run/netns", 0755);
  int made = 0;
  while (mount("", "/run/netns", "none", MS_SHARED | MS_REC, NULL) < 0) {
    if (errno != EINVAL || made) launch_fail(conn, "make /run/netns shared: %s", strerror(errno));
    if (mount("/run/netns", "/run/netns", "none", MS_BIND | MS_REC, NULL) < 0)
      launch_fail(conn, "bind /run/netns: %s", strerror(errno));
    made = 1;
  }
  char path[4096];
  snprintf(path, sizeof path, "/run/netns/%s", name);
  int fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
  if (fd < 0) launch_fail(conn, "create %s: %s", path, strerror(errno));
  close(fd);
  if (unshare(CLONE_NEWNET) < 0) {
    unlink(path);
    launch_fail(conn, "unshare net: %s", strerror(errno));
  }
  if (mount("/proc/self/ns/net", path, "none", MS_BIND, NULL) < 0) {
    unlink(path);
    launch_fail(conn, "bind %s: %s", path, strerror(errno));
  }
  int netfd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (netfd < 0) launch_fail(conn, "open netns: %s", strerror(errno));
  /* Root inside has no capability over this netns (it belongs to the host's user namespace), so low
     ports and ping are opened here; IPv6 is off so policy has one address family to cover ("all"
     also sets "default", so eth0, which comes later, has it off too). */
  write_sysctl(conn, "/proc/sys/net/ipv4/ip_unprivileged_port_start", "0");
  write_sysctl(conn, "/proc/sys/net/ipv4/ping_group_range", "0 2147483647");
  write_sysctl(conn, "/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
  write_sysctl(conn, "/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
  if (setns(host_ns, CLONE_NEWNET) < 0) launch_fail(conn, "setns host: %s", strerror(errno));
  return netfd;
}

static void link_up_by_name(struct nlbuf *b, const char *name) {
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
  struct nlmsghdr *h = nl_msg(b, RTM_NEWLINK, 0, &ifi, sizeof ifi);
  nl_attr(b, h, IFLA_IFNAME, name, strlen(name) + 1);
}

static int launch_network(int conn, const struct launch *l, int ready_fd) {
  int host_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host_ns < 0) launch_fail(conn, "open host netns: %s", strerror(errno));
  int host_nl = nl_open();
  if (host_nl < 0) launch_fail(conn, "netlink: %s", strerror(errno));
  unsigned bridx = if_nametoindex(l->bridge);
  if (!bridx) launch_fail(conn, "bridge %s: %s", l->bridge, strerror(errno));
  unsigned char mac[6];
  char addr[64], *slash;
  snprintf(addr, sizeof addr, "%s", l->addr);
  slash = strchr(addr, '/');
  struct in_addr ip, gw;
  if (parse_mac(l->mac, mac) < 0 || !slash || (*slash = 0, inet_pton(AF_INET, addr, &ip) != 1) ||
      inet_pton(AF_INET, l->gateway, &gw) != 1)
    launch_fail(conn, "bad network fields");
  int prefix = atoi(slash + 1);

  int netfd = make_netns(conn, l->netns, host_ns);
  /* The init may enter it now (it joins its cgroups meanwhile); its devices come next. */
  if (ready_fd >= 0) {
    char c = 1;
    if (write(ready_fd, &c, 1) != 1) { /* the init went away: the session reports it */ }
    close(ready_fd);
  }

  /* Host side: the pair (eth0 straight into the netns, a fixed MAC per address so the host's neighbour
     entry stays right after a resume), then the port isolated (no sandbox-to-sandbox layer 2) and up. */
  struct nlbuf b = {.len = 0, .msgs = 0};
  struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
  struct nlmsghdr *h = nl_msg(&b, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
  nl_attr(&b, h, IFLA_IFNAME, l->veth, strlen(l->veth) + 1);
  nl_attr(&b, h, IFLA_MASTER, &bridx, sizeof bridx);
  struct rtattr *info = nl_attr(&b, h, IFLA_LINKINFO, NULL, 0);
  nl_attr(&b, h, IFLA_INFO_KIND, "veth", 5);
  struct rtattr *data = nl_attr(&b, h, IFLA_INFO_DATA, NULL, 0);
  struct rtattr *peer = nl_attr(&b, h, VETH_INFO_PEER, &ifi, sizeof ifi);
  nl_attr(&b, h, IFLA_IFNAME, "eth0", 5);
  nl_attr(&b, h, IFLA_ADDRESS, mac, 6);
  nl_attr(&b, h, IFLA_NET_NS_FD, &netfd, sizeof netfd);
  nl_end(&b, peer);
  nl_end(&b, data);
  nl_end(&b, info);
  struct ifinfomsg up = {.ifi_family = AF_UNSPEC, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
  h = nl_msg(&b, RTM_NEWLINK, 0, &up, sizeof up);
  nl_attr(&b, h, IFLA_IFNAME, l->veth, strlen(l->veth) + 1);
  info = nl_attr(&b, h, IFLA_LINKINFO, NULL, 0);
  nl_attr(&b, h, IFLA_INFO_SLAVE_KIND, "bridge", 7);
  data = nl_attr(&b, h, IFLA_INFO_SLAVE_DATA, NULL, 0);
  unsigned char one = 1;
  nl_attr(&b, h, IFLA_BRPORT_ISOLATED, &one, 1);
  nl_end(&b, data);
  nl_end(&b, info);
  int seq = 0, err = nl_send(host_nl, &b, &seq);
  if (err) launch_fail(conn, "veth %s (%s): %s", l->veth, seq == 1 ? "create" : "isolate, up", strerror(-err));
  close(host_nl);

  /* Inside: lo and eth0 up, the address, the default route through the bridge. */
  if (setns(netfd, CLONE_NEWNET) < 0) launch_fail(conn, "setns %s: %s", l->netns, strerror(errno));
  int nl = nl_open();
  unsigned eth0 = if_nametoindex("eth0");
  if (nl < 0 || !eth0) launch_fail(conn, "eth0 in %s: %s", l->netns, strerror(errno));
  b.len = 0;
  b.msgs = 0;
  link_up_by_name(&b, "lo");
  struct ifaddrmsg ifa = {.ifa_family = AF_INET, .ifa_prefixlen = (unsigned char)prefix, .ifa_index = eth0};
  h = nl_msg(&b, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
  nl_attr(&b, h, IFA_LOCAL, &ip, 4);
  nl_attr(&b, h, IFA_ADDRESS, &ip, 4);
  link_up_by_name(&b, "eth0");
  struct rtmsg rt = {.rtm_family = AF_INET, .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_BOOT,
                     .rtm_scope = RT_SCOPE_UNIVERSE, .rtm_type = RTN_UNICAST};
  h = nl_msg(&b, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof rt);
  nl_attr(&b, h, RTA_GATEWAY, &gw, 4);
  err = nl_send(nl, &b, &seq);
  if (err) launch_fail(conn, "eth0 setup in %s (step %d): %s", l->netns, seq, strerror(-err));
  close(nl);
  if (setns(host_ns, CLONE_NEWNET) < 0) launch_fail(conn, "setns host: %s", strerror(errno));
  close(host_ns);
  return netfd;
}

/*
 * The network in a child of its own, so that it runs while the init joins its cgroups (each cgroup
 * migration waits for an RCU grace period: time, not CPU): `ready` gets a byte once the netns exists,
 * the exit status says whether all went well, `errfd` why not.
 */
static pid_t start_network(int conn, const struct launch *l, int *ready, int *errfd) {
  int rd[2], er[2];
  if (pipe2(rd, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0) launch_fail(conn, "pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) launch_fail(conn, "fork: %s", strerror(errno));
  if (pid == 0) {
    close(rd[0]);
    close(er[0]);
    launch_errfd = er[1];
    launch_network(conn, l, rd[1]);
    _exit(0);
  }
  close(rd[1]);
  close(er[1]);
  *ready = rd[0];
  *errfd = er[0];
  return pid;
}

static void read_text(int fd, char *out, size_t len) {
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, out + n, len - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    if (n == len - 1) break;
  }
  out[n] = 0;
  close(fd);
}

/* 0 when the child exited 0; otherwise its message (from errfd) is in `why`. */
static int wait_child(pid_t pid, int errfd, char *why, size_t len) {
  read_text(errfd, why, len);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* nft -f - with the script on stdin; its stderr comes back through errfd. */
static pid_t start_nft(int conn, const char *script, int *errfd) {
  int in[2], er[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0) launch_fail(conn, "pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) launch_fail(conn, "fork: %s", strerror(errno));
  if (pid == 0) {
    if (dup2(in[0], 0) < 0 || dup2(er[1], 1) < 0 || dup2(er[1], 2) < 0) _exit(125);
    signal(SIGPIPE, SIG_DFL);
    execlp("nft", "nft", "-f", "-", (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(er[1]);
  /* Scripts are a few hundred bytes: the pipe takes them whole. */
  if (write(in[1], script, strlen(script)) < 0) { /* nft died: its status says why */ }
  close(in[1]);
  *errfd = er[0];
  return pid;
}

static void wait_nft(int conn, pid_t pid, int errfd) {
  char out[2048];
  if (wait_child(pid, errfd, out, sizeof out) < 0) launch_fail(conn, "nft failed: %s", out);
}

static pid_t children_of(pid_t pid, pid_t *first) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", pid, pid);
  if (read_small(path, buf, sizeof buf) <= 0) return 0;
  *first = (pid_t)atoi(buf);
  return *first;
}

static int read_comm(pid_t pid, char *comm, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/comm", pid);
  ssize_t r = read_small(path, comm, len);
  if (r <= 0) return -1;
  if (comm[r - 1] == '\n') comm[r - 1] = 0;
  return 0;
}

/* Field 22 of /proc/PID/stat, as the runtime compares it. */
static int start_time(pid_t pid, char *out, size_t len) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  if (read_small(path, buf, sizeof buf) <= 0) return -1;
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  p += 2;
  for (int field = 3; field < 22 && p; field++) p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL;
  if (!p) return -1;
  size_t n = strcspn(p, " ");
  if (n == 0 || n >= len) return -1;
  memcpy(out, p, n);
  out[n] = 0;
  return 0;
}

static void tail_log(const char *log, char *out, size_t len) {
  out[0] = 0;
  int fd = open(log, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  off_t end = lseek(fd, 0, SEEK_END);
  lseek(fd, end > (off_t)len - 1 ? end - (off_t)len + 1 : 0, SEEK_SET);
  ssize_t r = read(fd, out, len - 1);
  out[r > 0 ? r : 0] = 0;
  close(fd);
}

/* The network child of this launch: when the init fails, a failed network is the reason to report. */
static pid_t net_pid = -1;
static int net_errfd = -1;

static void wait_network(int conn) {
  if (net_pid <= 0) return;
  char why[4096];
  int failed = wait_child(net_pid, net_errfd, why, sizeof why) < 0;
  net_pid = -1;
  if (failed) launch_fail(conn, "network: %s", why);
}

static void init_fail(int conn, pid_t pid, const char *log, const char *what) {
  if (pid > 0) kill(pid, SIGKILL);
  wait_network(conn);
  char why[1024];
  tail_log(log, why, sizeof why);
  launch_fail(conn, "%s: %s", what, why);
}

/*
 * bwrap binds the root with nosuid, so a set-user-id program (sudo, su) would not work for a user
 * other than root inside. The root is remounted without it from the host, once bwrap's setup is over:
 * set-user-id inside reaches the sandbox's own root (the same user namespace), never further. The
 * flag is bwrap's own, not one inherited from the host's mount, so the kernel lets it change.
 */
static int allow_setuid(pid_t target) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/mnt", target);
  int mnt = open(path, O_RDONLY | O_CLOEXEC);
  snprintf(path, sizeof path, "/proc/%d/root", target);
  int root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (mnt < 0 || root < 0) return -1;
  pid_t c = fork();
  if (c < 0) return -1;
  if (c == 0) {
    if (setns(mnt, CLONE_NEWNS) < 0 || fchdir(root) < 0 || chroot(".") < 0) _exit(1);
    _exit(mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_NODEV | MS_RELATIME, NULL) < 0 ? 2 : 0);
  }
  close(mnt);
  close(root);
  int st = 0;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
  return 0;
}

static void launch_init(int conn, const struct launch *l, int net_ready, char *answer, size_t alen) {
  int up[2], go[2];
  if (pipe2(up, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) launch_fail(conn, "pipe: %s", strerror(errno));
  int logfd = open(l->log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  int bpf = open(l->seccomp, O_RDONLY | O_CLOEXEC);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (logfd < 0 || bpf < 0 || devnull < 0) launch_fail(conn, "open log, seccomp: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) launch_fail(conn, "fork: %s", strerror(errno));
  if (pid == 0) {
    /* Detached like a spawn of its own: new session, stdio to the log, the filter on fd 3 (just before
       exec), default signal dispositions (the session ignores SIGPIPE, which exec would keep). */
    setsid();
    for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
    if (dup2(devnull, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0) _exit(125);
    char path[4096];
    for (int k = 0; k < l->ncg; k++) {
      snprintf(path, sizeof path, "%s/cgroup.procs", l->cgroups[k]);
      if (write_file(path, "0") < 0) die(path);
    }
    /* The netns before the user namespace: after it, this process has no capability over the host's. */
    char c = 0;
    if (net_ready >= 0) {
      if (read(net_ready, &c, 1) != 1) _exit(125); /* the network failed: the session says why */
      snprintf(path, sizeof path, "/run/netns/%s", l->netns);
      int netfd = open(path, O_RDONLY | O_CLOEXEC);
      if (netfd < 0 || setns(netfd, CLONE_NEWNET) < 0) die("setns net");
      close(netfd);
    }
    if (unshare(CLONE_NEWUSER) < 0) die("unshare user");
    c = 1;
    if (write(up[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(125);
    if (setgroups(0, NULL) < 0) die("setgroups");
    if (setresgid(0, 0, 0) < 0) die("setgid");
    if (setresuid(0, 0, 0) < 0) die("setuid");
    static char *env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    environ = env;
    /* fd 3 last: until now it may have been one of the pipes read above. */
    if (bpf == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(bpf, 3) < 0) die("seccomp fd");
    execvp(l->argv[0], l->argv);
    die(l->argv[0]);
  }
  close(up[1]);
  close(go[0]);
  if (net_ready >= 0) close(net_ready);
  close(logfd);
  close(bpf);
  close(devnull);
  char c;
  if (read(up[0], &c, 1) != 1) init_fail(conn, pid, l->log, "init failed before its user namespace");
  char path[64];
  const char *maps[2] = {"uid_map", "gid_map"};
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "/proc/%d/%s", pid, maps[k]);
    if (write_file(path, l->uidmap) < 0) {
      char what[128];
      snprintf(what, sizeof what, "%s: %s", path, strerror(errno));
      init_fail(conn, pid, l->log, what);
    }
  }
  if (write(go[1], &c, 1) != 1) init_fail(conn, pid, l->log, "init went away");
  close(go[1]);
  close(up[0]);
  /* bwrap's pid 1 forks the command once the mounts, pivot and namespaces are done. */
  long deadline = now_ms() + 10000;
  while (now_ms() < deadline) {
    pid_t inner = 0, grandchild = 0;
    char comm[64], st[32];
    if (children_of(pid, &inner) && read_comm(inner, comm, sizeof comm) == 0 && !strcmp(comm, "bwrap") &&
        children_of(inner, &grandchild) && start_time(inner, st, sizeof st) == 0) {
      if (allow_setuid(inner) < 0) init_fail(conn, pid, l->log, "remount / without nosuid");
      snprintf(answer, alen, "init %d %d %s\n", pid, inner, st);
      return;
    }
    if (waitpid(pid, NULL, WNOHANG) == pid) break;
    usleep(250);
  }
  init_fail(conn, pid, l->log, "init failed");
}

/* `r|w<TAB>SRC<TAB>DST`: DST must resolve to itself (the caller made it; a symlink would lead out). */
static void bind_volume(int conn, char *spec) {
  char *src = strchr(spec, '\t');
  char *dst = src ? strchr(src + 1, '\t') : NULL;
  if (!src || !dst || (spec[0] != 'r' && spec[0] != 'w')) launch_fail(conn, "bad volume field");
  *src++ = 0;
  *dst++ = 0;
  char *real = realpath(dst, NULL);
  if (!real || strcmp(real, dst) != 0) launch_fail(conn, "volume mount point %s is not a plain directory", dst);
  free(real);
  if (mount(src, dst, NULL, MS_BIND, NULL) < 0) launch_fail(conn, "bind %s on %s: %s", src, dst, strerror(errno));
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (spec[0] == 'r' ? MS_RDONLY : 0);
  if (mount(NULL, dst, NULL, flags, NULL) < 0) launch_fail(conn, "remount %s: %s", dst, strerror(errno));
}

/*
 * V:1  p:PID  u:UID  B:r|w<TAB>SRC<TAB>DST...   volumes into a running sandbox (a pooled one, claimed):
 * each SRC is cloned on the host as a detached mount (open_tree), made nosuid, nodev (read-only for
 * r), then moved onto DST inside PID's mount namespace by a child that entered it. DST is walked from
 * the sandbox's root one directory at a time without following symlinks, the missing ones made (owned
 * by UID, as launch.ts makes them in the upper dir): nothing on the way can lead out of the sandbox.
 */
static int bind_into(int tree, const char *dst, uid_t uid, char *why, size_t wlen) {
  int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  char path[4096];
  snprintf(path, sizeof path, "%s", dst);
  for (char *part = strtok(path, "/"); part && dir >= 0; part = strtok(NULL, "/")) {
    int next = openat(dir, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT) {
      if (mkdirat(dir, part, 0755) < 0 && errno != EEXIST) { snprintf(why, wlen, "mkdir %s: %s", part, strerror(errno)); return -1; }
      if (fchownat(dir, part, uid, uid, AT_SYMLINK_NOFOLLOW) < 0) { snprintf(why, wlen, "chown %s: %s", part, strerror(errno)); return -1; }
      next = openat(dir, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (next < 0) { snprintf(why, wlen, "%s in %s is not a plain directory: %s", part, dst, strerror(errno)); return -1; }
    close(dir);
    dir = next;
  }
  if (dir < 0) { snprintf(why, wlen, "open / in the sandbox: %s", strerror(errno)); return -1; }
  if (syscall(SYS_move_mount, tree, "", dir, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) {
    snprintf(why, wlen, "move_mount on %s: %s", dst, strerror(errno));
    return -1;
  }
  return 0;
}

static void claim_binds(int conn, char *req, size_t len) {
  pid_t pid = 0;
  uid_t uid = 0;
  char *binds[MAX_BINDS];
  int n = 0;
  for (size_t p = 0; p < len; p += strlen(req + p) + 1) {
    char *f = req + p, *v = f + 2;
    if (strlen(f) < 2 || f[1] != ':') launch_fail(conn, "bad volume request");
    if (f[0] == 'p') pid = (pid_t)atoi(v);
    else if (f[0] == 'u') uid = (uid_t)atoi(v);
    else if (f[0] == 'B' && n < MAX_BINDS) binds[n++] = v;
    else if (f[0] != 'V') launch_fail(conn, "unknown volume field %c", f[0]);
  }
  if (pid <= 1 || uid == 0) launch_fail(conn, "a volume request needs p: and u:");
  int trees[MAX_BINDS];
  char *dsts[MAX_BINDS];
  for (int i = 0; i < n; i++) {
    char *spec = binds[i], *src = strchr(spec, '\t');
    char *dst = src ? strchr(src + 1, '\t') : NULL;
    if (!src || !dst || (spec[0] != 'r' && spec[0] != 'w') || dst[1] != '/') launch_fail(conn, "bad volume field");
    *src++ = 0;
    *dst++ = 0;
    dsts[i] = dst;
    trees[i] = (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (trees[i] < 0) launch_fail(conn, "open_tree %s: %s", src, strerror(errno));
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (spec[0] == 'r' ? MOUNT_ATTR_RDONLY : 0)};
    if (syscall(SYS_mount_setattr, trees[i], "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
      launch_fail(conn, "mount_setattr %s: %s", src, strerror(errno));
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/mnt", pid);
  int mnt = open(path, O_RDONLY | O_CLOEXEC);
  snprintf(path, sizeof path, "/proc/%d/root", pid);
  int root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (mnt < 0 || root < 0) launch_fail(conn, "sandbox process %d: %s", pid, strerror(errno));
  int errp[2];
  if (pipe2(errp, O_CLOEXEC) < 0) launch_fail(conn, "pipe: %s", strerror(errno));
  pid_t c = fork();
  if (c < 0) launch_fail(conn, "fork: %s", strerror(errno));
  if (c == 0) {
    char why[4200] = "enter the sandbox's mount namespace";
    int ok = setns(mnt, CLONE_NEWNS) == 0 && fchdir(root) == 0 && chroot(".") == 0;
    for (int i = 0; ok && i < n; i++) ok = bind_into(trees[i], dsts[i], uid, why, sizeof why) == 0;
    if (!ok && write(errp[1], why, strlen(why)) < 0) { /* the exit status says it failed */ }
    _exit(ok ? 0 : 1);
  }
  close(errp[1]);
  char why[4200] = {0};
  ssize_t got = read(errp[0], why, sizeof why - 1);
  int st = 0;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    launch_fail(conn, "volumes into sandbox %d: %s", pid, got > 0 ? why : "failed");
  send_frame(conn, 'o', "ok\n", 3);
  send_frame(conn, 's', "exit 0\n", 7);
  _exit(0);
}

static void launch_session(int conn, char *req, size_t len) {
  struct launch l = {0};
  size_t nargs = 0;
  for (size_t p = 0; p < len; p += strlen(req + p) + 1) if (req[p] == 'a') nargs++;
  l.argv = calloc(nargs + 1, sizeof(char *));
  if (!l.argv) launch_fail(conn, "out of memory");
  nargs = 0;
  for (size_t p = 0; p < len; p += strlen(req + p) + 1) {
    char *f = req + p, *v = f + 2;
    if (strlen(f) < 2 || f[1] != ':') launch_fail(conn, "bad launch request");
    switch (f[0]) {
      case 'L': break;
      case 'M': l.merged = v; break;
      case 'o': l.overlay = v; break;
      case 'n': l.netns = v; break;
      case 'v': l.veth = v; break;
      case 'b': l.bridge = v; break;
      case 'h': l.mac = v; break;
      case 'A': l.addr = v; break;
      case 'g': l.gateway = v; break;
      case 'f': l.nft = v; break;
      case 'd': l.disk = v; break;
      case 'B': if (l.nbinds < MAX_BINDS) l.binds[l.nbinds++] = v; else launch_fail(conn, "too many volumes"); break;
      case 'c': if (l.ncg < MAX_CG) l.cgroups[l.ncg++] = v; break;
      case 'u': l.uidmap = v; break;
      case 'l': l.log = v; break;
      case 's': l.seccomp = v; break;
      case 'a': l.argv[nargs++] = v; break;
      default: launch_fail(conn, "unknown launch field %c", f[0]);
    }
  }
  if (nargs && (!l.uidmap || !l.log || !l.seccomp)) launch_fail(conn, "an init needs u:, l: and s:");
  if (l.netns && (!l.veth || !l.bridge || !l.mac || !l.addr || !l.gateway)) launch_fail(conn, "incomplete network fields");
  char why[512];
  if (l.disk && disk_setup(l.disk, why, sizeof why) < 0) launch_fail(conn, "%s", why);
  int nft_err = -1;
  pid_t nft = l.nft ? start_nft(conn, l.nft, &nft_err) : -1;
  if (l.overlay && l.merged && mount("overlay", l.merged, "overlay", 0, l.overlay) < 0)
    launch_fail(conn, "mount overlay on %s: %s", l.merged, strerror(errno));
  for (int i = 0; i < l.nbinds; i++) bind_volume(conn, l.binds[i]);
  int net_ready = -1;
  if (l.netns) net_pid = start_network(conn, &l, &net_ready, &net_errfd);
  char answer[256] = "ok\n";
  if (nargs) launch_init(conn, &l, net_ready, answer, sizeof answer);
  else if (net_ready >= 0) close(net_ready);
  wait_network(conn);
  if (nft > 0) wait_nft(conn, nft, nft_err);
  send_frame(conn, 'o', answer, strlen(answer));
  send_frame(conn, 's', "exit 0\n", 7);
  _exit(0);
}
