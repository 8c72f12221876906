/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status.h — the lookup by name that every kvp_*_parse shares (status.c).
 */
#ifndef KVP_STATUS_H
#define KVP_STATUS_H

#include "kvp_types.h"

/* The value whose name_of(value) is `name`, trying 0, 1, ... up to the
 * first NULL: KVP_EINVAL for a NULL name, KVP_ENOTFOUND for none. */
kvp_status kvp__name_parse(const char *name, const char *(*name_of)(int), int *out);
/* Define kvpool.h's `kvp_status fn(const char *name, type *out)`: the value
 * of `type` that name_of names, as kvp__name_parse finds it; *out is set
 * only on success, KVP_EINVAL for a NULL out. */
#define KVP__DEFINE_PARSE(fn, type, name_of)                                               \
    kvp_status fn(const char *name, type *out)                                             \
    {                                                                                      \
        int v;                                                                             \
        kvp_status rc = out ? kvp__name_parse(name, name_of, &v) : KVP_EINVAL;             \
        if (!rc)                                                                           \
            *out = (type)v;                                                                \
        return rc;                                                                         \
    }

#endif /* KVP_STATUS_H */
