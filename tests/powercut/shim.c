/* The power-cut rig's recorder (tests/powercut.rs), loaded with LD_PRELOAD into the
 * real `steward` binary. For every path at or under $POWERCUT_WATCH (the data
 * directory) -- the database, its -wal and journal files, temporaries and the
 * directory itself, but not the -shm index, which SQLite rebuilds -- it appends
 * one line per completed operation to $POWERCUT_LOG, with a single write(2) on an
 * O_APPEND descriptor, so the log holds every operation that returned before any
 * later line was written. Within a process each recorded operation and its line
 * are one step under a lock, and the process's exit waits for the step in flight:
 * a thread still writing when another calls exit() (a connection closing its log
 * while the process leaves) would otherwise die between the operation and its
 * line, or halfway through the line:
 *
 *   W <ino> <offset> <hex bytes> <path>   a write
 *   T <ino> <size> <path>                 a truncation (ftruncate, O_TRUNC)
 *   S <ino> <path>                        fsync/fdatasync of a file
 *   D <path>                              fsync of a directory
 *   C <ino> <path>                        a file created
 *   M <path>                              a directory created
 *   L <from> <to>                         a hard link
 *   R <from> <to>                         a rename
 *   U <path>                              an unlink
 *   X <path>                              a directory removed
 *   O <pid> <n>                           write number n to standard output begins
 *   P <pid> <n> <hex bytes>               ... and carried these bytes
 *
 * Fields are separated by tabs. A directory sync of the watched directory's parent
 * is recorded too: it makes the watched directory's own name durable.
 *
 * Standard output is where Steward acknowledges (a `run --json` line, an ACP
 * response, the terminal's screen): its O record is written before the bytes
 * reach the reader, so every operation logged before it completed before the
 * acknowledgement could be seen. The watched path is resolved through symlinks,
 * as /proc/self/fd reports the paths it is compared with, and so is the directory
 * of every path a call names. sync_file_range is not a durability barrier and is
 * not recorded as a sync.
 *
 * Not wrapped, because nothing Steward or SQLite runs calls them on the data
 * directory (a recorded run's strace matches its log): truncate(path),
 * copy_file_range, sendfile, symlink, mknod, O_TMPFILE, hole punching, syncfs/sync,
 * and raw system calls that bypass libc. A standard-output write blocked on a
 * reader that never reads would hold the exit (see above); every workload reads
 * its process's output to the end. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int log_fd = -2;
static char watch[PATH_MAX];
static char watch_parent[PATH_MAX];
static size_t watch_len;

static void init(void) {
    if (log_fd != -2) return;
    const char *w = getenv("POWERCUT_WATCH");
    const char *l = getenv("POWERCUT_LOG");
    if (!w || !l) { log_fd = -1; return; }
    /* The data directory may not exist yet (a first launch): resolve its parent. */
    char real[PATH_MAX], parent[PATH_MAX];
    if (realpath(w, real)) {
        snprintf(watch, sizeof watch, "%s", real);
    } else {
        snprintf(parent, sizeof parent, "%s", w);
        char *cut = strrchr(parent, '/');
        if (cut && cut != parent) {
            *cut = 0;
            if (realpath(parent, real)) snprintf(watch, sizeof watch, "%s/%s", real, cut + 1);
            else snprintf(watch, sizeof watch, "%s", w);
        } else {
            snprintf(watch, sizeof watch, "%s", w);
        }
    }
    watch_len = strlen(watch);
    snprintf(watch_parent, sizeof watch_parent, "%s", watch);
    char *slash = strrchr(watch_parent, '/');
    if (slash) *slash = 0;
    int (*real_open)(const char *, int, ...) = dlsym(RTLD_NEXT, "open");
    log_fd = real_open(l, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

/* One recorded operation at a time, with its line; see the top of the file. */
static pthread_mutex_t step = PTHREAD_MUTEX_INITIALIZER;
static long exiting;

static long tid(void) { return syscall(SYS_gettid); }

static int step_begin(void) {
    init();
    if (log_fd < 0 || __atomic_load_n(&exiting, __ATOMIC_SEQ_CST) == tid()) return 0;
    int saved = errno;
    pthread_mutex_lock(&step);
    errno = saved;
    return 1;
}

static void step_end(int held) {
    if (!held) return;
    int saved = errno;
    pthread_mutex_unlock(&step);
    errno = saved;
}

/* At exit: wait for the step in flight and let no other begin; the exiting thread
 * itself goes on recording. */
static void hold_at_exit(void) {
    init();
    if (log_fd < 0) return;
    pthread_mutex_lock(&step);
    __atomic_store_n(&exiting, tid(), __ATOMIC_SEQ_CST);
}

/* A forked child has one thread: whatever another thread held is not held there. */
static void after_fork(void) {
    pthread_mutex_init(&step, NULL);
    exiting = 0;
}

__attribute__((constructor)) static void setup(void) {
    atexit(hold_at_exit);
    pthread_atfork(NULL, NULL, after_fork);
}

/* `path` made absolute against `dirfd` (or the working directory). */
static void absolute(int dirfd, const char *path, char *out) {
    if (path[0] == '/') { snprintf(out, PATH_MAX, "%s", path); return; }
    char base[PATH_MAX];
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base)) base[0] = 0;
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, base, sizeof base - 1);
        base[n < 0 ? 0 : n] = 0;
    }
    snprintf(out, PATH_MAX, "%s/%s", base, path);
}

/* `absolute`, with its directory resolved through symlinks as the watched path is
 * (the name itself is kept: it may not exist yet, or be the link being made). */
static void resolved(int dirfd, const char *path, char *out) {
    char abs[PATH_MAX], dir[PATH_MAX];
    absolute(dirfd, path, abs);
    size_t n = strlen(abs);
    while (n > 1 && abs[n - 1] == '/') abs[--n] = 0;
    char *slash = strrchr(abs, '/');
    if (!slash || slash == abs) { snprintf(out, PATH_MAX, "%s", abs); return; }
    *slash = 0;
    if (realpath(abs, dir)) snprintf(out, PATH_MAX, "%s/%s", strcmp(dir, "/") ? dir : "", slash + 1);
    else { *slash = '/'; snprintf(out, PATH_MAX, "%s", abs); }
}

static int watched(const char *abs) {
    if (log_fd < 0) return 0;
    if (strncmp(abs, watch, watch_len) != 0) return 0;
    if (abs[watch_len] != 0 && abs[watch_len] != '/') return 0;
    size_t n = strlen(abs);
    if (n >= 4 && strcmp(abs + n - 4, "-shm") == 0) return 0;
    return 1;
}

/* The path of an open descriptor, when it is watched. */
static int fd_path(int fd, char *out) {
    init();
    if (log_fd < 0 || fd < 0 || fd == log_fd) return 0;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n <= 0) return 0;
    out[n] = 0;
    return 1;
}

/* One record per write: a short write (a full disk) would leave a torn line that
 * the next record runs into, so the rest is written, or the loss said. */
static void emit(const char *line, size_t len) {
    ssize_t (*real_write)(int, const void *, size_t) = dlsym(RTLD_NEXT, "write");
    while (len > 0) {
        ssize_t n = real_write(log_fd, line, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            static const char lost[] = "powercut recorder: a record was lost (disk full?)\n";
            real_write(2, lost, sizeof lost - 1);
            return;
        }
        line += n;
        len -= (size_t)n;
    }
}

static void record(const char *fmt, ...) {
    char line[3 * PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof line) emit(line, (size_t)n);
}

static unsigned long long ino_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

static void record_write(int fd, const char *path, const void *buf, ssize_t n, long long off) {
    static const char hex[] = "0123456789abcdef";
    size_t head = 64 + 2 * PATH_MAX;
    char *line = malloc(head + 2 * (size_t)n);
    if (!line) return;
    int k = snprintf(line, head, "W\t%llu\t%lld\t", ino_of(fd), off);
    char *p = line + k;
    const unsigned char *b = buf;
    for (ssize_t i = 0; i < n; i++) { *p++ = hex[b[i] >> 4]; *p++ = hex[b[i] & 15]; }
    p += sprintf(p, "\t%s\n", path);
    emit(line, (size_t)(p - line));
    free(line);
}

/* open/openat and their 64-bit names: a created file (C) and O_TRUNC (T). */
static int do_open(const char *sym, int at, int dirfd, const char *path, int flags, mode_t mode) {
    init();
    char abs[PATH_MAX];
    int watch_it = 0, existed = 1;
    if (log_fd >= 0) {
        resolved(at ? dirfd : AT_FDCWD, path, abs);
        watch_it = watched(abs);
        if (watch_it && (flags & O_CREAT)) {
            struct stat st;
            existed = lstat(abs, &st) == 0;
        }
    }
    int held = watch_it ? step_begin() : 0;
    int fd;
    if (at) {
        int (*real)(int, const char *, int, ...) = dlsym(RTLD_NEXT, sym);
        fd = real(dirfd, path, flags, mode);
    } else {
        int (*real)(const char *, int, ...) = dlsym(RTLD_NEXT, sym);
        fd = real(path, flags, mode);
    }
    if (fd >= 0 && watch_it) {
        int saved = errno;
        if (!existed) record("C\t%llu\t%s\n", ino_of(fd), abs);
        if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY)
            record("T\t%llu\t0\t%s\n", ino_of(fd), abs);
        errno = saved;
    }
    step_end(held);
    return fd;
}

#define MODE_ARG mode_t mode = 0; if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }
int open(const char *path, int flags, ...) { MODE_ARG return do_open("open", 0, 0, path, flags, mode); }
int open64(const char *path, int flags, ...) { MODE_ARG return do_open("open64", 0, 0, path, flags, mode); }
int openat(int d, const char *path, int flags, ...) { MODE_ARG return do_open("openat", 1, d, path, flags, mode); }
int openat64(int d, const char *path, int flags, ...) { MODE_ARG return do_open("openat64", 1, d, path, flags, mode); }
int creat(const char *path, mode_t mode) { return do_open("open", 0, 0, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) { return do_open("open64", 0, 0, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

static ssize_t do_pwrite(const char *sym, int fd, const void *buf, size_t n, off_t off) {
    ssize_t (*real)(int, const void *, size_t, off_t) = dlsym(RTLD_NEXT, sym);
    char path[PATH_MAX];
    if (!(fd_path(fd, path) && watched(path))) return real(fd, buf, n, off);
    int held = step_begin();
    ssize_t r = real(fd, buf, n, off);
    if (r > 0) {
        int saved = errno;
        record_write(fd, path, buf, r, (long long)off);
        errno = saved;
    }
    step_end(held);
    return r;
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return do_pwrite("pwrite", fd, buf, n, off); }
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return do_pwrite("pwrite64", fd, buf, n, off); }

/* A write to standard output: an O record before it, a P record with what it
 * carried after. */
static unsigned long long output_begin(void) {
    static unsigned long long next;
    unsigned long long n = __atomic_fetch_add(&next, 1, __ATOMIC_SEQ_CST);
    int saved = errno;
    record("O\t%d\t%llu\n", (int)getpid(), n);
    errno = saved;
    return n;
}

static void output_end(unsigned long long n, const void *buf, ssize_t r) {
    static const char hex[] = "0123456789abcdef";
    if (r <= 0) return;
    int saved = errno;
    char *line = malloc(64 + 2 * (size_t)r);
    if (line) {
        int k = snprintf(line, 64, "P\t%d\t%llu\t", (int)getpid(), n);
        char *p = line + k;
        const unsigned char *b = buf;
        for (ssize_t i = 0; i < r; i++) { *p++ = hex[b[i] >> 4]; *p++ = hex[b[i] & 15]; }
        *p++ = '\n';
        emit(line, (size_t)(p - line));
        free(line);
    }
    errno = saved;
}

/* Whether `fd` is a watched regular file, its path in `path`; `st` filled. */
static int watched_file(int fd, char *path, struct stat *st) {
    return fd > 2 && fstat(fd, st) == 0 && S_ISREG(st->st_mode) && fd_path(fd, path) && watched(path);
}

ssize_t write(int fd, const void *buf, size_t n) {
    ssize_t (*real)(int, const void *, size_t) = dlsym(RTLD_NEXT, "write");
    char path[PATH_MAX];
    struct stat st;
    if (fd == 1) {
        init();
        if (log_fd < 0) return real(fd, buf, n);
        int held = step_begin();
        unsigned long long k = output_begin();
        ssize_t r = real(fd, buf, n);
        output_end(k, buf, r);
        step_end(held);
        return r;
    }
    if (!watched_file(fd, path, &st)) return real(fd, buf, n);
    int held = step_begin();
    if (fstat(fd, &st) != 0) st.st_size = 0;
    off_t off = lseek(fd, 0, SEEK_CUR);
    if (fcntl(fd, F_GETFL) & O_APPEND) off = st.st_size;
    ssize_t r = real(fd, buf, n);
    if (r > 0) {
        int saved = errno;
        record_write(fd, path, buf, r, (long long)off);
        errno = saved;
    }
    step_end(held);
    return r;
}

/* The first `r` bytes of `iov` in one buffer (freed by the caller). */
static void *gather(const struct iovec *iov, int cnt, ssize_t r) {
    char *out = malloc(r > 0 ? (size_t)r : 1);
    if (!out) return NULL;
    size_t at = 0;
    for (int i = 0; i < cnt && at < (size_t)r; i++) {
        size_t take = iov[i].iov_len;
        if (take > (size_t)r - at) take = (size_t)r - at;
        memcpy(out + at, iov[i].iov_base, take);
        at += take;
    }
    return out;
}

/* writev and friends: `off` < 0 for the file position. */
static ssize_t do_writev(int fd, const struct iovec *iov, int cnt, off_t off, int flags, int which) {
    ssize_t (*rw)(int, const struct iovec *, int) = dlsym(RTLD_NEXT, "writev");
    ssize_t (*rp)(int, const struct iovec *, int, off_t) = dlsym(RTLD_NEXT, which == 1 ? "pwritev" : "pwritev64");
    ssize_t (*rp2)(int, const struct iovec *, int, off_t, int) = dlsym(RTLD_NEXT, which == 3 ? "pwritev2" : "pwritev64v2");
#define REAL_WRITEV (which == 0 ? rw(fd, iov, cnt) : which <= 2 ? rp(fd, iov, cnt, off) : rp2(fd, iov, cnt, off, flags))
    char path[PATH_MAX];
    struct stat st;
    if (fd == 1) {
        init();
        if (log_fd < 0) return REAL_WRITEV;
        int held = step_begin();
        unsigned long long k = output_begin();
        ssize_t r = REAL_WRITEV;
        void *bytes = r > 0 ? gather(iov, cnt, r) : NULL;
        if (bytes) output_end(k, bytes, r);
        free(bytes);
        step_end(held);
        return r;
    }
    if (!watched_file(fd, path, &st)) return REAL_WRITEV;
    int held = step_begin();
    if (fstat(fd, &st) != 0) st.st_size = 0;
    off_t at = off;
    if (at < 0) at = (fcntl(fd, F_GETFL) & O_APPEND) ? st.st_size : lseek(fd, 0, SEEK_CUR);
    ssize_t r = REAL_WRITEV;
#undef REAL_WRITEV
    if (r > 0) {
        int saved = errno;
        void *bytes = gather(iov, cnt, r);
        if (bytes) record_write(fd, path, bytes, r, (long long)at);
        free(bytes);
        errno = saved;
    }
    step_end(held);
    return r;
}
ssize_t writev(int fd, const struct iovec *iov, int cnt) { return do_writev(fd, iov, cnt, -1, 0, 0); }
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) { return do_writev(fd, iov, cnt, off, 0, 1); }
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off) { return do_writev(fd, iov, cnt, off, 0, 2); }
ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) { return do_writev(fd, iov, cnt, off, flags, 3); }
ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) { return do_writev(fd, iov, cnt, off, flags, 4); }

/* fallocate that grows a file: its new size, as a truncation would set it. */
static void record_growth(int fd, off_t size_before) {
    char path[PATH_MAX];
    struct stat st;
    int saved = errno;
    if (watched_file(fd, path, &st) && st.st_size > size_before)
        record("T\t%llu\t%lld\t%s\n", (unsigned long long)st.st_ino, (long long)st.st_size, path);
    errno = saved;
}
static off_t size_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_size : 0;
}
int fallocate(int fd, int mode, off_t off, off_t len) {
    int (*real)(int, int, off_t, off_t) = dlsym(RTLD_NEXT, "fallocate");
    char path[PATH_MAX];
    struct stat st;
    if (!watched_file(fd, path, &st)) return real(fd, mode, off, len);
    int held = step_begin();
    off_t before = size_of(fd);
    int r = real(fd, mode, off, len);
    if (r == 0) record_growth(fd, before);
    step_end(held);
    return r;
}
int fallocate64(int fd, int mode, off_t off, off_t len) {
    int (*real)(int, int, off_t, off_t) = dlsym(RTLD_NEXT, "fallocate64");
    char path[PATH_MAX];
    struct stat st;
    if (!watched_file(fd, path, &st)) return real(fd, mode, off, len);
    int held = step_begin();
    off_t before = size_of(fd);
    int r = real(fd, mode, off, len);
    if (r == 0) record_growth(fd, before);
    step_end(held);
    return r;
}
int posix_fallocate(int fd, off_t off, off_t len) {
    int (*real)(int, off_t, off_t) = dlsym(RTLD_NEXT, "posix_fallocate");
    char path[PATH_MAX];
    struct stat st;
    if (!watched_file(fd, path, &st)) return real(fd, off, len);
    int held = step_begin();
    off_t before = size_of(fd);
    int r = real(fd, off, len);
    if (r == 0) record_growth(fd, before);
    step_end(held);
    return r;
}
int posix_fallocate64(int fd, off_t off, off_t len) {
    int (*real)(int, off_t, off_t) = dlsym(RTLD_NEXT, "posix_fallocate64");
    char path[PATH_MAX];
    struct stat st;
    if (!watched_file(fd, path, &st)) return real(fd, off, len);
    int held = step_begin();
    off_t before = size_of(fd);
    int r = real(fd, off, len);
    if (r == 0) record_growth(fd, before);
    step_end(held);
    return r;
}

static int do_ftruncate(const char *sym, int fd, off_t len) {
    int (*real)(int, off_t) = dlsym(RTLD_NEXT, sym);
    char path[PATH_MAX];
    if (!(fd_path(fd, path) && watched(path))) return real(fd, len);
    int held = step_begin();
    int r = real(fd, len);
    if (r == 0) {
        int saved = errno;
        record("T\t%llu\t%lld\t%s\n", ino_of(fd), (long long)len, path);
        errno = saved;
    }
    step_end(held);
    return r;
}
int ftruncate(int fd, off_t len) { return do_ftruncate("ftruncate", fd, len); }
int ftruncate64(int fd, off_t len) { return do_ftruncate("ftruncate64", fd, len); }

static int do_sync(const char *sym, int fd) {
    int (*real)(int) = dlsym(RTLD_NEXT, sym);
    char path[PATH_MAX];
    if (!(fd_path(fd, path) && (watched(path) || strcmp(path, watch_parent) == 0))) return real(fd);
    int held = step_begin();
    int r = real(fd);
    if (r == 0) {
        struct stat st;
        int saved = errno;
        if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (watched(path) || strcmp(path, watch_parent) == 0) record("D\t%s\n", path);
        } else if (watched(path)) {
            record("S\t%llu\t%s\n", (unsigned long long)st.st_ino, path);
        }
        errno = saved;
    }
    step_end(held);
    return r;
}
int fsync(int fd) { return do_sync("fsync", fd); }
int fdatasync(int fd) { return do_sync("fdatasync", fd); }

/* A name operation: its paths resolved before the call (the step is taken only when
 * one is watched), its record written when it succeeded. */
#define NAME_OP(call, op, d1, a, d2, b) \
    init(); \
    char x_[PATH_MAX], y_[PATH_MAX]; \
    const char *b_ = (b); \
    int watch_ = 0; \
    if (log_fd >= 0) { \
        resolved(d1, a, x_); \
        if (b_) resolved(d2, b_, y_); \
        watch_ = watched(x_) || (b_ && watched(y_)); \
    } \
    int held = watch_ ? step_begin() : 0; \
    int r = call; \
    if (r == 0 && watch_) { \
        int saved = errno; \
        if (b_) record("%c\t%s\t%s\n", op, x_, y_); else record("%c\t%s\n", op, x_); \
        errno = saved; \
    } \
    step_end(held); \
    return r;

int link(const char *a, const char *b) {
    int (*real)(const char *, const char *) = dlsym(RTLD_NEXT, "link");
    NAME_OP(real(a, b), 'L', AT_FDCWD, a, AT_FDCWD, b)
}
int linkat(int d1, const char *a, int d2, const char *b, int flags) {
    int (*real)(int, const char *, int, const char *, int) = dlsym(RTLD_NEXT, "linkat");
    NAME_OP(real(d1, a, d2, b, flags), 'L', d1, a, d2, b)
}
int rename(const char *a, const char *b) {
    int (*real)(const char *, const char *) = dlsym(RTLD_NEXT, "rename");
    NAME_OP(real(a, b), 'R', AT_FDCWD, a, AT_FDCWD, b)
}
int renameat(int d1, const char *a, int d2, const char *b) {
    int (*real)(int, const char *, int, const char *) = dlsym(RTLD_NEXT, "renameat");
    NAME_OP(real(d1, a, d2, b), 'R', d1, a, d2, b)
}
int renameat2(int d1, const char *a, int d2, const char *b, unsigned flags) {
    int (*real)(int, const char *, int, const char *, unsigned) = dlsym(RTLD_NEXT, "renameat2");
    NAME_OP(real(d1, a, d2, b, flags), 'R', d1, a, d2, b)
}
int unlink(const char *a) {
    int (*real)(const char *) = dlsym(RTLD_NEXT, "unlink");
    NAME_OP(real(a), 'U', AT_FDCWD, a, 0, NULL)
}
int unlinkat(int d, const char *a, int flags) {
    int (*real)(int, const char *, int) = dlsym(RTLD_NEXT, "unlinkat");
    NAME_OP(real(d, a, flags), (flags & AT_REMOVEDIR) ? 'X' : 'U', d, a, 0, NULL)
}
int rmdir(const char *a) {
    int (*real)(const char *) = dlsym(RTLD_NEXT, "rmdir");
    NAME_OP(real(a), 'X', AT_FDCWD, a, 0, NULL)
}
int mkdir(const char *a, mode_t mode) {
    int (*real)(const char *, mode_t) = dlsym(RTLD_NEXT, "mkdir");
    NAME_OP(real(a, mode), 'M', AT_FDCWD, a, 0, NULL)
}
int mkdirat(int d, const char *a, mode_t mode) {
    int (*real)(int, const char *, mode_t) = dlsym(RTLD_NEXT, "mkdirat");
    NAME_OP(real(d, a, mode), 'M', d, a, 0, NULL)
}
