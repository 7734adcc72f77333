/*
 * minimal.c - the smallest complete nixl program.
 *
 * Two agents in one process stand for a prefill and a decode worker (one
 * agent per process is the normal case): both get the shm backend and
 * register 1 MiB of shared memory, they swap metadata blobs, then prefill
 * WRITEs its buffer into decode's with a notification and decode waits for
 * it.  When decode sees the notification, the bytes are already there.
 * This is the README's program with every status checked.
 */
#include <stdio.h>
#include <string.h>

#include "nixl.h"

#define TRY(call)                                                                                \
    do {                                                                                         \
        nixl_status_t s_ = (call);                                                               \
        if (s_ != NIXL_OK) {                                                                     \
            fprintf(stderr, "%s failed: %s\n", #call, nixl_strerror(s_));                        \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

static void on_notif(const char *sender, const void *msg, size_t len, void *arg)
{
    printf("decode: notification \"%.*s\" from %s\n", (int)len, (const char *)msg, sender);
    *(int *)arg = 1;
}

/* Make an agent with the shm backend and register one buffer in it. */
static nixl_status_t setup(const char *name, void *buf, size_t len, nixl_agent_t **agent_out)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *agent;
    nixl_backend_t *shm;
    nixl_status_t s = nixl_agent_create(&cfg, &agent);
    if (s != NIXL_OK)
        return s;
    nixl_desc_t d = {.addr = (uintptr_t)buf, .len = len};
    nixl_dlist_t dl = {.mem_type = NIXL_MEM_DRAM, .count = 1, .descs = &d};
    if ((s = nixl_backend_create(agent, "shm", NULL, 0, &shm)) != NIXL_OK ||
        (s = nixl_mem_register(agent, &dl, NULL)) != NIXL_OK) {
        nixl_agent_destroy(agent);
        return s;
    }
    *agent_out = agent;
    return NIXL_OK;
}

/* Load a's metadata into b. */
static nixl_status_t introduce(nixl_agent_t *a, nixl_agent_t *b)
{
    void *blob;
    size_t len;
    nixl_status_t s = nixl_md_get_local(a, &blob, &len);
    if (s != NIXL_OK)
        return s;
    s = nixl_md_load_remote(b, blob, len, NULL);
    nixl_free(blob);
    return s;
}

#define LEN (1u << 20)

int main(void)
{
    /* Shared memory: a same-host peer copies into it with plain memcpy. */
    void *srcp, *dstp;
    TRY(nixl_mem_alloc(LEN, &srcp));
    TRY(nixl_mem_alloc(LEN, &dstp));
    char *src = srcp, *dst = dstp;
    for (size_t i = 0; i < LEN; i++)
        src[i] = (char)('a' + i % 26);

    nixl_agent_t *prefill, *decode;
    TRY(setup("prefill", src, LEN, &prefill));
    TRY(setup("decode", dst, LEN, &decode));
    TRY(introduce(decode, prefill));
    TRY(introduce(prefill, decode));

    nixl_desc_t l = {.addr = (uintptr_t)src, .len = LEN};
    nixl_desc_t r = {.addr = (uintptr_t)dst, .len = LEN};
    nixl_dlist_t local = {.mem_type = NIXL_MEM_DRAM, .count = 1, .descs = &l};
    nixl_dlist_t remote = {.mem_type = NIXL_MEM_DRAM, .count = 1, .descs = &r};
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_NOTIF, .notif = "kv-ready", .notif_len = 8};
    nixl_xfer_t *xfer;
    TRY(nixl_xfer_create(prefill, NIXL_OP_WRITE, &local, &remote, "decode", &opt, &xfer));

    nixl_status_t s = nixl_xfer_post(xfer);
    while (s == NIXL_IN_PROG)
        s = nixl_xfer_status(xfer);
    TRY(s);
    nixl_xfer_info_t info;
    TRY(nixl_xfer_info(xfer, &info));
    printf("prefill: wrote %llu bytes via %s\n", (unsigned long long)info.bytes, info.path);

    int seen = 0;
    while (!seen)
        TRY(nixl_notifs_get(decode, on_notif, &seen, NULL));
    int same = memcmp(src, dst, LEN) == 0;
    printf("decode: %u bytes %s: \"%.26s...\"\n", LEN, same ? "match" : "DIFFER", dst);

    nixl_xfer_release(xfer);
    nixl_agent_destroy(prefill); /* also deregisters its memory */
    nixl_agent_destroy(decode);
    nixl_mem_free(src, LEN);
    nixl_mem_free(dst, LEN);
    return same ? 0 : 1;
}
