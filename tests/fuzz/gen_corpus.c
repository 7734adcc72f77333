/*
 * gen_corpus.c - writes the seed corpus of the metadata fuzzer: every
 * catalog case of md_cases.c marked for the corpus (valid blobs of several
 * shapes and hand-made malformed ones), plus blobs made by the encoder from
 * fixtures.  Files are named by what they are; the committed corpus in
 * tests/fuzz/corpus/ is this program's output:
 *     build/tests/fuzz/md_gen_corpus tests/fuzz/corpus
 * (libFuzzer adds its own finds beside them; keep those that matter.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/md_codec.h"
#include "md_cases.h"

static int write_file(const char *dir, const char *name, const void *p, size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "gen_corpus: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if ((len && fwrite(p, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "gen_corpus: %s: write failed\n", path);
        return -1;
    }
    return 0;
}

static int write_encoded(const char *dir, const char *name, uint32_t backends, uint32_t regions,
                         int shuffle)
{
    nixl_md_t *md = md_fixture_new(backends, regions, shuffle);
    void *blob;
    size_t len;
    int rc = -1;

    if (nixl_md_encode(md, &blob, &len) != NIXL_OK) {
        fprintf(stderr, "gen_corpus: %s: the encoder refused the fixture\n", name);
    } else {
        rc = write_file(dir, name, blob, len);
        free(blob);
    }
    free(md);
    return rc;
}

int main(int argc, char **argv)
{
    md_case_t *cases;
    size_t n, written = 0;
    int rc = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
        return 2;
    }
    n = md_cases_build(&cases);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!cases[i].in_corpus)
            continue;
        rc = write_file(argv[1], cases[i].name, cases[i].blob, cases[i].len);
        written++;
    }
    md_cases_free(cases, n);
    if (rc == 0)
        rc = write_encoded(argv[1], "ok-encoded-no-backends", 0, 0, 0);
    if (rc == 0)
        rc = write_encoded(argv[1], "ok-encoded-one-backend-one-region", 1, 1, 0);
    if (rc == 0)
        rc = write_encoded(argv[1], "ok-encoded-two-backends-shuffled", 2, 25, 1);
    if (rc == 0)
        rc = write_encoded(argv[1], "ok-encoded-eight-backends", 8, 6, 1);
    if (rc != 0)
        return 1;
    printf("gen_corpus: wrote %zu files to %s\n", written + 4, argv[1]);
    return 0;
}
