/*
 * disk: a sandbox's disk dir with its own limit (included by launch.c; the launch field
 * `d:KIND:BYTES:ID:DIR`). DIR holds the sandbox's overlay upper and work dirs; everything written
 * there counts against BYTES (0: no limit), and a write past it fails inside the sandbox (ENOSPC on
 * XFS, EDQUOT on btrfs). Done with ioctls in this process: the CLIs (xfs_quota, btrfs) cost a
 * process each, several milliseconds of a ~13 ms create.
 *
 *   KIND x  XFS project quota: DIR (made if missing, must be empty then) gets project ID and the
 *           inherit flag, so what is created below it is in the project; the project's hard block
 *           limit is BYTES. The store must be mounted with prjquota.
 *   KIND b  btrfs qgroup: DIR is a subvolume (made if missing); its qgroup's referenced bytes are
 *           limited to BYTES. The store must have quotas enabled (`btrfs quota enable`).
 *
 * DIR existing: only the limit is set (a claim changing it, or a retry).
 */
#include <linux/fs.h>
#include <linux/btrfs.h>
#include <linux/dqblk_xfs.h>
#include <sys/ioctl.h>
#include <sys/quota.h>
#include <libgen.h>

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443
#endif

static int disk_xfs(const char *dir, unsigned id, unsigned long long bytes, char *why, size_t wlen) {
  if (mkdir(dir, 0755) < 0 && errno != EEXIST) return snprintf(why, wlen, "mkdir %s: %s", dir, strerror(errno)), -1;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return snprintf(why, wlen, "open %s: %s", dir, strerror(errno)), -1;
  struct fsxattr fa;
  if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0) goto fail;
  if (fa.fsx_projid != id || !(fa.fsx_xflags & FS_XFLAG_PROJINHERIT)) {
    fa.fsx_projid = id;
    fa.fsx_xflags |= FS_XFLAG_PROJINHERIT;
    if (ioctl(fd, FS_IOC_FSSETXATTR, &fa) < 0) goto fail;
  }
  struct fs_disk_quota q = {0};
  q.d_version = FS_DQUOT_VERSION;
  q.d_flags = FS_PROJ_QUOTA;
  q.d_id = id;
  q.d_fieldmask = FS_DQ_BHARD | FS_DQ_BSOFT;
  q.d_blk_hardlimit = (bytes + 511) / 512; /* basic blocks; 0 = none */
  if (syscall(SYS_quotactl_fd, fd, QCMD(Q_XSETQLIM, PRJQUOTA), id, &q) < 0) goto fail;
  close(fd);
  return 0;
fail:
  snprintf(why, wlen, "project quota on %s: %s", dir, strerror(errno));
  close(fd);
  return -1;
}

static int disk_btrfs(const char *dir, unsigned long long bytes, char *why, size_t wlen) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s", dir);
    snprintf(b, sizeof b, "%s", dir);
    const char *parent = dirname(a), *name = basename(b);
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) return snprintf(why, wlen, "open %s: %s", parent, strerror(errno)), -1;
    struct btrfs_ioctl_vol_args args = {0};
    snprintf(args.name, sizeof args.name, "%s", name);
    int r = ioctl(pfd, BTRFS_IOC_SUBVOL_CREATE, &args);
    int saved = errno;
    close(pfd);
    if (r < 0 && saved != EEXIST) return snprintf(why, wlen, "subvolume %s: %s", dir, strerror(saved)), -1;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (fd < 0) return snprintf(why, wlen, "open %s: %s", dir, strerror(errno)), -1;
  struct btrfs_ioctl_qgroup_limit_args l = {0};
  l.qgroupid = 0; /* the subvolume fd is on */
  l.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  l.lim.max_rfer = bytes ? bytes : (unsigned long long)-1;
  int r = ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &l);
  int saved = errno;
  close(fd);
  if (r < 0) return snprintf(why, wlen, "qgroup limit on %s: %s", dir, strerror(saved)), -1;
  return 0;
}

/* `KIND:BYTES:ID:DIR`; 0 or -1 with `why`. */
static int disk_setup(char *spec, char *why, size_t wlen) {
  char *kind = strtok(spec, ":"), *bytes = strtok(NULL, ":"), *id = strtok(NULL, ":"), *dir = strtok(NULL, "");
  if (!kind || !bytes || !id || !dir || dir[0] != '/') return snprintf(why, wlen, "bad disk field"), -1;
  unsigned long long n = strtoull(bytes, NULL, 10);
  if (kind[0] == 'x') return disk_xfs(dir, (unsigned)strtoul(id, NULL, 10), n, why, wlen);
  if (kind[0] == 'b') return disk_btrfs(dir, n, why, wlen);
  return snprintf(why, wlen, "unknown disk kind %s", kind), -1;
}
