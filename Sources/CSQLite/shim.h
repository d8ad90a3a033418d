#ifndef HERALD_CSQLITE_SHIM_H
#define HERALD_CSQLITE_SHIM_H

#include <sqlite3.h>

/// sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0), which Swift cannot call (variadic): no memory statistics, so none of
/// SQLite's allocations takes its process-wide memory mutex. Only before SQLite's first use in the process.
static inline int herald_sqlite3_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

#endif
