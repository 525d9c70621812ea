/* ks_out_dir.h: the directory a capture's files go into, created private and checked.
 *
 * The sink writes files as the user the VM runs as, often root. A directory a
 * local user prepared (a symlink to their own directory, a directory they
 * created first, one anybody can write to) would get those files, or let them
 * be renamed away. ks_out_dir_open walks the path from / one component at a
 * time with openat(O_NOFOLLOW), creating what is missing with mode 0700, and
 * opens the directory only when
 *   - it is not a symlink and is a directory;
 *   - it is ours (our effective uid);
 *   - nobody else can write to it: no write bit for others, nor for a group
 *     that is not ours, unless it is sticky (and ours, as above);
 * and every directory above it is root's or ours and, when others can write
 * to it, sticky (/tmp). A symlink above it is followed when root or we own
 * it; the directory it leads to is checked like the others (the directories
 * on the way to it are not: the link's owner chose them). The files are
 * then created with openat() on the descriptor returned (mode 0600,
 * port/write/file.c): nothing can swap the directory between the check and the
 * write.
 */
#ifndef KS_OUT_DIR_H
#define KS_OUT_DIR_H

#include <sys/types.h>

#define KS_OUT_DIR_MAX 4096

/* Why a directory was refused (ks_out_dir.why). */
enum {
  KS_DIR_OK = 0,
  KS_DIR_ERRNO,        /* a system call failed: err */
  KS_DIR_RELATIVE,     /* not an absolute path */
  KS_DIR_SYMLINK,      /* the directory itself is a symlink */
  KS_DIR_NOT_DIR,      /* not a directory */
  KS_DIR_OWNER,        /* owned by another user (uid) */
  KS_DIR_WRITABLE      /* others can write to it and it is not sticky (mode) */
};

typedef struct ks_out_dir {
  int why;
  int err;                     /* errno, for KS_DIR_ERRNO */
  uid_t uid;                   /* the owner, for KS_DIR_OWNER */
  mode_t mode;                 /* the mode bits, for KS_DIR_WRITABLE */
  char path[KS_OUT_DIR_MAX];   /* the component at fault (the path up to it) */
} ks_out_dir;

/* The directory's descriptor (O_DIRECTORY, close-on-exec), its missing parts
 * created with mode 0700 when create is set; -1 with *r saying why. */
int ks_out_dir_open(const char *dir, int create, ks_out_dir *r);

#endif
