/*
 * test_locality.c - who a peer is relative to us, as the core computes it
 * once per loaded generation (nixl_peer_locality, src/core/peer.c) and
 * hands to every version-2 backend at peer_open: each identity field of
 * the agent section, changed alone, changes exactly what it should; unknown
 * (zero) fields are never "the same"; a version-1 blob is never "the same
 * process"; loopback is everything.  Then through a real agent: the record
 * of a peer agent in this process, from its encoded blob.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/agent.h"
#include "core/md_codec.h"
#include "util/host.h"

#include "../../common/test_check.h"

typedef struct want {
    int process, host, pidns, netns, uid;
} want_t;

static void check(const char *what, const nixl_md_t *md, const nixl_proc_id_t *self, int loopback, want_t w)
{
    nixl_be_peer_t l;
    memset(&l, 0xa5, sizeof(l));
    nixl_peer_locality(md, self, loopback, &l);
    int ok = l.same_process == w.process && l.same_host == w.host && l.same_pidns == w.pidns &&
             l.same_netns == w.netns && l.same_uid == w.uid && l.pid == md->pid && l.uid == md->uid &&
             l.start_time == md->start_time && l.name == md->name;
    if (!ok) {
        fprintf(stderr,
                "locality %s: got process %u host %u pidns %u netns %u uid %u, want %d %d %d %d %d (or the copied "
                "fields differ)\n",
                what, l.same_process, l.same_host, l.same_pidns, l.same_netns, l.same_uid, w.process, w.host, w.pidns,
                w.netns, w.uid);
        failures++;
    }
}

/* A peer exactly like self (version 2). */
static nixl_md_t like(const nixl_proc_id_t *self)
{
    nixl_md_t md;
    memset(&md, 0, sizeof(md));
    snprintf(md.name, sizeof(md.name), "peer");
    md.host = self->host;
    md.pid = self->pid;
    md.uid = self->uid;
    md.start_time = self->start_time;
    md.pidns = self->pidns;
    md.netns = self->netns;
    md.version = NIXL_MD_VERSION;
    return md;
}

static void test_fields(void)
{
    nixl_proc_id_t self;
    nixl_proc_id_get(&self);
    CHECK(self.pid == (uint32_t)getpid() && self.start_time != 0 && self.pidns != 0 && self.netns != 0);
    nixl_md_t md;

    md = like(&self);
    check("same process", &md, &self, 0, (want_t){1, 1, 1, 1, 1});
    md = like(&self);
    md.pid++;
    check("another process", &md, &self, 0, (want_t){0, 1, 1, 1, 1});
    md = like(&self);
    md.start_time++;
    check("a reused pid", &md, &self, 0, (want_t){0, 1, 1, 1, 1});
    md = like(&self);
    md.start_time = self.start_time = 0;
    check("start time unknown", &md, &self, 0, (want_t){0, 1, 1, 1, 1});
    nixl_proc_id_get(&self);
    md = like(&self);
    md.uid++;
    check("another uid", &md, &self, 0, (want_t){1, 1, 1, 1, 0});
    md = like(&self);
    md.netns++;
    check("another network namespace", &md, &self, 0, (want_t){1, 1, 1, 0, 1});
    md = like(&self);
    md.netns = 0;
    check("network namespace unknown", &md, &self, 0, (want_t){1, 1, 1, 0, 1});
    md = like(&self);
    md.pidns++;
    check("another pid namespace", &md, &self, 0, (want_t){0, 1, 0, 1, 1});
    md = like(&self);
    md.pidns = 0;
    check("pid namespace unknown", &md, &self, 0, (want_t){0, 1, 0, 1, 1});
    md = like(&self);
    md.host.boot_id[3] ^= 1;
    check("another boot", &md, &self, 0, (want_t){0, 0, 0, 0, 0});
    /* A version-1 blob: boot id and pid, nothing else. */
    md = like(&self);
    md.version = 1;
    md.uid = 0;
    md.start_time = md.pidns = md.netns = 0;
    check("version 1", &md, &self, 0, (want_t){0, 1, 0, 0, 0});
    /* Hostnames count only when neither side knows its boot id. */
    nixl_proc_id_t anon = self;
    memset(anon.host.boot_id, 0, sizeof(anon.host.boot_id));
    md = like(&anon);
    check("no boot ids, same hostname", &md, &anon, 0, (want_t){1, 1, 1, 1, 1});
    md.host.hostname[0] ^= 1;
    check("no boot ids, another hostname", &md, &anon, 0, (want_t){0, 0, 0, 0, 0});
    md = like(&self);
    md.host.boot_id[0] ^= 1;
    check("loopback", &md, &self, 1, (want_t){1, 1, 1, 1, 1});
}

/* Two agents of this process: what b's metadata tells a. */
static void test_agents(void)
{
    nixl_agent_config_t cfg = {.field_mask = NIXL_AGENT_CONFIG_NAME, .name = "b"};
    nixl_agent_t *b = NULL;
    CHECK_ST(nixl_agent_create(&cfg, &b), NIXL_OK);
    if (!b)
        return;
    void *blob = NULL;
    size_t len = 0;
    CHECK_ST(nixl_md_get_local(b, &blob, &len), NIXL_OK);
    nixl_md_t *md = NULL;
    CHECK_ST(nixl_md_decode(blob, len, &md), NIXL_OK);
    if (md) {
        nixl_proc_id_t self;
        nixl_proc_id_get(&self);
        CHECK(md->version == NIXL_MD_VERSION && md->pid == self.pid && md->uid == self.uid);
        CHECK(md->start_time == self.start_time && md->pidns == self.pidns && md->netns == self.netns);
        check("an agent of this process", md, &self, 0, (want_t){1, 1, 1, 1, 1});
        nixl_md_free(md);
    }
    free(blob);
    nixl_agent_destroy(b);
}

int main(void)
{
    test_fields();
    test_agents();
    if (failures) {
        fprintf(stderr, "test_locality: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_locality: all passed\n");
    return 0;
}
