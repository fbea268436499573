// How a prepared command starts the static sh's wait mode (static-sh-wait.c), and how all three read
// a request whole: included by the static sh, the namespaces helper (namespaces/helper/nube-helper.c)
// and gVisor's agent (gvisor/nube-agent.c), whose builds hash this file with their own sources.
#ifndef NUBE_STATIC_SH_WAIT_H
#define NUBE_STATIC_SH_WAIT_H
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* n bytes from fd into p: 0, or -1 at EOF or an error (EINTR retried). */
static inline int read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

/* argv[0], the format, the request's fd and seven numbers of /bin/sh's identity. */
#define SH_WAIT_ARGC 10

struct sh_wait {
  char fd[16];
  char id[7][24];
  char *argv[SH_WAIT_ARGC + 1];
};

/* `nube-sh-wait FORMAT FD DEV INO SIZE MTIME_S MTIME_NS CTIME_S CTIME_NS`, held by `w`. FORMAT is h
   (nube-helper's request fields) or a (nube-agent's). */
static inline char **sh_wait_argv(struct sh_wait *w, char *format, int fd, const struct stat *sh) {
  unsigned long long v[7] = {(unsigned long long)sh->st_dev, (unsigned long long)sh->st_ino,
                             (unsigned long long)sh->st_size, (unsigned long long)sh->st_mtim.tv_sec,
                             (unsigned long long)sh->st_mtim.tv_nsec, (unsigned long long)sh->st_ctim.tv_sec,
                             (unsigned long long)sh->st_ctim.tv_nsec};
  snprintf(w->fd, sizeof w->fd, "%d", fd);
  w->argv[0] = "nube-sh-wait";
  w->argv[1] = format;
  w->argv[2] = w->fd;
  for (int k = 0; k < 7; k++) {
    snprintf(w->id[k], sizeof w->id[k], "%llu", v[k]);
    w->argv[3 + k] = w->id[k];
  }
  w->argv[SH_WAIT_ARGC] = NULL;
  return w->argv;
}
#endif
