# Build: a release binary with the Swift runtime linked in statically.
FROM swift:6.3-bookworm AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libmicrohttpd-dev libsqlite3-dev pkg-config make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The Makefile's release build: the Swift runtime linked in statically, every module optimized with the profile.
# Debug information out, symbol table kept: a crash's backtrace still names every function (about half the binary
# was DWARF that only a debugger reads).
RUN make release \
    && mkdir -p /staging \
    && cp .build-release/release/herald /staging/ \
    && llvm-objcopy --strip-debug /staging/herald
# The crash backtracer the official Swift server images ship beside the binary.
RUN if [ -x /usr/libexec/swift/linux/swift-backtrace-static ]; then \
        cp /usr/libexec/swift/linux/swift-backtrace-static /staging/ && llvm-objcopy --strip-debug /staging/swift-backtrace-static; \
    fi

# The run-time root, distroless style: the binaries, the shared libraries `ldd` names for them (libmicrohttpd and
# GnuTLS, SQLite, libstdc++, libc), CA certificates (S3 and webhooks over HTTPS), time zones, and a passwd entry.
# About 141 MB in all, from 275 MB on debian:bookworm-slim with the unstripped binary.
FROM debian:bookworm-slim AS root
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libmicrohttpd12 libsqlite3-0 ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /staging/ /rootfs/usr/local/bin/
# `id` too: what a deployment check runs in the container to see the uid, there being no shell.
RUN set -e; \
    mkdir -p /rootfs/usr/bin && cp /usr/bin/id /rootfs/usr/bin/; \
    for binary in /rootfs/usr/local/bin/* /rootfs/usr/bin/id; do \
        ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'; \
    done | sort -u | while read -r library; do cp -L --parents "$library" /rootfs/; done; \
    cp -a --parents /etc/ld.so.cache /etc/ssl/certs /usr/share/ca-certificates /usr/share/zoneinfo /rootfs/; \
    mkdir -p /rootfs/app /rootfs/tmp /data; chmod 1777 /rootfs/tmp; \
    echo 'herald:x:10001:10001:herald:/app:/nonexistent' > /rootfs/etc/passwd; \
    echo 'herald:x:10001:' > /rootfs/etc/group; \
    chown 10001:10001 /data

# Run: nothing but that root; no shell, no package manager.
FROM scratch
COPY --from=root /rootfs/ /
COPY --from=root --chown=10001:10001 /data /data
WORKDIR /app
ENV HERALD_HOST=0.0.0.0 \
    HERALD_PORT=8080 \
    HERALD_DATA_DIR=/data \
    SWIFT_BACKTRACE=enable=yes,sanitize=yes,threads=all,images=all,interactive=no,swift-backtrace=/usr/local/bin/swift-backtrace-static
VOLUME /data
EXPOSE 8080
USER 10001
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["/usr/local/bin/herald", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/herald"]
CMD ["serve"]
