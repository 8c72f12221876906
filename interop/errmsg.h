/* SPDX-License-Identifier: Apache-2.0 */
/*
 * errmsg.h — the interop part's internal helper for error messages (not
 * installed, not part of the API): the calls that take an `err, errcap`
 * buffer all fill it the same way.
 */
#ifndef KVPI_ERRMSG_H
#define KVPI_ERRMSG_H

#include <stddef.h>

/* printf into err[0..cap) (truncated, NUL-terminated); nothing when err is
 * NULL or cap 0. */
void kvpi__set_err(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* KVPI_ERRMSG_H */
