/* Counts the calls to the C allocator of the process it is preloaded into, and writes
 * the count to $TERMGATE_ALLOC_COUNT_FILE every 20 ms (written without allocating, and
 * renamed into place so a reader never sees half a number). Rust's system allocator
 * calls malloc, calloc, realloc and posix_memalign. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_ulong calls;

static void counted(void) { atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed); }

void *malloc(size_t n) { counted(); return __libc_malloc(n); }
void *calloc(size_t k, size_t n) { counted(); return __libc_calloc(k, n); }
void *realloc(void *p, size_t n) { counted(); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { counted(); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { counted(); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    counted();
    void *p = __libc_memalign(a, n);
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
}

static char path[4096], staged[4100];

static void *writer(void *unused) {
    (void)unused;
    char line[32];
    for (;;) {
        int len = snprintf(line, sizeof line, "%lu\n", atomic_load(&calls));
        int fd = open(staged, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            ssize_t w = write(fd, line, (size_t)len);
            close(fd);
            if (w == len) rename(staged, path);
        }
        usleep(20000);
    }
    return NULL;
}

__attribute__((constructor)) static void start(void) {
    const char *to = getenv("TERMGATE_ALLOC_COUNT_FILE");
    if (to == NULL) return;
    snprintf(path, sizeof path, "%s", to);
    snprintf(staged, sizeof staged, "%s.new", to);
    pthread_t t;
    if (pthread_create(&t, NULL, writer, NULL) == 0) pthread_detach(t);
}
