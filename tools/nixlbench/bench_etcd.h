/*
 * bench_etcd.h - what the two halves of nixlbench's etcd mode share: a small
 * etcd client for coordination (bench_etcd_coord.c) used by the multi-process
 * driver (bench_etcd.c).
 *
 * nixl's own metadata goes through the library (nixl_md_etcd_*); the
 * benchmark needs a few keys of its own on top: who joined (ranks), buffer
 * addresses, barriers with a value per rank, and an abort flag.  Every
 * failure here is fatal for the run (bench_die).
 */
#ifndef NIXLBENCH_BENCH_ETCD_H
#define NIXLBENCH_BENCH_ETCD_H

#include <stddef.h>
#include <stdint.h>

typedef struct bench_coord bench_coord_t;

typedef struct bench_coord_pair {
    char key[256];
    char value[256];
    int64_t create_revision;
} bench_coord_pair_t;

/* urls: comma-separated, tried in order.  Grants a lease of ttl_s seconds
 * kept alive by a thread until bench_coord_close. */
bench_coord_t *bench_coord_open(const char *urls, uint32_t timeout_ms, int ttl_s);
/* Revokes the lease (its keys go at once) and frees. */
void bench_coord_close(bench_coord_t *kv);
/* Keys attached to the lease vanish when this process dies. */
void bench_coord_put(bench_coord_t *kv, const char *key, const char *value);
/* The same, without dying: 0 on success (used while exiting). */
int bench_coord_try_put(bench_coord_t *kv, const char *key, const char *value);
/* 1 and the value when the key exists, 0 when it does not. */
int bench_coord_get(bench_coord_t *kv, const char *key, char *out, size_t cap);
/* Every key under prefix, oldest first; *out is malloc'd (free it). */
size_t bench_coord_prefix(bench_coord_t *kv, const char *prefix, bench_coord_pair_t **out);
void bench_coord_delete_prefix(bench_coord_t *kv, const char *prefix);

#endif
