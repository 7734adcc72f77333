/*
 * status.c - the exported status helpers and version string.  Names and
 * messages are generated from NIXL_STATUS_LIST so they cannot drift from the
 * enum.
 */
#include "nixl.h"

#define STATUS_STR2_(x) #x
#define STATUS_STR_(x) STATUS_STR2_(x)

NIXL_API const char *nixl_strerror(nixl_status_t status)
{
    switch (status) {
#define STATUS_MSG_(name, value, msg)                                                            \
    case name:                                                                                   \
        return msg;
        NIXL_STATUS_LIST(STATUS_MSG_)
#undef STATUS_MSG_
    }
    return "unknown status";
}

NIXL_API const char *nixl_status_name(nixl_status_t status)
{
    switch (status) {
#define STATUS_NAME_(name, value, msg)                                                           \
    case name:                                                                                   \
        return #name;
        NIXL_STATUS_LIST(STATUS_NAME_)
#undef STATUS_NAME_
    }
    return "NIXL_UNKNOWN_STATUS";
}

NIXL_API const char *nixl_version(void)
{
    return STATUS_STR_(NIXL_VERSION_MAJOR) "." STATUS_STR_(NIXL_VERSION_MINOR) "." STATUS_STR_(NIXL_VERSION_PATCH);
}
