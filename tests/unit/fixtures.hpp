// Fixtures shared by the unit tests: a temporary directory and a fake
// CommandRunner. One copy here, so every test file means the same by them.
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "lib/core/error.hpp"
#include "lib/core/process.hpp"
#include "lib/options/template.hpp"

namespace sandweave::test {

// What fn throws: its code, and its message when asked. No error, or another
// exception, fails the test.
inline ErrorCode code_of(const std::function<void()>& fn, std::string* message = nullptr) {
    try {
        fn();
    } catch (const Error& e) {
        if (message) *message = e.what();
        return e.code();
    }
    FAIL("expected a sandweave::Error");
    return ErrorCode::general;
}

inline bool contains(const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
        if (x == s) return true;
    return false;
}

// The template fixtures (tests/data/templates) and the built-in templates.
inline const std::filesystem::path template_fixtures =
    std::filesystem::path(SANDWEAVE_TEST_DATA) / "templates";
inline const std::filesystem::path builtin_templates =
    std::filesystem::path(SANDWEAVE_SOURCE_DIR) / "templates";
// A template reference resolved with the user fixtures before the built-ins.
inline ResolvedTemplate tmpl(const std::string& ref) {
    return TemplateResolver({template_fixtures / "user"}, {builtin_templates}).resolve(ref);
}

// What fn throws: it must be an Error(usage); its message, for the test to
// compare. No error at all fails the test.
inline std::string usage_error(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::usage);
        return e.what();
    }
    FAIL("no error");
    return "";
}

// A fresh directory, <parent>/sandweave-<name>-test.XXXXXX, removed with its
// contents when the TempDir goes. parent defaults to $TMPDIR (or /tmp); a test
// that puts Unix sockets in it passes "/tmp" to keep their paths short.
struct TempDir {
    std::filesystem::path path;

    explicit TempDir(std::string_view name = "unit",
                     const std::filesystem::path& parent = std::filesystem::temp_directory_path()) {
        std::string tmpl = (parent / ("sandweave-" + std::string(name) + "-test.XXXXXX")).string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

// A CommandRunner that runs nothing: it records every command and answers from
// a script of replies (default: success).
class FakeRunner final : public CommandRunner {
  public:
    struct Reply {
        CommandResult result;
        std::string log_fd_text;  // written to the fd passed as the child's fd 3
        std::function<void(const Command&)> inspect;
    };

    std::vector<Command> calls;
    std::vector<bool> attached;
    std::vector<std::filesystem::path> console_logs;  // for launch_detached calls
    std::deque<Reply> replies;

    void reply(int exit_status, std::string out = "", std::string log = "") {
        Reply r;
        r.result.exit_status = exit_status;
        r.result.out = std::move(out);
        r.log_fd_text = std::move(log);
        replies.push_back(std::move(r));
    }

    // Never a real shim here: the shim re-executes the running binary, which in
    // this test binary would be doctest again.
    LaunchResult launch_detached(const Command& cmd,
                                 const std::filesystem::path& console_log) override {
        console_logs.push_back(console_log);
        std::string log;
        if (!replies.empty())
            std::swap(log, replies.front().log_fd_text);  // returned, not written to fd 3
        CommandResult r = answer(cmd, false);
        return LaunchResult{r.shell_status(), log};
    }
    CommandResult run(const Command& cmd) override { return answer(cmd, false); }
    CommandResult run_attached(const Command& cmd, const AttachOptions&) override {
        return answer(cmd, true);
    }

  private:
    CommandResult answer(const Command& cmd, bool is_attached) {
        calls.push_back(cmd);
        attached.push_back(is_attached);
        if (replies.empty()) {
            CommandResult ok;
            ok.exit_status = 0;
            return ok;
        }
        Reply r = std::move(replies.front());
        replies.pop_front();
        if (r.inspect) r.inspect(cmd);
        if (!r.log_fd_text.empty()) {
            for (const auto& [ours, theirs] : cmd.pass_fds)
                if (theirs == 3)
                    CHECK(::write(ours, r.log_fd_text.data(), r.log_fd_text.size()) ==
                          static_cast<ssize_t>(r.log_fd_text.size()));
        }
        return r.result;
    }
};

}  // namespace sandweave::test
