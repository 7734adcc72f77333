/*
 * fuzz_sock.c - libFuzzer harness for the metadata listener (src/md/socket.c),
 * driven over a real socket: each input is the bytes a client sends on one
 * connection to a listener on 127.0.0.1 (then it half-closes and reads
 * whatever comes back).  Beyond "does not crash", the listener must keep
 * socket.h's promises:
 *   - a reply, if any, is exactly one well-formed REPLY frame (magic,
 *     version 1, a known status, a payload only for a successful FETCH);
 *     an authenticated (version-2) request gets a refusal with status
 *     NIXL_ERR_NOT_AUTHENTICATED (this listener has no secret);
 *   - a handler runs only for a well-formed request, and sees exactly its
 *     payload (SEND: the blob; INVALIDATE: the name);
 *   - the listener keeps serving: every 64th input, and the last one, a
 *     well-formed FETCH after it is answered with our blob;
 *   - it holds no connection or buffer once a connection is over.
 * The first input byte picks how the bytes are written (all at once, or in
 * pieces of 1..16 bytes), so header and payload arrive split.
 * replay.c runs the same function over tests/fuzz/sock_corpus in every build
 * (test fuzz-sock-corpus), then checks once more that the listener serves;
 * gen_sock_corpus.c writes that corpus.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "md/socket.h"
#include "util/time.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR 16
#define MAGIC 0x4b53584eu

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_sock: %s\n", what);
    abort();
}

static const uint8_t our_blob[] = "the listener's metadata";
static struct {
    pthread_mutex_t lock;
    int calls;
    size_t len;
    int type; /* 1 load, 2 fetch, 3 invalidate */
} seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

static nixl_status_t on_load(void *arg, const char *from, const void *blob, size_t len)
{
    (void)arg;
    (void)from;
    (void)blob;
    pthread_mutex_lock(&seen.lock);
    seen.calls++;
    seen.len = len;
    seen.type = 1;
    pthread_mutex_unlock(&seen.lock);
    return len & 1 ? NIXL_ERR_BAD_METADATA : NIXL_OK;
}

static nixl_status_t on_fetch(void *arg, void **blob_out, size_t *len_out)
{
    (void)arg;
    pthread_mutex_lock(&seen.lock);
    seen.calls++;
    seen.len = 0;
    seen.type = 2;
    pthread_mutex_unlock(&seen.lock);
    *blob_out = malloc(sizeof(our_blob));
    if (!*blob_out)
        return NIXL_ERR_NO_MEMORY;
    memcpy(*blob_out, our_blob, sizeof(our_blob));
    *len_out = sizeof(our_blob);
    return NIXL_OK;
}

static nixl_status_t on_invalidate(void *arg, const char *from, const char *name)
{
    (void)arg;
    (void)from;
    pthread_mutex_lock(&seen.lock);
    seen.calls++;
    seen.len = strlen(name);
    seen.type = 3;
    pthread_mutex_unlock(&seen.lock);
    return NIXL_OK;
}

static nixl_md_listener_t *listener;
static uint16_t port;
static unsigned long inputs;

static void listener_once(void)
{
    if (listener)
        return;
    nixl_md_handlers_t h = {.on_load = on_load, .on_fetch = on_fetch, .on_invalidate = on_invalidate};
    if (nixl_md_listener_start("127.0.0.1", 0, &h, &listener) != NIXL_OK)
        fail("cannot start a listener on 127.0.0.1");
    port = nixl_md_listener_port(listener);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int conn_open(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        fail("cannot connect to the listener");
    return fd;
}

/* Reads until EOF (the listener always closes; 3 s at most). */
static size_t read_all(int fd, uint8_t *buf, size_t cap)
{
    size_t got = 0;
    uint64_t end = nixl_now_ns() + 3000000000ull;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        uint64_t now = nixl_now_ns();
        if (now >= end)
            fail("the listener neither replied nor closed within 3 s of our half-close");
        if (poll(&p, 1, (int)((end - now) / 1000000) + 1) <= 0)
            continue;
        uint8_t sink[256];
        ssize_t n = got < cap ? recv(fd, buf + got, cap - got, 0) : recv(fd, sink, sizeof(sink), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return got;
        if (got < cap)
            got += (size_t)n;
        else
            fail("a reply longer than any the listener may send");
    }
}

/* A well-formed FETCH must still be answered with our blob. */
static void check_still_serving(void)
{
    void *blob = NULL;
    size_t len = 0;
    if (nixl_md_sock_fetch("127.0.0.1", port, 3000, &blob, &len) != NIXL_OK || len != sizeof(our_blob) ||
        memcmp(blob, our_blob, len) != 0)
        fail("the listener stopped serving well-formed requests");
    free(blob);
    nixl_md_listener_stats_t st;
    for (int i = 0; i < 300; i++) {
        nixl_md_listener_stats(listener, &st);
        if (st.conns == 0 && st.payload_bytes == 0)
            return;
        usleep(10000);
    }
    fail("the listener still holds a connection or a buffer after every client closed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    listener_once();
    unsigned piece = data[0] & 15; /* 0: all at once, else pieces of that many bytes */
    const uint8_t *msg = data + 1;
    size_t len = size - 1;

    pthread_mutex_lock(&seen.lock);
    seen.calls = 0;
    pthread_mutex_unlock(&seen.lock);

    int fd = conn_open();
    for (size_t off = 0; off < len;) {
        /* Pieces for the first 256 bytes (header and a payload's start). */
        size_t n = piece && off < 256 ? (len - off < piece ? len - off : piece) : len - off;
        ssize_t k = send(fd, msg + off, n, MSG_NOSIGNAL);
        if (k <= 0)
            break; /* the listener closed first: fine, it judged the bytes so far */
        off += (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    uint8_t rep[HDR + sizeof(our_blob) + 1];
    size_t got = read_all(fd, rep, sizeof(rep));
    close(fd);

    /* What a well-formed request looks like, from the input alone. */
    int wf = len >= HDR && get_u32(msg) == MAGIC && msg[4] == 1 && msg[5] == 0 && get_u32(msg + 8) == 0;
    unsigned type = wf ? (unsigned)(msg[6] | msg[7] << 8) : 0;
    uint32_t plen = wf ? get_u32(msg + 12) : 0;
    wf = wf && type >= 1 && type <= 3 && len >= HDR + (size_t)plen && (type != 2 || plen == 0) &&
         (type != 1 || plen > 0) && (type != 3 || (plen > 0 && plen < 64));
    if (wf && type == 3)
        for (uint32_t i = 0; i < plen; i++)
            wf = wf && msg[HDR + i] >= 0x20 && msg[HDR + i] <= 0x7e;

    pthread_mutex_lock(&seen.lock);
    int calls = seen.calls, stype = seen.type;
    size_t slen = seen.len;
    pthread_mutex_unlock(&seen.lock);
    if (calls > 1)
        fail("more than one handler call for one connection");
    if (calls && !wf)
        fail("a handler ran for a malformed request");
    if (calls && ((unsigned)stype != type || (type != 2 && slen != plen)))
        fail("a handler saw another request than the one sent");
    /* A well-formed version-2 (authenticated) request: this keyless
     * listener refuses it with NIXL_ERR_NOT_AUTHENTICATED, no handler run. */
    int v2 = len >= HDR + 56 && get_u32(msg) == MAGIC && msg[4] == 2 && msg[5] == 0 && get_u32(msg + 8) == 0;
    unsigned t2 = v2 ? (unsigned)(msg[6] | msg[7] << 8) : 0;
    uint32_t p2 = v2 ? get_u32(msg + 12) : 0;
    v2 = v2 && t2 >= 1 && t2 <= 3 && len >= HDR + (size_t)p2 + 56;
    if (got && !calls) {
        if (!v2 || got != HDR || get_u32(rep) != MAGIC || rep[4] != 1 || rep[6] != 4 ||
            (int32_t)get_u32(rep + 8) != NIXL_ERR_NOT_AUTHENTICATED || get_u32(rep + 12) != 0)
            fail("a reply to a request no handler answered, other than refusing an authenticated one");
        got = 0; /* checked */
    }
    if (got) {
        if (!wf || !calls)
            fail("a reply to a request no handler answered");
        if (got < HDR || get_u32(rep) != MAGIC || rep[4] != 1 || rep[5] != 0 || rep[6] != 4 || rep[7] != 0)
            fail("a reply that is not one well-formed REPLY frame");
        uint32_t rlen = get_u32(rep + 12);
        int32_t st = (int32_t)get_u32(rep + 8);
        if (got != HDR + (size_t)rlen || (rlen && (type != 2 || st != NIXL_OK)))
            fail("a reply whose payload does not match its header");
        if (type == 2 && (rlen != sizeof(our_blob) || memcmp(rep + HDR, our_blob, rlen) != 0))
            fail("a FETCH answered with other bytes than our blob");
    }
    if (++inputs % 64 == 0)
        check_still_serving();
    return 0;
}

/* replay.c calls this after the last input. */
void fuzz_replay_done(void);
void fuzz_replay_done(void)
{
    if (listener) {
        check_still_serving();
        nixl_md_listener_stop(listener);
        listener = NULL;
    }
}
