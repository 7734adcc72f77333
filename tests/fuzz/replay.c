/*
 * replay.c - runs LLVMFuzzerTestOneInput over files without libFuzzer, so
 * the committed corpus is an ordinary test in every build (gcc included).
 * Arguments are files or directories (every regular file in them, sorted,
 * dot-files skipped).  Each input is copied into a buffer of its exact size
 * so a sanitizer build catches reads past the end.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* A harness may define it: run once after the last input (final checks). */
void fuzz_replay_done(void) __attribute__((weak));

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long size;

    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "replay: %s: cannot size the file\n", path);
        goto err_close;
    }
    buf = malloc(size ? (size_t)size : 1);
    if (!buf) {
        fprintf(stderr, "replay: %s: out of memory\n", path);
        goto err_close;
    }
    if (size && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "replay: %s: short read\n", path);
        goto err_free;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)size);
    free(buf);
    return 0;

err_free:
    free(buf);
err_close:
    fclose(f);
    return -1;
}

static int skip_entry(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

/* Returns the number of inputs run, or -1. */
static long run_dir(const char *dir)
{
    struct dirent **ents;
    long ran = 0;
    int n = scandir(dir, &ents, skip_entry, alphasort);

    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;

        snprintf(path, sizeof(path), "%s/%s", dir, ents[i]->d_name);
        if (ran >= 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode))
            ran = run_file(path) == 0 ? ran + 1 : -1;
        free(ents[i]);
    }
    free(ents);
    return ran;
}

int main(int argc, char **argv)
{
    long total = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        long ran;

        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        ran = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : (run_file(argv[i]) == 0 ? 1 : -1);
        if (ran < 0)
            return 1;
        total += ran;
    }
    if (fuzz_replay_done)
        fuzz_replay_done();
    printf("replay: ran %ld inputs\n", total);
    /* An empty corpus would make this test pass while testing nothing. */
    return total > 0 ? 0 : 1;
}
