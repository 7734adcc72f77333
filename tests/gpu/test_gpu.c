/*
 * test_gpu.c - GPU transfers between two processes over cuda_ipc, data
 * verified byte for byte.
 *
 *   test_gpu seed | same_gpu | cross_gpu | vmm | staged | isolated | host_to_gpu
 *
 * The program re-executes itself as the target (hidden --target-role) and
 * drives it over a pipe; metadata goes through the target's listener.  Each
 * case moves three kinds of request and checks each one's path:
 *   - one 8 MiB piece (copy engines: cuda_ipc.ce),
 *   - 4,096 KV-like pieces of 1,152 B, slots shuffled on both sides (one
 *     kernel launch: cuda_ipc.kernel, or cuda_ipc.ce with NIXL_CUDA_IPC_KERNEL=0),
 *   - 64 pieces at odd addresses and lengths (the kernel's byte path),
 * each WRITTEN with a notification (the target hashes its buffer the moment
 * it sees it: every byte must be there) and READ back.  No request may
 * take a fallback.
 *
 * seed is the field report's bug as a regression test: the sender's memory
 * is on GPU 1, and every call (registration, metadata, post, completion) is
 * made by a thread created fresh with GPU 0's context current.  The library
 * must bind GPU 1's context itself, go over IPC, and leave the thread's
 * context as it found it.
 *
 * staged forces the host-staged fallback (NIXL_CUDA_IPC_MAP=0): every
 * request must take cuda_ipc.staged, be counted as a fallback with its
 * cause, deliver the same bytes, and be refused under NIXL_ALLOW_FALLBACK=0.
 * host_to_gpu moves between the initiator's host memory (plain pageable
 * DRAM) and the target's VRAM: cuda_ipc copies it with the copy engines.
 * isolated gives each process one GPU of its own (CUDA_VISIBLE_DEVICES=0 and
 * =1), as engines that pin a worker to a GPU do: the peer's GPU is invisible
 * here, so its memory cannot be mapped.  Whatever path the driver allows,
 * the bytes must arrive, and a staged path must be counted.
 *
 * Exit 77 with the reason when there is no driver or too few GPUs.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu_util.h"
#include "nixl.h"

#define MiB (1024u * 1024u)
#define BUF_LEN (16u * MiB)
#define KV_PIECES 4096
#define KV_BYTES 1152
#define ODD_PIECES 64
#define TIMEOUT_MS 20000

enum { MEM_LEGACY = 0, MEM_VMM = 1, MEM_HOST = 2 };
enum { MODE_DIRECT = 0, MODE_STAGED = 1, MODE_ISOLATED = 2 };

/* CUDA_VISIBLE_DEVICES for the target process (isolated), or NULL. */
static const char *child_visible;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("FAIL: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

#define CHECK_OK(call)                                                                           \
    do {                                                                                         \
        nixl_status_t st_ = (call);                                                              \
        if (st_ != NIXL_OK)                                                                      \
            die("%s:%d: %s: %s", __FILE__, __LINE__, #call, nixl_status_name(st_));               \
    } while (0)

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void pattern(uint8_t *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = mix64(seed * 0x100000001b3ull ^ (i >> 3));
        for (size_t b = 0; b < 8 && i + b < len; b++)
            p[i + b] = (uint8_t)(w >> (8 * b));
    }
}

static uint64_t hash(const uint8_t *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* A buffer of one side: device memory (legacy or VMM) on one GPU. */
typedef struct side_buf {
    int dev, kind;
    uint8_t *p;
    gpu_vmm_t vmm;
} side_buf_t;

static void buf_alloc(side_buf_t *b, int dev, int kind, size_t len)
{
    b->dev = dev;
    b->kind = kind;
    if (kind == MEM_HOST) {
        b->p = aligned_alloc(4096, len);
        if (!b->p)
            die("out of memory");
        return;
    }
    b->p = kind == MEM_VMM ? gpu_alloc_vmm(dev, len, 3, &b->vmm) : gpu_alloc(dev, len);
}

static void buf_free(side_buf_t *b)
{
    if (b->kind == MEM_HOST)
        free(b->p);
    else if (b->kind == MEM_VMM)
        gpu_free_vmm(&b->vmm);
    else
        gpu_free(b->dev, b->p);
}

static nixl_mem_t buf_mem(const side_buf_t *b)
{
    return b->kind == MEM_HOST ? NIXL_MEM_DRAM : NIXL_MEM_VRAM;
}

static void buf_put(side_buf_t *b, const void *src, size_t len)
{
    if (b->kind == MEM_HOST)
        memcpy(b->p, src, len);
    else
        gpu_put(b->p, src, len);
}

static void buf_get(void *dst, const side_buf_t *b, size_t len)
{
    if (b->kind == MEM_HOST)
        memcpy(dst, b->p, len);
    else
        gpu_get(dst, b->p, len);
}

static nixl_agent_t *agent_make(const char *name, int listen)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_LISTEN,
                               .name = name,
                               .listen = listen};
    nixl_agent_t *a;
    CHECK_OK(nixl_agent_create(&cfg, &a));
    nixl_backend_t *be;
    CHECK_OK(nixl_backend_create(a, "cuda_ipc", NULL, 0, &be));
    return a;
}

static nixl_dlist_t one_vram(nixl_desc_t *d, const side_buf_t *b, size_t len)
{
    memset(d, 0, sizeof(*d));
    d->addr = (uint64_t)(uintptr_t)b->p;
    d->len = len;
    d->dev_id = (uint32_t)b->dev;
    return (nixl_dlist_t){.mem_type = buf_mem(b), .count = 1, .descs = d};
}

/* ------------------------------------------------------------------------
 * Target process: commands are text lines on a pipe, one reply line each.
 *   init <dev> <kind> <seed>   -> ok <addr> <port>
 *   wait <msg>                 -> got <hash at the moment msg arrived>
 *   hash                       -> hash <h>
 *   quit
 * ------------------------------------------------------------------------ */

typedef struct tgt {
    nixl_agent_t *agent;
    side_buf_t buf;
    char seen[64][64]; /* notifications received, not yet waited for */
    uint64_t seen_hash[64];
    int nseen;
    uint8_t *host;
} tgt_t;

static void tgt_on_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    tgt_t *t = arg;
    (void)sender;
    if (t->nseen == 64)
        die("target: too many notifications");
    /* Hash now: this is the moment the notification is seen. */
    gpu_get(t->host, t->buf.p, BUF_LEN);
    snprintf(t->seen[t->nseen], sizeof(t->seen[0]), "%.*s", (int)(len < 63 ? len : 63), (const char *)msg);
    t->seen_hash[t->nseen++] = hash(t->host, BUF_LEN);
}

static int target_main(int rfd, int wfd)
{
    tgt_t t;
    memset(&t, 0, sizeof(t));
    FILE *in = fdopen(rfd, "r"), *out = fdopen(wfd, "w");
    char why[256];
    if (!in || !out || gpu_init(why, sizeof(why)) == 0)
        return 1;
    t.host = malloc(BUF_LEN);
    if (!t.host)
        return 1;
    char line[256];
    for (;;) {
        struct pollfd p = {.fd = rfd, .events = POLLIN};
        if (poll(&p, 1, 1) == 0) {
            if (t.agent)
                nixl_agent_progress(t.agent);
            continue;
        }
        if (!fgets(line, sizeof(line), in))
            break;
        int dev, kind;
        unsigned long long seed;
        char msg[64];
        if (sscanf(line, "init %d %d %llu", &dev, &kind, &seed) == 3) {
            t.agent = agent_make("gpu_target", 1);
            buf_alloc(&t.buf, dev, kind, BUF_LEN);
            pattern(t.host, BUF_LEN, seed);
            gpu_put(t.buf.p, t.host, BUF_LEN);
            nixl_desc_t d;
            nixl_dlist_t l = one_vram(&d, &t.buf, BUF_LEN);
            CHECK_OK(nixl_mem_register(t.agent, &l, NULL));
            fprintf(out, "ok %llu %u\n", (unsigned long long)(uintptr_t)t.buf.p,
                    (unsigned)nixl_agent_listen_port(t.agent));
        } else if (sscanf(line, "wait %63s", msg) == 1) {
            uint64_t deadline = now_ms() + TIMEOUT_MS;
            int found = -1;
            while (found < 0 && now_ms() < deadline) {
                CHECK_OK(nixl_notifs_get(t.agent, tgt_on_notif, &t, NULL));
                for (int i = 0; i < t.nseen && found < 0; i++)
                    if (strcmp(t.seen[i], msg) == 0)
                        found = i;
                if (found < 0)
                    usleep(50);
            }
            if (found < 0) {
                fprintf(out, "timeout\n");
            } else {
                fprintf(out, "got %llu\n", (unsigned long long)t.seen_hash[found]);
                memmove(&t.seen[found], &t.seen[found + 1], (size_t)(t.nseen - found - 1) * sizeof(t.seen[0]));
                memmove(&t.seen_hash[found], &t.seen_hash[found + 1],
                        (size_t)(t.nseen - found - 1) * sizeof(t.seen_hash[0]));
                t.nseen--;
            }
        } else if (strncmp(line, "hash", 4) == 0) {
            gpu_get(t.host, t.buf.p, BUF_LEN);
            fprintf(out, "hash %llu\n", (unsigned long long)hash(t.host, BUF_LEN));
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        }
        fflush(out);
    }
    if (t.agent) {
        nixl_desc_t d;
        nixl_dlist_t l = one_vram(&d, &t.buf, BUF_LEN);
        CHECK_OK(nixl_mem_deregister(t.agent, &l, NULL));
        nixl_agent_destroy(t.agent);
        buf_free(&t.buf);
    }
    free(t.host);
    return 0;
}

/* ------------------------------------------------------------------------
 * Initiator
 * ------------------------------------------------------------------------ */

typedef struct peer_proc {
    pid_t pid;
    FILE *in, *out;
} peer_proc_t;

static void peer_spawn(peer_proc_t *pp)
{
    int p2c[2], c2p[2];
    if (pipe(p2c) || pipe(c2p))
        die("pipe: %s", strerror(errno));
    char rb[16], wb[16], exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        die("readlink /proc/self/exe");
    exe[n] = 0;
    snprintf(rb, sizeof(rb), "%d", p2c[0]);
    snprintf(wb, sizeof(wb), "%d", c2p[1]);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p2c[1]);
        close(c2p[0]);
        if (child_visible)
            setenv("CUDA_VISIBLE_DEVICES", child_visible, 1);
        execl(exe, exe, "--target-role", rb, wb, (char *)NULL);
        _exit(127);
    }
    close(p2c[0]);
    close(c2p[1]);
    pp->pid = pid;
    pp->out = fdopen(p2c[1], "w");
    pp->in = fdopen(c2p[0], "r");
}

static void peer_cmd(peer_proc_t *pp, char *reply, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void peer_cmd(peer_proc_t *pp, char *reply, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(pp->out, fmt, ap);
    va_end(ap);
    fputc('\n', pp->out);
    fflush(pp->out);
    if (!reply)
        return;
    if (!fgets(reply, (int)cap, pp->in))
        die("the target process stopped answering");
}

typedef struct xcase {
    const char *name;
    int init_dev, tgt_dev;
    int init_kind, tgt_kind;
    int post_ctx_dev; /* >= 0: a fresh thread with this device's context current makes every call */
    int need_gpus;
    int mode; /* MODE_* */
} xcase_t;


typedef struct run {
    const xcase_t *c;
    peer_proc_t peer;
    nixl_agent_t *agent;
    side_buf_t buf;
    uint8_t *local_img; /* what our buffer holds */
    uint8_t *tgt_img;   /* what the target's must hold */
    uint64_t tgt_addr;
    uint16_t port;
    char peer_name[NIXL_NAME_MAX + 1];
    int nreq;
} run_t;

typedef struct piece {
    uint64_t loff, roff, len;
} piece_t;

static void check_ctx_untouched(const run_t *r, const char *after)
{
    if (r->c->post_ctx_dev < 0)
        return;
    CUcontext cur = NULL;
    gpu_cu.cuCtxGetCurrent(&cur);
    if (cur != gpu_ctx(r->c->post_ctx_dev))
        die("after %s the calling thread's current context is %p, not GPU %d's %p: the library must restore it",
            after, (void *)cur, r->c->post_ctx_dev, (void *)gpu_ctx(r->c->post_ctx_dev));
}

static nixl_xfer_t *make_xfer(run_t *r, nixl_op_t op, const piece_t *pc, size_t n, const char *notif)
{
    nixl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd));
    if (!ld || !rd)
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        ld[i] = (nixl_desc_t){.addr = (uint64_t)(uintptr_t)r->buf.p + pc[i].loff, .len = pc[i].len,
                              .dev_id = (uint32_t)r->buf.dev};
        rd[i] = (nixl_desc_t){.addr = r->tgt_addr + pc[i].roff, .len = pc[i].len, .dev_id = (uint32_t)r->c->tgt_dev};
    }
    nixl_dlist_t ll = {.mem_type = buf_mem(&r->buf), .count = n, .descs = ld};
    nixl_dlist_t rl = {.mem_type = NIXL_MEM_VRAM, .count = n, .descs = rd};
    nixl_opt_args_t opt = {.field_mask = notif ? NIXL_OPT_NOTIF : 0, .notif = notif,
                           .notif_len = notif ? strlen(notif) : 0};
    nixl_xfer_t *x;
    CHECK_OK(nixl_xfer_create(r->agent, op, &ll, &rl, r->peer_name, &opt, &x));
    free(ld);
    free(rd);
    return x;
}

static void wait_xfer(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    uint64_t deadline = now_ms() + TIMEOUT_MS;
    while (st == NIXL_IN_PROG && now_ms() < deadline)
        st = nixl_xfer_status(x);
    if (st != NIXL_OK)
        die("transfer: %s", st == NIXL_IN_PROG ? "still in progress after 20 s" : nixl_status_name(st));
}

static void expect_path(nixl_xfer_t *x, const char *want, const char *what)
{
    nixl_xfer_info_t info;
    CHECK_OK(nixl_xfer_info(x, &info));
    if (strncmp(info.path, "cuda_ipc.", 9) != 0)
        die("%s went over path '%s', not cuda_ipc.*", what, info.path);
    if (want && strcmp(info.path, want) != 0)
        die("%s went over path '%s', want '%s'", what, info.path, want);
    printf("  %-34s path %-16s %6llu pieces %9llu bytes %8.1f us\n", what, info.path,
           (unsigned long long)info.descs, (unsigned long long)info.bytes, (double)info.xfer_ns / 1e3);
}

/* WRITE the pieces with a notification, check the target at that moment,
 * then READ them back into a scrubbed local buffer and check ours. */
static void write_read(run_t *r, const piece_t *pc, size_t n, const char *want_path, const char *what)
{
    char notif[32], reply[128], label[64];
    snprintf(notif, sizeof(notif), "w%d", r->nreq++);
    /* Fresh bytes each time, so a piece that did not move cannot pass. */
    pattern(r->local_img, BUF_LEN, 100 + (uint64_t)r->nreq);
    buf_put(&r->buf, r->local_img, BUF_LEN);
    for (size_t i = 0; i < n; i++)
        memcpy(r->tgt_img + pc[i].roff, r->local_img + pc[i].loff, pc[i].len);
    nixl_xfer_t *x = make_xfer(r, NIXL_OP_WRITE, pc, n, notif);
    wait_xfer(x);
    check_ctx_untouched(r, "a WRITE");
    snprintf(label, sizeof(label), "%s WRITE", what);
    expect_path(x, want_path, label);
    peer_cmd(&r->peer, reply, sizeof(reply), "wait %s", notif);
    unsigned long long h;
    if (sscanf(reply, "got %llu", &h) != 1)
        die("%s: the target did not see notification %s: %s", what, notif, reply);
    if (h != hash(r->tgt_img, BUF_LEN))
        die("%s: when notification %s arrived the target's bytes were not all there (hash differs)", what, notif);
    nixl_xfer_release(x);

    /* READ back over a scrubbed buffer. */
    if (r->buf.kind == MEM_HOST)
        memset(r->buf.p, 0xa5, BUF_LEN);
    else
        gpu_set(r->buf.p, 0xa5, BUF_LEN);
    memset(r->local_img, 0xa5, BUF_LEN);
    for (size_t i = 0; i < n; i++)
        memcpy(r->local_img + pc[i].loff, r->tgt_img + pc[i].roff, pc[i].len);
    x = make_xfer(r, NIXL_OP_READ, pc, n, NULL);
    wait_xfer(x);
    check_ctx_untouched(r, "a READ");
    snprintf(label, sizeof(label), "%s READ", what);
    expect_path(x, want_path, label);
    nixl_xfer_release(x);
    uint8_t *got = malloc(BUF_LEN);
    if (!got)
        die("out of memory");
    buf_get(got, &r->buf, BUF_LEN);
    for (size_t i = 0; i < BUF_LEN; i++)
        if (got[i] != r->local_img[i])
            die("%s READ: local byte %zu is 0x%02x, want 0x%02x", what, i, got[i], r->local_img[i]);
    free(got);
}

static void shuffle(uint32_t *v, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (uint32_t)i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(mix64(seed + i) % (i + 1));
        uint32_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static void *run_case(void *arg)
{
    run_t *r = arg;
    const xcase_t *c = r->c;
    char reply[128];
    if (c->post_ctx_dev >= 0) {
        gpu_bind(c->post_ctx_dev);
        printf("  calling thread: fresh, GPU %d's context current; sender memory on GPU %d (%s)\n",
               c->post_ctx_dev, c->init_dev, gpu_bus_id(c->init_dev));
    }
    char name[64];
    snprintf(name, sizeof(name), "gpu_init_%d", (int)getpid());
    r->agent = agent_make(name, 0);
    buf_alloc(&r->buf, c->init_dev, c->init_kind, BUF_LEN);
    nixl_desc_t d;
    nixl_dlist_t l = one_vram(&d, &r->buf, BUF_LEN);
    CHECK_OK(nixl_mem_register(r->agent, &l, NULL));
    check_ctx_untouched(r, "nixl_mem_register");

    peer_cmd(&r->peer, reply, sizeof(reply), "init %d %d %d", c->tgt_dev, c->tgt_kind, 1);
    unsigned long long addr;
    unsigned port;
    if (sscanf(reply, "ok %llu %u", &addr, &port) != 2)
        die("target init failed: %s", reply);
    r->tgt_addr = addr;
    r->port = (uint16_t)port;
    pattern(r->tgt_img, BUF_LEN, 1);
    CHECK_OK(nixl_md_fetch_remote(r->agent, "127.0.0.1", r->port, r->peer_name));
    CHECK_OK(nixl_md_send_local(r->agent, "127.0.0.1", r->port));

    const char *kernel_path = getenv("NIXL_CUDA_IPC_KERNEL") && !strcmp(getenv("NIXL_CUDA_IPC_KERNEL"), "0")
                                  ? "cuda_ipc.ce"
                                  : getenv("TEST_GPU_EXPECT_KERNEL_PATH") ? getenv("TEST_GPU_EXPECT_KERNEL_PATH")
                                                                         : "cuda_ipc.kernel";
    const char *big_path = "cuda_ipc.ce";
    if (c->mode == MODE_STAGED)
        kernel_path = big_path = "cuda_ipc.staged";
    else if (c->init_kind == MEM_HOST)
        kernel_path = "cuda_ipc.ce"; /* host memory: copy engines only */
    else if (c->mode == MODE_ISOLATED)
        kernel_path = big_path = NULL; /* whatever the driver allows; checked below */
    if (c->mode == MODE_STAGED) {
        /* The policy knob refuses the fallback at creation, with NO_PATH. */
        nixl_desc_t ld = {.addr = (uint64_t)(uintptr_t)r->buf.p, .len = 4096, .dev_id = (uint32_t)r->buf.dev};
        nixl_desc_t rd = {.addr = r->tgt_addr, .len = 4096, .dev_id = (uint32_t)c->tgt_dev};
        nixl_dlist_t ll = {.mem_type = buf_mem(&r->buf), .count = 1, .descs = &ld};
        nixl_dlist_t rl = {.mem_type = NIXL_MEM_VRAM, .count = 1, .descs = &rd};
        nixl_xfer_t *x = NULL;
        setenv("NIXL_ALLOW_FALLBACK", "0", 1);
        nixl_status_t st = nixl_xfer_create(r->agent, NIXL_OP_WRITE, &ll, &rl, r->peer_name, NULL, &x);
        unsetenv("NIXL_ALLOW_FALLBACK");
        if (st != NIXL_ERR_NO_PATH)
            die("NIXL_ALLOW_FALLBACK=0: creating a staged request gave %s, want NIXL_ERR_NO_PATH",
                nixl_status_name(st));
        printf("  NIXL_ALLOW_FALLBACK=0 refuses the staged path: %s\n", nixl_status_name(st));
    }
    /* One large piece: copy engines. */
    piece_t big = {.loff = 0, .roff = 8 * MiB, .len = 8 * MiB};
    write_read(r, &big, 1, big_path, "1 x 8 MiB");

    /* KV-shaped: shuffled slots on both sides, so no run merges. */
    piece_t *kv = calloc(KV_PIECES, sizeof(*kv));
    uint32_t *ls = malloc(KV_PIECES * sizeof(*ls)), *rs = malloc(KV_PIECES * sizeof(*rs));
    if (!kv || !ls || !rs)
        die("out of memory");
    shuffle(ls, KV_PIECES, 11);
    shuffle(rs, KV_PIECES, 12);
    for (size_t i = 0; i < KV_PIECES; i++)
        kv[i] = (piece_t){.loff = 8 * MiB + (uint64_t)ls[i] * KV_BYTES, .roff = (uint64_t)rs[i] * KV_BYTES,
                          .len = KV_BYTES};
    write_read(r, kv, KV_PIECES, kernel_path, "4096 x 1152 B shuffled");

    /* Odd addresses and lengths: the kernel's narrow paths. */
    piece_t odd[ODD_PIECES];
    for (size_t i = 0; i < ODD_PIECES; i++)
        odd[i] = (piece_t){.loff = 13 * MiB + 13 + i * 997, .roff = 5 * MiB + 5 + i * 1003 + (i % 7),
                           .len = 1 + (i * 37) % 900};
    write_read(r, odd, ODD_PIECES, kernel_path, "64 odd pieces");

    /* Everything on cuda_ipc paths; fallbacks only on the staged path, and
     * then every staged request counted with its cause. */
    nixl_path_stat_t rows[16];
    size_t nrows = 0;
    uint64_t staged = 0;
    CHECK_OK(nixl_path_stats(r->agent, rows, 16, &nrows));
    for (size_t i = 0; i < nrows && i < 16; i++) {
        int is_staged = strcmp(rows[i].path, "cuda_ipc.staged") == 0;
        if (strncmp(rows[i].path, "cuda_ipc.", 9) != 0 || rows[i].errors ||
            rows[i].fallbacks != (is_staged ? rows[i].requests : 0))
            die("path row %s: %llu requests, %llu fallbacks, %llu errors", rows[i].path,
                (unsigned long long)rows[i].requests, (unsigned long long)rows[i].fallbacks,
                (unsigned long long)rows[i].errors);
        if (is_staged)
            staged = rows[i].requests;
    }
    if (c->mode == MODE_STAGED && staged != 6)
        die("%llu staged requests counted, want 6", (unsigned long long)staged);
    nixl_fallback_stat_t fb[4];
    size_t nfb = 0;
    CHECK_OK(nixl_fallback_stats(r->agent, fb, 4, &nfb));
    if (!staged && nfb)
        die("%zu fallback rows, first: %s (%s) x %llu", nfb, fb[0].path, fb[0].cause,
            (unsigned long long)fb[0].count);
    if (staged) {
        if (nfb != 1 || strcmp(fb[0].path, "cuda_ipc.staged") != 0 || fb[0].count != staged || !fb[0].cause[0])
            die("staged requests: %zu fallback rows (want one for cuda_ipc.staged counting %llu, with a cause)", nfb,
                (unsigned long long)staged);
        printf("  fallback counted: %s x %llu, cause: %s\n", fb[0].path, (unsigned long long)fb[0].count,
               fb[0].cause);
    }

    CHECK_OK(nixl_mem_deregister(r->agent, &l, NULL));
    check_ctx_untouched(r, "nixl_mem_deregister");
    nixl_agent_destroy(r->agent);
    check_ctx_untouched(r, "nixl_agent_destroy");
    buf_free(&r->buf);
    free(kv);
    free(ls);
    free(rs);
    return NULL;
}

static const xcase_t cases[] = {
    {"seed", 1, 0, MEM_LEGACY, MEM_LEGACY, 0, 2, MODE_DIRECT},
    {"same_gpu", 0, 0, MEM_LEGACY, MEM_LEGACY, -1, 1, MODE_DIRECT},
    {"cross_gpu", 0, 1, MEM_LEGACY, MEM_LEGACY, -1, 2, MODE_DIRECT},
    {"vmm", 0, 1, MEM_VMM, MEM_VMM, -1, 1, MODE_DIRECT},
    {"staged", 0, 1, MEM_LEGACY, MEM_VMM, -1, 1, MODE_STAGED},
    {"isolated", 0, 0, MEM_LEGACY, MEM_LEGACY, -1, 1, MODE_ISOLATED},
    {"host_to_gpu", 0, 1, MEM_HOST, MEM_LEGACY, -1, 1, MODE_DIRECT},
    {"host_staged", 0, 1, MEM_HOST, MEM_VMM, -1, 1, MODE_STAGED},
};

/* GPUs the driver has, whatever CUDA_VISIBLE_DEVICES says. */
static int physical_gpus(void)
{
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    int n = 0;
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--target-role") == 0)
        return target_main(atoi(argv[2]), atoi(argv[3]));
    if (argc != 2) {
        fprintf(stderr, "usage: %s seed|same_gpu|cross_gpu|vmm|staged|isolated|host_to_gpu|host_staged\n", argv[0]);
        return 2;
    }
    const xcase_t *c = NULL;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (strcmp(cases[i].name, argv[1]) == 0)
            c = &cases[i];
    if (!c) {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (c->mode == MODE_STAGED)
        setenv("NIXL_CUDA_IPC_MAP", "0", 1);
    if (c->mode == MODE_ISOLATED) {
        int phys = physical_gpus();
        if (phys < 2) {
            printf("SKIP %s: needs 2 GPUs in /proc/driver/nvidia/gpus, %d found\n", c->name, phys);
            return 77;
        }
        setenv("CUDA_VISIBLE_DEVICES", "0", 1);
        child_visible = "1";
    }
    char why[256];
    int n = gpu_init(why, sizeof(why));
    if (n == 0) {
        printf("SKIP %s: %s\n", c->name, why);
        return 77;
    }
    if (n < c->need_gpus) {
        printf("SKIP %s: needs %d GPUs, %d found\n", c->name, c->need_gpus, n);
        return 77;
    }
    xcase_t cc = *c;
    if (cc.tgt_dev >= n)
        cc.tgt_dev = n - 1; /* vmm on one GPU: same device */
    printf("%s: initiator GPU %d (%s, %s) -> target GPU %d (%s, %s)\n", cc.name, cc.init_dev,
           gpu_bus_id(cc.init_dev),
           cc.init_kind == MEM_VMM ? "VMM" : cc.init_kind == MEM_HOST ? "host memory, pageable" : "cudaMalloc",
           cc.tgt_dev,
           gpu_bus_id(cc.tgt_dev), cc.tgt_kind == MEM_VMM ? "VMM, 3 mappings" : "cudaMalloc");
    run_t r;
    memset(&r, 0, sizeof(r));
    r.c = &cc;
    r.local_img = malloc(BUF_LEN);
    r.tgt_img = malloc(BUF_LEN);
    if (!r.local_img || !r.tgt_img)
        die("out of memory");
    peer_spawn(&r.peer);
    /* Always a fresh thread: for seed it sets GPU 0's context first. */
    pthread_t th;
    if (pthread_create(&th, NULL, run_case, &r) != 0)
        die("pthread_create");
    pthread_join(th, NULL);
    char reply[64];
    peer_cmd(&r.peer, reply, sizeof(reply), "hash");
    unsigned long long h;
    if (sscanf(reply, "hash %llu", &h) != 1 || h != hash(r.tgt_img, BUF_LEN))
        die("final target contents differ");
    peer_cmd(&r.peer, NULL, 0, "quit");
    int ws = 0;
    waitpid(r.peer.pid, &ws, 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        die("target process ended badly (status 0x%x)", (unsigned)ws);
    free(r.local_img);
    free(r.tgt_img);
    printf("PASS %s\n", cc.name);
    return 0;
}
