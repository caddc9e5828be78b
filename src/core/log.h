/*
 * log.h - leveled logging.
 *
 * infd_log formats one line "2026-11-21T13:22:58.123Z INFO  message" and
 * hands it to the sink (default: one write(2) to stderr, so lines from
 * different threads never interleave). A call below the current level costs
 * one relaxed atomic load: the INFD_LOG_* macros check the level before
 * evaluating their arguments. Level and sink setters are in infd/infd.h.
 */
#ifndef INFD_CORE_LOG_H
#define INFD_CORE_LOG_H

#include <stdatomic.h>

#include "infd/infd.h"

/* Current level; read through infd_log_enabled(). */
extern _Atomic int infd_log_level_current;

static inline int infd_log_enabled(infd_log_level level)
{
    return (int)level <= atomic_load_explicit(&infd_log_level_current, memory_order_relaxed);
}

/* Formats and emits one line at `level` (unconditionally: callers check
 * infd_log_enabled first, as the macros below do). Lines longer than 2 KiB
 * are truncated. */
void infd_log(infd_log_level level, const char *fmt, ...) INFD_PRINTF(2, 3);

#define INFD_LOG_AT_(level, ...)          \
    do {                                  \
        if (infd_log_enabled(level))      \
            infd_log(level, __VA_ARGS__); \
    } while (0)

#define INFD_LOG_ERROR(...) INFD_LOG_AT_(INFD_LOG_LEVEL_ERROR, __VA_ARGS__)
#define INFD_LOG_WARN(...)  INFD_LOG_AT_(INFD_LOG_LEVEL_WARN, __VA_ARGS__)
#define INFD_LOG_INFO(...)  INFD_LOG_AT_(INFD_LOG_LEVEL_INFO, __VA_ARGS__)
#define INFD_LOG_DEBUG(...) INFD_LOG_AT_(INFD_LOG_LEVEL_DEBUG, __VA_ARGS__)
#define INFD_LOG_TRACE(...) INFD_LOG_AT_(INFD_LOG_LEVEL_TRACE, __VA_ARGS__)

#endif /* INFD_CORE_LOG_H */
