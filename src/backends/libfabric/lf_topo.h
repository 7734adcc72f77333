/*
 * lf_topo.h - which rails are close to a GPU or to host memory.
 *
 * A pure layer over hwloc, testable without NICs: it is given the rails
 * (domain name, PCI address when the provider reported one) and answers
 * with rail sets (bit i = rail i).  Built without hwloc (LF_HAVE_HWLOC
 * undefined) every answer is "all rails".  It sees neither libfabric nor
 * the rest of the backend; logging goes through the host services.
 *
 * Thread safety: after lf_topo_open the topology is only read; the queries
 * may run on several threads (the "warned once" flags are atomic).
 */
#ifndef NIXL_BACKENDS_LF_TOPO_H
#define NIXL_BACKENDS_LF_TOPO_H

#include <stddef.h>
#include <stdint.h>

#include "nixl/backend.h"

#define LF_TOPO_MAX_RAILS 32
#define LF_TOPO_BUSID_LEN 16 /* "0000:1b:00.0" and its NUL */

typedef struct lf_topo lf_topo_t;

/* One rail as the provider described it. */
typedef struct lf_topo_rail {
    const char *domain; /* libfabric domain name (copied) */
    int has_pci;        /* fi_info gave nic->bus_attr of type PCI */
    uint32_t pci_domain;
    uint8_t pci_bus, pci_dev, pci_func;
} lf_topo_rail_t;

/* 1 when built with hwloc. */
int lf_topo_have_hwloc(void);

/* Load the topology: from xml_path when it is set (an error if it cannot be
 * loaded), else this host's (hwloc itself honours HWLOC_XMLFILE); then
 * place the rails in it.  Without hwloc, or when this host's topology
 * cannot be loaded, *out still answers: all rails, said once in the log
 * (INFO without hwloc, WARN when loading failed). */
nixl_status_t lf_topo_open(const nixl_host_services_t *host, const char *xml_path, const lf_topo_rail_t *rails,
                           unsigned nrails, lf_topo_t **out);
void lf_topo_close(lf_topo_t *t);

/* Every rail. */
uint32_t lf_topo_all(const lf_topo_t *t);
/* Rails whose place in the topology is known (PCI address found). */
uint32_t lf_topo_located(const lf_topo_t *t);

/* The rails closest to the GPU with this PCI bus id ("0000:1b:00.0",
 * "00000000:1B:00.0" or "1b:00.0"): those below the GPU's nearest PCI
 * ancestor (switch, bridge) that has any; else those on its NUMA node;
 * else those in its package.  Rails without a known place are added to
 * every answer (nothing says they are far).  A GPU the topology does not
 * have, or with no rail near at all, gets all rails, warned once. */
uint32_t lf_topo_gpu_rails(lf_topo_t *t, const char *pci_bus_id);
/* Rails on NUMA node numa (OS index), plus those without a known place;
 * all rails when numa < 0 or no located rail is on it. */
uint32_t lf_topo_numa_rails(const lf_topo_t *t, int numa);
/* The NUMA node (OS index) of host memory at addr: where its first page
 * lives, else the node of the CPU the caller runs on; -1 when unknown
 * (also for a topology loaded from XML: it is not this host). */
int lf_topo_addr_numa(const lf_topo_t *t, const void *addr);
/* NUMA node (OS index) of rail i, -1 when unknown or several. */
int lf_topo_rail_numa(const lf_topo_t *t, unsigned i);

/* GPUs the topology has (NVIDIA display or 3D controllers), in PCI order:
 * writes up to cap bus ids ("0000:1b:00.0"), returns how many there are. */
size_t lf_topo_gpus(const lf_topo_t *t, char (*ids)[LF_TOPO_BUSID_LEN], size_t cap);
/* Where the topology came from: "this host", "xml <path>", "HWLOC_XMLFILE
 * <path>", "none (built without hwloc)", "none (<why>)". */
const char *lf_topo_source(const lf_topo_t *t);

/* Parse a PCI bus id as above (hex digits of either case).  0 on
 * success, -1 when it is not one. */
int lf_topo_parse_busid(const char *s, uint32_t *domain, uint8_t *bus, uint8_t *dev, uint8_t *func);
/* "1,4-7,9" for a rail set; "-" for none.  Returns buf. */
const char *lf_topo_mask_str(uint32_t mask, char *buf, size_t cap);

#endif
