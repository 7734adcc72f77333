/*
 * test_fio_json.c - nixlbench's fio reader (tools/nixlbench/bench_fio.c):
 * real fio 3.33 output (argv[1], saved from a run on the CI box), every
 * truncation of it, missing fields, fields at the wrong level, garbage,
 * deep nesting; then bench_fio_run against stand-ins (absent program,
 * exit status, garbage on stdout) so each says what went wrong.
 *
 * Every input is copied into a buffer of exactly its length, so a read
 * past the end is ASan's to report in the sanitizer build.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/test_check.h"
#include "bench_fio.h"

/* Read text[0..len) from an exact-size copy. */
static int rd(const char *text, size_t len, int write, bench_fio_result_t *res, const char **why)
{
    char *copy = malloc(len ? len : 1);
    if (!copy)
        abort();
    memcpy(copy, text, len);
    *why = NULL;
    int rc = bench_fio_json_read(copy, len, write, res, why);
    free(copy);
    if (rc != 0)
        CHECK(*why != NULL && (*why)[0] != '\0');
    return rc;
}

static int rds(const char *s, int write, bench_fio_result_t *res, const char **why)
{
    return rd(s, strlen(s), write, res, why);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 20);
    *len = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

static void test_real_output(const char *path)
{
    size_t len = 0;
    char *text = slurp(path, &len);
    CHECK(text && len > 1000);
    if (!text)
        return;
    bench_fio_result_t res;
    const char *why;
    /* The write job: bw_bytes of "write"; its "read" moved nothing. */
    CHECK(rd(text, len, 1, &res, &why) == 0);
    CHECK(res.bytes_per_s == 975169254.0);
    CHECK(res.job_error == 0);
    CHECK(rd(text, len, 0, &res, &why) == -1);
    CHECK(why && strstr(why, "moved no bytes"));
    /* Every cut short of the last brace is refused, and says so. */
    const char *last = strrchr(text, '}');
    size_t whole = (size_t)(last - text) + 1, refused = 0;
    for (size_t cut = 0; cut < whole; cut++)
        refused += rd(text, cut, 1, &res, &why) == -1;
    CHECK(refused == whole);
    CHECK(rd(text, whole, 1, &res, &why) == 0);
    /* Lines fio (or a wrapper) prints before the JSON, text after it. */
    size_t plen = strlen("note: both iodepth >= 1 and synchronous I/O engine\n");
    char *wrapped = malloc(plen + len + 32);
    memcpy(wrapped, "note: both iodepth >= 1 and synchronous I/O engine\n", plen);
    memcpy(wrapped + plen, text, len);
    memcpy(wrapped + plen + len, "\nfio: trailing words\n", 21);
    CHECK(rd(wrapped, plen + len + 21, 1, &res, &why) == 0 && res.bytes_per_s == 975169254.0);
    free(wrapped);
    free(text);
}

static void test_fields(void)
{
    bench_fio_result_t res;
    const char *why;
    CHECK(rds("{\"jobs\":[{\"error\":0,\"read\":{\"bw_bytes\":4096,\"io_bytes\":1,\"runtime\":1}}]}", 0, &res, &why) ==
          0);
    CHECK(res.bytes_per_s == 4096.0);
    /* No bw_bytes: io_bytes / runtime (ms). */
    CHECK(rds("{\"jobs\":[{\"read\":{\"io_bytes\":3000000,\"runtime\":1500}}]}", 0, &res, &why) == 0);
    CHECK(res.bytes_per_s == 2000000.0);
    /* bw_bytes 0 but io_bytes and runtime present: the latter. */
    CHECK(rds("{\"jobs\":[{\"read\":{\"bw_bytes\":0,\"io_bytes\":1000,\"runtime\":2}}]}", 0, &res, &why) == 0);
    CHECK(res.bytes_per_s == 500000.0);
    /* A job error is read, not hidden: the caller calls it a failure. */
    CHECK(rds("{\"jobs\":[{\"error\":5,\"write\":{\"bw_bytes\":0,\"io_bytes\":0,\"runtime\":0}}]}", 1, &res, &why) ==
          0);
    CHECK(res.job_error == 5);
    /* Only job 0 counts. */
    CHECK(rds("{\"jobs\":[{\"read\":{\"bw_bytes\":7}},{\"read\":{\"bw_bytes\":9}}]}", 0, &res, &why) == 0);
    CHECK(res.bytes_per_s == 7.0);

    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "no JSON object"},
        {"fio: command not found", "no JSON object"},
        {"{}", "no \"jobs\""},
        {"{\"jobs\":{}}", "no \"jobs\""},
        {"{\"jobs\":[]}", "no job object"},
        {"{\"jobs\":[7]}", "no job object"},
        {"{\"jobs\":[{}]}", "no \"read\""},
        {"{\"jobs\":[{\"read\":[]}]}", "no \"read\""},
        {"{\"jobs\":[{\"read\":{}}]}", "neither bw_bytes"},
        {"{\"jobs\":[{\"read\":{\"io_bytes\":5}}]}", "neither bw_bytes"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":0}}]}", "moved no bytes"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":\"fast\"}}]}", "not a number"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":-4}}]}", "not a number"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":1e999}}]}", "not a number"},
        {"{\"jobs\":[{\"error\":\"EIO\",\"read\":{\"bw_bytes\":4}}]}", "\"error\""},
        /* The right names at the wrong level are not the fields. */
        {"{\"jobs\":[{\"read\":{\"clat_ns\":{\"bw_bytes\":4}}}]}", "neither bw_bytes"},
        {"{\"read\":{\"bw_bytes\":4},\"jobs\":[{\"write\":{\"bw_bytes\":4}}]}", "no \"read\""},
        {"{\"jobs\":[{\"job options\":{\"read\":{\"bw_bytes\":4}}}]}", "no \"read\""},
        /* Malformed: each is refused by the syntax check, before any field. */
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4}}]", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4,}}]}", "malformed"},
        {"{\"jobs\" [{\"read\":{\"bw_bytes\":4}}]}", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":04}}]}", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4.}}]}", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4e}}]}", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":NaN}}]}", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4}}],\"x\":\"\\q\"}", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4}}],\"x\":\"\\u12\"}", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4}}],\"x\":\"a\nb\"}", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4}}],\"x\":tru}", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4}}],\"x\":\"open", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4}}],\"x\":\"\\", "malformed"},
        {"{\"jobs\":[{\"read\":{\"bw_bytes\":4}}],7:1}", "malformed"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = rds(bad[i].text, 0, &res, &why);
        if (rc != -1 || !why || !strstr(why, bad[i].why)) {
            fprintf(stderr, "case %zu (%s): rc %d, why \"%s\", expected \"%s\"\n", i, bad[i].text, rc,
                    why ? why : "(null)", bad[i].why);
            failures++;
        }
    }
    /* Valid JSON that merely has escapes, literals and exponents beside the fields. */
    CHECK(rds("{\"x\":\"a\\\"}\\u00e9\\n\",\"y\":[true,false,null,-0.5e+3,{}],\"jobs\":[{\"read\":{\"bw_bytes\":"
              "1.5E3}}]}",
              0, &res, &why) == 0);
    CHECK(res.bytes_per_s == 1500.0);
}

static void test_garbage(void)
{
    bench_fio_result_t res;
    const char *why;
    /* Nesting far deeper than any fio output: refused, not a stack overflow. */
    size_t n = 100000;
    char *deep = malloc(2 * n + 1);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[0] = '{';
    CHECK(rd(deep, 2 * n, 0, &res, &why) == -1);
    for (size_t i = 0; i < n; i++)
        deep[i] = i % 2 ? '[' : '{';
    CHECK(rd(deep, n, 0, &res, &why) == -1);
    free(deep);
    /* Random bytes, and random bytes after a '{': refused, every time. */
    unsigned long long x = 88172645463325252ull;
    char buf[512];
    int refused = 0;
    for (int round = 0; round < 20000; round++) {
        size_t len = (size_t)(round % 500) + 1;
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (char)(round % 2 ? "{}[]\":,0123456789.eE-+tfnrul\\ \n"[x % 32] : (char)x);
        }
        if (round % 4 == 1)
            buf[0] = '{';
        refused += rd(buf, len, round % 3 == 0, &res, &why) == -1;
    }
    CHECK(refused == 20000);
}

/* A stand-in for fio in dir: a shell script with this body. */
static void stand_in(const char *dir, const char *name, const char *body, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(path, 0755);
}

static void test_run(void)
{
    if (access("/bin/sh", X_OK) != 0) {
        printf("skip: the stand-in checks need /bin/sh\n");
        return;
    }
    char dir[] = "/tmp/nixl-fio-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char file[300];
    snprintf(file, sizeof(file), "%s/data", dir);
    int fd = open(file, O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 65536) == 0);
    bench_fio_job_t job = {.fd = fd, .block = 4096, .size = 65536, .depth = 4, .ms = 50};
    char why[256], garbage[300], fails[300], good[300], cut[300];
    double bps = -1;

    job.prog = "/nonexistent/fio";
    CHECK(bench_fio_run(&job, &bps, why, sizeof(why)) == BENCH_FIO_ABSENT);
    CHECK(strstr(why, "No such file") != NULL);
    stand_in(dir, "garbage", "echo 'Segmentation fault (core dumped)'; head -c 3000 /dev/urandom", garbage,
             sizeof(garbage));
    job.prog = garbage;
    CHECK(bench_fio_run(&job, &bps, why, sizeof(why)) == BENCH_FIO_UNREADABLE);
    stand_in(dir, "fails", "echo '{\"jobs\":[{\"read\":{\"bw_bytes\":4096}}]}'; exit 3", fails, sizeof(fails));
    job.prog = fails;
    CHECK(bench_fio_run(&job, &bps, why, sizeof(why)) == BENCH_FIO_FAILED);
    CHECK(strstr(why, "exit status 3") != NULL);
    stand_in(dir, "cut", "printf '{\"jobs\":[{\"read\":{\"bw_bytes\":4096'", cut, sizeof(cut));
    job.prog = cut;
    CHECK(bench_fio_run(&job, &bps, why, sizeof(why)) == BENCH_FIO_UNREADABLE);
    CHECK(strstr(why, "truncated") != NULL);
    /* The arguments reach the program: the stand-in answers only to the row's pattern. */
    stand_in(dir, "good",
             "case \"$*\" in *--rw=randread*--bs=4096*--size=65536*--iodepth=4*--direct=0*--invalidate=0*"
             "--runtime=50ms*--output-format=json*) ;; *) exit 9;; esac\n"
             "test -e \"${2#--filename=}\" || exit 8\n"
             "echo '{\"jobs\":[{\"error\":0,\"read\":{\"bw_bytes\":123456789}}]}'",
             good, sizeof(good));
    job.prog = good;
    bps = -1;
    CHECK(bench_fio_run(&job, &bps, why, sizeof(why)) == BENCH_FIO_OK);
    CHECK(bps == 123456789.0);
    /* A descriptor fio cannot inherit is said, not run. */
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    CHECK(bench_fio_run(&job, &bps, why, sizeof(why)) == BENCH_FIO_FAILED);
    CHECK(strstr(why, "not inherited") != NULL);
    close(fd);
    unlink(garbage);
    unlink(fails);
    unlink(cut);
    unlink(good);
    unlink(file);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_fio_json fio-output.json\n");
        return 2;
    }
    test_real_output(argv[1]);
    test_fields();
    test_garbage();
    test_run();
    if (failures)
        fprintf(stderr, "%d checks failed\n", failures);
    else
        printf("fio reader: all checks passed\n");
    return failures ? 1 : 0;
}
