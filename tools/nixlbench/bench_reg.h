/*
 * bench_reg.h - the registration replay (--reg-replay, bench_reg.c): N
 * processes registering the Kimi-K3-like buffer set at the same moment.
 */
#ifndef NIXLBENCH_BENCH_REG_H
#define NIXLBENCH_BENCH_REG_H

/* 1 when argv asks for the registration replay. */
int bench_reg_wanted(int argc, char **argv);
/* The whole mode: its own options, the processes, the report.  Returns the
 * exit status. */
int bench_reg_main(int argc, char **argv);

#endif
