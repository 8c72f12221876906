/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status.c — the one table of status messages.
 *
 * Every code in kvp_status has exactly one entry here, indexed by its value,
 * so kvp_strerror is a bounds check and an array read.
 */
#include "kvp_internal.h"

static const char *const messages[] = {
    [KVP_OK] = "success",
    [KVP_EINVAL] = "invalid argument",
    [KVP_EEXHAUSTED] = "not enough free blocks",
    [KVP_ENOTFOUND] = "not found",
    [KVP_ENOTOWNER] = "the owner holds no such reference",
    [KVP_EDOUBLEFREE] = "block is already free",
    [KVP_EOWNERACTIVE] = "owner is already active",
    [KVP_EBUSY] = "busy: in use, or called from a callback",
    [KVP_ENOMEM] = "out of memory",
    [KVP_ERANGE] = "no such block (out of range or retired)",
    [KVP_ESPACE] = "output buffer too small",
    [KVP_ECORRUPT] = "pool invariant broken",
};

const char *kvp_strerror(int status)
{
    if (status < 0 || (size_t)status >= sizeof messages / sizeof messages[0])
        return "unknown status";
    return messages[status];
}
