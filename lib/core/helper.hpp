#pragma once
// Detached helpers: the long-lived processes sandweave starts from its own
// binary (the sandbox supervisor `__shim`, the audit writer `__audit-writer`,
// a pool's `__pool-refill`). One launcher starts all of them the same way:
//
//   - through an intermediate: the helper runs in a session of its own and is
//     reparented away from the caller (to init or the nearest subreaper), so it
//     outlives a CLI invocation and never lingers as a zombie of a long-running
//     caller. Both are clones that share the caller's memory until the
//     helper's exec (CLONE_VM | CLONE_VFORK, as posix_spawn does), not forks:
//     a fork copies the caller's page tables and makes its pages copy-on-write;
//   - stdin on /dev/null, stdout and stderr appended to a log file (or
//     /dev/null); default signal dispositions and an empty signal mask; none of
//     the caller's descriptors but the report pipe;
//   - one readiness report on a pipe, read to EOF and bounded by a timeout
//     after which the helper's process group is killed.
//
// The report, with Readiness::report: the helper finds the pipe as fd 3 and
// writes "ok[ DETAIL]" or "error MESSAGE" (both may span lines), then closes
// it (ReadinessReporter). A helper that exits without writing is `silent`: it
// died before it could say anything, and its log says why. With
// Readiness::exec the helper says nothing: a successful exec is the report
// (the pipe is close-on-exec in it), for callers that must not wait for a
// process to start up.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "lib/core/fd.hpp"

namespace sandweave {

inline constexpr int helper_report_fd = 3;
inline constexpr int helper_go_fd = 4;  // a held helper's go socket (HeldHelper)

struct HelperSpec {
    enum class Readiness { report, exec };

    std::vector<std::string> argv;  // argv[0] is an absolute path (e.g. self_exe())
    std::filesystem::path log;      // stdout and stderr, appended (0600); empty: /dev/null
    Readiness readiness = Readiness::report;
    std::chrono::milliseconds timeout{30000};
};

struct HelperReport {
    enum class Outcome {
        ready,      // "ok ..." (or, with Readiness::exec, the exec succeeded)
        failed,     // "error ..." (also: the helper could not be started)
        silent,     // EOF without a report
        garbled,    // something else; `detail` has it
        timed_out,  // no EOF within the timeout; the helper's group was killed
    };
    Outcome outcome = Outcome::silent;
    std::string detail;  // the text after "ok " / "error ", or the garbled text
    pid_t group = -1;    // the helper's session and process group

    bool ok() const { return outcome == Outcome::ready; }
};

// Starts the helper and waits for its report. Throws Error only when nothing
// could be started at all (no pipe, no fork, the log not openable).
HelperReport launch_helper(const HelperSpec& spec);

// A helper started ahead of its work, so its start-up overlaps the caller's
// (the sandbox supervisor execs while create mounts the overlay and writes the
// bundle). It blocks in wait_for_go() on fd 4 (a socket) until go(); when the launcher
// drops it without go() (a failed or killed create) it reads EOF and exits
// without doing anything. The timeout counts from go().
class HeldHelper {
  public:
    static HeldHelper start(const HelperSpec& spec);
    HeldHelper() = default;
    HeldHelper(HeldHelper&&) = default;
    HeldHelper& operator=(HeldHelper&&) = default;

    // Lets the helper go on, then waits for its report as launch_helper does.
    HelperReport go();

    // The helper's side: true once the launcher said go, false at EOF.
    static bool wait_for_go();

  private:
    Fd report_, go_;
    pid_t group_ = -1;
    std::chrono::milliseconds timeout_{30000};
    HelperSpec::Readiness readiness_ = HelperSpec::Readiness::report;
};

// The helper's end of the report. Reports at most once; destroying it without a
// report closes the pipe, which the launcher sees as `silent`.
class ReadinessReporter {
  public:
    ReadinessReporter() = default;
    explicit ReadinessReporter(Fd fd) : fd_(std::move(fd)) {}

    // fd 3 when it is a pipe (we were started by launch_helper), made
    // close-on-exec so the helper's own children never hold it open; otherwise
    // a reporter that reports nowhere (started by hand, or with Readiness::exec).
    static ReadinessReporter inherited();

    bool active() const { return fd_.valid(); }
    void ready(const std::string& detail = "");
    void error(const std::string& message);

  private:
    void send(const std::string& text);
    Fd fd_;
};

}  // namespace sandweave
