/*
 * cuda_ipc_nokernel.c - the kernel image when the build has no nvcc: none.
 * The backend then moves batches of small pieces with the copy engines.
 */
#include <stddef.h>

extern const unsigned char nixl_cuda_ipc_fatbin[];
extern const size_t nixl_cuda_ipc_fatbin_len;

__attribute__((aligned(16))) const unsigned char nixl_cuda_ipc_fatbin[] = {0};
const size_t nixl_cuda_ipc_fatbin_len = 0;
