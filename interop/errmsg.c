/* SPDX-License-Identifier: Apache-2.0 */
/*
 * errmsg.c — the error-message helper shared by the interop part's calls
 * that report into a caller's buffer (errmsg.h).
 */
#include "errmsg.h"

#include <stdarg.h>
#include <stdio.h>

void kvpi__set_err(char *err, size_t cap, const char *fmt, ...)
{
    if (!err || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}
