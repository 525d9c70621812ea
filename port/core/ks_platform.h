/* ks_platform.h: the few calls of the sink that differ between systems, and their fallbacks.
 *
 *                      a file's stream       random bits      a bigger pipe
 *   Linux (glibc,      fopencookie           getrandom        F_SETPIPE_SZ, up to
 *   musl)                                                     /proc/sys/fs/pipe-max-size
 *   macOS, the BSDs    funopen               arc4random_buf   (none: the pipe's own size)
 *   other POSIX        fdopen (the errno     /dev/urandom     (none)
 *                      stdio leaves)
 *
 * A stream of ours (fopencookie, funopen) keeps the first errno of a write or
 * the close where it happens (port/write/file.c); with fdopen it is the
 * one stdio left when the stream was found in error. KS_PORTABLE builds the
 * last row on Linux, so that its code is compiled and tested here (make
 * check-portability).
 */
#ifndef KS_PLATFORM_H
#define KS_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

#if defined(KS_PORTABLE)
#define KS_STREAM_FDOPEN 1
#define KS_RANDOM_URANDOM 1
#elif defined(__linux__)
#define KS_STREAM_COOKIE 1
#define KS_RANDOM_GETRANDOM 1
#define KS_PIPE_SETSIZE 1
#elif defined(__APPLE__) || defined(__FreeBSD__) || defined(__NetBSD__) || \
    defined(__OpenBSD__) || defined(__DragonFly__)
#define KS_STREAM_FUNOPEN 1
#define KS_RANDOM_ARC4 1
#else
#define KS_STREAM_FDOPEN 1
#define KS_RANDOM_URANDOM 1
#endif

/* 64 unpredictable bits into *v: 1, or 0 when the system has none to give now. */
int ks_random64(uint64_t *v);

/* The errno's name in lower case, as Erlang's file module gives it
 * ("enospc", "edquot", "eacces"), or NULL for one the sink does not know. */
const char *ks_errno_name(int err);

/* Makes the pipe on fd hold `want` bytes (0: as many as the system allows);
 * returns its size then, or 0 where a pipe's size cannot be set or read. */
size_t ks_pipe_enlarge(int fd, size_t want);

#endif
