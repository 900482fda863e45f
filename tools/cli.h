/*
 * cli.h — helpers shared by the commands of the bufkern tool (bufkern.c,
 * check.c).
 */
#ifndef BK_TOOL_CLI_H
#define BK_TOOL_CLI_H

#include "bufkern.h"

#include <stddef.h>

/* The enum name of a status ("BK_ERR_INVALID_ARGUMENT"). */
const char *cli_status_name(bk_status st);

/* Prints "bufkern: <what> failed: BK_ERR_... (text): <bk_last_error()>" to
 * stderr when st is not BK_OK; returns 1 then, else 0. */
int cli_report(bk_status st, const char *what);

/* Parses "cpu", "cuda" or "cuda:N"; returns 0 when the text is neither. */
int cli_parse_device(const char *s, bk_device *d);

/* The first CUDA device when one is visible, else the CPU. */
bk_device cli_default_device(void);

/* "cpu" or "cuda:N" into buf. */
const char *cli_device_text(bk_device d, char *buf, size_t cap);

/* Seconds on a monotonic clock. */
double cli_now(void);

/* `bufkern check`: the contract's examples of every primitive. */
int bk_tool_check(int argc, char **argv);
void bk_tool_check_usage(void);

#endif /* BK_TOOL_CLI_H */
