/*
 * test_reg_pool.c - registration on the bounded worker pool, seen through
 * nixl_mem_register and the counters of the fake backends
 * (fake_backend.h): the cap is respected (and 0 means one worker per
 * buffer), a backend without NIXL_CAP_REG_MT is never called concurrently,
 * a failure still lets every other job run, returns the first error in the
 * caller's order and leaves nothing registered, and the derived default
 * follows the agents counted in the peers file, dead ones reclaimed.
 *
 * The peers file is a private one (NIXL_REG_PEERS_FILE), so agents of other
 * tests running on this host do not change the derived cap under us.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/reg_peers.h"
#include "fake_backend.h"
#include "nixl.h"

#include "../../common/test_check.h"
#define CHECK_EQ(a, b)                                                                                           \
    do {                                                                                                         \
        long long a_ = (long long)(a), b_ = (long long)(b);                                                      \
        if (a_ != b_) {                                                                                          \
            fprintf(stderr, "%s:%d: %s = %lld, want %s = %lld\n", __FILE__, __LINE__, #a, a_, #b, b_);           \
            failures++;                                                                                          \
        }                                                                                                        \
    } while (0)

#define MAX_BUFS 128
#define BUF_STRIDE (64 * 1024)

static char peers_path[256];

/* ---- helpers ---- */

/* A symbol of the module that holds backend (dlopen RTLD_NOLOAD of the
 * origin nixl_backends_available reports), or NULL. */
static void *module_sym(const char *backend, const char *sym)
{
    const nixl_backend_info_t *infos;
    size_t n;
    if (nixl_backends_available(&infos, &n) != NIXL_OK)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(infos[i].name, backend) != 0)
            continue;
        void *h = dlopen(infos[i].origin, RTLD_NOW | RTLD_NOLOAD);
        return h ? dlsym(h, sym) : NULL;
    }
    return NULL;
}

static fake_counters_fn counters_of(const char *backend)
{
    return (fake_counters_fn)(uintptr_t)module_sym(backend, FAKE_COUNTERS_SYM);
}

static fake_meet_fn meet_of(const char *backend)
{
    return (fake_meet_fn)(uintptr_t)module_sym(backend, FAKE_MEET_SYM);
}

static fake_counters_fn fake_ctr, serial_ctr;
static fake_meet_fn fake_meet;

static fake_counters_t take(fake_counters_fn fn)
{
    fake_counters_t c;
    fn(&c, 1);
    return c;
}

static nixl_agent_t *mk_agent(const char *name)
{
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    return a;
}

static void mk_backend(nixl_agent_t *a, const char *name, const char *delay_us, const char *key, const char *val)
{
    nixl_param_t p[2] = {{"reg_delay_us", delay_us}, {key, val}};
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(a, name, p, key ? 2 : 1, &b), NIXL_OK);
}

/* n buffers of one arena; lengths 4 KiB x (i+1) when distinct, else 4 KiB;
 * with reverse, descriptor 0 has the highest address. */
typedef struct bufset {
    char *mem;
    size_t n;
    nixl_desc_t d[MAX_BUFS];
    nixl_dlist_t l;
} bufset_t;

static void bufs_make(bufset_t *s, size_t n, int distinct, int reverse)
{
    s->mem = malloc(n * BUF_STRIDE);
    s->n = n;
    for (size_t i = 0; i < n; i++) {
        size_t slot = reverse ? n - 1 - i : i;
        s->d[i] = (nixl_desc_t){(uintptr_t)s->mem + slot * BUF_STRIDE, distinct ? 4096 * (i + 1) : 4096, 0, 0, NULL};
    }
    s->l = (nixl_dlist_t){NIXL_MEM_DRAM, n, s->d};
}

static void bufs_free(bufset_t *s)
{
    free(s->mem);
}

/* The rule of reg_pool.c, recomputed: online cores shared by the agents,
 * no more than this process may use, 1..64. */
static unsigned expected_auto(unsigned agents)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN), mine;
    cpu_set_t set;
    if (online < 1)
        online = 1;
    mine = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : online;
    long share = online / agents;
    if (share > mine)
        share = mine;
    if (share > 64)
        share = 64;
    return share < 1 ? 1 : (unsigned)share;
}

static long my_tid(void)
{
    return (long)syscall(SYS_gettid);
}

/* ---- caps ---- */

static void test_caps(void)
{
    nixl_agent_t *a = mk_agent("caps");
    mk_backend(a, "fake", "40000", NULL, NULL);
    bufset_t s;
    bufs_make(&s, 8, 0, 0);
    static const struct {
        const char *cap;
        int64_t want;
    } rows[] = {{"1", 1}, {"2", 2}, {"3", 3}, {"0", 8}, {"16", 8}};
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        setenv("NIXL_REG_CONCURRENCY", rows[r].cap, 1);
        take(fake_ctr);
        fake_meet(rows[r].want, 8);
        CHECK_ST(nixl_mem_register(a, &s.l, NULL), NIXL_OK);
        fake_meet(0, 0);
        fake_counters_t c = take(fake_ctr);
        CHECK_EQ(c.reg_calls, 8);
        CHECK_EQ(c.live, 8);
        if (c.max_inside != rows[r].want)
            fprintf(stderr, "cap %s:\n", rows[r].cap);
        CHECK_EQ(c.max_inside, rows[r].want);
        if (rows[r].want == 1) {
            /* Cap 1 runs inline: no thread is made. */
            CHECK_EQ(c.threads, 1);
            CHECK_EQ(c.last_tid, my_tid());
        }
        CHECK_ST(nixl_mem_deregister(a, &s.l, NULL), NIXL_OK);
        CHECK_EQ(take(fake_ctr).live, 0);
    }
    /* One job runs inline whatever the cap. */
    setenv("NIXL_REG_CONCURRENCY", "0", 1);
    nixl_dlist_t one = {NIXL_MEM_DRAM, 1, s.d};
    CHECK_ST(nixl_mem_register(a, &one, NULL), NIXL_OK);
    fake_counters_t c = take(fake_ctr);
    CHECK(c.threads == 1 && c.last_tid == my_tid());
    CHECK_ST(nixl_mem_deregister(a, &one, NULL), NIXL_OK);
    unsetenv("NIXL_REG_CONCURRENCY");
    nixl_agent_destroy(a);
    bufs_free(&s);
}

/* ---- backends without NIXL_CAP_REG_MT ---- */

static void test_serial_backend(void)
{
    bufset_t s;
    bufs_make(&s, 8, 0, 0);

    /* Even with a worker per buffer, one call at a time. */
    nixl_agent_t *a = mk_agent("serial_only");
    mk_backend(a, "fake_serial", "10000", NULL, NULL);
    setenv("NIXL_REG_CONCURRENCY", "0", 1);
    take(serial_ctr);
    CHECK_ST(nixl_mem_register(a, &s.l, NULL), NIXL_OK);
    fake_counters_t c = take(serial_ctr);
    CHECK_EQ(c.reg_calls, 8);
    CHECK_EQ(c.max_inside, 1);
    CHECK_ST(nixl_mem_deregister(a, &s.l, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    CHECK_EQ(take(serial_ctr).live, 0);

    /* Beside a concurrent backend: still one at a time for it, while the
     * other proceeds in parallel: the fake's calls meet two at a time
     * (fake_backend.h), which only a pool running them in parallel allows. */
    a = mk_agent("serial_mixed");
    mk_backend(a, "fake_serial", "30000", NULL, NULL);
    mk_backend(a, "fake", "30000", NULL, NULL);
    setenv("NIXL_REG_CONCURRENCY", "4", 1);
    take(serial_ctr);
    take(fake_ctr);
    fake_meet(2, 8);
    CHECK_ST(nixl_mem_register(a, &s.l, NULL), NIXL_OK);
    fake_meet(0, 0);
    fake_counters_t cs = take(serial_ctr), cf = take(fake_ctr);
    CHECK_EQ(cs.max_inside, 1);
    CHECK(cf.max_inside >= 2 && cf.max_inside <= 4);
    CHECK(cs.live == 8 && cf.live == 8);
    CHECK_ST(nixl_mem_deregister(a, &s.l, NULL), NIXL_OK);
    CHECK(take(serial_ctr).live == 0 && take(fake_ctr).live == 0);
    unsetenv("NIXL_REG_CONCURRENCY");
    nixl_agent_destroy(a);
    bufs_free(&s);
}

/* ---- failures: every job attempted, first error, exact rollback ---- */

static void test_failures(void)
{
    bufset_t s;
    /* Lengths 4 KiB x (i+1); descriptor 0 at the highest address, so the
     * caller's order and the address order disagree. */
    bufs_make(&s, 8, 1, 1);
    nixl_agent_t *a = mk_agent("fail_len");
    mk_backend(a, "fake_serial", "3000", NULL, NULL);
    /* Descriptor 2 (12 KiB) fails with IO, descriptor 6 (28 KiB, lower
     * address) with BACKEND. */
    mk_backend(a, "fake", "3000", "fail_len", "12288:-84,28672:-81");
    setenv("NIXL_REG_CONCURRENCY", "4", 1);
    take(serial_ctr);
    take(fake_ctr);
    CHECK_ST(nixl_mem_register(a, &s.l, NULL), NIXL_ERR_IO);
    fake_counters_t cs = take(serial_ctr), cf = take(fake_ctr);
    CHECK_EQ(cf.reg_calls, 8); /* no early stop */
    CHECK_EQ(cs.reg_calls, 8);
    CHECK_EQ(cf.live, 0); /* rolled back, on both backends */
    CHECK_EQ(cs.live, 0);
    nixl_dlist_t one = {NIXL_MEM_DRAM, 1, s.d};
    CHECK_ST(nixl_mem_deregister(a, &one, NULL), NIXL_ERR_REG_MISMATCH);

    /* The same buffers listed the other way round: 28 KiB comes first. */
    bufset_t r = s;
    for (size_t i = 0; i < 8; i++)
        r.d[i] = s.d[7 - i];
    r.l.descs = r.d;
    CHECK_ST(nixl_mem_register(a, &r.l, NULL), NIXL_ERR_BACKEND);
    cs = take(serial_ctr);
    cf = take(fake_ctr);
    CHECK(cf.reg_calls == 8 && cs.reg_calls == 8 && cf.live == 0 && cs.live == 0);

    /* Inline (cap 1) keeps the same rules. */
    setenv("NIXL_REG_CONCURRENCY", "1", 1);
    CHECK_ST(nixl_mem_register(a, &s.l, NULL), NIXL_ERR_IO);
    cs = take(serial_ctr);
    cf = take(fake_ctr);
    CHECK(cf.reg_calls == 8 && cs.reg_calls == 8 && cf.live == 0 && cs.live == 0);
    /* The buffers that do not fail register fine afterwards. */
    nixl_dlist_t ok = {NIXL_MEM_DRAM, 2, s.d};
    CHECK_ST(nixl_mem_register(a, &ok, NULL), NIXL_OK);
    CHECK(take(fake_ctr).live == 2 && take(serial_ctr).live == 2);
    nixl_agent_destroy(a);
    CHECK(take(fake_ctr).live == 0 && take(serial_ctr).live == 0);

    /* The Nth call fails, on the pool and inline. */
    static const char *const caps[] = {"4", "1"};
    for (size_t k = 0; k < 2; k++) {
        setenv("NIXL_REG_CONCURRENCY", caps[k], 1);
        a = mk_agent("fail_nth");
        mk_backend(a, "fake", "2000", "fail_reg_at", "5");
        take(fake_ctr);
        CHECK_ST(nixl_mem_register(a, &s.l, NULL), NIXL_ERR_BACKEND);
        cf = take(fake_ctr);
        CHECK(cf.reg_calls == 8 && cf.live == 0);
        CHECK_ST(nixl_mem_register(a, &s.l, NULL), NIXL_OK);
        CHECK_EQ(take(fake_ctr).live, 8);
        nixl_agent_destroy(a);
        CHECK_EQ(take(fake_ctr).live, 0);
    }

    /* A backend created later registers what is there, on the pool, all or
     * nothing. */
    setenv("NIXL_REG_CONCURRENCY", "4", 1);
    a = mk_agent("late");
    mk_backend(a, "fake_serial", "1000", NULL, NULL);
    CHECK_ST(nixl_mem_register(a, &s.l, NULL), NIXL_OK);
    nixl_param_t p = {"fail_len", "8192:-81"};
    nixl_backend_t *b = NULL;
    take(fake_ctr);
    CHECK_ST(nixl_backend_create(a, "fake", &p, 1, &b), NIXL_ERR_BACKEND);
    cf = take(fake_ctr);
    CHECK(cf.reg_calls == 8 && cf.live == 0);
    CHECK_ST(nixl_backend_create(a, "fake", NULL, 0, &b), NIXL_OK);
    CHECK_EQ(take(fake_ctr).live, 8);
    nixl_agent_destroy(a);
    CHECK(take(fake_ctr).live == 0 && take(serial_ctr).live == 0);
    unsetenv("NIXL_REG_CONCURRENCY");
    bufs_free(&s);
}

/* ---- the derived default and the peers file ---- */

static void table_write(const nixl_reg_peers_table_t *t)
{
    int fd = open(peers_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, t, sizeof(*t)) == (ssize_t)sizeof(*t));
        close(fd);
    }
}

static int table_read(nixl_reg_peers_table_t *t)
{
    int fd = open(peers_path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, t, sizeof(*t));
    close(fd);
    return n == (ssize_t)sizeof(*t) ? 0 : -1;
}

static void table_init(nixl_reg_peers_table_t *t)
{
    memset(t, 0, sizeof(*t));
    t->magic = NIXL_REG_PEERS_MAGIC;
    t->version = NIXL_REG_PEERS_VERSION;
    t->nslots = NIXL_REG_PEERS_SLOTS;
    t->slot_size = sizeof(nixl_reg_peers_slot_t);
}

static int slots_used(const nixl_reg_peers_table_t *t)
{
    int n = 0;
    for (int i = 0; i < NIXL_REG_PEERS_SLOTS; i++)
        n += t->slot[i].pid != 0;
    return n;
}

/* A pid that was alive (with its start time) and is now dead and reaped. */
static void dead_process(uint32_t *pid_out, uint64_t *start_out)
{
    int fds[2];
    char c;
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[1]);
        _exit(read(fds[0], &c, 1) < 0 ? 1 : 0);
    }
    close(fds[0]);
    *start_out = nixl_reg_peers_start_time(pid);
    CHECK(*start_out != 0);
    close(fds[1]);
    CHECK(waitpid(pid, NULL, 0) == pid);
    *pid_out = (uint32_t)pid;
}

/* Register nb buffers on auto; the most calls seen at once. */
/* One batch on auto; the most reg() calls at once.  They meet at want
 * (fake_backend.h), so a late thread cannot make the pool look smaller. */
static int64_t auto_batch(nixl_agent_t *a, bufset_t *s, int64_t want)
{
    take(fake_ctr);
    fake_meet(want, s->n);
    CHECK_ST(nixl_mem_register(a, &s->l, NULL), NIXL_OK);
    fake_meet(0, 0);
    fake_counters_t c = take(fake_ctr);
    CHECK_EQ(c.live, (int64_t)s->n);
    CHECK_ST(nixl_mem_deregister(a, &s->l, NULL), NIXL_OK);
    return c.max_inside;
}

static void test_derived_default(void)
{
    unsetenv("NIXL_REG_CONCURRENCY");
    unsigned e1 = expected_auto(1), e3 = expected_auto(3), efull = expected_auto(NIXL_REG_PEERS_SLOTS + 1);
    size_t nb = 2 * (size_t)e1 < 4 ? 4 : 2 * (size_t)e1;
    bufset_t s;
    bufs_make(&s, nb, 0, 0);
    nixl_agent_t *a = mk_agent("derived");
    mk_backend(a, "fake", "30000", NULL, NULL);
    nixl_reg_peers_table_t *t = malloc(sizeof(*t));
    pid_t self = getpid();
    uint64_t my_start = nixl_reg_peers_start_time(self);
    CHECK(my_start != 0);

    /* Alone: all the cores (this box: online / 1). */
    unlink(peers_path);
    CHECK_EQ(auto_batch(a, &s, e1), e1);
    CHECK(table_read(t) == 0 && slots_used(t) == 0); /* our slot was given back */

    /* Two more agents registering: 3 share the cores. */
    table_init(t);
    t->slot[3] = (nixl_reg_peers_slot_t){.pid = (uint32_t)self, .start = my_start, .token = 0xa0};
    t->slot[9] = (nixl_reg_peers_slot_t){.pid = (uint32_t)self, .start = my_start, .token = 0xb0};
    table_write(t);
    CHECK_EQ(auto_batch(a, &s, e3), e3);
    CHECK(table_read(t) == 0 && slots_used(t) == 2 && t->slot[3].token == 0xa0 && t->slot[9].token == 0xb0);

    /* Their processes died (one pid even reused by a process started at
     * another time): not counted, and reclaimed. */
    table_init(t);
    dead_process(&t->slot[3].pid, &t->slot[3].start);
    t->slot[9] = (nixl_reg_peers_slot_t){.pid = (uint32_t)self, .start = my_start + 1, .token = 0xb0};
    table_write(t);
    CHECK_EQ(auto_batch(a, &s, e1), e1);
    CHECK(table_read(t) == 0 && slots_used(t) == 0);

    /* A file full of dead agents: one slot is reclaimed for us. */
    uint32_t dead;
    uint64_t dead_start;
    dead_process(&dead, &dead_start);
    table_init(t);
    for (int i = 0; i < NIXL_REG_PEERS_SLOTS; i++)
        t->slot[i] = (nixl_reg_peers_slot_t){.pid = dead, .start = dead_start, .token = 1};
    table_write(t);
    CHECK_EQ(auto_batch(a, &s, e1), e1);
    CHECK(table_read(t) == 0 && slots_used(t) == 0);

    /* A file full of live agents: no slot for us, we still count. */
    table_init(t);
    for (int i = 0; i < NIXL_REG_PEERS_SLOTS; i++)
        t->slot[i] = (nixl_reg_peers_slot_t){.pid = (uint32_t)self, .start = my_start, .token = 100 + (uint64_t)i};
    table_write(t);
    CHECK_EQ(auto_batch(a, &s, efull), efull);
    CHECK(table_read(t) == 0 && slots_used(t) == NIXL_REG_PEERS_SLOTS);

    /* A file of another layout, or no usable file: count ourselves only,
     * never an error, and leave the foreign file alone. */
    int fd = open(peers_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, "not a peers table", 17) == 17);
    close(fd);
    CHECK_EQ(auto_batch(a, &s, e1), e1);
    struct stat st;
    CHECK(stat(peers_path, &st) == 0 && st.st_size == 17);
    char nowhere[sizeof(peers_path) + 16];
    snprintf(nowhere, sizeof(nowhere), "%s.d/none/peers", peers_path);
    setenv("NIXL_REG_PEERS_FILE", nowhere, 1);
    CHECK_EQ(auto_batch(a, &s, e1), e1);
    setenv("NIXL_REG_PEERS_FILE", peers_path, 1);

    /* A value that is not a number means auto (warned once). */
    setenv("NIXL_REG_CONCURRENCY", "many", 1);
    unlink(peers_path);
    CHECK_EQ(auto_batch(a, &s, e1), e1);
    unsetenv("NIXL_REG_CONCURRENCY");

    free(t);
    nixl_agent_destroy(a);
    bufs_free(&s);
}

/* 60 ms into a batch, two agents start registering; 70 ms later the
 * counters restart, so what they see afterwards is the shrunk pool. */
static void *arrive_later(void *arg)
{
    (void)arg;
    const struct timespec t60 = {0, 60000000}, t70 = {0, 70000000};
    nanosleep(&t60, NULL);
    nixl_reg_peers_table_t *t = malloc(sizeof(*t));
    int fd = open(peers_path, O_RDWR);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
    CHECK(pread(fd, t, sizeof(*t), 0) == (ssize_t)sizeof(*t));
    CHECK_EQ(slots_used(t), 1); /* the batch's own */
    for (int i = 0, added = 0; i < NIXL_REG_PEERS_SLOTS && added < 2; i++) {
        if (t->slot[i].pid == 0) {
            t->slot[i] = (nixl_reg_peers_slot_t){.pid = (uint32_t)getpid(),
                                                 .start = nixl_reg_peers_start_time(getpid()),
                                                 .token = 0xc0 + (uint64_t)i};
            added++;
        }
    }
    CHECK(pwrite(fd, t, sizeof(*t), 0) == (ssize_t)sizeof(*t));
    flock(fd, LOCK_UN);
    close(fd);
    free(t);
    nanosleep(&t70, NULL);
    take(fake_ctr);
    return NULL;
}

/* A batch on auto gives workers back when other agents start registering. */
static void test_cap_shrinks(void)
{
    unsetenv("NIXL_REG_CONCURRENCY");
    unsigned e1 = expected_auto(1), e3 = expected_auto(3);
    if (e1 > 8 || e3 >= e1) {
        printf("test_reg_pool: shrinking not checked here (%u cores to share: batches too short to watch)\n", e1);
        return;
    }
    bufset_t s;
    bufs_make(&s, 10 * (size_t)e1, 0, 0);
    nixl_agent_t *a = mk_agent("shrinks");
    mk_backend(a, "fake", "20000", NULL, NULL);
    unlink(peers_path);
    pthread_t th;
    take(fake_ctr);
    CHECK(pthread_create(&th, NULL, arrive_later, NULL) == 0);
    CHECK_ST(nixl_mem_register(a, &s.l, NULL), NIXL_OK);
    pthread_join(th, NULL);
    fake_counters_t c = take(fake_ctr);
    CHECK(c.reg_calls > 0 && c.reg_calls < s.n); /* the reset came mid-batch */
    CHECK_EQ(c.max_inside, e3);
    CHECK_EQ(c.live, (int64_t)s.n);
    CHECK_ST(nixl_mem_deregister(a, &s.l, NULL), NIXL_OK);
    nixl_agent_destroy(a);
    unlink(peers_path);
    bufs_free(&s);
}

int main(void)
{
    char dir[] = "/tmp/nixl-regpool-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(peers_path, sizeof(peers_path), "%s/peers", dir);
    setenv("NIXL_REG_PEERS_FILE", peers_path, 1);
    fake_ctr = counters_of("fake");
    fake_meet = meet_of("fake");
    serial_ctr = counters_of("fake_serial");
    if (!fake_ctr || !fake_meet || !serial_ctr) {
        fprintf(stderr, "test_reg_pool: the fake backends are not in NIXL_PLUGIN_DIR\n");
        return 1;
    }
    test_caps();
    test_serial_backend();
    test_failures();
    test_derived_default();
    test_cap_shrinks();
    unlink(peers_path);
    rmdir(dir);
    if (failures) {
        fprintf(stderr, "test_reg_pool: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_reg_pool: all checks passed (derived cap here: %u alone, %u among 3)\n", expected_auto(1),
           expected_auto(3));
    return 0;
}
