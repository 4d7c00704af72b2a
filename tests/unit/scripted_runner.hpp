#pragma once
// ScriptedRunner: a CommandRunner for unit tests of the layers above the runsc
// driver. Every command is recorded; the answer comes from `respond` (run and
// run_attached) and `launch` (launch_detached), which tests set per case and
// which usually switch on subcommand(cmd): "--version", "state", "trace",
// "delete", ... By default every command fails (exit 1): a test states what
// it expects to succeed.

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "lib/core/process.hpp"

namespace sandweave {

class ScriptedRunner final : public CommandRunner {
  public:
    struct Call {
        enum class How { run, attached, launched };
        Command cmd;
        How how;
        std::filesystem::path console_log;  // launched only
    };

    std::vector<Call> calls;
    std::function<CommandResult(const Command&)> respond;
    std::function<LaunchResult(const Command&, const std::filesystem::path& console_log)> launch;

    // The first argument after the program that is not a global flag
    // ("--root=...", "--log-fd=3"), or "--version" when that is all there is.
    static std::string subcommand(const Command& c) {
        for (std::size_t i = 1; i < c.argv.size(); ++i) {
            const std::string& a = c.argv[i];
            if (a == "--version") return a;
            if (a.rfind("--", 0) != 0) return a;
        }
        return "";
    }

    // Commands run so far whose subcommand is `sub`.
    std::size_t count(const std::string& sub) const {
        std::size_t n = 0;
        for (const auto& c : calls) n += subcommand(c.cmd) == sub;
        return n;
    }

    static CommandResult ok(std::string out = "") {
        CommandResult r;
        r.exit_status = 0;
        r.out = std::move(out);
        return r;
    }
    static CommandResult fail(int status = 1, std::string err = "") {
        CommandResult r;
        r.exit_status = status;
        r.err = std::move(err);
        return r;
    }

    LaunchResult launch_detached(const Command& cmd,
                                 const std::filesystem::path& console_log) override {
        calls.push_back({cmd, Call::How::launched, console_log});
        if (launch) return launch(cmd, console_log);
        return LaunchResult{1, ""};
    }
    CommandResult run(const Command& cmd) override {
        calls.push_back({cmd, Call::How::run, {}});
        return respond ? respond(cmd) : fail();
    }
    CommandResult run_attached(const Command& cmd, const AttachOptions&) override {
        calls.push_back({cmd, Call::How::attached, {}});
        return respond ? respond(cmd) : fail();
    }
};

}  // namespace sandweave
