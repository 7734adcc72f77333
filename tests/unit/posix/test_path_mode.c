/*
 * test_path_mode.c - NIXL's path mode for FILE registrations through the
 * public API and the posix backend: the library opens the file named in
 * meta ("rw,create:<path>") at registration, transfers name it by its
 * dev_id, deregistration closes it.  Every byte written is read back with
 * pread from the path; each bad form is refused with its status and
 * leaves no registration and no fd behind.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nixl.h"

#include "../../common/test_check.h"

/* How many of this process's fds are open on path. */
static int open_on(const char *path)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char link[300], target[256];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(link, target, sizeof(target) - 1);
        if (k > 0) {
            target[k] = 0;
            n += strcmp(target, path) == 0;
        }
    }
    closedir(d);
    return n;
}

static nixl_status_t run(nixl_xfer_t *x)
{
    nixl_status_t st = nixl_xfer_post(x);
    for (uint64_t t0 = test_now_ms(); st == NIXL_IN_PROG && test_now_ms() - t0 < 10000;)
        st = nixl_xfer_status(x);
    return st;
}

static nixl_desc_t by_path(uint32_t id, const char *meta)
{
    return (nixl_desc_t){0, 0, id, (uint32_t)strlen(meta), (uint8_t *)(uintptr_t)meta};
}

int main(void)
{
    enum { NP = 64, PIECE = 4096 };
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "pm"};
    nixl_agent_t *a = NULL;
    CHECK_ST(nixl_agent_create(&c, &a), NIXL_OK);
    nixl_backend_t *b = NULL;
    CHECK_ST(a ? nixl_backend_create(a, "posix", NULL, 0, &b) : NIXL_ERR_NULL, NIXL_OK);
    if (!a || !b)
        return 1;

    char dir[] = "/var/tmp/nixl-pm-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128], meta[160], ro_meta[160];
    snprintf(path, sizeof(path), "%s/kv.bin", dir);
    snprintf(meta, sizeof(meta), "rw,create:%s", path);
    snprintf(ro_meta, sizeof(ro_meta), "ro:%s", path);

    unsigned char *src = malloc(NP * PIECE), *back = calloc(NP, PIECE), *img = malloc(PIECE);
    CHECK(src && back && img);
    for (size_t i = 0; i < (size_t)NP * PIECE; i++)
        src[i] = (unsigned char)(i * 29 + (i >> 12));
    nixl_desc_t mem[2] = {{(uintptr_t)src, NP * PIECE, 0, 0, NULL}, {(uintptr_t)back, NP * PIECE, 0, 0, NULL}};
    nixl_dlist_t ml = {NIXL_MEM_DRAM, 2, mem};
    CHECK_ST(nixl_mem_register(a, &ml, NULL), NIXL_OK);

    /* The file does not exist yet: "create" makes it; id 7 is no open fd. */
    nixl_desc_t f = by_path(7, meta);
    nixl_dlist_t fl = {NIXL_MEM_FILE, 1, &f};
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    CHECK(access(path, F_OK) == 0);
    CHECK(open_on(path) == 1);

    /* nixl_mem_query reads the path out of path mode's meta. */
    nixl_mem_info_t qi;
    CHECK_ST(nixl_mem_query(a, &fl, "posix", &qi), NIXL_OK);
    CHECK(qi.accessible && qi.size == 0);

    /* WRITE pieces to shuffled offsets of file 7, READ them back. */
    static nixl_desc_t ld[NP], rd[NP], bd[NP];
    for (size_t i = 0; i < NP; i++) {
        ld[i] = (nixl_desc_t){(uintptr_t)src + i * PIECE, PIECE, 0, 0, NULL};
        rd[i] = (nixl_desc_t){((i * 37 + 5) % NP) * PIECE, PIECE, 7, 0, NULL};
        bd[i] = (nixl_desc_t){(uintptr_t)back + i * PIECE, PIECE, 0, 0, NULL};
    }
    nixl_dlist_t l = {NIXL_MEM_DRAM, NP, ld}, r = {NIXL_MEM_FILE, NP, rd}, bl = {NIXL_MEM_DRAM, NP, bd};
    nixl_xfer_t *x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &l, &r, "pm", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(x);
    int pfd = open(path, O_RDONLY);
    CHECK(pfd >= 0);
    int bad = 0;
    for (size_t i = 0; i < NP; i++)
        bad += pread(pfd, img, PIECE, (off_t)rd[i].addr) != PIECE || memcmp(img, src + i * PIECE, PIECE) != 0;
    close(pfd);
    if (bad)
        fprintf(stderr, "path mode: %d of %d pieces wrong in %s\n", bad, NP, path);
    CHECK(bad == 0);
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_READ, &bl, &r, "pm", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_OK);
    nixl_xfer_release(x);
    CHECK(memcmp(back, src, (size_t)NP * PIECE) == 0);
    CHECK_ST(nixl_mem_query(a, &fl, "posix", &qi), NIXL_OK);
    CHECK(qi.accessible && qi.size == (uint64_t)NP * PIECE);

    /* Id 7 is taken: another path under it is refused (and its file not
     * left open). */
    nixl_desc_t again = by_path(7, ro_meta);
    nixl_dlist_t al = {NIXL_MEM_FILE, 1, &again};
    CHECK_ST(nixl_mem_register(a, &al, NULL), NIXL_ERR_INVALID_PARAM);
    CHECK(open_on(path) == 1);

    /* Deregistration (with or without the meta) closes the library's fd. */
    nixl_desc_t plain = {0, 0, 7, 0, NULL};
    nixl_dlist_t pl = {NIXL_MEM_FILE, 1, &plain};
    CHECK_ST(nixl_mem_deregister(a, &pl, NULL), NIXL_OK);
    CHECK(open_on(path) == 0);

    /* An id that is an fd registered as one cannot name a path, nor the
     * other way round. */
    int q = open(path, O_RDWR);
    CHECK(q >= 0);
    nixl_desc_t as_fd = {0, 4096, (uint32_t)q, 0, NULL}, as_path = by_path((uint32_t)q, meta);
    nixl_dlist_t fdl = {NIXL_MEM_FILE, 1, &as_fd}, ppl = {NIXL_MEM_FILE, 1, &as_path};
    CHECK_ST(nixl_mem_register(a, &fdl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &ppl, NULL), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(nixl_mem_deregister(a, &fdl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &ppl, NULL), NIXL_OK);
    CHECK_ST(nixl_mem_register(a, &fdl, NULL), NIXL_ERR_INVALID_PARAM);
    CHECK_ST(nixl_mem_deregister(a, &ppl, NULL), NIXL_OK);
    close(q);
    CHECK(open_on(path) == 0);

    /* Read-only: a WRITE to it fails at the file, and says so. */
    nixl_desc_t rof = by_path(8, ro_meta);
    nixl_dlist_t rol = {NIXL_MEM_FILE, 1, &rof};
    CHECK_ST(nixl_mem_register(a, &rol, NULL), NIXL_OK);
    nixl_desc_t one = {0, PIECE, 8, 0, NULL}, m1 = {(uintptr_t)src, PIECE, 0, 0, NULL};
    nixl_dlist_t onel = {NIXL_MEM_FILE, 1, &one}, m1l = {NIXL_MEM_DRAM, 1, &m1};
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &m1l, &onel, "pm", NULL, &x), NIXL_OK);
    CHECK_ST(x ? run(x) : NIXL_ERR_NULL, NIXL_ERR_XFER_FAILED);
    nixl_xfer_release(x);
    CHECK_ST(nixl_mem_deregister(a, &rol, NULL), NIXL_OK);

    /* Bad forms, each refused with nothing registered and no fd left:
     * a missing file without "create", an unknown flag, an empty path, a
     * NUL in the path, two path-mode files under one id in one list. */
    char missing[160], twoa[160], twob[160];
    snprintf(missing, sizeof(missing), "rw:%s/none/kv.bin", dir);
    snprintf(twoa, sizeof(twoa), "rw,create:%s/a.bin", dir);
    snprintf(twob, sizeof(twob), "rw,create:%s/b.bin", dir);
    const char nul_meta[] = "rw:/var/tmp/x\0y";
    nixl_desc_t bads[4] = {by_path(9, missing), by_path(9, "rw,fast:/var/tmp/x"), by_path(9, "rw:"),
                           {0, 0, 9, sizeof(nul_meta) - 1, (uint8_t *)(uintptr_t)nul_meta}};
    for (int k = 0; k < 4; k++) {
        nixl_dlist_t one_bad = {NIXL_MEM_FILE, 1, &bads[k]};
        CHECK_ST(nixl_mem_register(a, &one_bad, NULL), NIXL_ERR_INVALID_PARAM);
    }
    nixl_desc_t pair[2] = {{0, 4096, 9, (uint32_t)strlen(twoa), (uint8_t *)twoa},
                           {4096, 4096, 9, (uint32_t)strlen(twob), (uint8_t *)twob}};
    nixl_dlist_t pairl = {NIXL_MEM_FILE, 2, pair};
    CHECK_ST(nixl_mem_register(a, &pairl, NULL), NIXL_ERR_INVALID_PARAM);
    char pa[160];
    snprintf(pa, sizeof(pa), "%s/a.bin", dir);
    CHECK(open_on(pa) == 0);
    /* Nothing of id 9 was registered: a transfer to it is refused. */
    nixl_desc_t nine = {0, PIECE, 9, 0, NULL};
    nixl_dlist_t ninel = {NIXL_MEM_FILE, 1, &nine};
    x = NULL;
    CHECK_ST(nixl_xfer_create(a, NIXL_OP_WRITE, &m1l, &ninel, "pm", NULL, &x), NIXL_ERR_NOT_REGISTERED);

    /* A path-mode registration left at destroy is closed with the agent. */
    CHECK_ST(nixl_mem_register(a, &fl, NULL), NIXL_OK);
    CHECK(open_on(path) == 1);
    nixl_agent_destroy(a);
    CHECK(open_on(path) == 0);

    char p2[160];
    snprintf(p2, sizeof(p2), "%s/a.bin", dir);
    unlink(p2);
    snprintf(p2, sizeof(p2), "%s/b.bin", dir);
    unlink(p2);
    unlink(path);
    rmdir(dir);
    free(src);
    free(back);
    free(img);
    if (failures) {
        fprintf(stderr, "test_path_mode: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_path_mode: all checks passed\n");
    return 0;
}
