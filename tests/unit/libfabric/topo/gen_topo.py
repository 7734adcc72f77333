#!/usr/bin/python3
"""Writes the hwloc XML topologies test_topo.c reads (committed beside this
script; run it again after changing a layout):

  p5.xml        a p5.48xlarge-like node: 2 packages (one NUMA node each),
                8 PCIe switches, each with 1 GPU (NVIDIA H100) and 4 EFA NICs
  fewnics.xml   8 GPUs, 2 NICs: each GPU and each NIC behind its own root
                port; one NIC per package

Bus numbers follow one rule per file, which test_topo.c repeats:
  p5:      switch s (0..7) owns buses [s*0x20, s*0x20+0x1f]; its GPU is on
           bus s*0x20+3, its NICs on buses s*0x20+4 .. s*0x20+7 (device 0,
           function 0); switches 0-3 are in package 0, 4-7 in package 1
  fewnics: GPU g (0..7) on bus 0x10+g*0x10, in package g/4; the NIC of
           package p on bus 0x90+p*0x10
"""
import os
import sys

PUS_PER_PACKAGE = 16  # 8 cores x 2 hardware threads


class Writer:
    def __init__(self):
        self.lines = []
        self.gp = 0
        self.depth = 0

    def next_gp(self):
        self.gp += 1
        return self.gp

    def open(self, attrs, close=False):
        text = " ".join('%s="%s"' % kv for kv in attrs)
        self.lines.append("  " * self.depth + "<object %s%s>" % (text, "/" if close else ""))
        if not close:
            self.depth += 1

    def close(self):
        self.depth -= 1
        self.lines.append("  " * self.depth + "</object>")

    def info(self, name, value):
        self.lines.append("  " * self.depth + '<info name="%s" value="%s"/>' % (name, value))


def mask(bits):
    v = 0
    for b in bits:
        v |= 1 << b
    return "0x%08x" % v if v < (1 << 32) else "0x" + ",".join(
        "%08x" % ((v >> (32 * i)) & 0xFFFFFFFF) for i in reversed(range((v.bit_length() + 31) // 32)))


def sets(cpus, nodes):
    c, n = mask(cpus), mask(nodes)
    return [("cpuset", c), ("complete_cpuset", c), ("nodeset", n), ("complete_nodeset", n)]


def busid(bus, dev=0, fn=0):
    return "0000:%02x:%02x.%x" % (bus, dev, fn)


def host_bridge(w, lo, hi):
    w.open([("type", "Bridge"), ("gp_index", w.next_gp()), ("bridge_type", "0-1"), ("depth", "0"),
            ("bridge_pci", "0000:[%02x-%02x]" % (lo, hi))])


def bridge(w, at, lo, hi, depth, ids="1000:c030"):
    """A PCI-to-PCI bridge (a root port or a switch port) at bus id 'at'."""
    w.open([("type", "Bridge"), ("gp_index", w.next_gp()), ("bridge_type", "1-1"), ("depth", str(depth)),
            ("bridge_pci", "0000:[%02x-%02x]" % (lo, hi)), ("pci_busid", at),
            ("pci_type", "0604 [%s] [0000:0000] 00" % ids), ("pci_link_speed", "32.000000")])


def pcidev(w, at, cls, ids, subids, vendor, device):
    w.open([("type", "PCIDev"), ("gp_index", w.next_gp()), ("pci_busid", at),
            ("pci_type", "%s [%s] [%s] 00" % (cls, ids, subids)), ("pci_link_speed", "32.000000")])
    w.info("PCIVendor", vendor)
    w.info("PCIDevice", device)
    w.close()


def gpu(w, at):
    pcidev(w, at, "0302", "10de:2330", "10de:16c1", "NVIDIA Corporation", "GH100 [H100 SXM5 80GB]")


def efa(w, at):
    pcidev(w, at, "0200", "1d0f:efa1", "1d0f:efa1", "Amazon.com, Inc.", "Elastic Fabric Adapter (EFA)")


def machine(w, product, npkg, body):
    cpus = range(npkg * PUS_PER_PACKAGE)
    w.lines.append('<?xml version="1.0" encoding="UTF-8"?>')
    w.lines.append('<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    w.lines.append('<topology version="2.0">')
    w.depth = 1
    attrs = [("type", "Machine"), ("os_index", "0")] + sets(cpus, range(npkg))
    attrs += [("allowed_cpuset", mask(cpus)), ("allowed_nodeset", mask(range(npkg))), ("gp_index", w.next_gp())]
    w.open(attrs)
    w.info("DMIProductName", product)
    for p in range(npkg):
        pus = range(p * PUS_PER_PACKAGE, (p + 1) * PUS_PER_PACKAGE)
        w.open([("type", "Package"), ("os_index", str(p))] + sets(pus, [p]) + [("gp_index", w.next_gp())])
        w.open([("type", "NUMANode"), ("os_index", str(p))] + sets(pus, [p]) +
               [("gp_index", w.next_gp()), ("local_memory", str(1 << 40))], close=True)
        for c in range(PUS_PER_PACKAGE // 2):
            core = [pus[2 * c], pus[2 * c + 1]]
            w.open([("type", "Core"), ("os_index", str(c))] + sets(core, [p]) + [("gp_index", w.next_gp())])
            for pu in core:
                w.open([("type", "PU"), ("os_index", str(pu))] + sets([pu], [p]) + [("gp_index", w.next_gp())],
                       close=True)
            w.close()
        body(w, p)
        w.close()
    w.close()
    w.depth = 0
    w.lines.append("</topology>")
    return "\n".join(w.lines) + "\n"


def p5_package(w, p):
    for s in range(4 * p, 4 * p + 4):
        base = s * 0x20
        host_bridge(w, base, base + 0x1F)
        bridge(w, busid(base, 1), base + 1, base + 0x1F, 1, "1022:14ab")   # root port
        bridge(w, busid(base + 1), base + 2, base + 0x1F, 2)                # switch upstream
        for d in range(5):
            bridge(w, busid(base + 2, d), base + 3 + d, base + 3 + d, 3)    # switch downstream
            (gpu if d == 0 else efa)(w, busid(base + 3 + d))
            w.close()
        w.close()
        w.close()
        w.close()


def fewnics_package(w, p):
    for g in range(4 * p, 4 * p + 4):
        bus = 0x10 + g * 0x10
        host_bridge(w, bus - 1, bus + 0x0E)
        bridge(w, busid(bus - 1, 1), bus, bus, 1, "1022:14ab")
        gpu(w, busid(bus))
        w.close()
        w.close()
    bus = 0x90 + p * 0x10
    host_bridge(w, bus - 1, bus + 0x0E)
    bridge(w, busid(bus - 1, 1), bus, bus, 1, "1022:14ab")
    efa(w, busid(bus))
    w.close()
    w.close()


def main():
    out = os.path.dirname(os.path.abspath(__file__)) if len(sys.argv) < 2 else sys.argv[1]
    files = {
        "p5.xml": machine(Writer(), "p5.48xlarge-like", 2, p5_package),
        "fewnics.xml": machine(Writer(), "8 GPUs 2 NICs", 2, fewnics_package),
    }
    for name, text in files.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
