/*
 * test_posix_peers.c - files are local: an agent's FILE regions are never
 * published to peers, a blob that carries some anyway (an older libnixl,
 * or one made up) has them ignored, and a request or a remote list naming
 * another agent with FILE memory on either side is refused with
 * NIXL_ERR_MEM_TYPE and a log line saying "files are local".  Two agents
 * in one process, each with shm and posix: the case where posix would
 * otherwise reach the other agent's files (the same fd numbers work).
 * Loopback storage requests go on working.
 *
 * Linked with the internal library to decode the blobs it checks.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/md_codec.h"
#include "nixl.h"
#include "nixl/backend.h"

#include "../../common/test_check.h"
#include "../../common/test_capture.h"

/* ---- helpers ---- */

static nixl_agent_t *agent_make(const char *name)
{
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = name};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    if (!a)
        exit(1);
    nixl_backend_t *b = NULL;
    CHECK_ST(nixl_backend_create(a, "shm", NULL, 0, &b), NIXL_OK);
    CHECK_ST(nixl_backend_create(a, "posix", NULL, 0, &b), NIXL_OK);
    return a;
}

static nixl_status_t run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    for (uint64_t t0 = test_now_ms(); st == NIXL_IN_PROG && test_now_ms() - t0 < 10000;)
        st = nixl_xfer_status(x);
    return st;
}

/* FILE regions in a blob, over all its backends. */
static uint32_t blob_file_regions(const void *blob, size_t len, uint32_t *dram_out)
{
    nixl_md_t *md = NULL;
    CHECK_ST(nixl_md_decode(blob, len, &md), NIXL_OK);
    uint32_t files = 0, dram = 0;
    for (uint32_t b = 0; md && b < md->num_backends; b++)
        for (uint32_t i = 0; i < md->backends[b].num_regions; i++) {
            files += md->backends[b].regions[i].mem_type == NIXL_MEM_FILE;
            dram += md->backends[b].regions[i].mem_type == NIXL_MEM_DRAM;
        }
    if (md)
        nixl_md_free(md);
    *dram_out = dram;
    return files;
}

/* Each refusal: the status, nothing made, and the log line. */
#define CHECK_REFUSED(expr, made)                                                                                    \
    do {                                                                                                             \
        capture_begin();                                                                                             \
        nixl_status_t st__ = (expr);                                                                                 \
        const char *log__ = capture_end();                                                                           \
        CHECK_ST(st__, NIXL_ERR_MEM_TYPE);                                                                           \
        CHECK((made) == NULL);                                                                                       \
        if (!strstr(log__, "files are local"))                                                                       \
            fprintf(stderr, "%s:%d: no 'files are local' in the log of %s\n", __FILE__, __LINE__, #expr);            \
        CHECK(strstr(log__, "files are local") != NULL);                                                             \
    } while (0)

enum { N = 64 * 1024 };

int main(void)
{
    nixl_agent_t *a = agent_make("fa"), *b = agent_make("fb");
    void *ma = NULL, *mb = NULL;
    CHECK_ST(nixl_mem_alloc(N, &ma), NIXL_OK);
    CHECK_ST(nixl_mem_alloc(N, &mb), NIXL_OK);
    if (!ma || !mb)
        return 1;
    memset(ma, 'a', N);
    memset(mb, 'b', N);
    char path[] = "/var/tmp/nixl-posix-peers-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    unsigned char orig[4096], now[4096];
    for (size_t i = 0; i < sizeof(orig); i++)
        orig[i] = (unsigned char)(i * 7 + 1);
    CHECK(pwrite(fd, orig, sizeof(orig), 0) == (ssize_t)sizeof(orig));

    nixl_desc_t da = {(uintptr_t)ma, N, 0, 0, NULL}, db = {(uintptr_t)mb, N, 0, 0, NULL};
    nixl_desc_t whole = {0, 0, (uint32_t)fd, 0, NULL};
    nixl_dlist_t la = {NIXL_MEM_DRAM, 1, &da}, lb = {NIXL_MEM_DRAM, 1, &db}, fl = {NIXL_MEM_FILE, 1, &whole};
    CHECK_ST(nixl_mem_register(a, &la, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(b, &lb, NULL), NIXL_OK);

    /* (a) A's blob, full and partial, carries its DRAM and none of its files. */
    void *blob = NULL;
    size_t len = 0;
    uint32_t dram = 0;
    CHECK_ST(nixl_md_get_local(a, &blob, &len), NIXL_OK);
    CHECK(blob && blob_file_regions(blob, len, &dram) == 0 && dram == 1);
    nixl_md_t *amd = NULL;
    CHECK_ST(nixl_md_decode(blob, len, &amd), NIXL_OK);
    void *ablob = blob;
    size_t alen = len;
    nixl_desc_t piece = {4096, 4096, (uint32_t)fd, 0, NULL};
    nixl_dlist_t pl = {NIXL_MEM_FILE, 1, &piece};
    blob = NULL;
    CHECK_REFUSED(nixl_md_get_local_partial(a, &pl, NIXL_MD_PARTIAL_CONN_INFO, NULL, &blob, &len), blob);
    nixl_dlist_t empty = {NIXL_MEM_FILE, 0, NULL}; /* connection info only: nothing of a file in it */
    CHECK_ST(nixl_md_get_local_partial(a, &empty, 0, NULL, &blob, &len), NIXL_OK);
    CHECK(blob && blob_file_regions(blob, len, &dram) == 0 && dram == 0);
    nixl_free(blob);

    CHECK_ST(nixl_md_load_remote(b, ablob, alen, NULL), NIXL_OK);
    CHECK_ST(nixl_md_get_local(b, &blob, &len), NIXL_OK);
    CHECK_ST(nixl_md_load_remote(a, blob, len, NULL), NIXL_OK);
    nixl_free(blob);

    /* (b) B names A with A's file on the remote side: WRITE, READ, a
     * prepared list, rows; A names B with its own file on the local side. */
    nixl_desc_t bpiece = {(uintptr_t)mb, 4096, 0, 0, NULL}, apiece = {(uintptr_t)ma, 4096, 0, 0, NULL};
    nixl_dlist_t bl = {NIXL_MEM_DRAM, 1, &bpiece}, al = {NIXL_MEM_DRAM, 1, &apiece};
    nixl_xfer_t *x = NULL;
    CHECK_REFUSED(nixl_xfer_create(b, NIXL_OP_WRITE, &bl, &pl, "fa", NULL, &x), x);
    CHECK_REFUSED(nixl_xfer_create(b, NIXL_OP_READ, &bl, &pl, "fa", NULL, &x), x);
    nixl_prep_t *rp = NULL, *lp = NULL;
    CHECK_REFUSED(nixl_prep_create(b, "fa", &pl, NULL, &rp), rp);
    uint64_t lrow[3] = {(uintptr_t)mb, 4096, 0}, rrow[3] = {4096, 4096, (uint64_t)fd};
    nixl_rows_t lr = {NIXL_MEM_DRAM, 1, lrow, 3, 1}, rr = {NIXL_MEM_FILE, 1, rrow, 3, 1};
    CHECK_REFUSED(nixl_xfer_create_rows(b, NIXL_OP_WRITE, &lr, &rr, "fa", NULL, &x), x);
    nixl_desc_t bremote = {(uintptr_t)mb, 4096, 0, 0, NULL};
    nixl_dlist_t brl = {NIXL_MEM_DRAM, 1, &bremote};
    CHECK_REFUSED(nixl_xfer_create(a, NIXL_OP_WRITE, &pl, &brl, "fb", NULL, &x), x);
    CHECK_ST(nixl_prep_create(a, NULL, &pl, NULL, &lp), NIXL_OK);
    CHECK_ST(nixl_prep_create(a, "fb", &brl, NULL, &rp), NIXL_OK);
    uint32_t zero = 0;
    CHECK_REFUSED(lp && rp ? nixl_xfer_make(a, NIXL_OP_WRITE, lp, &zero, rp, &zero, 1, NULL, &x) : NIXL_ERR_NULL, x);
    nixl_prep_release(lp);
    nixl_prep_release(rp);
    /* Nothing moved: A's file and B's memory are as they were. */
    CHECK(pread(fd, now, sizeof(now), 0) == (ssize_t)sizeof(now) && memcmp(now, orig, sizeof(orig)) == 0);
    CHECK(lseek(fd, 0, SEEK_END) == (off_t)sizeof(orig));
    CHECK(((unsigned char *)mb)[0] == 'b' && ((unsigned char *)mb)[4095] == 'b');

    /* Memory to a peer still works, and so do A's own storage requests. */
    CHECK_ST(nixl_xfer_create(b, NIXL_OP_WRITE, &bl, &al, "fa", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(x);
    CHECK(((unsigned char *)ma)[0] == 'b' && ((unsigned char *)ma)[4095] == 'b');
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &al, &pl, "fa", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(x);
    CHECK(pread(fd, now, sizeof(now), 4096) == (ssize_t)sizeof(now) && now[0] == 'b' && now[4095] == 'b');

    /* A blob with FILE regions (as an older libnixl published them, or made
     * up): one of A's open fd, one of an fd number that is not open here.
     * It loads (the regions are ignored; posix would refuse the closed one
     * and fail the whole load otherwise) and no request reaches them. */
    nixl_md_backend_t *px = NULL;
    for (uint32_t i = 0; amd && i < amd->num_backends; i++)
        if (strcmp(amd->backends[i].name, "posix") == 0)
            px = &amd->backends[i];
    CHECK(px != NULL);
    if (px) {
        nixl_md_region_t regs[2] = {
            {NIXL_MEM_FILE, (uint32_t)fd, nixl_file_key((uint32_t)fd, 0), 1u << 20, NULL, 0},
            {NIXL_MEM_FILE, 1999999, nixl_file_key(1999999, 0), 1u << 20, NULL, 0},
        };
        px->regions = regs;
        px->num_regions = 2;
        void *forged = NULL;
        size_t flen = 0;
        CHECK_ST(nixl_md_encode(amd, &forged, &flen), NIXL_OK);
        px->regions = NULL;
        px->num_regions = 0;
        CHECK(forged && blob_file_regions(forged, flen, &dram) == 2);
        nixl_agent_t *c = agent_make("fc");
        CHECK_ST(forged ? nixl_md_load_remote(c, forged, flen, NULL) : NIXL_ERR_NULL, NIXL_OK);
        void *mc = NULL;
        CHECK_ST(nixl_mem_alloc(4096, &mc), NIXL_OK);
        nixl_desc_t dc = {(uintptr_t)mc, 4096, 0, 0, NULL};
        nixl_dlist_t cl = {NIXL_MEM_DRAM, 1, &dc};
        CHECK_ST(nixl_mem_register(c, &cl, NULL), NIXL_OK);
        memset(mc, 'c', 4096);
        x = NULL;
        CHECK_REFUSED(nixl_xfer_create(c, NIXL_OP_WRITE, &cl, &pl, "fa", NULL, &x), x);
        CHECK(pread(fd, now, sizeof(now), 4096) == (ssize_t)sizeof(now) && now[0] == 'b' && now[4095] == 'b');
        /* Its DRAM region was loaded as usual. */
        x = NULL;
        CHECK_ST(nixl_xfer_create(c, NIXL_OP_WRITE, &cl, &al, "fa", NULL, &x), NIXL_OK);
        CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
        nixl_xfer_release(x);
        CHECK(((unsigned char *)ma)[0] == 'c');
        nixl_agent_destroy(c);
        nixl_mem_free(mc, 4096);
        nixl_free(forged);
    }
    nixl_md_free(amd);
    nixl_free(ablob);

    nixl_agent_destroy(a);
    nixl_agent_destroy(b);
    nixl_mem_free(ma, N);
    nixl_mem_free(mb, N);
    close(fd);
    if (failures) {
        fprintf(stderr, "test_posix_peers: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_posix_peers: all checks passed\n");
    return 0;
}
