/*
 * test_util.c - unit tests of src/util: string helpers, the configuration
 * table, logging and its rate limiter, host identity, status names.
 *
 * Log output is checked by pointing fd 2 at a temporary file while the code
 * under test runs.  The log-level test must run first: the level is read
 * from the environment once per process.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nixl.h"
#include "util/config.h"
#include "util/config_vars.h"
#include "util/host.h"
#include "util/log.h"
#include "util/str.h"

#include "../../common/test_check.h"

#define CHECK_STR(a, b)                                                                          \
    do {                                                                                         \
        const char *a_ = (a), *b_ = (b);                                                         \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                                   \
            fprintf(stderr, "%s:%d: CHECK_STR failed: %s = \"%s\", expected \"%s\"\n", __FILE__, \
                    __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                       \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

/* ---- stderr capture ---------------------------------------------------- */

typedef struct capture {
    int saved_fd;
    int file_fd;
    char path[64];
    char text[65536];
} capture_t;

static capture_t cap;

static void capture_begin(void)
{
    snprintf(cap.path, sizeof(cap.path), "/tmp/nixl_test_util_XXXXXX");
    int fd = mkstemp(cap.path);
    if (fd < 0) {
        perror("mkstemp");
        exit(1);
    }
    /* O_APPEND so concurrent writers cannot overwrite each other's lines. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_APPEND);
    fflush(stderr);
    cap.saved_fd = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    cap.file_fd = fd;
}

/* Restores stderr and returns what was written meanwhile (NUL-terminated). */
static const char *capture_end(void)
{
    fflush(stderr);
    dup2(cap.saved_fd, STDERR_FILENO);
    close(cap.saved_fd);
    ssize_t n = pread(cap.file_fd, cap.text, sizeof(cap.text) - 1, 0);
    cap.text[n > 0 ? n : 0] = '\0';
    close(cap.file_fd);
    unlink(cap.path);
    return cap.text;
}

static size_t count_substr(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

static size_t count_lines(const char *s)
{
    return count_substr(s, "\n");
}

/* ---- logging ----------------------------------------------------------- */

static void test_log_bad_env(void)
{
    setenv("NIXL_LOG_LEVEL", "loud", 1);
    capture_begin();
    nixl_log_init();
    nixl_log_init();
    const char *out = capture_end();
    unsetenv("NIXL_LOG_LEVEL");

    CHECK(count_lines(out) == 1);
    CHECK(strstr(out, " WARN ") != NULL);
    CHECK(strstr(out, "NIXL_LOG_LEVEL=\"loud\"") != NULL);
    CHECK(nixl_log_enabled(NIXL_LOG_ERROR));
    CHECK(nixl_log_enabled(NIXL_LOG_WARN));
    CHECK(!nixl_log_enabled(NIXL_LOG_INFO));
}

static void test_log_format(void)
{
    char expect[128];

    nixl_log_set_level(NIXL_LOG_INFO);
    capture_begin();
    nixl_log_write(NIXL_LOG_INFO, "here", "hello %d\n", 42);
    NIXL_DEBUG("not printed at info");
    const char *out = capture_end();
    snprintf(expect, sizeof(expect), "nixl[%ld] INFO here: hello 42\n", (long)getpid());
    CHECK_STR(out, expect);

    nixl_log_set_level(NIXL_LOG_ERROR);
    capture_begin();
    NIXL_WARN("not printed at error");
    nixl_log_write(NIXL_LOG_WARN, "x", "nor this");
    NIXL_ERROR("printed %s", "at error");
    out = capture_end();
    CHECK(count_lines(out) == 1);
    CHECK(strstr(out, " ERROR ") != NULL && strstr(out, "test_util.c:") != NULL);
    CHECK(strstr(out, ": printed at error\n") != NULL);

    /* -1 goes back to the environment's level (the default, warn). */
    nixl_log_set_level(-1);
    CHECK(nixl_log_enabled(NIXL_LOG_WARN) && !nixl_log_enabled(NIXL_LOG_INFO));

    /* An oversized message is cut but stays one line. */
    static char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    capture_begin();
    NIXL_WARN("%s", big);
    out = capture_end();
    CHECK(count_lines(out) == 1);
    CHECK(strlen(out) <= 2048 && out[strlen(out) - 1] == '\n');
}

#define LOG_THREADS 4
#define LOG_LINES 200

static void *log_thread(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < LOG_LINES; i++)
        nixl_log_write(NIXL_LOG_WARN, "thread", "t%ld line %03d %s", id, i, "abcdefghijklmnopqrstuvwxyz");
    return NULL;
}

static void test_log_threads(void)
{
    pthread_t th[LOG_THREADS];

    capture_begin();
    for (long i = 0; i < LOG_THREADS; i++)
        pthread_create(&th[i], NULL, log_thread, (void *)i);
    for (int i = 0; i < LOG_THREADS; i++)
        pthread_join(th[i], NULL);
    const char *out = capture_end();

    /* Every line whole: a torn line would break one of these counts. */
    CHECK(count_lines(out) == LOG_THREADS * LOG_LINES);
    CHECK(count_substr(out, "nixl[") == LOG_THREADS * LOG_LINES);
    CHECK(count_substr(out, " abcdefghijklmnopqrstuvwxyz\n") == LOG_THREADS * LOG_LINES);
}

/* ---- rate limiter ------------------------------------------------------ */

static void test_ratelimit_basic(void)
{
    nixl_ratelimit_t rl = {0, 0};
    uint64_t dropped = 99;
    const uint64_t interval = 200 * 1000 * 1000ull;

    CHECK(nixl_ratelimit_pass(&rl, interval, &dropped) == 1);
    CHECK(dropped == 0);
    dropped = 99;
    CHECK(nixl_ratelimit_pass(&rl, interval, &dropped) == 0);
    CHECK(nixl_ratelimit_pass(&rl, interval, &dropped) == 0);
    CHECK(dropped == 99); /* untouched when blocked */

    struct timespec ts = {0, 250 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK(nixl_ratelimit_pass(&rl, interval, &dropped) == 1);
    CHECK(dropped == 2);
    CHECK(nixl_ratelimit_pass(&rl, interval, NULL) == 0);
}

#define RL_THREADS 4
#define RL_CALLS 2000

static nixl_ratelimit_t rl_shared;
static int rl_passed;

static void *rl_thread(void *arg)
{
    for (int i = 0; i < RL_CALLS; i++)
        if (nixl_ratelimit_pass(&rl_shared, 3600ull * 1000000000ull, NULL))
            __atomic_fetch_add(&rl_passed, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void test_ratelimit_threads(void)
{
    pthread_t th[RL_THREADS];
    uint64_t dropped = 0;

    for (int i = 0; i < RL_THREADS; i++)
        pthread_create(&th[i], NULL, rl_thread, NULL);
    for (int i = 0; i < RL_THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK(rl_passed == 1);

    /* Pretend the interval ran out: the next pass reports every drop. */
    __atomic_store_n(&rl_shared.next_ns, 0, __ATOMIC_RELAXED);
    CHECK(nixl_ratelimit_pass(&rl_shared, 1, &dropped) == 1);
    CHECK(dropped == RL_THREADS * RL_CALLS - 1);
}

static void test_warn_ratelimited(void)
{
    static nixl_ratelimit_t rl;

    capture_begin();
    for (int i = 0; i < 5; i++)
        NIXL_WARN_RATELIMITED(&rl, 3600ull * 1000000000ull, "fallback %d", i);
    rl.next_ns = 0;
    NIXL_WARN_RATELIMITED(&rl, 3600ull * 1000000000ull, "fallback %d", 5);
    const char *out = capture_end();

    CHECK(count_lines(out) == 3);
    CHECK(strstr(out, ": fallback 0\n") != NULL);
    CHECK(strstr(out, ": fallback 5\n") != NULL);
    CHECK(strstr(out, "(4 similar messages suppressed)") != NULL);
}

/* ---- strings ----------------------------------------------------------- */

static void test_strlcpy(void)
{
    char buf[8];

    memset(buf, '#', sizeof(buf));
    CHECK(nixl_strlcpy(buf, "hello", 4) == 5);
    CHECK_STR(buf, "hel");
    CHECK(nixl_strlcpy(buf, "hello", 6) == 5);
    CHECK_STR(buf, "hello");
    CHECK(nixl_strlcpy(buf, "hello", 1) == 5);
    CHECK_STR(buf, "");
    memset(buf, '#', sizeof(buf));
    CHECK(nixl_strlcpy(buf, "hello", 0) == 5);
    CHECK(buf[0] == '#');
    CHECK(nixl_strlcpy(buf, "", sizeof(buf)) == 0);
    CHECK_STR(buf, "");
}

static void test_edit_distance(void)
{
    CHECK(nixl_edit_distance("", "") == 0);
    CHECK(nixl_edit_distance("abc", "") == 3);
    CHECK(nixl_edit_distance("", "abcd") == 4);
    CHECK(nixl_edit_distance("abc", "abc") == 0);
    CHECK(nixl_edit_distance("kitten", "sitting") == 3);
    CHECK(nixl_edit_distance("sitting", "kitten") == 3);
    CHECK(nixl_edit_distance("flaw", "lawn") == 2);
    CHECK(nixl_edit_distance("NIXL_LOG_LEVLE", "NIXL_LOG_LEVEL") == 2);
    CHECK(nixl_edit_distance("nixl", "NIXL") == 4);

    /* Past the on-stack row: the heap path must agree. */
    static char a[400], b[400];
    memset(a, 'a', sizeof(a) - 1);
    memcpy(b, a, sizeof(b));
    b[200] = 'b';
    CHECK(nixl_edit_distance(a, b) == 1);
    CHECK(nixl_edit_distance(a, "a") == sizeof(a) - 2);
    CHECK(nixl_edit_distance("a", a) == sizeof(a) - 2);
}

static void test_parse_size(void)
{
    static const struct {
        const char *s;
        uint64_t v;
    } good[] = {
        {"0", 0},
        {"123", 123},
        {"4K", 4096},
        {"4k", 4096},
        {"2M", 2u << 20},
        {"1G", 1ull << 30},
        {"007", 7},
        {"18446744073709551615", UINT64_MAX},
        {"17179869183G", 17179869183ull << 30},
    };
    static const char *const bad[] = {
        "", "-1", "+1", " 1", "1 ", "1KB", "K", "0x10", "1.5", "1T", "12x",
        "18446744073709551616",   /* 2^64 */
        "99999999999999999999999", /* far past 2^64 */
        "17179869184G",           /* 2^34 G = 2^64 */
        "18014398509481984K",     /* 2^54 K = 2^64 */
    };
    uint64_t v;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        v = 1;
        CHECK(nixl_parse_size(good[i].s, &v) == 0);
        CHECK(v == good[i].v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 42;
        if (nixl_parse_size(bad[i], &v) != -1)
            fprintf(stderr, "parse_size accepted \"%s\"\n", bad[i]), failures++;
        CHECK(v == 42);
    }
    CHECK(nixl_parse_size(NULL, &v) == -1);
}

static void test_parse_bool(void)
{
    static const char *const yes[] = {"1", "yes", "YES", "true", "True", "on", "ON"};
    static const char *const no[] = {"0", "no", "No", "false", "FALSE", "off", "Off"};
    static const char *const bad[] = {"", "2", "y", "n", "yes ", " on", "enable", "00"};
    int v;

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        v = -5;
        CHECK(nixl_parse_bool(yes[i], &v) == 0 && v == 1);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        v = -5;
        CHECK(nixl_parse_bool(no[i], &v) == 0 && v == 0);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = -5;
        CHECK(nixl_parse_bool(bad[i], &v) == -1 && v == -5);
    }
    CHECK(nixl_parse_bool(NULL, &v) == -1);
}

/* ---- configuration ----------------------------------------------------- */

static const char *const static_names[] = {
#define NAME_(name, def, doc) #name,
    NIXL_CONFIG_LIST(NAME_)
#undef NAME_
};
#define NUM_STATIC (sizeof(static_names) / sizeof(static_names[0]))

static void test_config_table(void)
{
    CHECK(nixl_cfg_count() >= NUM_STATIC);
    for (size_t i = 0; i < NUM_STATIC; i++) {
        const nixl_cfg_row_t *row = nixl_cfg_row(i);
        CHECK(row != NULL);
        if (row == NULL)
            continue;
        CHECK_STR(row->name, static_names[i]);
        CHECK(row->def != NULL && row->doc != NULL && row->doc[0] != '\0');
    }
    CHECK(nixl_cfg_row(nixl_cfg_count()) == NULL);
    CHECK(nixl_cfg_get("NIXL_NOT_A_ROW") == NULL);
    CHECK(nixl_cfg_get(NULL) == NULL);
}

static void test_config_values(void)
{
    unsetenv("NIXL_MD_TIMEOUT_MS");
    CHECK_STR(nixl_cfg_get("NIXL_MD_TIMEOUT_MS"), "5000");
    CHECK(nixl_cfg_size("NIXL_MD_TIMEOUT_MS") == 5000);

    setenv("NIXL_MD_TIMEOUT_MS", "64K", 1);
    CHECK_STR(nixl_cfg_get("NIXL_MD_TIMEOUT_MS"), "64K");
    CHECK(nixl_cfg_size("NIXL_MD_TIMEOUT_MS") == 65536);

    /* Bad value: the default, and one warning however often it is read. */
    setenv("NIXL_MD_TIMEOUT_MS", "12x", 1);
    capture_begin();
    uint64_t a = nixl_cfg_size("NIXL_MD_TIMEOUT_MS");
    uint64_t b = nixl_cfg_size("NIXL_MD_TIMEOUT_MS");
    const char *out = capture_end();
    CHECK(a == 5000 && b == 5000);
    CHECK(count_lines(out) == 1);
    CHECK(strstr(out, "NIXL_MD_TIMEOUT_MS=\"12x\"") != NULL);
    unsetenv("NIXL_MD_TIMEOUT_MS");

    unsetenv("NIXL_ALLOW_FALLBACK");
    CHECK(nixl_cfg_bool("NIXL_ALLOW_FALLBACK") == 1);
    setenv("NIXL_ALLOW_FALLBACK", "off", 1);
    CHECK(nixl_cfg_bool("NIXL_ALLOW_FALLBACK") == 0);
    setenv("NIXL_ALLOW_FALLBACK", "maybe", 1);
    capture_begin();
    CHECK(nixl_cfg_bool("NIXL_ALLOW_FALLBACK") == 1);
    CHECK(nixl_cfg_bool("NIXL_ALLOW_FALLBACK") == 1);
    out = capture_end();
    CHECK(count_lines(out) == 1);
    unsetenv("NIXL_ALLOW_FALLBACK");

    /* Unknown names are an error, not a silent zero that looks like a value. */
    capture_begin();
    CHECK(nixl_cfg_size("NIXL_NOT_A_ROW") == 0);
    CHECK(nixl_cfg_bool("NIXL_NOT_A_ROW") == 0);
    out = capture_end();
    CHECK(count_substr(out, " ERROR ") == 2);
}

static void test_config_add(void)
{
    size_t n = nixl_cfg_count();

    unsetenv("NIXL_TEST_ROW");
    nixl_cfg_add("NIXL_TEST_ROW", "7", "a row added by the test");
    CHECK(nixl_cfg_count() == n + 1);
    const nixl_cfg_row_t *row = nixl_cfg_row(n);
    CHECK(row != NULL && strcmp(row->name, "NIXL_TEST_ROW") == 0 && strcmp(row->def, "7") == 0);
    CHECK_STR(nixl_cfg_get("NIXL_TEST_ROW"), "7");
    CHECK(nixl_cfg_size("NIXL_TEST_ROW") == 7);
    setenv("NIXL_TEST_ROW", "9", 1);
    CHECK(nixl_cfg_size("NIXL_TEST_ROW") == 9);

    /* A second add of the same name (or of a static name) changes nothing. */
    nixl_cfg_add("NIXL_TEST_ROW", "8", "again");
    nixl_cfg_add("NIXL_LOG_LEVEL", "trace", "again");
    CHECK(nixl_cfg_count() == n + 1);
    CHECK_STR(nixl_cfg_row(n)->def, "7");
    CHECK_STR(nixl_cfg_row(0)->def, "warn");

    capture_begin();
    nixl_cfg_add("NOT_NIXL", "1", "wrong prefix");
    nixl_cfg_add(NULL, "1", "no name");
    (void)capture_end();
    CHECK(nixl_cfg_count() == n + 1);
}

#define ADD_THREADS 4
#define ADD_ROWS 20

static char add_names[ADD_THREADS * ADD_ROWS][48];
static int add_done;

static void *add_thread(void *arg)
{
    long t = (long)arg;
    for (int i = 0; i < ADD_ROWS; i++)
        nixl_cfg_add(add_names[t * ADD_ROWS + i], "1", "concurrent row");
    return NULL;
}

static void test_config_add_threads(void)
{
    pthread_t th[ADD_THREADS];
    size_t n = nixl_cfg_count();
    int bad_rows = 0;

    for (int i = 0; i < ADD_THREADS * ADD_ROWS; i++)
        snprintf(add_names[i], sizeof(add_names[i]), "NIXL_TEST_CONCURRENT_%d", i);
    for (long i = 0; i < ADD_THREADS; i++)
        pthread_create(&th[i], NULL, add_thread, (void *)i);

    /* Readers take no lock: every row they can count must be complete. */
    while (!__atomic_load_n(&add_done, __ATOMIC_RELAXED)) {
        size_t c = nixl_cfg_count();
        for (size_t i = 0; i < c; i++) {
            const nixl_cfg_row_t *row = nixl_cfg_row(i);
            if (row == NULL || row->name == NULL || strncmp(row->name, "NIXL_", 5) != 0 || row->def == NULL)
                bad_rows++;
        }
        if (c == n + ADD_THREADS * ADD_ROWS)
            __atomic_store_n(&add_done, 1, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < ADD_THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK(bad_rows == 0);
    CHECK(nixl_cfg_count() == n + ADD_THREADS * ADD_ROWS);
    for (int i = 0; i < ADD_THREADS * ADD_ROWS; i++)
        CHECK_STR(nixl_cfg_get(add_names[i]), "1");
}

static void test_config_check_env(void)
{
    setenv("NIXL_LOG_LEVLE", "debug", 1);
    setenv("NIXL_QQQQQQQQQQQQQQQQ", "1", 1);
    setenv("NIXL_TEST_ROW", "3", 1); /* added at run time: known */
    setenv("NIXL_PROGRESS_INTERVAL_US", "50", 1);

    capture_begin();
    nixl_cfg_check_env();
    nixl_cfg_check_env(); /* once per process */
    const char *out = capture_end();

    CHECK(count_substr(out, "NIXL_LOG_LEVLE") == 1);
    CHECK(strstr(out, "unknown variable NIXL_LOG_LEVLE in the environment; did you mean NIXL_LOG_LEVEL?\n") != NULL);
    CHECK(count_substr(out, "NIXL_QQQQQQQQQQQQQQQQ") == 1);
    CHECK(strstr(out, "NIXL_QQQQQQQQQQQQQQQQ in the environment (nixl-info -c") != NULL);
    CHECK(strstr(out, "NIXL_TEST_ROW") == NULL);
    CHECK(strstr(out, "NIXL_PROGRESS_INTERVAL_US") == NULL);

    unsetenv("NIXL_LOG_LEVLE");
    unsetenv("NIXL_QQQQQQQQQQQQQQQQ");
    unsetenv("NIXL_TEST_ROW");
    unsetenv("NIXL_PROGRESS_INTERVAL_US");
}

/* ---- host identity ----------------------------------------------------- */

static void test_boot_id_parse(void)
{
    static const uint8_t expect[16] = {0x01, 0x23, 0xab, 0xcd, 0x45, 0x67, 0x89, 0xef,
                                       0xab, 0xcd, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab};
    static const char *const bad[] = {
        "0123abcd-4567-89ef-ABCD-0123456789a",     /* short */
        "0123abcd-4567-89ef-ABCD-0123456789abc",   /* long */
        "0123abcd-4567-89ef-ABCD-0123456789ab\n\n", /* two newlines */
        "0123abcd-4567-89ef-ABCD-0123456789ab ",   /* trailing blank */
        "0123abcd4-567-89ef-ABCD-0123456789ab",    /* dash moved */
        "0123abcd-4567-89ef-ABCD+0123456789ab",    /* not a dash */
        "0123abcg-4567-89ef-ABCD-0123456789ab",    /* not hex */
        "0123abcd-4567-89ef-ABCD-0123456789a\n",   /* newline in the UUID */
        "",
    };
    uint8_t id[16];
    const char *good = "0123abcd-4567-89ef-ABCD-0123456789ab\n";

    memset(id, 0, sizeof(id));
    CHECK(nixl_boot_id_parse(good, strlen(good), id) == 0);
    CHECK(memcmp(id, expect, 16) == 0);
    memset(id, 0, sizeof(id));
    CHECK(nixl_boot_id_parse(good, strlen(good) - 1, id) == 0);
    CHECK(memcmp(id, expect, 16) == 0);

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(id, 0x5a, sizeof(id));
        if (nixl_boot_id_parse(bad[i], strlen(bad[i]), id) != -1)
            fprintf(stderr, "boot id parse accepted \"%s\"\n", bad[i]), failures++;
        CHECK(id[0] == 0x5a && id[15] == 0x5a);
    }
    CHECK(nixl_boot_id_parse(NULL, 36, id) == -1);
}

static void test_host_id(void)
{
    nixl_host_id_t a, b;
    char name[64] = "";
    static const uint8_t zero[16];

    nixl_host_id_get(&a);
    nixl_host_id_get(&b);
    CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    CHECK(nixl_host_id_same(&a, &b));

    gethostname(name, sizeof(name) - 1);
    CHECK(strncmp(a.hostname, name, sizeof(a.hostname) - 1) == 0);

    /* The cached id is what the kernel says now. */
    char text[64];
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, text, sizeof(text));
        close(fd);
        uint8_t id[16];
        CHECK(n > 0 && nixl_boot_id_parse(text, (size_t)n, id) == 0);
        CHECK(memcmp(id, a.boot_id, 16) == 0);
        CHECK(memcmp(a.boot_id, zero, 16) != 0);

        b.boot_id[0] ^= 1; /* another kernel, even with the same hostname */
        CHECK(!nixl_host_id_same(&a, &b));
    } else {
        printf("note: boot_id unreadable (%s); boot id checks skipped\n", strerror(errno));
    }

    /* Unknown boot ids: the hostname decides; empty hostnames never match. */
    memcpy(&b, &a, sizeof(a));
    memset(a.boot_id, 0, 16);
    CHECK(nixl_host_id_same(&a, &b));
    b.hostname[0] = a.hostname[0] == 'x' ? 'y' : 'x';
    CHECK(!nixl_host_id_same(&a, &b));
    a.hostname[0] = b.hostname[0] = '\0';
    memset(b.boot_id, 0, 16);
    CHECK(!nixl_host_id_same(&a, &b));
}

/* ---- status ------------------------------------------------------------ */

static void test_status(void)
{
    static const struct {
        nixl_status_t st;
        const char *name;
        const char *msg;
    } all[] = {
#define ROW_(name, value, msg) {name, #name, msg},
        NIXL_STATUS_LIST(ROW_)
#undef ROW_
    };
    const size_t n = sizeof(all) / sizeof(all[0]);

    for (size_t i = 0; i < n; i++) {
        CHECK_STR(nixl_status_name(all[i].st), all[i].name);
        CHECK_STR(nixl_strerror(all[i].st), all[i].msg);
        CHECK(strcmp(nixl_strerror(all[i].st), "unknown status") != 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(all[i].st != all[j].st);
            CHECK(strcmp(nixl_status_name(all[i].st), nixl_status_name(all[j].st)) != 0);
            CHECK(strcmp(nixl_strerror(all[i].st), nixl_strerror(all[j].st)) != 0);
        }
    }
    CHECK_STR(nixl_strerror((nixl_status_t)12345), "unknown status");
    CHECK_STR(nixl_status_name((nixl_status_t)-999), "NIXL_UNKNOWN_STATUS");

    char v[32];
    snprintf(v, sizeof(v), "%d.%d.%d", NIXL_VERSION_MAJOR, NIXL_VERSION_MINOR, NIXL_VERSION_PATCH);
    CHECK_STR(nixl_version(), v);
}

/* ------------------------------------------------------------------------ */

int main(void)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"log_bad_env", test_log_bad_env}, /* first: the level is read once */
        {"log_format", test_log_format},
        {"log_threads", test_log_threads},
        {"ratelimit_basic", test_ratelimit_basic},
        {"ratelimit_threads", test_ratelimit_threads},
        {"warn_ratelimited", test_warn_ratelimited},
        {"strlcpy", test_strlcpy},
        {"edit_distance", test_edit_distance},
        {"parse_size", test_parse_size},
        {"parse_bool", test_parse_bool},
        {"config_table", test_config_table},
        {"config_values", test_config_values},
        {"config_add", test_config_add},
        {"config_add_threads", test_config_add_threads},
        {"config_check_env", test_config_check_env}, /* after the adds it relies on */
        {"boot_id_parse", test_boot_id_parse},
        {"host_id", test_host_id},
        {"status", test_status},
    };

    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        int before = failures;
        tests[i].fn();
        printf("%s %s\n", failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    if (failures != 0) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    return 0;
}
