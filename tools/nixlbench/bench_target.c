/*
 * bench_target.c - the passive side of nixlbench.
 *
 * The target owns one registered buffer that the initiator reads or writes.
 * It listens for metadata, then serves text notifications until "quit":
 *   alloc <bytes> <nixl|malloc> [dram|vram <gpu>]  -> buf <addr> <bytes>
 *   chk <seed> <block> <batch> <layout>   -> ok <seed> | bad <seed> <offset>
 *       (attached to a write: the bytes have landed when it arrives)
 *   fill <seed> <block> <batch> <layout>  -> filled <seed>
 *   kvalloc, kvchk                        (the KV replay: bench_kv.c)
 *   quit
 * VRAM is filled and checked through a host staging copy.
 * Malformed requests are answered "err <why>" rather than ending the target.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

typedef struct target {
    nixl_agent_t *agent;
    uint8_t *buf;
    uint8_t *host; /* buf (DRAM) or its staging copy (VRAM) */
    uint64_t len;
    bench_alloc_t alloc;
    bench_mem_t mem;
    int dev;
} target_t;

static void reply(target_t *t, const char *peer, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void reply(target_t *t, const char *peer, const char *fmt, ...)
{
    char text[BENCH_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    bench_notif_send(t->agent, peer, text);
}

static nixl_dlist_t one_range(const target_t *t, nixl_desc_t *d)
{
    memset(d, 0, sizeof(*d));
    d->addr = (uint64_t)(uintptr_t)t->buf;
    d->len = t->len;
    d->dev_id = t->mem == BENCH_MEM_VRAM ? (uint32_t)t->dev : 0;
    return (nixl_dlist_t){.mem_type = t->mem == BENCH_MEM_VRAM ? NIXL_MEM_VRAM : NIXL_MEM_DRAM, .count = 1,
                          .descs = d};
}

static void buffer_drop(target_t *t)
{
    if (!t->buf)
        return;
    nixl_desc_t d;
    nixl_dlist_t l = one_range(t, &d);
    bench_check(nixl_mem_deregister(t->agent, &l, NULL), "nixl_mem_deregister(target buffer)");
    if (t->mem == BENCH_MEM_VRAM) {
        bench_vram_free(t->dev, t->buf);
        free(t->host);
    } else {
        bench_free(t->alloc, t->buf, t->len);
    }
    t->buf = t->host = NULL;
    t->len = 0;
}

static void on_alloc(target_t *t, const bench_msg_t *m)
{
    unsigned long long bytes;
    char kind[16], mem[16] = "dram";
    int dev = 0;
    int n = sscanf(m->text, "alloc %llu %15s %15s %d", &bytes, kind, mem, &dev);
    if ((n != 2 && n != 4) || bytes == 0 || dev < 0 || (strcmp(mem, "dram") && strcmp(mem, "vram"))) {
        reply(t, m->sender, "err malformed alloc request");
        return;
    }
    bench_alloc_t a;
    if (!strcmp(kind, "nixl"))
        a = BENCH_ALLOC_NIXL;
    else if (!strcmp(kind, "malloc"))
        a = BENCH_ALLOC_MALLOC;
    else {
        reply(t, m->sender, "err unknown allocator %s", kind);
        return;
    }
    buffer_drop(t);
    t->alloc = a;
    t->mem = strcmp(mem, "vram") ? BENCH_MEM_DRAM : BENCH_MEM_VRAM;
    t->dev = dev;
    t->len = bytes;
    if (t->mem == BENCH_MEM_VRAM) {
        t->buf = bench_vram_alloc(dev, bytes);
        t->host = malloc(bytes);
        if (!t->host)
            bench_die("out of memory for a %llu-byte staging buffer", bytes);
    } else {
        t->buf = t->host = bench_alloc(a, bytes);
    }
    nixl_desc_t d;
    nixl_dlist_t l = one_range(t, &d);
    bench_check(nixl_mem_register(t->agent, &l, NULL), "nixl_mem_register(target buffer)");
    reply(t, m->sender, "buf %" PRIu64 " %" PRIu64, (uint64_t)(uintptr_t)t->buf, t->len);
}

/* Parses "<verb> seed block batch layout"; 0 when it fits the buffer. */
static int parse_row(target_t *t, const bench_msg_t *m, const char *verb, uint64_t *seed, uint64_t *block,
                     uint64_t *batch, bench_layout_t *layout)
{
    char fmt[64], lay[16];
    unsigned long long s, bl, ba;
    snprintf(fmt, sizeof(fmt), "%s %%llu %%llu %%llu %%15s", verb);
    if (sscanf(m->text, fmt, &s, &bl, &ba, lay) != 4 || bl == 0 || ba == 0 || ba > UINT32_MAX) {
        reply(t, m->sender, "err malformed %s request", verb);
        return -1;
    }
    if (!t->buf || bl > t->len / ba) {
        reply(t, m->sender, "err %s of %llu x %llu bytes exceeds the target buffer (%" PRIu64 ")", verb, bl, ba,
              t->len);
        return -1;
    }
    if (!strcmp(lay, "contig"))
        *layout = BENCH_LAYOUT_CONTIG;
    else if (!strcmp(lay, "shuffled"))
        *layout = BENCH_LAYOUT_SHUFFLED;
    else {
        reply(t, m->sender, "err unknown layout %s", lay);
        return -1;
    }
    *seed = s;
    *block = bl;
    *batch = ba;
    return 0;
}

static void on_chk(target_t *t, const bench_msg_t *m)
{
    uint64_t seed, block, batch;
    bench_layout_t layout;
    if (parse_row(t, m, "chk", &seed, &block, &batch, &layout))
        return;
    if (t->mem == BENCH_MEM_VRAM)
        bench_vram_get(t->dev, t->host, t->buf, t->len);
    int64_t bad = bench_target_check(t->host, seed, block, batch, layout);
    if (bad < 0)
        reply(t, m->sender, "ok %" PRIu64, seed);
    else
        reply(t, m->sender, "bad %" PRIu64 " %" PRId64, seed, bad);
}

static void on_fill(target_t *t, const bench_msg_t *m)
{
    uint64_t seed, block, batch;
    bench_layout_t layout;
    if (parse_row(t, m, "fill", &seed, &block, &batch, &layout))
        return;
    bench_target_fill(t->host, seed, block, batch, layout);
    if (t->mem == BENCH_MEM_VRAM)
        bench_vram_put(t->dev, t->buf, t->host, t->len);
    reply(t, m->sender, "filled %" PRIu64, seed);
}

static void report_port(const bench_opts_t *o, target_t *t)
{
    uint16_t port = nixl_agent_listen_port(t->agent);
    if (o->report_fd >= 0) {
        char line[64];
        int n = snprintf(line, sizeof(line), "port %u\n", (unsigned)port);
        if (write(o->report_fd, line, (size_t)n) != n)
            bench_die("cannot report the listen port to the parent");
        close(o->report_fd);
    } else {
        printf("nixlbench target: agent %s, backend %s, listening on port %u\n", nixl_agent_name(t->agent),
               o->backend, (unsigned)port);
        fflush(stdout);
    }
}

int bench_run_target(const bench_opts_t *o)
{
    target_t t = {0};
    char name[NIXL_NAME_MAX + 1];
    snprintf(name, sizeof(name), "nixlbench-target-%ld", (long)getpid());
    nixl_agent_config_t cfg = {
        .field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_LISTEN | NIXL_AGENT_CONFIG_LISTEN_PORT,
        .name = name,
        .listen = 1,
        .listen_port = o->listen_port,
    };
    bench_check(nixl_agent_create(&cfg, &t.agent), "nixl_agent_create(target)");
    nixl_backend_t *be;
    bench_check(nixl_backend_create(t.agent, o->backend, o->params, o->num_params, &be), "nixl_backend_create(target)");
    report_port(o, &t);

    struct timespec nap = {0, (long)o->target_poll_us * 1000};
    int quit = 0;
    while (!quit) {
        bench_msg_t m;
        int busy = 0;
        bench_inbox_poll(t.agent);
        while (!quit && bench_inbox_pop(&m) == 0) {
            busy = 1;
            if (!strncmp(m.text, "alloc ", 6))
                on_alloc(&t, &m);
            else if (!strncmp(m.text, "chk ", 4))
                on_chk(&t, &m);
            else if (!strncmp(m.text, "fill ", 5))
                on_fill(&t, &m);
            else if (!strcmp(m.text, "quit"))
                quit = 1;
            else if (bench_kv_target_handle(t.agent, &m))
                ;
            else
                reply(&t, m.sender, "err unknown request \"%.64s\"", m.text);
        }
        /* Sleeping when idle leaves the core to the initiator: with shm the
         * copy runs in the initiator and needs nothing from us. */
        if (!busy && o->target_poll_us)
            nanosleep(&nap, NULL);
    }
    buffer_drop(&t);
    bench_kv_target_drop(t.agent);
    nixl_agent_destroy(t.agent);
    return 0;
}
