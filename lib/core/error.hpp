#pragma once
// One error type for the whole library. Each layer that catches and rethrows adds
// what it was doing, so the message a user reads is a chain from the outermost
// operation to the root cause:
//   "creating sandbox sw-3f2a: starting audit writer: bind /var/lib/...: address in use"
// The code maps to the documented exit status (README, "Exit status"); only main() turns it
// into one. Library code never calls exit().

#include <stdexcept>
#include <string>
#include <utility>

namespace sandweave {

enum class ErrorCode {
    general = 1,           // anything else
    usage = 2,             // bad flag, bad template, refused request
    audit_incomplete = 3,  // an export was written but is not complete
    not_found = 4,         // no such sandbox / pool / snapshot / template / image
    runtime = 5,           // runtime missing or lacks a requested feature
    connection = 255,      // the connection to a remote worker failed or was lost (as ssh)
};

class Error : public std::runtime_error {
  public:
    Error(ErrorCode code, std::string message)
        : std::runtime_error(std::move(message)), code_(code) {}

    ErrorCode code() const { return code_; }

    // A copy of this error with `what_we_were_doing: ` in front of the message.
    Error wrap(const std::string& context) const { return Error(code_, context + ": " + what()); }

  private:
    ErrorCode code_;
};

// "open /x: No such file or directory" for the current errno.
std::string errno_message(const std::string& what);
std::string errno_message(const std::string& what, int err);

// Throws Error(general, errno_message(what)).
[[noreturn]] void throw_errno(const std::string& what);
[[noreturn]] void throw_errno(const std::string& what, int err);

// Runs fn(); an Error thrown from it gets `context` prepended.
template <typename Fn>
auto with_context(const std::string& context, Fn&& fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (const Error& e) {
        throw e.wrap(context);
    }
}

}  // namespace sandweave
