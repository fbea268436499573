// The static sh's process name (scripts/install-static-sh.sh). The namespaces driver runs it from a
// memfd, whose name the kernel gives the process ("memfd:nube-sh"): ps, top and pgrep would not see
// an `sh`. Before dash starts, a name given that way becomes what an exec of argv[0] would have given
// (`sh` for /bin/sh). glibc calls constructors with argc and argv, in static programs too.
#include <string.h>
#include <sys/prctl.h>

__attribute__((constructor)) static void nube_comm(int argc, char **argv) {
  char name[17] = {0};
  if (argc < 1 || !argv[0] || prctl(PR_GET_NAME, name) != 0 || strncmp(name, "memfd:", 6) != 0) return;
  const char *base = strrchr(argv[0], '/');
  prctl(PR_SET_NAME, base ? base + 1 : argv[0]);
}
