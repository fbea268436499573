/**
 * The static sh scripts/install-static-sh.sh builds (Debian's dash 0.5.12-2 linked statically: no
 * loader, no relocations when it starts) and the reference copy of Debian's own /bin/dash it stands in
 * for. Both drivers run it for `/bin/sh` while a sandbox's /bin/sh is that dash byte for byte: gVisor's
 * agent from a copy in /.nube, the namespaces spawner from a sealed memfd. The dir is keyed by dash's
 * version and nube's build recipe (BUILD in the script).
 */
export const STATIC_SH_DIR = '/opt/nube/dash/0.5.12-2-n4';
