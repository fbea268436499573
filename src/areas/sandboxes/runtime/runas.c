/* /.nube/runas: runs a command as another user of the sandbox, or gives paths to one. Static, so it
 * works in any image (Alpine's musl, distroless) where util-linux's setpriv is missing. The caller
 * (the sandboxes service) has resolved the user against the sandbox's /etc/passwd and /etc/group.
 *
 *   runas UID GID GROUPS -- ARGV...   GROUPS: supplementary gids, comma-separated, or "-" for none
 *   runas --chown UID GID PATH...     lchown of each path (files the API wrote for that user)
 *
 * It runs as root inside the sandbox (root of the sandbox's user namespace): dropping to UID clears
 * its capabilities as setpriv's --reuid does. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned long id_of(const char *s) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (!*s || *end || errno || v > 0xfffffffeUL) {
    fprintf(stderr, "runas: bad id %s\n", s);
    exit(125);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc >= 4 && strcmp(argv[1], "--chown") == 0) {
    uid_t uid = (uid_t)id_of(argv[2]);
    gid_t gid = (gid_t)id_of(argv[3]);
    int rc = 0;
    for (int i = 4; i < argc; i++) {
      if (lchown(argv[i], uid, gid) < 0) {
        fprintf(stderr, "runas: chown %s: %s\n", argv[i], strerror(errno));
        rc = 1;
      }
    }
    return rc;
  }
  if (argc < 6 || strcmp(argv[4], "--") != 0) {
    fprintf(stderr, "usage: runas UID GID GROUPS -- ARGV... | runas --chown UID GID PATH...\n");
    return 125;
  }
  uid_t uid = (uid_t)id_of(argv[1]);
  gid_t gid = (gid_t)id_of(argv[2]);
  gid_t groups[256];
  size_t n = 0;
  if (strcmp(argv[3], "-") != 0) {
    char *list = strdup(argv[3]);
    for (char *tok = strtok(list, ","); tok && n < 256; tok = strtok(NULL, ",")) groups[n++] = (gid_t)id_of(tok);
  }
  if (setgroups(n, groups) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) {
    fprintf(stderr, "runas: cannot become %lu:%lu: %s\n", (unsigned long)uid, (unsigned long)gid, strerror(errno));
    return 125;
  }
  execvp(argv[5], argv + 5);
  fprintf(stderr, "%s: %s\n", argv[5], strerror(errno));
  return errno == ENOENT ? 127 : 126;
}
