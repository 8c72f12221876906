/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status.c — the names and messages of the status codes.
 *
 * Both tables are expansions of KVP_STATUS_MAP (kvpool.h), the one list of
 * codes, indexed by value: a code has exactly one entry in each, so
 * kvp_strerror and kvp_status_name are a bounds check and an array read.
 * Also the lookup by name that every parse call of kvpool.h shares.
 */
#include "status.h"

#define MESSAGE(name, value, word, msg) [value] = msg,
static const char *const messages[] = {KVP_STATUS_MAP(MESSAGE)};
#undef MESSAGE

#define NAME(name, value, word, msg) [value] = "KVP_" #name,
static const char *const names[] = {KVP_STATUS_MAP(NAME)};
#undef NAME

_Static_assert(sizeof messages / sizeof messages[0] == KVP_STATUS_COUNT,
               "status values run from 0 without gaps");

/* See kvpool.h. */
const char *kvp_strerror(int status)
{
    if (status < 0 || status >= KVP_STATUS_COUNT)
        return "unknown status";
    return messages[status];
}

/* See kvpool.h. */
const char *kvp_status_name(int status)
{
    if (status < 0 || status >= KVP_STATUS_COUNT)
        return NULL;
    return names[status];
}

/* See status.h.  O(values). */
kvp_status kvp__name_parse(const char *name, const char *(*name_of)(int), int *out)
{
    if (!name)
        return KVP_EINVAL;
    for (int v = 0; name_of(v); v++)
        if (strcmp(name_of(v), name) == 0) {
            *out = v;
            return KVP_OK;
        }
    return KVP_ENOTFOUND;
}
