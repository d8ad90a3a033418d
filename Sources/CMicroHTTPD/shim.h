#ifndef HERALD_CMICROHTTPD_SHIM_H
#define HERALD_CMICROHTTPD_SHIM_H

#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// `MHD_OPTION_URI_LOG_CALLBACK`'s callback: sees the raw request target before libmicrohttpd decodes it;
/// what it returns is the request's `req_cls` at the first access-handler call.
typedef void *(*herald_uri_callback)(void *cls, const char *uri, struct MHD_Connection *connection);

/// Wraps the variadic `MHD_start_daemon`: the address and callbacks are fixed arguments,
/// every other option comes as an `MHD_OPTION_END`-terminated `MHD_OptionItem` array.
static inline struct MHD_Daemon *herald_start_daemon(
    unsigned int flags,
    const struct sockaddr *address,
    MHD_AccessHandlerCallback handler,
    MHD_RequestCompletedCallback completed,
    MHD_NotifyConnectionCallback connections,
    herald_uri_callback target,
    MHD_LogCallback logger,
    void *context,
    const struct MHD_OptionItem *options)
{
    /* The logger comes first so that messages about the other options reach it. */
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, context,
                            MHD_OPTION_EXTERNAL_LOGGER, logger, context,
                            MHD_OPTION_SOCK_ADDR, address,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, context,
                            MHD_OPTION_NOTIFY_CONNECTION, connections, context,
                            MHD_OPTION_URI_LOG_CALLBACK, target, context,
                            MHD_OPTION_ARRAY, options,
                            MHD_OPTION_END);
}

/// Wraps the variadic `MHD_get_daemon_info` for the port the daemon is bound to (0 on error).
static inline uint16_t herald_daemon_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/// Wraps the variadic `MHD_get_connection_info` for the client's address (NULL if unknown).
static inline const struct sockaddr *herald_client_address(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == NULL ? NULL : info->client_addr;
}

/// Wraps the variadic `MHD_get_connection_info` for the connection's socket (-1 if unknown).
static inline int herald_connection_socket(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

/// poll(2)'s event for a peer that closed its side, which glibc declares only under `_GNU_SOURCE` (Linux's value;
/// other systems report the hang-up as `POLLHUP` alone).
#if defined(__linux__)
#define HERALD_POLLRDHUP 0x2000
#else
#define HERALD_POLLRDHUP 0
#endif

/// Whether this libmicrohttpd was built with TLS (Debian's is, with GnuTLS).
static inline _Bool herald_tls_supported(void)
{
    return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}

#endif
