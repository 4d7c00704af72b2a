#include "lib/sandbox/activity.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/log.hpp"

namespace sandweave {

namespace fs = std::filesystem;

namespace {

fs::path activity_file(const fs::path& dir) {
    return dir / "activity";
}

}  // namespace

void touch_activity(const fs::path& dir) {
    Fd fd(::open(activity_file(dir).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd || ::futimens(fd.get(), nullptr) != 0)
        log().debug("marking activity in " + dir.string() + " failed");
}

CommandActivity::CommandActivity(const fs::path& dir) : dir_(dir) {
    touch_activity(dir_);
    try {
        lock_.emplace(activity_file(dir_), FileLock::Mode::shared);
    } catch (const Error& e) {
        // A sandbox whose directory just went: the run itself reports that.
        log().debug(std::string("activity lock: ") + e.what());
    }
}

CommandActivity::~CommandActivity() {
    touch_activity(dir_);
}

ActivityInfo read_activity(const fs::path& dir) {
    ActivityInfo info;
    struct stat st {};
    if (::stat(activity_file(dir).c_str(), &st) == 0)
        info.last = std::chrono::system_clock::time_point(
            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::chrono::seconds(st.st_mtim.tv_sec) +
                std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
    // The probe takes the lock exclusively for an instant, so two probes at
    // once (the shim's lifetime watcher and an `inspect`) each see the other
    // as a running command. A command holds its shared lock for as long as it
    // runs: a few tries a millisecond apart tell the two apart.
    try {
        info.busy = true;
        for (int attempt = 0; attempt < 5 && info.busy; ++attempt) {
            if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            info.busy = !FileLock::try_lock(activity_file(dir)).locked();
        }
    } catch (const Error&) {
        info.busy = false;
    }
    return info;
}

FileLock try_lock_idle(const fs::path& dir) {
    return FileLock::try_lock(activity_file(dir));
}

}  // namespace sandweave
