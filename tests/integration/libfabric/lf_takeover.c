/*
 * lf_takeover.c - one side of takeover_remote.sh (docs/trust.md claim 16
 * for a peer whose process the owner cannot look at): agents with the
 * libfabric backend (tcp on --iface) and a progress thread, public API
 * only.
 *
 *   lf_takeover owner IFACE
 *       Agent "owner", listener on every address of its namespace: prints
 *       "ready PORT", waits for "victim"'s metadata, connects to it
 *       (nixl_md_connect) and prints "connected STATUS"; then keeps the
 *       connection (heartbeats on its progress thread) for 40 s or until
 *       killed.
 *
 *   lf_takeover send IFACE IP PORT [stay]
 *       Agent "victim" (a new instance each run) sends its metadata to
 *       IP:PORT and prints "send STATUS"; with stay it then lives on (its
 *       progress thread answering the owner) until killed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nixl.h"

static nixl_agent_t *mk(const char *name, const char *iface, int listen)
{
    nixl_agent_config_t c = {.field_mask = NIXL_AGENT_CONFIG_NAME | NIXL_AGENT_CONFIG_PROGRESS_THREAD,
                             .name = name,
                             .progress_thread = 1};
    if (listen) {
        c.field_mask |= NIXL_AGENT_CONFIG_LISTEN | NIXL_AGENT_CONFIG_LISTEN_PORT;
        c.listen = 1;
        c.listen_port = 0;
    }
    nixl_agent_t *a = NULL;
    nixl_status_t st = nixl_agent_create(&c, &a);
    if (st != NIXL_OK) {
        fprintf(stderr, "lf_takeover: agent %s: %s\n", name, nixl_status_name(st));
        exit(2);
    }
    nixl_param_t p[2] = {{"provider", "tcp"}, {"iface", iface}};
    nixl_backend_t *b = NULL;
    st = nixl_backend_create(a, "libfabric", p, 2, &b);
    if (st != NIXL_OK) {
        fprintf(stderr, "lf_takeover: libfabric on %s: %s\n", iface, nixl_status_name(st));
        exit(2);
    }
    static unsigned char buf[1 << 16];
    nixl_desc_t d = {(uintptr_t)buf, sizeof(buf), 0, 0, NULL};
    nixl_dlist_t dl = {NIXL_MEM_DRAM, 1, &d};
    if (nixl_mem_register(a, &dl, NULL) != NIXL_OK)
        exit(2);
    return a;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (getenv("NIXL_MD_SECRET_FILE"))
        unsetenv("NIXL_MD_SECRET_FILE"); /* the claim is about the listener without a secret */
    if (argc == 3 && strcmp(argv[1], "owner") == 0) {
        nixl_agent_t *a = mk("owner", argv[2], 1);
        printf("ready %u\n", (unsigned)nixl_agent_listen_port(a));
        int k = 0;
        while (nixl_md_check_remote(a, "victim") != NIXL_OK && k++ < 300)
            nap_ms(50);
        printf("connected %s\n", nixl_status_name(nixl_md_connect(a, "victim", NULL)));
        for (int i = 0; i < 800; i++)
            nap_ms(50);
        nixl_agent_destroy(a);
        return 0;
    }
    if ((argc == 5 || argc == 6) && strcmp(argv[1], "send") == 0) {
        nixl_agent_t *a = mk("victim", argv[2], 0);
        printf("send %s\n", nixl_status_name(nixl_md_send_local(a, argv[3], (uint16_t)atoi(argv[4]))));
        if (argc == 6 && strcmp(argv[5], "stay") == 0)
            for (int i = 0; i < 800; i++)
                nap_ms(50);
        nixl_agent_destroy(a);
        return 0;
    }
    fprintf(stderr, "usage: lf_takeover owner IFACE | send IFACE IP PORT [stay]\n");
    return 2;
}
