/* time.h - monotonic clock in nanoseconds: nixl_now_ns of the backend kit. */
#ifndef NIXL_UTIL_TIME_H
#define NIXL_UTIL_TIME_H

#include "nixl/backend_util.h"

#endif
