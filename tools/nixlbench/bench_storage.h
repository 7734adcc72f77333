/*
 * bench_storage.h - nixlbench --storage (bench_storage.c): host memory to
 * and from a file through the posix backend against a raw io_uring loop.
 */
#ifndef NIXLBENCH_BENCH_STORAGE_H
#define NIXLBENCH_BENCH_STORAGE_H

/* 1 when argv asks for the storage rows. */
int bench_storage_wanted(int argc, char **argv);
/* The whole mode: its own options, the measures, the report; the exit status. */
int bench_storage_main(int argc, char **argv);

#endif
