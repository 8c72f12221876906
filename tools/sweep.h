/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sweep.h — `kvpool sweep`: the replay of replay.h repeated over traces and
 * capacities, printed as a table and optionally written as CSV and a plot.
 */
#ifndef KVPT_SWEEP_H
#define KVPT_SWEEP_H

/* `kvpool sweep TRACE [TRACE...] --capacities A,B,C [--csv FILE] [--plot
 * FILE]` (argv[0] = "sweep"); returns the exit code. */
int kvpt_cmd_sweep(int argc, char **argv);

#endif /* KVPT_SWEEP_H */
