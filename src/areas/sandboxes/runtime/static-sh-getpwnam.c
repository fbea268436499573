// getpwnam for the static sh (scripts/install-static-sh.sh): a static glibc cannot load NSS modules,
// so `~user` would stay unexpanded. This reads /etc/passwd, which is what a sandbox's NSS ("files")
// reads too.
#include <pwd.h>
#include <stdio.h>
#include <string.h>

struct passwd *getpwnam(const char *name) {
  FILE *f = fopen("/etc/passwd", "re");
  if (!f) return NULL;
  struct passwd *p;
  while ((p = fgetpwent(f)) && strcmp(p->pw_name, name) != 0) {
  }
  fclose(f);
  return p;
}
