/*
 * config.h - the one table of NIXL_* variables.
 *
 * Every tunable the core reads is a row of NIXL_CONFIG_LIST (config_vars.h):
 * name, default, doc.  Values come from the environment or the default.
 * Backends' parameters get rows too (NIXL_<BACKEND>_<KEY>), added when the
 * backends are enumerated.  An unknown NIXL_* variable in the environment
 * gets one warning that names the closest known one.
 */
#ifndef NIXL_UTIL_CONFIG_H
#define NIXL_UTIL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

typedef struct nixl_cfg_row {
    const char *name;
    const char *def;
    const char *doc;
} nixl_cfg_row_t;

/* Current value: the environment's, else the default.  NULL if the name is
 * not in the table. */
const char *nixl_cfg_get(const char *name);
/* Parsed accessors: an unparsable value is warned about once and the default
 * is used. */
uint64_t nixl_cfg_size(const char *name);
int nixl_cfg_bool(const char *name);

/* Add a row at run time (backend parameters).  Strings must live forever.
 * Adding a name twice is a no-op.  Thread-safe. */
void nixl_cfg_add(const char *name, const char *def, const char *doc);

/* Number of rows and row i (static rows first). */
size_t nixl_cfg_count(void);
const nixl_cfg_row_t *nixl_cfg_row(size_t i);

/* Warn once per process about every NIXL_* variable not in the table. */
void nixl_cfg_check_env(void);

#endif
