/*
 * test_topo.c - the rail locality layer (lf_topo.c) against hwloc XML
 * topologies written by topo/gen_topo.py, without NICs or GPUs.
 *
 *   test_topo CASE TOPO_DIR
 *
 * Built twice: with hwloc (test_topo) and without (test_topo_nohwloc, the
 * same cases expecting "all rails" everywhere and one INFO line saying why).
 * The bus numbers repeat gen_topo.py's rules:
 *   p5:      switch s: GPU on bus s*0x20+3, NICs on s*0x20+4..7; switches
 *            0-3 in package/NUMA node 0, 4-7 in 1
 *   fewnics: GPU g on bus 0x10+g*0x10 (package g/4); NIC of package p on
 *            bus 0x90+p*0x10
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/libfabric/lf_topo.h"

#include "../../common/test_check_exit.h"

#define CHECK_MASK(got, want)                                                                     \
    do {                                                                                          \
        uint32_t g_ = (got), w_ = (want);                                                         \
        if (g_ != w_) {                                                                           \
            fprintf(stderr, "%s:%d: %s = 0x%08x, expected 0x%08x\n", __FILE__, __LINE__, #got, g_, w_); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static const char *topo_dir;
static int have_hwloc;

/* ---- a host that counts log lines by level ---- */

static unsigned nlog[5];

static int t_log_enabled(nixl_log_level_t level)
{
    return level <= NIXL_LOG_INFO;
}

static void t_log(nixl_log_level_t level, const char *where, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[log %d %s] ", (int)level, where);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if ((unsigned)level < 5)
        nlog[level]++;
}

static nixl_host_services_t host = {
    .abi_version = NIXL_BACKEND_ABI_VERSION,
    .struct_size = sizeof(nixl_host_services_t),
    .log_enabled = t_log_enabled,
    .log = t_log,
};

static void log_reset(void)
{
    memset(nlog, 0, sizeof(nlog));
}

/* With hwloc: want; without: every rail. */
static uint32_t expect(const lf_topo_t *t, uint32_t want)
{
    return have_hwloc ? want : lf_topo_all(t);
}

static lf_topo_t *open_xml(const char *name, const lf_topo_rail_t *rails, unsigned n)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", topo_dir, name);
    lf_topo_t *t = NULL;
    log_reset();
    CHECK(lf_topo_open(&host, path, rails, n, &t) == NIXL_OK && t);
    if (!have_hwloc) {
        /* One line says why every answer is all rails. */
        CHECK(nlog[NIXL_LOG_INFO] == 1 && nlog[NIXL_LOG_WARN] == 0);
        CHECK(strstr(lf_topo_source(t), "without hwloc") != NULL);
    } else {
        CHECK(strstr(lf_topo_source(t), name) != NULL);
    }
    return t;
}

static void busid(char out[LF_TOPO_BUSID_LEN], unsigned bus)
{
    snprintf(out, LF_TOPO_BUSID_LEN, "0000:%02x:00.0", bus);
}

/* ---- p5.48xlarge-like: 8 GPUs, 32 NICs, 4 per switch ---- */

#define P5_NICS 32
static char p5_names[P5_NICS][32];

/* Rail k is NIC (k*5)%32, so a GPU's rails are scattered over the mask. */
static unsigned p5_nic_of_rail(unsigned k)
{
    return (k * 5) % P5_NICS;
}

static void p5_rails(lf_topo_rail_t *r)
{
    for (unsigned k = 0; k < P5_NICS; k++) {
        unsigned nic = p5_nic_of_rail(k);
        snprintf(p5_names[k], sizeof(p5_names[k]), "rdmap%us%u-rdm", nic / 4, nic % 4);
        r[k] = (lf_topo_rail_t){.domain = p5_names[k], .has_pci = 1, .pci_bus = (uint8_t)((nic / 4) * 0x20 + 4 + nic % 4)};
    }
}

static uint32_t p5_switch_rails(unsigned s)
{
    uint32_t m = 0;
    for (unsigned k = 0; k < P5_NICS; k++)
        if (p5_nic_of_rail(k) / 4 == s)
            m |= 1u << k;
    return m;
}

static void case_p5(void)
{
    lf_topo_rail_t rails[P5_NICS];
    p5_rails(rails);
    lf_topo_t *t = open_xml("p5.xml", rails, P5_NICS);
    CHECK_MASK(lf_topo_all(t), UINT32_MAX);
    CHECK_MASK(lf_topo_located(t), have_hwloc ? UINT32_MAX : 0u);
    uint32_t seen = 0;
    for (unsigned s = 0; s < 8; s++) {
        char id[LF_TOPO_BUSID_LEN];
        busid(id, s * 0x20 + 3);
        uint32_t m = lf_topo_gpu_rails(t, id);
        printf("p5 GPU %s: rails 0x%08x\n", id, m);
        CHECK_MASK(m, expect(t, p5_switch_rails(s)));
        if (have_hwloc) {
            CHECK(__builtin_popcount(m) == 4 && !(m & seen));
            seen |= m;
        }
    }
    CHECK(!have_hwloc || seen == UINT32_MAX);
    for (unsigned k = 0; k < P5_NICS; k++)
        CHECK(lf_topo_rail_numa(t, k) == (have_hwloc ? (int)(p5_nic_of_rail(k) / 16) : -1));
    /* The GPUs, in PCI order. */
    char ids[16][LF_TOPO_BUSID_LEN];
    size_t n = lf_topo_gpus(t, ids, 16);
    CHECK(n == (have_hwloc ? 8u : 0u));
    for (size_t g = 0; g < n; g++) {
        char want[LF_TOPO_BUSID_LEN];
        busid(want, (unsigned)g * 0x20 + 3);
        CHECK(strcmp(ids[g], want) == 0);
    }
    CHECK(lf_topo_gpus(t, ids, 3) == n);
    CHECK(nlog[NIXL_LOG_WARN] == 0);
    lf_topo_close(t);
}

/* ---- fewer NICs than GPUs: each GPU gets its NUMA node's NIC ---- */

static void case_fewnics(void)
{
    /* The NIC of package 1 first: rail 0 is NUMA node 1's. */
    lf_topo_rail_t rails[2] = {
        {.domain = "nic-pkg1", .has_pci = 1, .pci_bus = 0xa0},
        {.domain = "nic-pkg0", .has_pci = 1, .pci_bus = 0x90},
    };
    lf_topo_t *t = open_xml("fewnics.xml", rails, 2);
    for (unsigned g = 0; g < 8; g++) {
        char id[LF_TOPO_BUSID_LEN];
        busid(id, 0x10 + g * 0x10);
        CHECK_MASK(lf_topo_gpu_rails(t, id), expect(t, g / 4 == 0 ? 2u : 1u));
    }
    CHECK(lf_topo_rail_numa(t, 0) == (have_hwloc ? 1 : -1) && lf_topo_rail_numa(t, 1) == (have_hwloc ? 0 : -1));
    CHECK(lf_topo_gpus(t, NULL, 0) == (have_hwloc ? 8u : 0u));
    CHECK(nlog[NIXL_LOG_WARN] == 0);
    lf_topo_close(t);

    /* Rails without a place (no PCI address, or one the topology lacks)
     * are never ruled out; the missing one is warned at open. */
    lf_topo_rail_t more[4] = {
        rails[0],
        rails[1],
        {.domain = "lo"},
        {.domain = "ghost", .has_pci = 1, .pci_bus = 0xee},
    };
    t = open_xml("fewnics.xml", more, 4);
    CHECK(nlog[NIXL_LOG_WARN] == (have_hwloc ? 1u : 0u));
    CHECK_MASK(lf_topo_located(t), have_hwloc ? 3u : 0u);
    CHECK_MASK(lf_topo_gpu_rails(t, "0000:10:00.0"), expect(t, 2u | 4u | 8u));
    CHECK_MASK(lf_topo_gpu_rails(t, "0000:80:00.0"), expect(t, 1u | 4u | 8u));
    CHECK_MASK(lf_topo_numa_rails(t, 0), expect(t, 2u | 4u | 8u));
    lf_topo_close(t);
}

/* ---- host memory: the rails of a NUMA node ---- */

static void case_numa(void)
{
    lf_topo_rail_t rails[P5_NICS];
    p5_rails(rails);
    lf_topo_t *t = open_xml("p5.xml", rails, P5_NICS);
    uint32_t n0 = p5_switch_rails(0) | p5_switch_rails(1) | p5_switch_rails(2) | p5_switch_rails(3);
    CHECK_MASK(lf_topo_numa_rails(t, 0), expect(t, n0));
    CHECK_MASK(lf_topo_numa_rails(t, 1), expect(t, ~n0));
    CHECK_MASK(lf_topo_numa_rails(t, -1), UINT32_MAX);
    CHECK_MASK(lf_topo_numa_rails(t, 7), UINT32_MAX); /* no rail there */
    /* An XML topology is not this host: no address has a node in it. */
    int x = 0;
    CHECK(lf_topo_addr_numa(t, &x) == -1);
    lf_topo_close(t);

    /* This host's topology: touched memory is on some node, and the
     * answer is a set of rails (all of them: no rail has a place). */
    lf_topo_rail_t one[2] = {{.domain = "lo"}, {.domain = "eth0"}};
    log_reset();
    CHECK(lf_topo_open(&host, NULL, one, 2, &t) == NIXL_OK);
    char *buf = malloc(1 << 16);
    CHECK(buf);
    memset(buf, 1, 1 << 16);
    int node = lf_topo_addr_numa(t, buf + 100);
    printf("this host: %s, buffer on NUMA node %d\n", lf_topo_source(t), node);
    CHECK(have_hwloc ? node >= 0 : node == -1);
    CHECK_MASK(lf_topo_numa_rails(t, node), 3u);
    CHECK_MASK(lf_topo_gpu_rails(t, "0000:03:00.0"), 3u);
    free(buf);
    lf_topo_close(t);
}

/* ---- bus id spellings; GPUs the topology does not have ---- */

static void case_busid(void)
{
    static const struct {
        const char *s;
        int ok;
        uint32_t dom;
        unsigned bus, dev, fn;
    } ids[] = {
        {"0000:a3:00.0", 1, 0, 0xa3, 0, 0},     {"0000:A3:00.0", 1, 0, 0xa3, 0, 0},
        {"00000000:A3:00.0", 1, 0, 0xa3, 0, 0}, {"a3:00.0", 1, 0, 0xa3, 0, 0},
        {"0001:1B:1f.7", 1, 1, 0x1b, 0x1f, 7},  {"0:3:0.0", 1, 0, 3, 0, 0},
        {"0000:a3:00", 0, 0, 0, 0, 0},          {"0000:a3:00.8", 0, 0, 0, 0, 0},
        {"0000:a3:20.0", 0, 0, 0, 0, 0},        {"0000:1a3:00.0", 0, 0, 0, 0, 0},
        {"0000:a3:00.0 ", 0, 0, 0, 0, 0},       {" 0000:a3:00.0", 0, 0, 0, 0, 0},
        {"zz:00.0", 0, 0, 0, 0, 0},             {"", 0, 0, 0, 0, 0},
        {"000000000:a3:00.0", 0, 0, 0, 0, 0},   {"0000:a3:00.0.1", 0, 0, 0, 0, 0},
        {"0000-a3-00.0", 0, 0, 0, 0, 0},        {"GPU-5d3c", 0, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        uint32_t dom = 99;
        uint8_t bus = 0, dev = 0, fn = 0;
        int r = lf_topo_parse_busid(ids[i].s, &dom, &bus, &dev, &fn);
        if ((r == 0) != ids[i].ok || (r == 0 && (dom != ids[i].dom || bus != ids[i].bus || dev != ids[i].dev ||
                                                   fn != ids[i].fn))) {
            fprintf(stderr, "bus id \"%s\": parsed %d -> %x:%x:%x.%x\n", ids[i].s, r, dom, bus, dev, fn);
            exit(1);
        }
    }
    CHECK(lf_topo_parse_busid(NULL, NULL, NULL, NULL, NULL) == -1);

    lf_topo_rail_t rails[P5_NICS];
    p5_rails(rails);
    lf_topo_t *t = open_xml("p5.xml", rails, P5_NICS);
    /* Every spelling of switch 5's GPU finds the same rails. */
    const char *same[] = {"0000:a3:00.0", "0000:A3:00.0", "00000000:A3:00.0", "a3:00.0"};
    for (size_t i = 0; i < 4; i++)
        CHECK_MASK(lf_topo_gpu_rails(t, same[i]), expect(t, p5_switch_rails(5)));
    CHECK(nlog[NIXL_LOG_WARN] == 0);
    /* A GPU the topology lacks, a NIC's bus id, a bad id: all rails,
     * warned once. */
    CHECK_MASK(lf_topo_gpu_rails(t, "0000:ff:00.0"), UINT32_MAX);
    CHECK(nlog[NIXL_LOG_WARN] == (have_hwloc ? 1u : 0u));
    CHECK_MASK(lf_topo_gpu_rails(t, "0000:fe:00.0"), UINT32_MAX);
    CHECK_MASK(lf_topo_gpu_rails(t, "not-a-bus-id"), UINT32_MAX);
    CHECK(nlog[NIXL_LOG_WARN] == (have_hwloc ? 1u : 0u));
    lf_topo_close(t);

    /* No rail has a place: nothing to choose, nothing to warn about. */
    lf_topo_rail_t none[3] = {{.domain = "a"}, {.domain = "b"}, {.domain = "c"}};
    t = open_xml("p5.xml", none, 3);
    CHECK_MASK(lf_topo_gpu_rails(t, "0000:03:00.0"), 7u);
    CHECK_MASK(lf_topo_gpu_rails(t, "0000:ff:00.0"), 7u);
    CHECK(nlog[NIXL_LOG_WARN] == 0);
    lf_topo_close(t);
}

/* ---- loading ---- */

static void case_load(void)
{
    lf_topo_rail_t rails[1] = {{.domain = "x", .has_pci = 1, .pci_bus = 4}};
    lf_topo_t *t = NULL;
    char path[1024];
    snprintf(path, sizeof(path), "%s/no-such-file.xml", topo_dir);
    log_reset();
    nixl_status_t st = lf_topo_open(&host, path, rails, 1, &t);
    if (have_hwloc) {
        /* A topology asked for by name must load. */
        CHECK(st == NIXL_ERR_INVALID_PARAM && t == NULL && nlog[NIXL_LOG_ERROR] == 1);
    } else {
        CHECK(st == NIXL_OK && lf_topo_gpu_rails(t, "0000:03:00.0") == 1u);
        lf_topo_close(t);
    }
    CHECK(lf_topo_open(&host, NULL, rails, 33, &t) == NIXL_ERR_INVALID_PARAM);
    CHECK(lf_topo_open(&host, NULL, NULL, 2, &t) == NIXL_ERR_INVALID_PARAM);
    char buf[64];
    CHECK(strcmp(lf_topo_mask_str(0, buf, sizeof(buf)), "-") == 0);
    CHECK(strcmp(lf_topo_mask_str(0x8000001du, buf, sizeof(buf)), "0,2-4,31") == 0);
    CHECK(strcmp(lf_topo_mask_str(UINT32_MAX, buf, sizeof(buf)), "0-31") == 0);
    lf_topo_close(NULL);
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"p5", case_p5}, {"fewnics", case_fewnics}, {"numa", case_numa}, {"busid", case_busid}, {"load", case_load},
};

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_topo CASE TOPO_DIR\n");
        return 2;
    }
    topo_dir = argv[2];
    have_hwloc = lf_topo_have_hwloc();
    printf("built %s hwloc\n", have_hwloc ? "with" : "without");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(cases[i].name, argv[1]) == 0) {
            cases[i].fn();
            printf("ok %s\n", argv[1]);
            return 0;
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
