/*
 * test_partial_md.c - partial metadata through the public API, with the
 * `fake` module backends (memcpy between agents of this process):
 * nixl_md_get_local_partial's argument errors; a blob without connection
 * info refused by an agent that does not know the peer (or knows another
 * instance of it, or invalidated it); a blob with it making the peer known
 * with only its regions; a blob without it adding regions to a known peer
 * while requests made before stay valid; transfers into regions learned
 * only from partial blobs, bytes verified; a blob that changes a loaded
 * region making older requests stale; the backends of opt choosing which
 * backend the peer can use; and nixl_md_send_local_partial to a listener.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nixl.h"

#include "../../common/test_check.h"

enum { RLEN = 8192 };

static nixl_agent_t *mk_agent(const char *name, int listen)
{
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    if (listen) {
        c.field_mask |= NIXL_AGENT_CONFIG_LISTEN | NIXL_AGENT_CONFIG_LISTEN_PORT;
        c.listen = 1;
        c.listen_port = 0;
    }
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    return a;
}

static nixl_backend_t *mk_backend(nixl_agent_t *a, const char *name)
{
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(a, name, NULL, 0, &b), NIXL_OK);
    return b;
}

static nixl_desc_t desc(const void *p, uint64_t off, uint64_t len)
{
    nixl_desc_t d = {(uint64_t)(uintptr_t)p + off, len, 0, 0, NULL};
    return d;
}

static nixl_dlist_t dl(const nixl_desc_t *d, size_t n)
{
    nixl_dlist_t l = {NIXL_MEM_DRAM, n, d};
    return l;
}

/* The target: three registered regions of RLEN bytes. */
typedef struct target {
    nixl_agent_t *a;
    nixl_backend_t *be[2]; /* fake, and fake_serial when asked for */
    unsigned char *r[3];
} target_t;

static void target_up(target_t *t, const char *name, int two_backends)
{
    t->a = mk_agent(name, 0);
    t->be[0] = mk_backend(t->a, "fake");
    t->be[1] = two_backends ? mk_backend(t->a, "fake_serial") : NULL;
    for (int i = 0; i < 3; i++) {
        t->r[i] = malloc(RLEN);
        CHECK(t->r[i] != NULL);
        memset(t->r[i], 0, RLEN);
        nixl_desc_t d = desc(t->r[i], 0, RLEN);
        nixl_dlist_t l = dl(&d, 1);
        CHECK_ST(nixl_mem_register(t->a, &l, NULL), NIXL_OK);
    }
}

static void target_down(target_t *t)
{
    nixl_agent_destroy(t->a);
    for (int i = 0; i < 3; i++)
        free(t->r[i]);
}

/* Partial metadata of the target: region i (through a descriptor inside it). */
static nixl_status_t partial_of(nixl_agent_t *a, const void *region, uint32_t flags, const nixl_opt_args_t *opt,
                                void **blob, size_t *len)
{
    nixl_desc_t d = desc(region, 100, 1000);
    nixl_dlist_t l = dl(&d, 1);
    return nixl_md_get_local_partial(a, &l, flags, opt, blob, len);
}

static nixl_status_t load_partial(nixl_agent_t *from, nixl_agent_t *into, const void *region, uint32_t flags)
{
    void *blob = NULL;
    size_t len = 0;
    nixl_status_t st = partial_of(from, region, flags, NULL, &blob, &len);
    if (st != NIXL_OK)
        return st;
    char name[NIXL_NAME_MAX + 1] = "";
    st = nixl_md_load_remote(into, blob, len, name);
    if (st == NIXL_OK)
        CHECK(strcmp(name, nixl_agent_name(from)) == 0);
    nixl_free(blob);
    return st;
}

static nixl_status_t run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    for (int k = 0; st == NIXL_IN_PROG && k < 1000000; k++)
        st = nixl_xfer_status(x);
    return st;
}

/* WRITE RLEN bytes of pattern seed from src into the peer's region and
 * check every byte there; returns the request's status. */
static nixl_status_t write_verified(nixl_agent_t *a, const char *peer, unsigned char *src, unsigned char *dst,
                                    unsigned seed, char *backend_out)
{
    for (size_t i = 0; i < RLEN; i++)
        src[i] = (unsigned char)(i * 31 + seed);
    memset(dst, 0, RLEN);
    nixl_desc_t l = desc(src, 0, RLEN), r = desc(dst, 0, RLEN);
    nixl_dlist_t L = dl(&l, 1), R = dl(&r, 1);
    nixl_xfer_t *x = NULL;
    nixl_status_t st = nixl_xfer_create(a, NIXL_OP_WRITE, &L, &R, peer, NULL, &x);
    if (st != NIXL_OK)
        return st;
    st = run(x);
    if (st == NIXL_OK) {
        CHECK(memcmp(src, dst, RLEN) == 0);
        nixl_xfer_info_t info;
        CHECK_ST(nixl_xfer_info(x, &info), NIXL_OK);
        if (backend_out)
            snprintf(backend_out, 32, "%s", info.backend);
    }
    nixl_xfer_release(x);
    return st;
}

static nixl_status_t make_write(nixl_agent_t *a, const char *peer, unsigned char *src, unsigned char *dst,
                                nixl_xfer_t **x)
{
    nixl_desc_t l = desc(src, 0, RLEN), r = desc(dst, 0, RLEN);
    nixl_dlist_t L = dl(&l, 1), R = dl(&r, 1);
    return nixl_xfer_create(a, NIXL_OP_WRITE, &L, &R, peer, NULL, x);
}

/* An initiator with one registered buffer of RLEN bytes. */
static nixl_agent_t *initiator(const char *name, unsigned char **buf, int two_backends, int listen)
{
    nixl_agent_t *a = mk_agent(name, listen);
    mk_backend(a, "fake");
    if (two_backends)
        mk_backend(a, "fake_serial");
    *buf = malloc(RLEN);
    CHECK(*buf != NULL);
    nixl_desc_t d = desc(*buf, 0, RLEN);
    nixl_dlist_t l = dl(&d, 1);
    CHECK_ST(nixl_mem_register(a, &l, NULL), NIXL_OK);
    return a;
}

static void test_argument_errors(void)
{
    target_t t;
    target_up(&t, "pm_args", 0);
    nixl_agent_t *other = mk_agent("pm_other", 0);
    nixl_backend_t *obe = mk_backend(other, "fake");
    void *blob = NULL;
    size_t len = 0;
    nixl_desc_t in = desc(t.r[0], 0, 16), out = desc(t.r[0], RLEN - 8, 16), zero = desc(t.r[1], 0, 0);
    nixl_dlist_t L = dl(&in, 1), LO = dl(&out, 1), LZ = dl(&zero, 1), LN = {NIXL_MEM_DRAM, 1, NULL};
    nixl_dlist_t LT = {(nixl_mem_t)99, 1, &in}, LV = {NIXL_MEM_VRAM, 1, &in};

    printf("argument errors: one expected ERROR line per case follows\n");
    fflush(stdout);
    CHECK_ST(nixl_md_get_local_partial(NULL, &L, 0, NULL, &blob, &len), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_get_local_partial(t.a, &L, 0, NULL, NULL, &len), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_get_local_partial(t.a, &L, 0, NULL, &blob, NULL), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_get_local_partial(t.a, NULL, 0, NULL, &blob, &len), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_get_local_partial(t.a, &LN, 0, NULL, &blob, &len), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_get_local_partial(t.a, &LT, 0, NULL, &blob, &len), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(nixl_md_get_local_partial(t.a, &L, 0x2, NULL, &blob, &len), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(nixl_md_get_local_partial(t.a, &LO, 0, NULL, &blob, &len), NIXL_ERR_NOT_REGISTERED);
    CHECK_ST(nixl_md_get_local_partial(t.a, &LZ, 0, NULL, &blob, &len), NIXL_ERR_ZERO_LENGTH);
    /* fake publishes DRAM only. */
    CHECK_ST(nixl_md_get_local_partial(t.a, &LV, 0, NULL, &blob, &len), NIXL_ERR_MEM_TYPE);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_BACKENDS, .backends = &obe, .num_backends = 1};
    CHECK_ST(nixl_md_get_local_partial(t.a, &L, 0, &opt, &blob, &len), NIXL_ERR_UNKNOWN_BACKEND);
    nixl_backend_t *none = NULL;
    opt.backends = &none;
    CHECK_ST(nixl_md_get_local_partial(t.a, &L, 0, &opt, &blob, &len), NIXL_ERR_UNKNOWN_BACKEND);
    opt.backends = NULL;
    CHECK_ST(nixl_md_get_local_partial(t.a, &L, 0, &opt, &blob, &len), NIXL_ERR_NULL);
    CHECK(blob == NULL && len == 0); /* outputs untouched on every failure */
    CHECK_ST(nixl_md_send_local_partial(t.a, &L, 0, NULL, NULL, 1), NIXL_ERR_NULL);
    CHECK_ST(nixl_md_send_local_partial(t.a, &LO, 0, NULL, "127.0.0.1", 1), NIXL_ERR_NOT_REGISTERED);

    /* A partial blob naming the agent itself is refused as a full one is. */
    CHECK_ST(nixl_md_get_local_partial(t.a, &L, NIXL_MD_PARTIAL_CONN_INFO, NULL, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(t.a, blob, len, NULL), NIXL_ERR_SELF);
    /* A cut one does not decode. */
    CHECK_ST(nixl_md_load_remote(other, blob, len - 1, NULL), NIXL_ERR_BAD_METADATA);
    nixl_free(blob);
    nixl_agent_destroy(other);
    target_down(&t);
}

static void test_without_conn_needs_a_known_peer(void)
{
    target_t t;
    target_up(&t, "pm_tgt1", 0);
    unsigned char *src;
    nixl_agent_t *a = initiator("pm_ini1", &src, 0, 0);

    printf("a blob without connection info into an agent that does not know the peer: ERROR lines follow\n");
    fflush(stdout);
    CHECK_ST(load_partial(t.a, a, t.r[0], 0), NIXL_ERR_UNKNOWN_PEER);
    CHECK_ST(nixl_md_check_remote(a, "pm_tgt1"), NIXL_ERR_UNKNOWN_PEER);

    /* With connection info: known, with region 0 only. */
    CHECK_ST(load_partial(t.a, a, t.r[0], NIXL_MD_PARTIAL_CONN_INFO), NIXL_OK);
    CHECK_ST(nixl_md_check_remote(a, "pm_tgt1"), NIXL_OK);
    CHECK_ST(write_verified(a, "pm_tgt1", src, t.r[0], 1, NULL), NIXL_OK);
    CHECK_ST(write_verified(a, "pm_tgt1", src, t.r[1], 2, NULL), NIXL_ERR_NOT_REGISTERED);

    /* A request made now, then region 1 without connection info: added;
     * the request stays valid (same generation) and region 1 is reachable. */
    nixl_xfer_t *before = NULL;
    CHECK_ST(make_write(a, "pm_tgt1", src, t.r[0], &before), NIXL_OK);
    CHECK_ST(load_partial(t.a, a, t.r[1], 0), NIXL_OK);
    memset(src, 0x5a, RLEN);
    CHECK_ST(run(before), NIXL_OK);
    CHECK(t.r[0][0] == 0x5a && t.r[0][RLEN - 1] == 0x5a);
    CHECK_ST(write_verified(a, "pm_tgt1", src, t.r[1], 3, NULL), NIXL_OK);
    CHECK_ST(write_verified(a, "pm_tgt1", src, t.r[0], 4, NULL), NIXL_OK); /* region 0 kept */
    CHECK_ST(write_verified(a, "pm_tgt1", src, t.r[2], 5, NULL), NIXL_ERR_NOT_REGISTERED);
    /* The same blob again adds nothing and changes nothing. */
    CHECK_ST(load_partial(t.a, a, t.r[1], 0), NIXL_OK);
    CHECK_ST(run(before), NIXL_OK);

    /* Region 1 registered again, as another range: the partial blob changes
     * what was loaded, so it is a reload and the older request is stale. */
    nixl_desc_t r1 = desc(t.r[1], 0, RLEN), r1half = desc(t.r[1], 0, RLEN / 2);
    nixl_dlist_t L1 = dl(&r1, 1), L1h = dl(&r1half, 1);
    CHECK_ST(nixl_mem_deregister(t.a, &L1, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(t.a, &L1h, NULL), NIXL_OK);
    CHECK_ST(load_partial(t.a, a, t.r[1], 0), NIXL_OK);
    CHECK_ST(nixl_xfer_post(before), NIXL_ERR_STALE);
    nixl_xfer_release(before);
    CHECK_ST(write_verified(a, "pm_tgt1", src, t.r[1], 6, NULL), NIXL_ERR_NOT_REGISTERED); /* the old length */
    CHECK_ST(write_verified(a, "pm_tgt1", src, t.r[0], 7, NULL), NIXL_OK); /* the merge kept region 0 */
    nixl_desc_t l = desc(src, 0, RLEN / 2), r = desc(t.r[1], 0, RLEN / 2);
    nixl_dlist_t L = dl(&l, 1), R = dl(&r, 1);
    nixl_xfer_t *x = NULL;
    memset(src, 0x77, RLEN);
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &L, &R, "pm_tgt1", NULL, &x), NIXL_OK);
    CHECK_ST(run(x), NIXL_OK);
    CHECK(t.r[1][0] == 0x77 && t.r[1][RLEN / 2 - 1] == 0x77);
    nixl_xfer_release(x);

    /* Invalidated: a blob without connection info is refused again. */
    CHECK_ST(nixl_md_invalidate_remote(a, "pm_tgt1"), NIXL_OK);
    printf("a blob without connection info into an agent that invalidated the peer: an ERROR line follows\n");
    fflush(stdout);
    CHECK_ST(load_partial(t.a, a, t.r[0], 0), NIXL_ERR_UNKNOWN_PEER);
    CHECK_ST(nixl_md_check_remote(a, "pm_tgt1"), NIXL_ERR_UNKNOWN_PEER);

    nixl_agent_destroy(a);
    free(src);
    target_down(&t);
}

/* Connection info alone first (an empty list), then regions one by one,
 * over a full load too: NIXL's partial_md_example, in one process. */
static void test_conn_first_then_regions(void)
{
    target_t t;
    target_up(&t, "pm_tgt2", 0);
    unsigned char *src;
    nixl_agent_t *a = initiator("pm_ini2", &src, 0, 0);
    void *blob = NULL;
    size_t len = 0;
    nixl_dlist_t empty = {NIXL_MEM_DRAM, 0, NULL};
    /* Connection info whatever the flags say. */
    CHECK_ST(nixl_md_get_local_partial(t.a, &empty, 0, NULL, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(a, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
    CHECK_ST(nixl_md_check_remote(a, "pm_tgt2"), NIXL_OK);
    CHECK_ST(write_verified(a, "pm_tgt2", src, t.r[2], 1, NULL), NIXL_ERR_NOT_REGISTERED);
    for (int i = 2; i >= 0; i--) {
        CHECK_ST(load_partial(t.a, a, t.r[i], 0), NIXL_OK);
        CHECK_ST(write_verified(a, "pm_tgt2", src, t.r[i], (unsigned)(10 + i), NULL), NIXL_OK);
    }
    /* Two descriptors in one region and one in another: both regions. */
    nixl_agent_t *b = NULL;
    unsigned char *src_b;
    b = initiator("pm_ini2b", &src_b, 0, 0);
    nixl_desc_t d[3] = {desc(t.r[0], 0, 64), desc(t.r[0], 4096, 64), desc(t.r[2], RLEN - 64, 64)};
    nixl_dlist_t L = dl(d, 3);
    CHECK_ST(nixl_md_get_local_partial(t.a, &L, NIXL_MD_PARTIAL_CONN_INFO, NULL, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(b, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
    CHECK_ST(write_verified(b, "pm_tgt2", src_b, t.r[0], 20, NULL), NIXL_OK);
    CHECK_ST(write_verified(b, "pm_tgt2", src_b, t.r[2], 21, NULL), NIXL_OK);
    CHECK_ST(write_verified(b, "pm_tgt2", src_b, t.r[1], 22, NULL), NIXL_ERR_NOT_REGISTERED);
    /* The full blob after partial ones replaces them (a new generation). */
    nixl_xfer_t *x = NULL;
    CHECK_ST(make_write(b, "pm_tgt2", src_b, t.r[0], &x), NIXL_OK);
    CHECK_ST(nixl_md_get_local(t.a, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(b, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
    CHECK_ST(nixl_xfer_post(x), NIXL_ERR_STALE);
    nixl_xfer_release(x);
    CHECK_ST(write_verified(b, "pm_tgt2", src_b, t.r[1], 23, NULL), NIXL_OK);
    nixl_agent_destroy(b);
    free(src_b);
    nixl_agent_destroy(a);
    free(src);
    target_down(&t);
}

/* A restarted peer (same name, new instance): without connection info its
 * partial blob cannot be loaded over the old one; with it, it replaces it. */
static void test_other_instance(void)
{
    target_t t;
    target_up(&t, "pm_tgt3", 0);
    unsigned char *src;
    nixl_agent_t *a = initiator("pm_ini3", &src, 0, 0);
    void *blob = NULL;
    size_t len = 0;
    CHECK_ST(nixl_md_get_local(t.a, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(a, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
    nixl_xfer_t *x = NULL;
    CHECK_ST(make_write(a, "pm_tgt3", src, t.r[0], &x), NIXL_OK);
    target_down(&t);
    target_up(&t, "pm_tgt3", 0);
    printf("a blob without connection info from a restarted peer: an ERROR line follows\n");
    fflush(stdout);
    CHECK_ST(load_partial(t.a, a, t.r[1], 0), NIXL_ERR_UNKNOWN_PEER);
    CHECK_ST(load_partial(t.a, a, t.r[1], NIXL_MD_PARTIAL_CONN_INFO), NIXL_OK);
    CHECK_ST(nixl_xfer_post(x), NIXL_ERR_STALE);
    nixl_xfer_release(x);
    CHECK_ST(write_verified(a, "pm_tgt3", src, t.r[1], 30, NULL), NIXL_OK);
    /* The old instance's regions went with it. */
    CHECK_ST(write_verified(a, "pm_tgt3", src, t.r[0], 31, NULL), NIXL_ERR_NOT_REGISTERED);
    nixl_agent_destroy(a);
    free(src);
    target_down(&t);
}

/* opt->backends: the blob describes only the backends chosen, so the peer
 * can reach the region only through them. */
static void test_backends_chosen(void)
{
    target_t t;
    target_up(&t, "pm_tgt4", 1);
    unsigned char *src;
    nixl_agent_t *a = initiator("pm_ini4", &src, 1, 0);
    nixl_opt_args_t opt = {.field_mask = NIXL_OPT_BACKENDS, .backends = &t.be[1], .num_backends = 1};
    void *blob = NULL, *all = NULL;
    size_t len = 0, all_len = 0;
    CHECK_ST(partial_of(t.a, t.r[0], NIXL_MD_PARTIAL_CONN_INFO, &opt, &blob, &len), NIXL_OK);
    CHECK_ST(partial_of(t.a, t.r[0], NIXL_MD_PARTIAL_CONN_INFO, NULL, &all, &all_len), NIXL_OK);
    CHECK(len < all_len);
    CHECK_ST(nixl_md_load_remote(a, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
    char be[32] = "";
    CHECK_ST(write_verified(a, "pm_tgt4", src, t.r[0], 40, be), NIXL_OK);
    CHECK(strcmp(be, "fake_serial") == 0);
    /* The other backend's view of region 1, without connection info: the
     * initiator never got fake's connection info from this peer. */
    opt.backends = &t.be[0];
    CHECK_ST(partial_of(t.a, t.r[1], 0, &opt, &blob, &len), NIXL_OK);
    printf("a blob naming a backend whose connection info was never sent: an ERROR line follows\n");
    fflush(stdout);
    CHECK_ST(nixl_md_load_remote(a, blob, len, NULL), NIXL_ERR_UNKNOWN_PEER);
    nixl_free(blob);
    CHECK_ST(partial_of(t.a, t.r[1], NIXL_MD_PARTIAL_CONN_INFO, &opt, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(a, blob, len, NULL), NIXL_OK);
    nixl_free(blob);
    CHECK_ST(write_verified(a, "pm_tgt4", src, t.r[1], 41, be), NIXL_OK);
    CHECK(strcmp(be, "fake") == 0);
    /* An empty backend list in the options means all of them. */
    opt.num_backends = 0;
    CHECK_ST(partial_of(t.a, t.r[0], NIXL_MD_PARTIAL_CONN_INFO, &opt, &blob, &len), NIXL_OK);
    CHECK(len == all_len && memcmp(blob, all, len) == 0);
    nixl_free(blob);
    nixl_free(all);
    nixl_agent_destroy(a);
    free(src);
    target_down(&t);
}

/* nixl_md_send_local_partial to a listener, which loads the blob and
 * answers with the load's status. */
static void test_send_to_listener(void)
{
    target_t t;
    target_up(&t, "pm_tgt5", 0);
    unsigned char *src, *src_c;
    nixl_agent_t *a = initiator("pm_ini5", &src, 0, 1);
    nixl_agent_t *c = initiator("pm_ini5c", &src_c, 0, 1);
    uint16_t pa = nixl_agent_listen_port(a), pc = nixl_agent_listen_port(c);
    CHECK(pa != 0 && pc != 0);
    nixl_desc_t d0 = desc(t.r[0], 0, RLEN), d1 = desc(t.r[1], 8, 8);
    nixl_dlist_t L0 = dl(&d0, 1), L1 = dl(&d1, 1);

    CHECK_ST(nixl_md_send_local_partial(t.a, &L0, NIXL_MD_PARTIAL_CONN_INFO, NULL, "127.0.0.1", pa), NIXL_OK);
    CHECK_ST(nixl_md_check_remote(a, "pm_tgt5"), NIXL_OK);
    CHECK_ST(write_verified(a, "pm_tgt5", src, t.r[0], 50, NULL), NIXL_OK);
    CHECK_ST(write_verified(a, "pm_tgt5", src, t.r[1], 51, NULL), NIXL_ERR_NOT_REGISTERED);
    CHECK_ST(nixl_md_send_local_partial(t.a, &L1, 0, NULL, "127.0.0.1", pa), NIXL_OK);
    CHECK_ST(write_verified(a, "pm_tgt5", src, t.r[1], 52, NULL), NIXL_OK);

    /* c never heard of the target: its listener refuses, and says why. */
    printf("a blob without connection info sent to a listener that does not know the peer: ERROR lines "
           "follow\n");
    fflush(stdout);
    CHECK_ST(nixl_md_send_local_partial(t.a, &L1, 0, NULL, "127.0.0.1", pc), NIXL_ERR_UNKNOWN_PEER);
    CHECK_ST(nixl_md_check_remote(c, "pm_tgt5"), NIXL_ERR_UNKNOWN_PEER);
    nixl_agent_destroy(c);
    free(src_c);
    nixl_agent_destroy(a);
    free(src);
    target_down(&t);
}

int main(void)
{
    test_argument_errors();
    test_without_conn_needs_a_known_peer();
    test_conn_first_then_regions();
    test_other_instance();
    test_backends_chosen();
    test_send_to_listener();
    if (failures) {
        fprintf(stderr, "test_partial_md: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_partial_md: all checks passed\n");
    return 0;
}
