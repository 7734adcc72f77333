/*
 * cuda_ipc_kernel.cu - the gather/scatter kernel of the cuda_ipc backend.
 *
 * One launch moves every small piece of a request: the table (built and
 * uploaded once at prepare) lists {src, dst, len}, or, for an indexed
 * request, the layers' bases and the slots, from which the kernel computes
 * each piece's addresses; one warp moves one piece,
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

/* One piece, by one warp: 16 bytes per lane per step when both ends are
 * 16-byte aligned, 8 when 8-aligned, then bytes. */
__device__ __forceinline__ void copy_piece(unsigned long long src, unsigned long long dst, unsigned long long len,
                                           unsigned lane)
{
    const unsigned long long align = src | dst;
    unsigned long long done;
    if ((align & 15) == 0) {
        done = len & ~15ull;
        copy_words((const uint4 *)src, (uint4 *)dst, len >> 4, lane);
    } else if ((align & 7) == 0) {
        done = len & ~7ull;
        copy_words((const unsigned long long *)src, (unsigned long long *)dst, len >> 3, lane);
    } else {
        done = 0;
    }
    const unsigned char *s = (const unsigned char *)src;
    unsigned char *d = (unsigned char *)dst;
    for (unsigned long long k = done + lane; k < len; k += 32)
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
        copy_piece(p.src, p.dst, p.len, lane);
    }
}

/* An indexed request (xfer_prepare_indexed): piece w = (layer l, slot t),
 * layer-major, moves item bytes from bases[2l] + sslots[t] x sstride to
 * bases[2l + 1] + dslots[t] x dstride.  The host uploaded the layers' two
 * bases and the two slot arrays; the addresses are computed here. */
extern "C" __global__ void __launch_bounds__(256)
nixl_cuda_ipc_copy_indexed(const unsigned long long *__restrict__ bases, const unsigned *__restrict__ sslots,
                           const unsigned *__restrict__ dslots, unsigned long long nslots, unsigned long long count,
                           unsigned long long item, unsigned long long sstride, unsigned long long dstride)
{
    const unsigned lane = threadIdx.x & 31;
    const unsigned long long warps = ((unsigned long long)gridDim.x * blockDim.x) >> 5;
    for (unsigned long long w = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < count;
         w += warps) {
        const unsigned long long l = w / nslots, t = w - l * nslots;
        copy_piece(bases[2 * l] + (unsigned long long)sslots[t] * sstride,
                   bases[2 * l + 1] + (unsigned long long)dslots[t] * dstride, item, lane);
    }
}
