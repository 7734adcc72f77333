/*
 * etcd_server.c - start, crash, restart and remove a private etcd for a
 * test (see etcd_server.h).  etcd's own output goes to a log file in the
 * scratch directory and is printed when it fails to come up.
 */
#include "etcd_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ETCD_BIN "etcd"
#define START_TIMEOUT_MS 15000

static uint64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int etcd_in_path(void)
{
    const char *path = getenv("PATH");
    char buf[4096];
    if (!path)
        path = "/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t n = colon ? (size_t)(colon - path) : strlen(path);
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, path, ETCD_BIN);
        if (access(buf, X_OK) == 0)
            return 1;
        if (!colon)
            break;
        path = colon + 1;
    }
    return 0;
}

/* A port nobody listens on now (the kernel's pick). */
static uint16_t free_port(const char *ip)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    uint16_t port = 0;
    if (fd < 0)
        return 0;
    inet_pton(AF_INET, ip, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* One HTTP/1.0 exchange with etcd at ip:port; the reply (headers and body)
 * goes to resp.  0 when a whole reply arrived. */
static int http_exchange(const char *ip, uint16_t port, const char *method, const char *path, const char *body,
                         char *resp, size_t cap, int timeout_ms)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    uint64_t deadline = ms_now() + (uint64_t)timeout_ms;
    size_t got = 0, blen = body ? strlen(body) : 0;
    int rc = -1;
    char head[256];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
        goto out;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto out;
    int n = snprintf(head, sizeof(head), "%s %s HTTP/1.0\r\nHost: %s:%u\r\nContent-Type: application/json\r\n"
                                         "Content-Length: %zu\r\n\r\n",
                     method, path, ip, (unsigned)port, blen);
    if (write(fd, head, (size_t)n) != n || (blen && write(fd, body, blen) != (ssize_t)blen))
        goto out;
    while (got < cap - 1 && ms_now() < deadline) {
        ssize_t r = read(fd, resp + got, cap - 1 - got);
        if (r == 0) {
            rc = 0;
            break;
        }
        if (r < 0)
            break;
        got += (size_t)r;
    }
    resp[got] = '\0';
out:
    close(fd);
    return rc;
}

int etcd_server_healthy(const etcd_server_t *s, int timeout_ms)
{
    char resp[1024];
    if (s->metrics_port && http_exchange("127.0.0.1", s->metrics_port, "GET", "/health", NULL, resp, sizeof(resp),
                                         timeout_ms))
        return 0;
    if (!s->metrics_port &&
        http_exchange(s->ip, s->client_port, "GET", "/health", NULL, resp, sizeof(resp), timeout_ms))
        return 0;
    return strstr(resp, " 200 ") && strstr(resp, "\"health\":\"true\"");
}

static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_encode(const char *src, char *dst)
{
    size_t n = strlen(src), o = 0;
    const unsigned char *s = (const unsigned char *)src;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        dst[o++] = b64_chars[(v >> 18) & 63];
        dst[o++] = b64_chars[(v >> 12) & 63];
        dst[o++] = i + 1 < n ? b64_chars[(v >> 6) & 63] : '=';
        dst[o++] = i + 2 < n ? b64_chars[v & 63] : '=';
    }
    dst[o] = '\0';
}

static int b64_decode(const char *src, size_t len, char *dst, size_t cap)
{
    size_t o = 0;
    unsigned v = 0;
    int bits = 0;
    for (size_t i = 0; i < len && src[i] != '='; i++) {
        const char *p = strchr(b64_chars, src[i]);
        if (!p || !src[i])
            return -1;
        v = v << 6 | (unsigned)(p - b64_chars);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o + 1 >= cap)
                return -1;
            dst[o++] = (char)((v >> bits) & 0xff);
        }
    }
    dst[o] = '\0';
    return 0;
}

/* "http://ip:port" into its parts. */
static int url_split(const char *url, char *ip, size_t cap, uint16_t *port)
{
    unsigned p;
    const char *h = strstr(url, "://");
    h = h ? h + 3 : url;
    const char *colon = strrchr(h, ':');
    if (!colon || (size_t)(colon - h) >= cap || sscanf(colon + 1, "%u", &p) != 1 || p == 0 || p > 65535)
        return -1;
    memcpy(ip, h, (size_t)(colon - h));
    ip[colon - h] = '\0';
    *port = (uint16_t)p;
    return 0;
}

int etcd_kv_put(const char *url, const char *key, const char *value)
{
    char ip[64], body[1024], k[256], v[512], resp[2048];
    uint16_t port;
    if (url_split(url, ip, sizeof(ip), &port) || strlen(key) > 180 || strlen(value) > 360)
        return -1;
    b64_encode(key, k);
    b64_encode(value, v);
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"value\":\"%s\"}", k, v);
    if (http_exchange(ip, port, "POST", "/v3/kv/put", body, resp, sizeof(resp), 2000))
        return -1;
    return strstr(resp, " 200 ") ? 0 : -1;
}

int etcd_kv_get(const char *url, const char *key, char *out, size_t cap)
{
    char ip[64], body[512], k[256], resp[4096];
    uint16_t port;
    if (url_split(url, ip, sizeof(ip), &port) || strlen(key) > 180)
        return -1;
    b64_encode(key, k);
    snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
    if (http_exchange(ip, port, "POST", "/v3/kv/range", body, resp, sizeof(resp), 2000) || !strstr(resp, " 200 "))
        return -1;
    const char *val = strstr(resp, "\"value\":\"");
    if (!val)
        return strstr(resp, "\"kvs\"") ? -1 : 0;
    val += 9;
    const char *end = strchr(val, '"');
    if (!end || b64_decode(val, (size_t)(end - val), out, cap))
        return -1;
    return 1;
}

static void print_log(const etcd_server_t *s)
{
    char path[300], line[512];
    snprintf(path, sizeof(path), "%s/etcd.log", s->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "---- %s ----\n", path);
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    fclose(f);
}

static int launch(etcd_server_t *s)
{
    char data[300], logp[300], client[128], peer[128], cluster[160], metrics[64], ttl[16];
    const etcd_server_opts_t *o = &s->opts;
    int tls = o->cert_file[0] != '\0';
    snprintf(data, sizeof(data), "%s/data", s->dir);
    snprintf(logp, sizeof(logp), "%s/etcd.log", s->dir);
    snprintf(client, sizeof(client), "%s://%s:%u", tls ? "https" : "http", s->ip, (unsigned)s->client_port);
    snprintf(metrics, sizeof(metrics), "http://127.0.0.1:%u", (unsigned)s->metrics_port);
    snprintf(ttl, sizeof(ttl), "%d", o->auth_token_ttl_s);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%u", (unsigned)s->peer_port);
    snprintf(cluster, sizeof(cluster), "t=%s", peer);
    snprintf(s->url, sizeof(s->url), "%s", client);
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* etcd must not outlive a test that crashed. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        const char *argv[48] = {ETCD_BIN, "--name", "t", "--data-dir", data, "--listen-client-urls", client,
                                "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
                                "--initial-cluster-state", "new", "--log-level", "error"};
        int argc = 19;
        if (tls) {
            const char *more[] = {"--cert-file", o->cert_file, "--key-file", o->key_file, "--listen-metrics-urls",
                                  metrics};
            for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++)
                argv[argc++] = more[i];
        }
        if (o->trusted_ca_file[0]) {
            argv[argc++] = "--trusted-ca-file";
            argv[argc++] = o->trusted_ca_file;
            argv[argc++] = "--client-cert-auth";
        }
        if (o->auth_token_ttl_s > 0) {
            argv[argc++] = "--auth-token";
            argv[argc++] = "simple";
            argv[argc++] = "--auth-token-ttl";
            argv[argc++] = ttl;
            /* Users are made by the test: the cheapest hashing will do. */
            argv[argc++] = "--bcrypt-cost";
            argv[argc++] = "4";
        }
        argv[argc] = NULL;
        execvp(ETCD_BIN, (char *const *)argv);
        fprintf(stderr, "exec etcd: %s\n", strerror(errno));
        _exit(127);
    }
    s->pid = pid;
    uint64_t deadline = ms_now() + START_TIMEOUT_MS;
    while (ms_now() < deadline) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            s->pid = 0;
            return -1;
        }
        if (etcd_server_healthy(s, 500))
            return 0;
        usleep(50 * 1000);
    }
    etcd_server_stop(s, SIGKILL);
    return -1;
}

int etcd_server_start(etcd_server_t *s, const char *ip)
{
    return etcd_server_start_opts(s, ip, NULL);
}

int etcd_server_start_opts(etcd_server_t *s, const char *ip, const etcd_server_opts_t *o)
{
    memset(s, 0, sizeof(*s));
    if (o)
        s->opts = *o;
    if (!etcd_in_path()) {
        printf("SKIP: the etcd binary is not in PATH (Debian package etcd-server)\n");
        return 77;
    }
    snprintf(s->ip, sizeof(s->ip), "%s", ip ? ip : "127.0.0.1");
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof(s->dir), "%s/nixl-etcd-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->dir)) {
        fprintf(stderr, "etcd_server: mkdtemp %s: %s\n", s->dir, strerror(errno));
        return -1;
    }
    /* A port taken between our pick and etcd's bind: pick again. */
    for (int attempt = 0; attempt < 3; attempt++) {
        s->client_port = free_port(s->ip);
        s->peer_port = free_port("127.0.0.1");
        s->metrics_port = s->opts.cert_file[0] ? free_port("127.0.0.1") : 0;
        if (!s->client_port || !s->peer_port || s->client_port == s->peer_port ||
            (s->opts.cert_file[0] && (!s->metrics_port || s->metrics_port == s->client_port ||
                                      s->metrics_port == s->peer_port)))
            continue;
        if (launch(s) == 0)
            return 0;
    }
    fprintf(stderr, "etcd_server: etcd did not become healthy at %s\n", s->url);
    print_log(s);
    return -1;
}

void etcd_server_stop(etcd_server_t *s, int sig)
{
    if (!s->pid)
        return;
    kill(s->pid, sig);
    int status;
    uint64_t deadline = ms_now() + 5000;
    while (waitpid(s->pid, &status, WNOHANG) != s->pid) {
        if (ms_now() > deadline) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            break;
        }
        usleep(10 * 1000);
    }
    s->pid = 0;
}

static void rm_rf(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

int etcd_server_restart(etcd_server_t *s, int wipe)
{
    etcd_server_stop(s, SIGKILL);
    if (wipe) {
        char data[300];
        snprintf(data, sizeof(data), "%s/data", s->dir);
        rm_rf(data);
    }
    /* The old process's ports may linger a moment. */
    for (int attempt = 0; attempt < 20; attempt++) {
        if (launch(s) == 0)
            return 0;
        usleep(100 * 1000);
    }
    fprintf(stderr, "etcd_server: etcd did not come back at %s\n", s->url);
    print_log(s);
    return -1;
}

void etcd_server_cleanup(etcd_server_t *s)
{
    etcd_server_stop(s, SIGTERM);
    if (s->dir[0])
        rm_rf(s->dir);
    s->dir[0] = '\0';
}

/* ---- two "hosts" on one machine ---- */

/* ip(8) with the arguments; 0 when it succeeded. */
static int ip_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ip_cmd(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(cmd, sizeof(cmd), "ip ");
    vsnprintf(cmd + n, sizeof(cmd) - (size_t)n, fmt, ap);
    va_end(ap);
    strncat(cmd, " >/dev/null 2>&1", sizeof(cmd) - strlen(cmd) - 1);
    return system(cmd) == 0 ? 0 : -1;
}

void test_netns_destroy(test_netns_t *n)
{
    if (!n->made)
        return;
    for (int i = 0; i < 2; i++)
        if (n->ns[i][0])
            ip_cmd("netns del %s", n->ns[i]);
    ip_cmd("link del %s", n->br);
    n->made = 0;
}

int test_netns_create(test_netns_t *n)
{
    int id = (int)(getpid() % 100000);
    int net = 16 + (int)(getpid() % 200);
    memset(n, 0, sizeof(*n));
    if (geteuid() != 0) {
        printf("SKIP: creating network namespaces needs root\n");
        return -1;
    }
    snprintf(n->br, sizeof(n->br), "nxbr%d", id);
    snprintf(n->bridge_ip, sizeof(n->bridge_ip), "10.213.%d.1", net);
    if (ip_cmd("link add %s type bridge", n->br)) {
        printf("SKIP: cannot create a bridge here (ip link add type bridge failed)\n");
        return -1;
    }
    n->made = 1;
    if (ip_cmd("addr add %s/24 dev %s", n->bridge_ip, n->br) || ip_cmd("link set %s up", n->br))
        goto err;
    for (int i = 0; i < 2; i++) {
        char veth[16];
        snprintf(n->ns[i], sizeof(n->ns[i]), "nixl-etcd-%d-%c", id, 'a' + i);
        snprintf(veth, sizeof(veth), "nxv%d%c", id, 'a' + i);
        if (ip_cmd("netns add %s", n->ns[i]) ||
            ip_cmd("link add %s type veth peer name eth0 netns %s", veth, n->ns[i]) ||
            ip_cmd("link set %s master %s up", veth, n->br) ||
            ip_cmd("netns exec %s ip addr add 10.213.%d.%d/24 dev eth0", n->ns[i], net, 2 + i) ||
            ip_cmd("netns exec %s ip link set eth0 up", n->ns[i]) ||
            ip_cmd("netns exec %s ip link set lo up", n->ns[i]))
            goto err;
    }
    return 0;
err:
    printf("SKIP: cannot set up network namespaces with veth pairs here (ip netns/link failed)\n");
    test_netns_destroy(n);
    return -1;
}
