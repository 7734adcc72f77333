/*
 * bench_gds.h - nixlbench --gds (bench_gds.c): GPU memory to and from a
 * file through the gds backend against a raw cuFile loop.
 */
#ifndef NIXLBENCH_BENCH_GDS_H
#define NIXLBENCH_BENCH_GDS_H

int bench_gds_wanted(int argc, char **argv);
int bench_gds_main(int argc, char **argv);

#endif
