// ps, logs, kill, wait: the commands sandweave started in a sandbox through
// its guest agent (run --detach gives the handle they take).
#include <cstdio>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"
#include "lib/core/log.hpp"

namespace sandweave::cli {
namespace {

std::int64_t parse_handle(const std::string& s) {
    try {
        std::size_t used = 0;
        long long v = std::stoll(s, &used);
        if (used == s.size() && v > 0 && v <= UINT32_MAX) return v;
    } catch (const std::exception&) {
    }
    throw Error(ErrorCode::usage, "'" + s + "' is not a process handle (see `sandweave ps ID`)");
}

std::string exit_text(const api::ProcessInfo& p) {
    if (p.state == "running") return "-";
    return p.exit_code ? std::to_string(*p.exit_code) : "?";
}

}  // namespace

void register_process_verbs(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* ps = app.add_subcommand("ps", "List the commands sandweave started in a sandbox");
    auto ps_id = std::make_shared<std::string>();
    ps->add_option("id", *ps_id, "Sandbox id or name")->required();
    ps->callback([&g, &out, ps_id] {
        Session s(g);
        auto list = s.api().ps({*ps_id});
        if (g.json) {
            print_json(api::encode_value(list.processes));
        } else {
            std::printf("%-7s %-7s %-11s %-8s %-5s %-21s %s\n", "HANDLE", "PID", "USER", "STATE",
                        "EXIT", "STARTED", "COMMAND");
            for (const auto& p : list.processes)
                std::printf("%-7lld %-7lld %-11s %-8s %-5s %-21s %s%s\n",
                            static_cast<long long>(p.handle), static_cast<long long>(p.pid),
                            p.user.c_str(), p.state.c_str(), exit_text(p).c_str(),
                            p.started_at.c_str(), p.command.c_str(),
                            p.detached ? "" : "  (attached)");
        }
        out.exit_code = 0;
    });

    auto* logs = app.add_subcommand("logs", "Print the output a detached command has written");
    auto logs_id = std::make_shared<std::string>();
    auto logs_handle = std::make_shared<std::string>();
    auto follow = std::make_shared<bool>(false);
    logs->add_option("id", *logs_id, "Sandbox id or name")->required();
    logs->add_option("handle", *logs_handle, "Process handle (from run --detach or ps)")
        ->required();
    logs->add_flag("-f,--follow", *follow,
                   "Keep printing until the command ends, then exit with its status");
    logs->callback([&g, &out, logs_id, logs_handle, follow] {
        out.docker_exit_codes = true;
        api::RunParams p;
        p.id = *logs_id;
        p.attach = parse_handle(*logs_handle);
        p.follow = *follow;
        Session s(g);
        api::RunIo io;
        io.out = OutputSink{1, {}};
        io.err = OutputSink{2, {}};
        io.forward_own_signals = false;
        auto r = s.api().run(p, io);
        // Without --follow, logs succeeds whether or not the command ended.
        out.exit_code = *follow ? r.exit_code : 0;
        if (*follow && r.message) log().error(*r.message);
    });

    auto* kill =
        app.add_subcommand("kill", "Send a signal to a detached command (all its processes)");
    auto kill_id = std::make_shared<std::string>();
    auto kill_handle = std::make_shared<std::string>();
    auto signal = std::make_shared<std::string>("TERM");
    kill->add_option("id", *kill_id, "Sandbox id or name")->required();
    kill->add_option("handle", *kill_handle, "Process handle")->required();
    kill->add_option("-s,--signal", *signal, "Signal name or number (default TERM)");
    kill->callback([&g, &out, kill_id, kill_handle, signal] {
        api::KillParams p{*kill_id, parse_handle(*kill_handle), *signal};
        (void)api::parse_signal(p.signal);  // a bad name fails before connecting
        Session s(g);
        auto r = s.api().kill(p);
        if (!r.running) log().warn("process " + *kill_handle + " had already ended");
        if (g.json) print_json(api::encode_value(r));
        out.exit_code = 0;
    });

    auto* wait =
        app.add_subcommand("wait", "Wait for a detached command to end; exit with its status");
    auto wait_id = std::make_shared<std::string>();
    auto wait_handle = std::make_shared<std::string>();
    wait->add_option("id", *wait_id, "Sandbox id or name")->required();
    wait->add_option("handle", *wait_handle, "Process handle")->required();
    wait->callback([&g, &out, wait_id, wait_handle] {
        out.docker_exit_codes = true;
        Session s(g);
        auto r = s.api().wait({*wait_id, parse_handle(*wait_handle)});
        if (g.json) print_json(api::encode_value(r));
        if (r.message) log().error(*r.message);
        out.exit_code = r.exit_code;
    });
}

}  // namespace sandweave::cli
