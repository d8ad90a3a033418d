#!/usr/bin/env python3
"""Instructions a status poll costs, counted by valgrind's callgrind and split by who spends them (issue 35).

    python3 Benchmarks/callgrind.py [--polls 1000] [--skip-swift-build] [--layout PATH]
                                    (`make bench-callgrind`: a release build first; writes Benchmarks/out/callgrind.md and
                                    its part of BENCHMARKS.md; `make layout` writes Sources/herald/hot-functions.txt too)

Three servers answer the same `GET /v1/jobs/{id}` (a succeeded job of 4 media, on a copy of one data directory): Herald
at `herald serve`'s defaults (info: the access log on) with a key whose rate limit the load never reaches, the C server
doing the same read and JSON and Herald's per-request product work (`Benchmarks/c-status`, `--product`), and the same C
server without that work. Each runs under `valgrind --tool=callgrind`; after 200 polls (not counted) the counters are
zeroed, 4 threads send `--polls` polls on keep-alive connections (each answer checked: 200 and Herald's bytes), and the
counters are dumped. Instructions are counted whatever else the machine does, so one run is enough: the figures repeat.

The split: by the object that holds the function (SQLite, libmicrohttpd, libc, OpenSSL), and inside Herald's static
binary by the function's name: Herald's own modules, the Swift runtime (retain and release; allocation; metadata,
generic and existential dispatch; exclusivity checks), Swift's standard library, swift-http-types, swift-metrics and
its Prometheus backend, swift-log, Foundation and the other packages. The counts are of the whole process while the
polls run (its timers too: the access log's writer every 100 ms), divided by the polls.
"""
import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.client import HTTPConnection

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import run  # noqa: E402 (the benchmarks' helpers: builds, keys, the C servers' SQL)
from herald_support import Server, free_port  # noqa: E402

HERALD_MODULES = {"HeraldApp", "MicroHTTP", "HeraldCore", "HeraldStorage", "SQLiteStorage", "PostgresStorage", "Publishing",
                  "JSONText", "Platform", "Locking", "FileReading", "herald"}
GROUPS = [
    "Herald's own code (its Swift modules)",
    "Swift runtime: retain and release",
    "Swift runtime: allocation",
    "Swift runtime: metadata, generic and existential dispatch",
    "Swift runtime: exclusivity checks",
    "Swift runtime: other",
    "Swift standard library",
    "swift-http-types",
    "swift-metrics and Prometheus",
    "swift-log",
    "Foundation",
    "other Swift packages",
    "the C server's own code",
    "SQLite",
    "libmicrohttpd",
    "libc: malloc and free",
    "libc: memcpy, memset, strings",
    "libc: other",
    "OpenSSL (SHA-256, on a cache miss)",
    "the dynamic loader and the rest",
]


def group_of(obj, function):
    """The group of one function of one object (its path as callgrind names it)."""
    name = os.path.basename(obj)
    if name.startswith("libsqlite3"):
        return "SQLite"
    if name.startswith("libmicrohttpd"):
        return "libmicrohttpd"
    if name.startswith("libcrypto"):
        return "OpenSSL (SHA-256, on a cache miss)"
    if name.startswith("libc.so") or name.startswith("libc-"):
        if re.match(r"^(__libc_)?(malloc|free|calloc|realloc|cfree)|^_int_(malloc|free|realloc)|^malloc_|^tcache|^unlink_chunk", function):
            return "libc: malloc and free"
        if re.match(r"^_*(mem|str|wmem)", function):
            return "libc: memcpy, memset, strings"
        return "libc: other"
    if name == "status":
        return "the C server's own code"
    if not name.startswith("herald"):
        return "the dynamic loader and the rest"
    return swift_group(function)


def swift_group(function):
    """The group of a function of Herald's static binary, by its (mangled or C) name."""
    if re.match(r"^(swift_(nonatomic_)?(retain|release|bridgeObjectRetain|bridgeObjectRelease|unknownObjectRetain|unknownObjectRelease)"
                r"|swift::RefCounts|_swift_release_dealloc|swift_unownedRetain|swift_unownedRelease)", function):
        return "Swift runtime: retain and release"
    if re.match(r"^(swift_(allocObject|deallocObject|slowAlloc|slowDealloc|deallocClassInstance|allocBox|deallocBox|"
                r"deallocUninitializedObject|initStackObject|task_alloc|task_dealloc|allocEmptyBox)|swift::StackAllocator|_swift_stdlib_malloc)",
                function):
        return "Swift runtime: allocation"
    if re.match(r"^(swift_(beginAccess|endAccess)|swift::runtime::AccessSet)", function):
        return "Swift runtime: exclusivity checks"
    if re.match(r"^(swift_(getGenericMetadata|getWitnessTable|getAssociated|conformsToProtocol|dynamicCast|getTypeByMangledName|"
                r"checkMetadataState|getCanonical|instantiate|getForeign|getSingleton|getExistential|getTupleType|getFunctionType|"
                r"getEnumCaseMultiPayload|storeEnumTag|getEnumCase)|__swift_instantiate|getCache|swift::.*(Metadata|Witness|Conformance|Cache|"
                r"ConcurrentReadableHashMap|TaggedMetadataAllocator))", function):
        return "Swift runtime: metadata, generic and existential dispatch"
    if function.startswith("swift_") or function.startswith("swift::") or function.startswith("_swift"):
        return "Swift runtime: other"
    module = mangled_module(function)
    if module is None:
        return "the dynamic loader and the rest"
    if module in HERALD_MODULES:
        return "Herald's own code (its Swift modules)"
    if module in ("Swift", "Synchronization", "_Concurrency", "_StringProcessing"):
        return "Swift standard library"
    if module == "HTTPTypes":
        return "swift-http-types"
    if module in ("Metrics", "CoreMetrics", "Prometheus"):
        return "swift-metrics and Prometheus"
    if module == "Logging":
        return "swift-log"
    if module.startswith("Foundation"):
        return "Foundation"
    return "other Swift packages"


def mangled_module(function):
    """The module of a Swift mangled name (`$s9HeraldApp...` is HeraldApp; `$ss`, `$sS...` the standard library)."""
    match = re.match(r"^\$s(\d+)", function)
    if match:
        length = int(match.group(1))
        start = match.end()
        return function[start:start + length]
    if function.startswith("$s"):
        return "Swift"
    return None


def self_costs(path):
    """{(object, function): self instructions} from a callgrind output file (name compression, calls excluded)."""
    names = {"ob": {}, "fn": {}}
    costs = collections.Counter()
    obj = function = None
    skip_next = False

    def named(kind, text):
        match = re.match(r"^\((\d+)\)(?: (.*))?$", text)
        if not match:
            return text
        if match.group(2) is not None:
            names[kind][match.group(1)] = match.group(2)
        return names[kind].get(match.group(1), text)

    with open(path, errors="replace") as file:
        for line in file:
            line = line.rstrip("\n")
            if not line:
                continue
            head = line[0]
            if head.isdigit() or head in "+-*":
                if skip_next:
                    skip_next = False
                    continue
                fields = line.split()
                if len(fields) > 1 and function is not None:
                    costs[(obj, function)] += int(fields[1])
            elif line.startswith("ob="):
                obj = named("ob", line[3:])
            elif line.startswith("fn="):
                function = named("fn", line[3:])
            elif line.startswith("cob="):
                named("ob", line[4:])
            elif line.startswith("cfn="):
                named("fn", line[4:])
            elif line.startswith("calls="):
                skip_next = True
    return costs


SECTION_PREFIXES = ["hot.", "", "unlikely."]


def hot_functions(costs, binary, polls_count):
    """The functions of Herald's own binary that spent at least 3 instructions a poll, hottest first: what the linker
    places side by side (each is in a section of its own: `.text.NAME`, or `.text.hot.NAME` or `.text.unlikely.NAME`
    as the profile has it). Names callgrind could not give as a symbol (an address, a demangled C++ name) are left
    out."""
    hot = [(cost, function) for (obj, function), cost in costs.items()
           if os.path.basename(obj or "") == binary and function and cost >= 3 * polls_count
           and not function.startswith("0x") and not re.search(r"[\s(<]", function)]
    return [function for _, function in sorted(hot, key=lambda item: (-item[0], item[1]))]


def polls(server, path, expected, count, threads=4):
    """`count` polls over `threads` keep-alive connections; every answer must be 200 and `expected`."""
    errors = []

    def client(share):
        connection = HTTPConnection("127.0.0.1", server.port, timeout=120)
        try:
            for _ in range(share):
                connection.request("GET", path, headers=run.key_headers(server.url(path)))
                response = connection.getresponse()
                body = response.read()
                if response.status != 200 or body != expected:
                    errors.append(f"{response.status}: {body[:200]!r}")
                    return
        except Exception as error:  # reported below
            errors.append(repr(error))
        finally:
            connection.close()

    workers = [threading.Thread(target=client, args=(count // threads,)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=600)
    if errors:
        raise RuntimeError(f"{server.name}: {errors[0]}")


def measure(name, command, port, path, expected, count, out, env=None):
    """Instructions by (object, function) for `count` polls of a server started under callgrind (`env` added to its
    environment)."""
    prefix = os.path.join(out, f"callgrind-{name}")
    for stale in glob.glob(prefix + "*"):
        os.remove(stale)
    server = Server(["valgrind", "--tool=callgrind", f"--callgrind-out-file={prefix}.%p"] + command, port, name=name,
                    log_path=os.path.join(out, f"{name}.log"), env=env)
    server.start(path, timeout=300, headers=run.key_headers(server.url(path)))
    try:
        polls(server, path, expected, 200)
        subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True, capture_output=True, timeout=120)
        started = time.monotonic()
        polls(server, path, expected, count)
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True, timeout=120)
        run.log(f"callgrind: {name}, {count} polls in {time.monotonic() - started:.1f} s under valgrind")
    finally:
        server.stop(timeout=120)
    dumps = sorted(glob.glob(f"{prefix}.{server.pid}.*"), key=os.path.getmtime)
    if not dumps:
        raise RuntimeError(f"{name}: callgrind wrote no dump ({prefix}.{server.pid}.*)")
    return self_costs(dumps[0])


TRACED = "Herald, tracing on"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, default=1000, choices=range(100, 20001), metavar="100..20000")
    parser.add_argument("--skip-swift-build", action="store_true")
    parser.add_argument("--layout", metavar="PATH",
                        help="also write the functions Herald ran a poll, hottest first, as the linker's section order "
                             "(`make layout`: Sources/herald/hot-functions.txt)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    binaries = run.build(swift=not args.skip_swift_build)

    # A job of 4 media, published by a Herald not under valgrind; then every server answers it from a copy.
    data = tempfile.mkdtemp(prefix="herald-callgrind-")
    herald = run.herald_serve(binaries, "callgrind-setup", data)
    try:
        media = [json.loads(run.http("POST", herald.url("/v1/media"), run.PNG + bytes([index]) * 100, "image/png")[1])["id"]
                 for index in range(4)]
        body = json.dumps({"text": "benchmark", "media_ids": media}).encode()
        job = json.loads(run.http("POST", herald.url("/v1/posts"), body, "application/json")[1])["job"]["id"]
        assert json.loads(run.http("GET", herald.url(f"/v1/jobs/{job}?wait=30"))[1])["state"] == "succeeded"
        path = f"/v1/jobs/{job}"
        _, expected = run.http("GET", herald.url(path))
        key = run.KEYS[herald.port]
    finally:
        herald.stop()
    database = os.path.join(data, "herald.sqlite")
    query, tenant = run.status_query(binaries), run.job_tenant(database, job)

    # Valgrind 3.19 cannot read the DWARF 5 that Swift writes ("unhandled dwarf2 abbrev form code 0x25"): a copy
    # without debug information, its symbol table kept, runs under it.
    traced = os.path.join(run.OUT, "herald-callgrind")
    subprocess.run(["objcopy", "--strip-debug", binaries["herald"], traced], check=True, timeout=300)
    counts = {}
    # Issue 34: the same Herald with every poll a sampled span, exported to a collector that answers without decoding.
    port = free_port()
    collector = run.start_server("otlp-collector-callgrind", ["python3", os.path.join(run.ROOT, "Tests", "Support", "otlp_receiver.py"),
                                                              "--port", str(port), "--discard"], port, ready_path="/_control/exports")
    try:
        contenders = [
            ("Herald", lambda port: [traced, "serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir", data,
                                     "--log-level", "info", "--rate-limit", str(run.POLL_RATE_LIMIT)]),
            ("C, product work", lambda port: [binaries["status"], "--product", "--rate-limit", str(run.POLL_RATE_LIMIT), str(port),
                                              database, tenant, query]),
            ("C, same read", lambda port: [binaries["status"], str(port), database, tenant, query]),
            (TRACED, lambda port: [traced, "serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir", data,
                                   "--log-level", "info", "--rate-limit", str(run.POLL_RATE_LIMIT), "--otlp-endpoint", collector.url("")]),
        ]
        for name, command in contenders:
            port = free_port()
            run.KEYS[port] = key
            label = name.lower().replace(",", "").replace(" ", "-")
            # Traced: batches go out every 100 ms, not 5 s, so that the exports fall within the counted polls.
            env = {"OTEL_BSP_SCHEDULE_DELAY": "100"} if name == TRACED else None
            counts[name] = measure(label, command(port), port, path, expected, args.polls, run.OUT, env=env)
    finally:
        collector.stop()
        shutil.rmtree(data, ignore_errors=True)

    if args.layout:
        functions = hot_functions(counts["Herald"], os.path.basename(traced), args.polls)
        with open(args.layout, "w") as file:
            # Under each name its section may have: the profile (Package.swift) marks functions hot or unlikely.
            file.write("".join(f".text.{prefix}{function}\n" for function in functions for prefix in SECTION_PREFIXES))
        run.log(f"{len(functions)} functions, hottest first, in {args.layout}")
    text = report(counts, args.polls)
    with open(os.path.join(run.OUT, "callgrind.md"), "w") as file:
        file.write(text + "\n")
    run.write_section("callgrind", text)
    print(text)


def report(counts, polls_count):
    grouped = {name: collections.Counter() for name in counts}
    functions = {name: collections.Counter() for name in counts}
    for name, costs in counts.items():
        for (obj, function), cost in costs.items():
            grouped[name][group_of(obj or "", function or "")] += cost
            functions[name][(group_of(obj or "", function or ""), function)] += cost
    per = {name: {group: value / polls_count for group, value in groups.items()} for name, groups in grouped.items()}
    names = list(counts)
    total = {name: sum(per[name].values()) for name in names}
    herald, product = names[0], names[1]
    lines = [f"## Instructions a status poll (callgrind, {run.machine()})", "",
             f"{polls_count:,} polls of `GET /v1/jobs/{{id}}` (4 uploads) over 4 keep-alive connections, after 200 not counted; "
             "user-space instructions of the whole process while they ran, a poll. `Benchmarks/callgrind.py` (`make bench-callgrind`).", "",
             "| who | " + " | ".join(names) + f" | {herald} − {product} |", "|---|" + "---|" * (len(names) + 1)]
    for group in GROUPS:
        if any(per[name].get(group, 0) >= 0.5 for name in names):
            cells = [f"{per[name].get(group, 0):,.0f}" for name in names]
            lines.append(f"| {group} | " + " | ".join(cells) + f" | {per[herald].get(group, 0) - per[product].get(group, 0):+,.0f} |")
    lines.append("| **total** | " + " | ".join(f"**{total[name]:,.0f}**" for name in names)
                 + f" | **{total[herald] - total[product]:+,.0f}** |")
    lines += ["", f"Herald / C with the product work, in instructions: {total[herald] / total[product]:.2f}× "
              f"(the goal, 0.8× of C by CPU, means at most {total[product] / 0.8:,.0f} a poll at C's instructions per cycle).", "",
              "Herald's most expensive functions a poll (self instructions):", "", "| function | group | instructions |", "|---|---|---|"]
    for (group, function), cost in functions[herald].most_common(25):
        lines.append(f"| `{demangled(function)[:90]}` | {group} | {cost / polls_count:,.0f} |")
    if TRACED in total:
        lines += ["", f"With tracing on ({TRACED}: each poll a sampled server span, batched and exported over OTLP/HTTP to a "
                  f"collector that does not decode it), a poll costs {total[TRACED]:,.0f} instructions: "
                  f"**{total[TRACED] - total[herald]:+,.0f} a span**, its export included. Without `--otlp-endpoint` Herald "
                  "has no tracer: the first column is the untraced cost."]
    return "\n".join(lines) + "\n"


def demangled(function):
    """A readable name: swift-demangle's simplified form when it is there."""
    if not function.startswith("$s") or shutil.which("swift-demangle") is None:
        return function
    result = subprocess.run(["swift-demangle", "--simplified", "--compact", function], capture_output=True, text=True, timeout=30)
    return result.stdout.strip() or function


if __name__ == "__main__":
    main()
