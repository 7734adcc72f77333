/* time.h - monotonic clock in nanoseconds (nixl_now_ns of the backend kit), and the wall clock. */
#ifndef NIXL_UTIL_TIME_H
#define NIXL_UTIL_TIME_H

#include <time.h>

#include "nixl/backend_util.h"

/* Wall-clock time in ns since the epoch: only where peers compare times
 * (authenticated frames); everything else uses the monotonic nixl_now_ns. */
static inline uint64_t nixl_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
