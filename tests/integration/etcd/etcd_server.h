/*
 * etcd_server.h - a private etcd for one test: its own loopback (or given)
 * address, free ports, a data dir in a scratch directory; stopped, restarted
 * (same ports, data kept or wiped) and removed by the test.
 *
 * Needs no nixl and no libcurl (plain HTTP/1.0 over a socket), so tests
 * built without etcd support can still say why they skip.
 */
#ifndef NIXL_TEST_ETCD_SERVER_H
#define NIXL_TEST_ETCD_SERVER_H

#include <stdint.h>
#include <sys/types.h>

/* What etcd_server_start_opts adds to a plain etcd ("" or 0: left out). */
typedef struct etcd_server_opts {
    char cert_file[256], key_file[256]; /* https:// client URLs with this certificate */
    char trusted_ca_file[256];          /* --client-cert-auth: clients need a certificate it signed */
    int auth_token_ttl_s;               /* --auth-token simple --auth-token-ttl N (auth itself: etcdctl) */
} etcd_server_opts_t;

typedef struct etcd_server {
    pid_t pid; /* 0 when stopped */
    char dir[256];
    char ip[64];
    uint16_t client_port, peer_port;
    uint16_t metrics_port; /* plain HTTP /health when the client URLs are https:// (0: none) */
    char url[128];         /* http(s)://ip:client_port */
    etcd_server_opts_t opts;
} etcd_server_t;

/* Start etcd on ip (NULL: 127.0.0.1) and wait until it is healthy.
 * 0 on success; 77 with the reason printed when the etcd binary is missing;
 * -1 on failure (with etcd's log printed). */
int etcd_server_start(etcd_server_t *s, const char *ip);
/* The same with TLS or token settings (o may be NULL). */
int etcd_server_start_opts(etcd_server_t *s, const char *ip, const etcd_server_opts_t *o);
/* Stop with sig (SIGKILL: a crash) and reap it; the data dir stays. */
void etcd_server_stop(etcd_server_t *s, int sig);
/* Start again on the same ports; wipe: with an empty data dir (etcd lost
 * everything).  0 on success. */
int etcd_server_restart(etcd_server_t *s, int wipe);
/* Stop it (if running) and remove its directory. */
void etcd_server_cleanup(etcd_server_t *s);
/* 1 when GET /health answers {"health":"true"} within timeout_ms. */
int etcd_server_healthy(const etcd_server_t *s, int timeout_ms);

/* The application's own keys next to nixl's (tests keep buffer addresses
 * and progress flags there).  url: "http://ip:port".  put: 0 on success;
 * get: 1 found (value in out), 0 absent, -1 error (etcd unreachable). */
int etcd_kv_put(const char *url, const char *key, const char *value);
int etcd_kv_get(const char *url, const char *key, char *out, size_t cap);

/* Two network namespaces ("hosts") with a veth each on a bridge of the
 * root namespace, whose address (bridge_ip) etcd can listen on.  Needs
 * root and ip(8); -1 with the reason printed as a SKIP line otherwise. */
typedef struct test_netns {
    char ns[2][32];
    char br[16];
    char bridge_ip[32];
    int made;
} test_netns_t;

int test_netns_create(test_netns_t *n);
void test_netns_destroy(test_netns_t *n);

#endif
