/*
 * lf_topo.c - GPU -> NIC and NUMA -> NIC locality for the libfabric rails.
 *
 * Registering device memory on all 32 NICs of a node instead of its GPU's 4
 * made start-up several times slower in the field; this file says which
 * rails are the GPU's.  With hwloc the PCI tree is walked up from the GPU:
 * the first bridge (switch port, switch, root port, host bridge) with rails
 * below it gives them; a GPU with no rail below any of its bridges gets the
 * rails of its NUMA node, then of its package.  Host memory gets the rails
 * of the NUMA node its first page is on.  Rails whose PCI device is not
 * known (tcp has none) are never ruled out.  Whatever cannot be answered is
 * "all rails", warned once, so a wrong topology costs speed, never a
 * transfer.
 *
 * GPUs are named by PCI bus id, never by CUDA ordinal: ordinals change with
 * CUDA_VISIBLE_DEVICES, bus ids do not.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef LF_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "lf_topo.h"

/* The kit's log macro; a topology may be loaded without a host (tests). */
#define TOPO_LOG(t, lvl, ...)                                                                     \
    do {                                                                                          \
        if ((t)->host)                                                                            \
            NIXL_BE_LOG((t)->host, lvl, __VA_ARGS__);                                             \
    } while (0)

struct lf_topo {
    const nixl_host_services_t *host;
    unsigned nrails;
    uint32_t all;
    uint32_t located;
    int numa[LF_TOPO_MAX_RAILS];
    char domain[LF_TOPO_MAX_RAILS][64];
    char source[320];
    atomic_int warned_gpu; /* a GPU not in the topology, or a bad bus id */
    atomic_int warned_far; /* a GPU with no rail near it */
#ifdef LF_HAVE_HWLOC
    hwloc_topology_t topo; /* NULL: nothing loaded, every answer is all rails */
    hwloc_obj_t pci[LF_TOPO_MAX_RAILS]; /* the rail's PCI device */
    hwloc_obj_t cpu[LF_TOPO_MAX_RAILS]; /* its first ancestor that is not I/O */
#endif
};

int lf_topo_have_hwloc(void)
{
#ifdef LF_HAVE_HWLOC
    return 1;
#else
    return 0;
#endif
}

/* Up to maxdig hex digits; NULL when there are none or too many. */
static const char *lf_topo_hex(const char *p, unsigned maxdig, uint32_t *v)
{
    uint32_t x = 0;
    unsigned n = 0;
    for (;; p++, n++) {
        unsigned d;
        if (*p >= '0' && *p <= '9')
            d = (unsigned)(*p - '0');
        else if (*p >= 'a' && *p <= 'f')
            d = (unsigned)(*p - 'a' + 10);
        else if (*p >= 'A' && *p <= 'F')
            d = (unsigned)(*p - 'A' + 10);
        else
            break;
        if (n == maxdig)
            return NULL;
        x = (x << 4) | d;
    }
    if (n == 0)
        return NULL;
    *v = x;
    return p;
}

int lf_topo_parse_busid(const char *s, uint32_t *domain, uint8_t *bus, uint8_t *dev, uint8_t *func)
{
    uint32_t f[4], dom = 0;
    const char *p = s;
    if (!p || !(p = lf_topo_hex(p, 8, &f[0])) || *p++ != ':' || !(p = lf_topo_hex(p, 8, &f[1])))
        return -1;
    if (*p == ':') {
        /* domain:bus:device.function */
        dom = f[0];
        f[0] = f[1];
        if (!(p = lf_topo_hex(p + 1, 2, &f[1])))
            return -1;
    }
    if (*p++ != '.' || !(p = lf_topo_hex(p, 1, &f[2])) || *p != '\0')
        return -1;
    if (f[0] > 0xff || f[1] > 0x1f || f[2] > 7)
        return -1;
    *domain = dom;
    *bus = (uint8_t)f[0];
    *dev = (uint8_t)f[1];
    *func = (uint8_t)f[2];
    return 0;
}

const char *lf_topo_mask_str(uint32_t mask, char *buf, size_t cap)
{
    size_t used = 0;
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    if (!mask) {
        snprintf(buf, cap, "-");
        return buf;
    }
    for (unsigned i = 0; i < 32;) {
        if (!(mask & (1u << i))) {
            i++;
            continue;
        }
        unsigned j = i;
        while (j + 1 < 32 && (mask & (1u << (j + 1))))
            j++;
        int k = j == i ? snprintf(buf + used, cap - used, "%s%u", used ? "," : "", i)
                       : snprintf(buf + used, cap - used, "%s%u-%u", used ? "," : "", i, j);
        if (k < 0 || (size_t)k >= cap - used)
            break;
        used += (size_t)k;
        i = j + 1;
    }
    return buf;
}

uint32_t lf_topo_all(const lf_topo_t *t)
{
    return t->all;
}

uint32_t lf_topo_located(const lf_topo_t *t)
{
    return t->located;
}

int lf_topo_rail_numa(const lf_topo_t *t, unsigned i)
{
    return i < t->nrails ? t->numa[i] : -1;
}

const char *lf_topo_source(const lf_topo_t *t)
{
    return t->source;
}

#ifdef LF_HAVE_HWLOC

/* Rails whose PCI device sits below bridge a. */
static uint32_t lf_topo_rails_below(const lf_topo_t *t, hwloc_obj_t a)
{
    uint32_t m = 0;
    for (unsigned i = 0; i < t->nrails; i++) {
        for (hwloc_obj_t o = t->pci[i]; o; o = o->parent) {
            if (o == a) {
                m |= 1u << i;
                break;
            }
            if (!hwloc_obj_type_is_io(o->type))
                break;
        }
    }
    return m;
}

static uint32_t lf_topo_rails_same_numa(const lf_topo_t *t, hwloc_obj_t c)
{
    uint32_t m = 0;
    if (!c || !c->nodeset || hwloc_bitmap_iszero(c->nodeset))
        return 0;
    for (unsigned i = 0; i < t->nrails; i++)
        if (t->cpu[i] && t->cpu[i]->nodeset && hwloc_bitmap_intersects(t->cpu[i]->nodeset, c->nodeset))
            m |= 1u << i;
    return m;
}

static hwloc_obj_t lf_topo_package(hwloc_topology_t topo, hwloc_obj_t c)
{
    if (!c)
        return NULL;
    return c->type == HWLOC_OBJ_PACKAGE ? c : hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, c);
}

static uint32_t lf_topo_rails_same_package(const lf_topo_t *t, hwloc_obj_t c)
{
    uint32_t m = 0;
    hwloc_obj_t pkg = lf_topo_package(t->topo, c);
    if (!pkg)
        return 0;
    for (unsigned i = 0; i < t->nrails; i++)
        if (t->cpu[i] && lf_topo_package(t->topo, t->cpu[i]) == pkg)
            m |= 1u << i;
    return m;
}

static int lf_topo_is_gpu(hwloc_obj_t o)
{
    /* NVIDIA display (0x0300) and 3D (0x0302) controllers: what CUDA drives. */
    return o->type == HWLOC_OBJ_PCI_DEVICE && (o->attr->pcidev.class_id >> 8) == 0x03 &&
           o->attr->pcidev.vendor_id == 0x10de;
}

static void lf_topo_place(lf_topo_t *t, const lf_topo_rail_t *rails)
{
    for (unsigned i = 0; i < t->nrails; i++) {
        const lf_topo_rail_t *r = &rails[i];
        if (!r->has_pci)
            continue;
        hwloc_obj_t o = hwloc_get_pcidev_by_busid(t->topo, r->pci_domain, r->pci_bus, r->pci_dev, r->pci_func);
        if (!o) {
            TOPO_LOG(t, NIXL_LOG_WARN,
                     "libfabric: rail %u (%s) is at PCI %04x:%02x:%02x.%x, which the topology (%s) does not have: it "
                     "is treated as near every GPU and NUMA node",
                     i, t->domain[i], r->pci_domain, r->pci_bus, r->pci_dev, r->pci_func, t->source);
            continue;
        }
        t->pci[i] = o;
        t->cpu[i] = hwloc_get_non_io_ancestor_obj(t->topo, o);
        t->located |= 1u << i;
        if (t->cpu[i] && t->cpu[i]->nodeset && hwloc_bitmap_weight(t->cpu[i]->nodeset) == 1)
            t->numa[i] = hwloc_bitmap_first(t->cpu[i]->nodeset);
    }
}

/* Loads the topology into t->topo; a nonzero return is an error only when
 * xml_path was given (this host's topology failing is warned and lived
 * with). */
static nixl_status_t lf_topo_load(lf_topo_t *t, const char *xml_path)
{
    const char *env = getenv("HWLOC_XMLFILE");
    int explicit_xml = xml_path && *xml_path;
    hwloc_topology_t topo;
    if (explicit_xml)
        snprintf(t->source, sizeof(t->source), "xml %s", xml_path);
    else if (env && *env)
        snprintf(t->source, sizeof(t->source), "HWLOC_XMLFILE %s", env);
    else
        snprintf(t->source, sizeof(t->source), "this host (hwloc)");
    if (hwloc_topology_init(&topo) != 0) {
        TOPO_LOG(t, NIXL_LOG_WARN, "libfabric: hwloc_topology_init failed: every region goes on every rail");
        snprintf(t->source, sizeof(t->source), "none (hwloc_topology_init failed)");
        return explicit_xml ? NIXL_ERR_NO_MEMORY : NIXL_OK;
    }
    /* Bridges are kept when they lead to a GPU or a NIC: all we walk. */
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    const char *what = "hwloc_topology_set_xml";
    int ret = explicit_xml ? hwloc_topology_set_xml(topo, xml_path) : 0;
    if (ret == 0) {
        what = "hwloc_topology_load";
        ret = hwloc_topology_load(topo);
    }
    if (ret != 0) {
        if (explicit_xml) {
            TOPO_LOG(t, NIXL_LOG_ERROR, "libfabric: topology file %s (topo_xml) could not be loaded: %s failed",
                     xml_path, what);
        } else {
            TOPO_LOG(t, NIXL_LOG_WARN, "libfabric: %s failed for %s: every region goes on every rail", what,
                     t->source);
            snprintf(t->source, sizeof(t->source), "none (%s failed)", what);
        }
        hwloc_topology_destroy(topo);
        return explicit_xml ? NIXL_ERR_INVALID_PARAM : NIXL_OK;
    }
    t->topo = topo;
    return NIXL_OK;
}

#endif /* LF_HAVE_HWLOC */

nixl_status_t lf_topo_open(const nixl_host_services_t *host, const char *xml_path, const lf_topo_rail_t *rails,
                           unsigned nrails, lf_topo_t **out)
{
    if (!out || (nrails && !rails) || nrails > LF_TOPO_MAX_RAILS)
        return NIXL_ERR_INVALID_PARAM;
    lf_topo_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NIXL_ERR_NO_MEMORY;
    t->host = host;
    t->nrails = nrails;
    t->all = nrails == 32 ? UINT32_MAX : (1u << nrails) - 1;
    for (unsigned i = 0; i < nrails; i++) {
        t->numa[i] = -1;
        snprintf(t->domain[i], sizeof(t->domain[i]), "%s", rails[i].domain ? rails[i].domain : "?");
    }
#ifdef LF_HAVE_HWLOC
    nixl_status_t st = lf_topo_load(t, xml_path);
    if (st != NIXL_OK) {
        free(t);
        return st;
    }
    if (t->topo)
        lf_topo_place(t, rails);
#else
    (void)xml_path;
    snprintf(t->source, sizeof(t->source), "none (built without hwloc)");
    TOPO_LOG(t, NIXL_LOG_INFO,
             "libfabric: built without hwloc (libhwloc-dev): no GPU/NUMA locality, every region goes on every rail");
#endif
    *out = t;
    return NIXL_OK;
}

void lf_topo_close(lf_topo_t *t)
{
    if (!t)
        return;
#ifdef LF_HAVE_HWLOC
    if (t->topo)
        hwloc_topology_destroy(t->topo);
#endif
    free(t);
}

uint32_t lf_topo_gpu_rails(lf_topo_t *t, const char *pci_bus_id)
{
#ifdef LF_HAVE_HWLOC
    char set[128];
    if (!t->topo || !t->located)
        return t->all;
    uint32_t dom;
    uint8_t bus, dev, fn;
    if (lf_topo_parse_busid(pci_bus_id, &dom, &bus, &dev, &fn) != 0) {
        if (!atomic_exchange(&t->warned_gpu, 1))
            TOPO_LOG(t, NIXL_LOG_WARN, "libfabric: \"%s\" is not a PCI bus id: its memory goes on every rail",
                     pci_bus_id ? pci_bus_id : "(null)");
        return t->all;
    }
    hwloc_obj_t g = hwloc_get_pcidev_by_busid(t->topo, dom, bus, dev, fn);
    if (!g) {
        if (!atomic_exchange(&t->warned_gpu, 1))
            TOPO_LOG(t, NIXL_LOG_WARN,
                     "libfabric: GPU %04x:%02x:%02x.%x is not in the topology (%s): its memory goes on every rail "
                     "(%s)",
                     dom, bus, dev, fn, t->source, lf_topo_mask_str(t->all, set, sizeof(set)));
        return t->all;
    }
    uint32_t m = 0;
    for (hwloc_obj_t a = g->parent; a && hwloc_obj_type_is_io(a->type) && !m; a = a->parent)
        m = lf_topo_rails_below(t, a);
    if (!m) {
        hwloc_obj_t c = hwloc_get_non_io_ancestor_obj(t->topo, g);
        m = lf_topo_rails_same_numa(t, c);
        if (!m)
            m = lf_topo_rails_same_package(t, c);
    }
    if (!m) {
        if (!atomic_exchange(&t->warned_far, 1))
            TOPO_LOG(t, NIXL_LOG_WARN,
                     "libfabric: no rail shares a PCI switch, NUMA node or package with GPU %04x:%02x:%02x.%x: its "
                     "memory goes on every rail",
                     dom, bus, dev, fn);
        return t->all;
    }
    return m | (t->all & ~t->located);
#else
    (void)pci_bus_id;
    return t->all;
#endif
}

uint32_t lf_topo_numa_rails(const lf_topo_t *t, int numa)
{
#ifdef LF_HAVE_HWLOC
    uint32_t m = 0;
    if (!t->topo || numa < 0)
        return t->all;
    for (unsigned i = 0; i < t->nrails; i++)
        if (t->cpu[i] && t->cpu[i]->nodeset && hwloc_bitmap_isset(t->cpu[i]->nodeset, (unsigned)numa))
            m |= 1u << i;
    return m ? m | (t->all & ~t->located) : t->all;
#else
    (void)numa;
    return t->all;
#endif
}

int lf_topo_addr_numa(const lf_topo_t *t, const void *addr)
{
#ifdef LF_HAVE_HWLOC
    if (!t->topo || !hwloc_topology_is_thissystem(t->topo))
        return -1;
    hwloc_nodeset_t ns = hwloc_bitmap_alloc();
    hwloc_cpuset_t cs = hwloc_bitmap_alloc();
    int node = -1;
    if (ns && cs) {
        /* One page: a location query walks the pages it is given. */
        long page = sysconf(_SC_PAGESIZE);
        uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(page > 0 ? page - 1 : 4095);
        if (hwloc_get_area_memlocation(t->topo, (const void *)a, page > 0 ? (size_t)page : 4096, ns,
                                       HWLOC_MEMBIND_BYNODESET) == 0 &&
            hwloc_bitmap_weight(ns) == 1) {
            node = hwloc_bitmap_first(ns);
        } else if (hwloc_get_last_cpu_location(t->topo, cs, HWLOC_CPUBIND_THREAD) == 0) {
            hwloc_bitmap_zero(ns);
            hwloc_cpuset_to_nodeset(t->topo, cs, ns);
            if (hwloc_bitmap_weight(ns) == 1)
                node = hwloc_bitmap_first(ns);
        }
    }
    hwloc_bitmap_free(cs);
    hwloc_bitmap_free(ns);
    return node;
#else
    (void)t;
    (void)addr;
    return -1;
#endif
}

size_t lf_topo_gpus(const lf_topo_t *t, char (*ids)[LF_TOPO_BUSID_LEN], size_t cap)
{
    size_t n = 0;
#ifdef LF_HAVE_HWLOC
    if (!t->topo)
        return 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->topo, o)) != NULL;) {
        if (!lf_topo_is_gpu(o))
            continue;
        if (n < cap)
            snprintf(ids[n], LF_TOPO_BUSID_LEN, "%04x:%02x:%02x.%x", (unsigned)o->attr->pcidev.domain & 0xffff,
                     o->attr->pcidev.bus, o->attr->pcidev.dev, o->attr->pcidev.func);
        n++;
    }
#else
    (void)t;
    (void)ids;
    (void)cap;
#endif
    return n;
}
