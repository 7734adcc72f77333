/*
 * cuda_ipc_kernel.cu - the gather/scatter kernel of the cuda_ipc backend.
 *
 * One launch moves every small piece of a request: the table (built and
 * uploaded once at prepare) lists {src, dst, len}; one warp moves one piece,
 * 16 bytes per lane per step when both ends are 16-byte aligned (KV pieces
 * of 1,152 bytes are), 8 or 1 otherwise.  Four loads are issued before
 * their stores so each warp keeps several NVLink round trips in flight.
 * Built by nvcc into a fatbin (sm_80, sm_90 and PTX) that the build embeds
 * as a C array (embed_fatbin.py); the driver loads it with cuModuleLoadData.
 */
#include <stdint.h>

struct nixl_cuda_ipc_piece {
    unsigned long long src;
    unsigned long long dst;
    unsigned long long len;
};

template <typename T>
__device__ __forceinline__ void copy_words(const T *__restrict__ s, T *__restrict__ d, unsigned long long n,
                                           unsigned lane)
{
    unsigned long long k = lane;
    for (; k + 96 < n; k += 128) {
        T a = s[k], b = s[k + 32], c = s[k + 64], e = s[k + 96];
        d[k] = a;
        d[k + 32] = b;
        d[k + 64] = c;
        d[k + 96] = e;
    }
    for (; k < n; k += 32)
        d[k] = s[k];
}

extern "C" __global__ void __launch_bounds__(256)
nixl_cuda_ipc_copy_pieces(const nixl_cuda_ipc_piece *__restrict__ table, unsigned long long count)
{
    const unsigned lane = threadIdx.x & 31;
    const unsigned long long warps = ((unsigned long long)gridDim.x * blockDim.x) >> 5;
    for (unsigned long long w = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < count;
         w += warps) {
        const nixl_cuda_ipc_piece p = table[w];
        const unsigned long long align = p.src | p.dst;
        unsigned long long done;
        if ((align & 15) == 0) {
            done = p.len & ~15ull;
            copy_words((const uint4 *)p.src, (uint4 *)p.dst, p.len >> 4, lane);
        } else if ((align & 7) == 0) {
            done = p.len & ~7ull;
            copy_words((const unsigned long long *)p.src, (unsigned long long *)p.dst, p.len >> 3, lane);
        } else {
            done = 0;
        }
        const unsigned char *s = (const unsigned char *)p.src;
        unsigned char *d = (unsigned char *)p.dst;
        for (unsigned long long k = done + lane; k < p.len; k += 32)
            d[k] = s[k];
    }
}
