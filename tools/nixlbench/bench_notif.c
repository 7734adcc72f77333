/*
 * bench_notif.c - the little text protocol between initiator and target.
 *
 * Notifications are delivered through a callback inside nixl_notifs_get;
 * they are copied into an inbox and handled after the call returns, so the
 * benchmark never calls back into the agent from inside the library.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static bench_msg_t *inbox;
static size_t inbox_head, inbox_len, inbox_cap;

static void inbox_push(const char *sender, const void *msg, size_t len, void *arg)
{
    (void)arg;
    if (inbox_len == inbox_cap) {
        size_t cap = inbox_cap ? inbox_cap * 2 : 16;
        bench_msg_t *n = malloc(cap * sizeof(*n));
        if (!n)
            bench_die("out of memory for the notification inbox");
        for (size_t i = 0; i < inbox_len; i++)
            n[i] = inbox[(inbox_head + i) % inbox_cap];
        free(inbox);
        inbox = n;
        inbox_cap = cap;
        inbox_head = 0;
    }
    bench_msg_t *m = &inbox[(inbox_head + inbox_len) % inbox_cap];
    snprintf(m->sender, sizeof(m->sender), "%s", sender ? sender : "");
    size_t n = len < sizeof(m->text) - 1 ? len : sizeof(m->text) - 1;
    memcpy(m->text, msg, n);
    m->text[n] = '\0';
    inbox_len++;
}

void bench_inbox_poll(nixl_agent_t *agent)
{
    bench_check(nixl_notifs_get(agent, inbox_push, NULL, NULL), "nixl_notifs_get");
}

int bench_inbox_pop(bench_msg_t *msg_out)
{
    if (!inbox_len)
        return -1;
    *msg_out = inbox[inbox_head];
    inbox_head = (inbox_head + 1) % inbox_cap;
    inbox_len--;
    return 0;
}

static int has_prefix(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(text, prefix, n) == 0 && (text[n] == '\0' || text[n] == ' ');
}

void bench_inbox_wait(nixl_agent_t *agent, const char *const *prefixes, size_t n, uint32_t timeout_ms,
                      bench_msg_t *msg_out)
{
    uint64_t deadline = bench_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    const struct timespec nap = {0, 20000};
    for (;;) {
        bench_msg_t m;
        bench_inbox_poll(agent);
        while (bench_inbox_pop(&m) == 0) {
            for (size_t i = 0; i < n; i++) {
                if (has_prefix(m.text, prefixes[i])) {
                    *msg_out = m;
                    return;
                }
            }
            if (has_prefix(m.text, "err"))
                bench_die("target reported an error: %s", m.text);
            fprintf(stderr, "nixlbench: ignoring unexpected notification from %s: \"%s\"\n", m.sender, m.text);
        }
        if (bench_child_alive() < 0)
            bench_die("the target process died while we waited for \"%s\"", prefixes[0]);
        if (bench_now_ns() > deadline)
            bench_die("no \"%s\" answer from the target within %u ms", prefixes[0], timeout_ms);
        nanosleep(&nap, NULL);
    }
}

void bench_notif_send(nixl_agent_t *agent, const char *peer, const char *text)
{
    nixl_status_t st = nixl_notif_send(agent, peer, text, strlen(text), NULL);
    if (st != NIXL_OK) {
        char call[BENCH_MSG_MAX + 32];
        snprintf(call, sizeof(call), "nixl_notif_send(\"%s\")", text);
        bench_check(st, call);
    }
}
