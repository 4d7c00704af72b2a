// sandweave-audit-testkit: the audit API behind a tiny command line, for the
// integration tests and benches until `sandweave` wires it (it is also the
// writer's self_exe there: `__audit-writer` runs writer_main).
//
//   __audit-writer ARGS...                      the daemon (as start_writer execs it)
//   start --dir D --metadata F [--sandbox-id I] [--max-bytes N] [--runtime-version V]
//   pod-config --dir D --metadata F             prints the --pod-init-config JSON
//   barrier|finish --dir D [--sentry-dropped N|unavailable]
//   export --dir D --dest P [--sentry-dropped N|unavailable]   exit 3 when incomplete
//   status --dir D
//   trace-list-dropped FILE                     prints N or "unavailable"

#include <cstdio>
#include <iostream>
#include <map>

#include "lib/audit/audit.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/log.hpp"

using namespace sandweave;

namespace {

class StderrLogger : public Logger {
  public:
    void debug(const std::string&) override {}
    void info(const std::string& m) override { std::fprintf(stderr, "info: %s\n", m.c_str()); }
    void warn(const std::string& m) override { std::fprintf(stderr, "warn: %s\n", m.c_str()); }
    void error(const std::string& m) override { std::fprintf(stderr, "error: %s\n", m.c_str()); }
};

std::map<std::string, std::string> options(int argc, char** argv, int from) {
    std::map<std::string, std::string> o;
    for (int i = from; i < argc; ++i) {
        std::string k = argv[i];
        if (k.rfind("--", 0) != 0 || i + 1 >= argc)
            throw Error(ErrorCode::usage, "bad argument " + k);
        o[k.substr(2)] = argv[++i];
    }
    return o;
}

std::optional<std::uint64_t> sentry(const std::map<std::string, std::string>& o) {
    auto it = o.find("sentry-dropped");
    if (it == o.end() || it->second == "unavailable") return std::nullopt;
    return std::stoull(it->second);
}

}  // namespace

int main(int argc, char** argv) {
    set_logger(std::make_shared<StderrLogger>());
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s COMMAND ...\n", argv[0]);
        return 2;
    }
    std::string cmd = argv[1];
    try {
        if (cmd == "__audit-writer") {
            std::vector<std::string> args(argv + 1, argv + argc);
            return audit::writer_main(audit::parse_writer_argv(args));
        }
        if (cmd == "trace-list-dropped") {
            auto v = audit::parse_trace_list_dropped(read_file(argc > 2 ? argv[2] : "/dev/stdin"));
            std::printf("%s\n", v ? std::to_string(*v).c_str() : "unavailable");
            return 0;
        }
        auto o = options(argc, argv, 2);
        fs::path dir = o.at("dir");
        if (cmd == "start" || cmd == "pod-config") {
            auto md = audit::parse_trace_metadata(read_file(o.at("metadata")));
            auto points = audit::default_selection(md);
            if (cmd == "pod-config") {
                std::cout << audit::pod_init_config(points, audit::sink_socket_path(dir));
                return 0;
            }
            audit::WriterOptions w;
            w.dir = dir;
            w.sandbox_id = o.count("sandbox-id") ? o["sandbox-id"] : "test";
            if (o.count("max-bytes")) w.max_bytes = std::stoull(o["max-bytes"]);
            w.runtime_version = o.count("runtime-version") ? o["runtime-version"] : "";
            w.points = points;
            pid_t pid = audit::start_writer("/proc/self/exe", w);
            std::printf("%d\n", static_cast<int>(pid));
            return 0;
        }
        audit::Status st;
        if (cmd == "barrier")
            st = audit::barrier(dir, sentry(o));
        else if (cmd == "finish")
            st = audit::finish(dir, sentry(o));
        else if (cmd == "status")
            st = audit::live_status(dir);
        else if (cmd == "export")
            st = audit::export_log(dir, o.at("dest"), sentry(o));
        else
            throw Error(ErrorCode::usage, "unknown command " + cmd);
        auto j = audit::to_json(st);
        j.erase("points");  // long; the sidecar has them
        std::cout << j.dump() << "\n";
        return cmd == "export" && !st.complete ? 3 : 0;
    } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return static_cast<int>(e.code());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
