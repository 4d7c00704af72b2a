// The hook that turns lib/core/fault.hpp's points into crashes, linked only
// into the test build's `sandweave-faults`. Read once at start-up from the
// environment and removed from it, so the helpers this process starts
// (shim, writer, refill, lifetime watcher) run without it.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "lib/core/fault.hpp"

namespace {

std::string crash_at;
std::string trace_file;

void hook(const char* point) {
    if (!trace_file.empty()) {
        int fd = ::open(trace_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            std::string line = std::string(point) + "\n";
            (void)!::write(fd, line.data(), line.size());
            ::close(fd);
        }
    }
    if (crash_at == point) ::kill(::getpid(), SIGKILL);
}

struct Install {
    Install() {
        if (const char* p = std::getenv("SANDWEAVE_FAULT")) crash_at = p;
        if (const char* t = std::getenv("SANDWEAVE_FAULT_TRACE")) trace_file = t;
        ::unsetenv("SANDWEAVE_FAULT");
        ::unsetenv("SANDWEAVE_FAULT_TRACE");
        sandweave::fault_hook = hook;
    }
} install;

}  // namespace
