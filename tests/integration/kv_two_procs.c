/*
 * kv_two_procs.c - two separate processes move KV-shaped data through nixl.
 *
 *   kv_two_procs --md listener|file [--layers L] [--tokens N]
 *
 * Run without --role it is the launcher: it makes a scratch directory and
 * starts two copies of this program, "decode" (the target) and "prefill"
 * (the initiator), as sibling processes that share nothing but that
 * directory and nixl.  Metadata goes through the decode agent's listener
 * (--md listener: the port is published in a file) or through files
 * (--md file: nixl_md_get_local -> file -> nixl_md_load_remote, both ways).
 *
 * Decode tells prefill where its layer buffers are with a notification.
 * Prefill WRITEs every token slot of every layer with a notification; decode
 * verifies every byte of its pool (request slots carry the data, the others
 * are untouched) when the notification arrives and answers with a verdict
 * notification; prefill then READs the slots back into a scratch area and
 * verifies them.  Exit status 0 only when both sides saw every byte right.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nixl.h"

#define SLOT_BYTES 1152u /* 576 bf16 values: one token of one layer */
#define PREFILL_NAME "kv_prefill"
#define DECODE_NAME "kv_decode"
#define WAIT_MS 60000u

typedef struct opts {
    const char *role; /* NULL: launcher */
    const char *md;   /* "listener" or "file" */
    const char *dir;
    uint32_t layers, tokens;
} opts_t;

static const char *who = "launcher";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kv_two_procs[%s]: ", who);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    _exit(1);
}

static void check(nixl_status_t s, const char *what)
{
    if (s != NIXL_OK)
        die("%s: %s (%s)", what, nixl_status_name(s), nixl_strerror(s));
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void nap(void)
{
    struct timespec ts = {0, 200 * 1000};
    nanosleep(&ts, NULL);
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The bytes of token t of layer l (what prefill computed). */
static void token_fill(uint8_t *dst, uint32_t l, uint32_t t)
{
    uint64_t key = ((uint64_t)l << 32 | t) * 0x100000001b3ull;
    for (uint32_t i = 0; i < SLOT_BYTES; i += 8) {
        uint64_t w = mix64(key + i);
        memcpy(dst + i, &w, 8);
    }
}

/* What an unused decode slot holds: distinct from every token. */
static void idle_fill(uint8_t *dst, uint32_t l, uint32_t slot)
{
    uint64_t key = ~(((uint64_t)l << 32 | slot) * 0x9e3779b97f4a7c15ull);
    for (uint32_t i = 0; i < SLOT_BYTES; i += 8) {
        uint64_t w = mix64(key ^ i);
        memcpy(dst + i, &w, 8);
    }
}

/* The request's slots in a pool of 2*tokens: runs of 1..64 slots at
 * shuffled places, so slots are neither all contiguous nor in order. */
static uint32_t *slots_make(uint32_t tokens, uint64_t seed)
{
    uint32_t pool = tokens * 2;
    uint32_t *start = malloc(pool * sizeof(*start)), *len = malloc(pool * sizeof(*len));
    uint32_t *slots = malloc(tokens * sizeof(*slots));
    if (!start || !len || !slots)
        die("out of memory");
    uint32_t nruns = 0;
    for (uint32_t at = 0; at < pool; nruns++) {
        uint32_t l = 1 + (uint32_t)(mix64(seed + at) % 64);
        start[nruns] = at;
        len[nruns] = l < pool - at ? l : pool - at;
        at += len[nruns];
    }
    for (uint32_t i = nruns; i > 1; i--) {
        uint32_t j = (uint32_t)(mix64(seed ^ (0xabcdull * i)) % i);
        uint32_t s = start[i - 1], l = len[i - 1];
        start[i - 1] = start[j];
        len[i - 1] = len[j];
        start[j] = s;
        len[j] = l;
    }
    uint32_t k = 0;
    for (uint32_t r = 0; r < nruns && k < tokens; r++)
        for (uint32_t j = 0; j < len[r] && k < tokens; j++)
            slots[k++] = start[r] + j;
    free(start);
    free(len);
    return slots;
}

/* ---- files in the shared directory ---- */

static void file_put(const opts_t *o, const char *name, const void *data, size_t len)
{
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", o->dir, name);
    snprintf(path, sizeof(path), "%s/%s", o->dir, name);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
        die("writing %s: %s", tmp, strerror(errno));
    if (rename(tmp, path))
        die("rename %s: %s", path, strerror(errno));
}

/* Wait for a file to appear; returns its malloc'd contents. */
static void *file_wait(const opts_t *o, const char *name, size_t *len_out)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", o->dir, name);
    uint64_t deadline = now_ms() + WAIT_MS;
    FILE *f;
    while (!(f = fopen(path, "rb"))) {
        if (now_ms() > deadline)
            die("%s did not appear", path);
        nap();
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p || n < 0 || fread(p, 1, (size_t)n, f) != (size_t)n)
        die("reading %s", path);
    fclose(f);
    *len_out = (size_t)n;
    return p;
}

/* ---- notifications used as the control channel ---- */

typedef struct inbox {
    char prefix[16];
    void *msg;
    size_t len;
} inbox_t;

static void inbox_cb(const char *sender, const void *msg, size_t len, void *arg)
{
    inbox_t *in = arg;
    size_t pl = strlen(in->prefix);
    if (in->msg || len < pl || memcmp(msg, in->prefix, pl) != 0) {
        fprintf(stderr, "kv_two_procs[%s]: unexpected notification from %s (%zu bytes)\n", who, sender, len);
        return;
    }
    in->msg = malloc(len + 1);
    if (!in->msg)
        die("out of memory");
    memcpy(in->msg, msg, len);
    ((char *)in->msg)[len] = 0;
    in->len = len;
}

static void *notif_wait(nixl_agent_t *a, const char *prefix, size_t *len_out)
{
    inbox_t in;
    memset(&in, 0, sizeof(in));
    snprintf(in.prefix, sizeof(in.prefix), "%s", prefix);
    uint64_t deadline = now_ms() + WAIT_MS;
    while (!in.msg) {
        check(nixl_notifs_get(a, inbox_cb, &in, NULL), "nixl_notifs_get");
        if (!in.msg && now_ms() > deadline)
            die("no '%s' notification within %u ms", prefix, WAIT_MS);
        if (!in.msg)
            nap();
    }
    *len_out = in.len;
    return in.msg;
}

static nixl_agent_t *agent_make(const char *name, int listen)
{
    nixl_agent_config_t cfg = {
        .field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_LISTEN,
        .name = name,
        .listen = listen,
    };
    nixl_agent_t *a = NULL;
    check(nixl_agent_create(&cfg, &a), "nixl_agent_create");
    nixl_backend_t *b = NULL;
    check(nixl_backend_create(a, "shm", NULL, 0, &b), "nixl_backend_create(shm)");
    return a;
}

static nixl_status_t register_layers(nixl_agent_t *a, uint8_t **bufs, uint32_t n, size_t len, int dereg)
{
    nixl_desc_t *d = calloc(n, sizeof(*d));
    if (!d)
        die("out of memory");
    for (uint32_t i = 0; i < n; i++) {
        d[i].addr = (uint64_t)(uintptr_t)bufs[i];
        d[i].len = len;
    }
    nixl_dlist_t dl = {.mem_type = NIXL_MEM_DRAM, .count = n, .descs = d};
    nixl_status_t s = dereg ? nixl_mem_deregister(a, &dl, NULL) : nixl_mem_register(a, &dl, NULL);
    free(d);
    return s;
}

/* ------------------------------------------------------------------------
 * decode: the target
 * ------------------------------------------------------------------------ */

static int run_decode(const opts_t *o)
{
    who = "decode";
    int listener = strcmp(o->md, "listener") == 0;
    nixl_agent_t *a = agent_make(DECODE_NAME, listener);
    size_t pool = (size_t)o->tokens * 2, layer_len = pool * SLOT_BYTES;
    uint8_t **layer = calloc(o->layers, sizeof(*layer));
    if (!layer)
        die("out of memory");
    for (uint32_t l = 0; l < o->layers; l++) {
        void *p;
        check(nixl_mem_alloc(layer_len, &p), "nixl_mem_alloc");
        layer[l] = p;
        for (size_t s = 0; s < pool; s++)
            idle_fill(layer[l] + s * SLOT_BYTES, l, (uint32_t)s);
    }
    check(register_layers(a, layer, o->layers, layer_len, 0), "registering the KV pool");

    if (listener) {
        char port[16];
        int n = snprintf(port, sizeof(port), "%u", nixl_agent_listen_port(a));
        file_put(o, "decode.port", port, (size_t)n);
        uint64_t deadline = now_ms() + WAIT_MS;
        while (nixl_md_check_remote(a, PREFILL_NAME) != NIXL_OK) {
            if (now_ms() > deadline)
                die("prefill never sent its metadata to the listener");
            nap();
        }
    } else {
        void *blob;
        size_t len;
        check(nixl_md_get_local(a, &blob, &len), "nixl_md_get_local");
        file_put(o, "decode.md", blob, len);
        nixl_free(blob);
        void *peer = file_wait(o, "prefill.md", &len);
        char name[NIXL_NAME_MAX + 1];
        check(nixl_md_load_remote(a, peer, len, name), "loading prefill.md");
        free(peer);
        if (strcmp(name, PREFILL_NAME) != 0)
            die("prefill.md names '%s'", name);
    }

    /* Where the layers are: "layout:" + one u64 per layer. */
    size_t ml = 7 + o->layers * 8u;
    uint8_t *m = malloc(ml);
    if (!m)
        die("out of memory");
    memcpy(m, "layout:", 7);
    for (uint32_t l = 0; l < o->layers; l++) {
        uint64_t addr = (uint64_t)(uintptr_t)layer[l];
        memcpy(m + 7 + l * 8u, &addr, 8);
    }
    check(nixl_notif_send(a, PREFILL_NAME, m, ml, NULL), "sending the layout");
    free(m);

    size_t len;
    free(notif_wait(a, "kv:", &len));
    /* The notification is here: every byte must be too. */
    uint32_t *dslot = slots_make(o->tokens, 2);
    uint8_t *owner = calloc(pool, 1);
    if (!owner)
        die("out of memory");
    for (uint32_t t = 0; t < o->tokens; t++)
        owner[dslot[t]] = 1;
    uint8_t want[SLOT_BYTES];
    char verdict[128] = "verified:ok";
    uint64_t checked = 0;
    for (uint32_t l = 0; l < o->layers && strcmp(verdict, "verified:ok") == 0; l++) {
        for (uint32_t t = 0; t < o->tokens; t++) {
            token_fill(want, l, t);
            checked += SLOT_BYTES;
            if (memcmp(layer[l] + (size_t)dslot[t] * SLOT_BYTES, want, SLOT_BYTES) != 0) {
                snprintf(verdict, sizeof(verdict), "verified:bad layer %u token %u", l, t);
                break;
            }
        }
        for (size_t s = 0; s < pool; s++) {
            if (owner[s])
                continue;
            idle_fill(want, l, (uint32_t)s);
            if (memcmp(layer[l] + s * SLOT_BYTES, want, SLOT_BYTES) != 0) {
                snprintf(verdict, sizeof(verdict), "verified:bad layer %u idle slot %zu was written", l, s);
                break;
            }
        }
    }
    printf("decode: %s (%llu bytes of %u layers x %u tokens checked on arrival)\n", verdict,
           (unsigned long long)checked, o->layers, o->tokens);
    check(nixl_notif_send(a, PREFILL_NAME, verdict, strlen(verdict), NULL), "sending the verdict");
    free(notif_wait(a, "done", &len));

    free(owner);
    free(dslot);
    check(register_layers(a, layer, o->layers, layer_len, 1), "deregistering");
    nixl_agent_destroy(a);
    for (uint32_t l = 0; l < o->layers; l++)
        nixl_mem_free(layer[l], layer_len);
    free(layer);
    return strcmp(verdict, "verified:ok") == 0 ? 0 : 1;
}

/* ------------------------------------------------------------------------
 * prefill: the initiator
 * ------------------------------------------------------------------------ */

static void xfer_finish(nixl_xfer_t *x, const char *what)
{
    nixl_status_t s = nixl_xfer_post(x);
    uint64_t deadline = now_ms() + WAIT_MS;
    while (s == NIXL_IN_PROG && now_ms() < deadline)
        s = nixl_xfer_status(x);
    check(s, what);
}

static int run_prefill(const opts_t *o)
{
    who = "prefill";
    int listener = strcmp(o->md, "listener") == 0;
    nixl_agent_t *a = agent_make(PREFILL_NAME, 0);
    size_t pool = (size_t)o->tokens * 2, layer_len = pool * SLOT_BYTES;
    uint32_t *pslot = slots_make(o->tokens, 1), *dslot = slots_make(o->tokens, 2);
    uint8_t **layer = calloc(o->layers, sizeof(*layer));
    size_t scratch_len = (size_t)o->layers * o->tokens * SLOT_BYTES;
    uint8_t *scratch = calloc(1, scratch_len);
    if (!layer || !scratch)
        die("out of memory");
    for (uint32_t l = 0; l < o->layers; l++) {
        /* Plain heap memory on this side: the backend must cope with both. */
        layer[l] = calloc(1, layer_len);
        if (!layer[l])
            die("out of memory");
        for (uint32_t t = 0; t < o->tokens; t++)
            token_fill(layer[l] + (size_t)pslot[t] * SLOT_BYTES, l, t);
    }
    check(register_layers(a, layer, o->layers, layer_len, 0), "registering the KV pool");
    check(register_layers(a, &scratch, 1, scratch_len, 0), "registering the scratch area");

    char name[NIXL_NAME_MAX + 1];
    if (listener) {
        size_t len;
        char *port = file_wait(o, "decode.port", &len);
        char buf[16];
        snprintf(buf, sizeof(buf), "%.*s", (int)(len < 15 ? len : 15), port);
        free(port);
        uint16_t p = (uint16_t)atoi(buf);
        check(nixl_md_fetch_remote(a, "127.0.0.1", p, name), "nixl_md_fetch_remote");
        check(nixl_md_send_local(a, "127.0.0.1", p), "nixl_md_send_local");
    } else {
        size_t len;
        void *peer = file_wait(o, "decode.md", &len);
        check(nixl_md_load_remote(a, peer, len, name), "loading decode.md");
        free(peer);
        void *blob;
        check(nixl_md_get_local(a, &blob, &len), "nixl_md_get_local");
        file_put(o, "prefill.md", blob, len);
        nixl_free(blob);
    }
    if (strcmp(name, DECODE_NAME) != 0)
        die("the peer's metadata names '%s'", name);

    size_t ml;
    uint8_t *m = notif_wait(a, "layout:", &ml);
    if (ml != 7 + o->layers * 8u)
        die("layout notification of %zu bytes", ml);
    uint64_t *raddr = calloc(o->layers, sizeof(*raddr));
    if (!raddr)
        die("out of memory");
    memcpy(raddr, m + 7, o->layers * 8u);
    free(m);

    size_t n = (size_t)o->layers * o->tokens;
    nixl_desc_t *ld = calloc(n, sizeof(*ld)), *rd = calloc(n, sizeof(*rd)), *sd = calloc(n, sizeof(*sd));
    if (!ld || !rd || !sd)
        die("out of memory");
    for (uint32_t l = 0; l < o->layers; l++) {
        for (uint32_t t = 0; t < o->tokens; t++) {
            size_t i = (size_t)l * o->tokens + t;
            ld[i].addr = (uint64_t)(uintptr_t)layer[l] + (uint64_t)pslot[t] * SLOT_BYTES;
            rd[i].addr = raddr[l] + (uint64_t)dslot[t] * SLOT_BYTES;
            sd[i].addr = (uint64_t)(uintptr_t)scratch + i * SLOT_BYTES;
            ld[i].len = rd[i].len = sd[i].len = SLOT_BYTES;
        }
    }
    nixl_dlist_t ll = {.mem_type = NIXL_MEM_DRAM, .count = n, .descs = ld};
    nixl_dlist_t rl = {.mem_type = NIXL_MEM_DRAM, .count = n, .descs = rd};
    nixl_dlist_t sl = {.mem_type = NIXL_MEM_DRAM, .count = n, .descs = sd};

    char note[32];
    snprintf(note, sizeof(note), "kv:%u", o->tokens);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = note, .notif_len = strlen(note)};
    nixl_xfer_t *w = NULL;
    check(nixl_xfer_create(a, NIXL_OP_WRITE, &ll, &rl, DECODE_NAME, &opt, &w), "creating the WRITE");
    xfer_finish(w, "the WRITE");
    nixl_xfer_info_t info;
    check(nixl_xfer_info(w, &info), "nixl_xfer_info");
    printf("prefill: WRITE %llu bytes, %llu descriptors (%llu after merging) via %s/%s\n",
           (unsigned long long)info.bytes, (unsigned long long)info.descs_in, (unsigned long long)info.descs,
           info.backend, info.path);
    if (info.bytes != (uint64_t)n * SLOT_BYTES || info.descs_in != n)
        die("xfer_info does not match the request");
    nixl_xfer_release(w);

    size_t vl;
    char *verdict = notif_wait(a, "verified:", &vl);
    printf("prefill: decode says %s\n", verdict);
    int ok = strcmp(verdict, "verified:ok") == 0;
    free(verdict);

    nixl_xfer_t *r = NULL;
    check(nixl_xfer_create(a, NIXL_OP_READ, &sl, &rl, DECODE_NAME, NULL, &r), "creating the READ");
    xfer_finish(r, "the READ");
    nixl_xfer_release(r);
    uint8_t want[SLOT_BYTES];
    for (size_t i = 0; i < n && ok; i++) {
        token_fill(want, (uint32_t)(i / o->tokens), (uint32_t)(i % o->tokens));
        if (memcmp(scratch + i * SLOT_BYTES, want, SLOT_BYTES) != 0) {
            fprintf(stderr, "kv_two_procs[prefill]: READ back: layer %zu token %zu differs\n", i / o->tokens,
                    i % o->tokens);
            ok = 0;
        }
    }
    if (ok)
        printf("prefill: READ back %zu bytes into the scratch area: every byte matches\n", scratch_len);
    check(nixl_notif_send(a, DECODE_NAME, "done", 4, NULL), "sending done");

    free(ld);
    free(rd);
    free(sd);
    free(raddr);
    check(register_layers(a, &scratch, 1, scratch_len, 1), "deregistering");
    check(register_layers(a, layer, o->layers, layer_len, 1), "deregistering");
    nixl_agent_destroy(a);
    for (uint32_t l = 0; l < o->layers; l++)
        free(layer[l]);
    free(layer);
    free(scratch);
    free(pslot);
    free(dslot);
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------------------
 * launcher
 * ------------------------------------------------------------------------ */

static pid_t spawn(const char *exe, const char *role, const opts_t *o)
{
    char layers[16], tokens[16];
    snprintf(layers, sizeof(layers), "%u", o->layers);
    snprintf(tokens, sizeof(tokens), "%u", o->tokens);
    char *argv[] = {(char *)exe,   (char *)"--role",   (char *)role,   (char *)"--md", (char *)o->md,
                    (char *)"--dir", (char *)o->dir,    (char *)"--layers", layers, (char *)"--tokens",
                    tokens,          NULL};
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(exe, argv);
        _exit(127);
    }
    return pid;
}

static void rm_dir(const char *dir)
{
    static const char *names[] = {"decode.port", "decode.md", "prefill.md"};
    char path[4096];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static int run_launcher(opts_t *o)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        die("readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = 0;
    char dir[] = "/tmp/nixl-kv-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp: %s", strerror(errno));
    o->dir = dir;
    printf("launcher: %u layers x %u tokens x %u B, metadata via %s, scratch dir %s\n", o->layers, o->tokens,
           SLOT_BYTES, o->md, dir);
    pid_t pids[2] = {spawn(exe, "decode", o), spawn(exe, "prefill", o)};
    const char *names[2] = {"decode", "prefill"};
    int status[2] = {-1, -1}, left = 2, failed = 0;
    uint64_t deadline = now_ms() + 3 * WAIT_MS;
    while (left > 0) {
        int ws;
        pid_t r = waitpid(-1, &ws, WNOHANG);
        if (r > 0) {
            for (int i = 0; i < 2; i++) {
                if (r != pids[i])
                    continue;
                status[i] = ws;
                left--;
                if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
                    failed = 1;
                    if (WIFSIGNALED(ws))
                        fprintf(stderr, "launcher: %s killed by signal %d\n", names[i], WTERMSIG(ws));
                    else
                        fprintf(stderr, "launcher: %s exited with %d\n", names[i], WEXITSTATUS(ws));
                    /* One side failed: the other would wait for it in vain. */
                    for (int j = 0; j < 2; j++)
                        if (status[j] == -1)
                            kill(pids[j], SIGKILL);
                }
            }
            continue;
        }
        if (now_ms() > deadline) {
            fprintf(stderr, "launcher: timed out; killing what is left\n");
            for (int j = 0; j < 2; j++)
                if (status[j] == -1)
                    kill(pids[j], SIGKILL);
            failed = 1;
            deadline = UINT64_MAX;
        }
        nap();
    }
    rm_dir(dir);
    printf("launcher: %s\n", failed ? "FAILED" : "both processes verified every byte");
    return failed;
}

int main(int argc, char **argv)
{
    opts_t o = {.md = "listener", .layers = 27, .tokens = 1024};
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: %s --md listener|file [--layers L] [--tokens N]\n", argv[0]);
            return 2;
        }
        if (strcmp(argv[i], "--role") == 0)
            o.role = v;
        else if (strcmp(argv[i], "--md") == 0)
            o.md = v;
        else if (strcmp(argv[i], "--dir") == 0)
            o.dir = v;
        else if (strcmp(argv[i], "--layers") == 0)
            o.layers = (uint32_t)atoi(v);
        else if (strcmp(argv[i], "--tokens") == 0)
            o.tokens = (uint32_t)atoi(v);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if ((strcmp(o.md, "listener") != 0 && strcmp(o.md, "file") != 0) || o.layers == 0 || o.tokens == 0) {
        fprintf(stderr, "bad options\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!o.role)
        return run_launcher(&o);
    if (!o.dir)
        die("--dir is required with --role");
    if (strcmp(o.role, "decode") == 0)
        return run_decode(&o);
    if (strcmp(o.role, "prefill") == 0)
        return run_prefill(&o);
    die("unknown role %s", o.role);
}
