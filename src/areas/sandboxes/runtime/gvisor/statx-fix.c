// statx-fix.so: preloaded (LD_PRELOAD) into the commands nube runs in a gVisor sandbox. Debian's gVisor
// (20221219) answers EINVAL to statx and fstatat with AT_NO_AUTOMOUNT, which coreutils always passes,
// so `ls DIR` and `stat` failed. The flag only matters for automount points, which a sandbox has none
// of: dropping it is exact here.
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf) {
  return syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}

int fstatat(int dirfd, const char *path, struct stat *buf, int flags) {
  return syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}

int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags) {
  return syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}
