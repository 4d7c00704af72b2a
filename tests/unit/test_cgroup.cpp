// lib/core/cgroup: finding this process's own cgroup.procs files, and the
// no-op move create makes to warm the kernel's cgroup attach lock.
#include <doctest/doctest.h>

#include <unistd.h>

#include "lib/core/cgroup.hpp"
#include "lib/core/fsutil.hpp"

using namespace sandweave;
namespace fs = std::filesystem;

namespace {

// A cgroup v1 host as the CI machines have it, plus an unmounted hierarchy.
constexpr const char* v1_cgroups =
    "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/9e6e\n3:cpuset:/\n2:cpu,cpuacct:/x y\n"
    "7:net_cls:/\n0::/\n";
constexpr const char* v1_mountinfo =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "36 31 0:33 / /sys/fs/cgroup/memory rw,relatime shared:5 - cgroup cgroup rw,memory\n"
    "40 31 0:37 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "41 31 0:38 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
    "50 23 8:1 / / rw,relatime - ext4 /dev/vda rw\n";

}  // namespace

TEST_SUITE("cgroup") {
    TEST_CASE("v1: every mounted hierarchy's own cgroup, memory and cpuset last") {
        auto files = own_cgroup_procs_files(v1_cgroups, v1_mountinfo);
        CHECK(files == std::vector<fs::path>{
                           "/sys/fs/cgroup/systemd/cgroup.procs",
                           "/sys/fs/cgroup/pids/cgroup.procs",
                           "/sys/fs/cgroup/cpu,cpuacct/x y/cgroup.procs",
                           "/sys/fs/cgroup/cpuset/cgroup.procs",
                           "/sys/fs/cgroup/memory/process_api/9e6e/cgroup.procs",
                       });
    }

    TEST_CASE("cgroup2 comes first; escaped mount points are unescaped") {
        auto files = own_cgroup_procs_files(
            "0::/user.slice/session-1.scope\n",
            "24 1 0:22 / /sys/fs/cgroup\\040unified rw - cgroup2 cgroup2 rw,nsdelegate\n");
        CHECK(files == std::vector<fs::path>{
                           "/sys/fs/cgroup unified/user.slice/session-1.scope/cgroup.procs"});
    }

    TEST_CASE("a hierarchy mounted from a subtree: only a cgroup under it") {
        const char* mi = "60 1 0:40 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        CHECK(own_cgroup_procs_files("0::/docker/abc/inner\n", mi) ==
              std::vector<fs::path>{"/sys/fs/cgroup/inner/cgroup.procs"});
        CHECK(own_cgroup_procs_files("0::/docker/abc\n", mi) ==
              std::vector<fs::path>{"/sys/fs/cgroup/cgroup.procs"});
        CHECK(own_cgroup_procs_files("0::/docker/abcd\n", mi).empty());
        CHECK(own_cgroup_procs_files("0::/other\n", mi).empty());
    }

    TEST_CASE("malformed or empty input gives nothing, never a throw") {
        CHECK(own_cgroup_procs_files("", "").empty());
        CHECK(own_cgroup_procs_files("garbage\n8:pids\n8:pids:relative\n", v1_mountinfo).empty());
        CHECK(own_cgroup_procs_files("8:pids:/\n", "40 31 0:37 / /p rw - cgroup\n").empty());
    }

    TEST_CASE("rejoin_own_cgroup leaves this process where it was") {
        std::string before = read_file("/proc/self/cgroup");
        auto written = rejoin_own_cgroup();
        CHECK(read_file("/proc/self/cgroup") == before);
        // As root on a host with a cgroup filesystem (CI), the write is made.
        if (::geteuid() == 0 && fs::exists("/sys/fs/cgroup") && !fs::is_empty("/sys/fs/cgroup")) {
            REQUIRE(written.has_value());
            CHECK(written->filename() == "cgroup.procs");
        }
    }

    TEST_CASE("a sandbox's cgroups: the name at the top of every hierarchy, each once") {
        std::string mi = std::string(v1_mountinfo) +
                         // The same hierarchy mounted again, a subtree, and cgroup2.
                         "70 31 0:37 / /mnt/pids rw - cgroup cgroup rw,pids\n"
                         "71 31 0:32 /x /mnt/mem rw - cgroup cgroup rw,memory\n"
                         "72 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        CHECK(top_cgroup_dirs("sw-0123456789ab", mi) ==
              std::vector<fs::path>{
                  "/sys/fs/cgroup/cpu,cpuacct/sw-0123456789ab",
                  "/sys/fs/cgroup/cpuset/sw-0123456789ab",
                  "/sys/fs/cgroup/memory/sw-0123456789ab",
                  "/sys/fs/cgroup/pids/sw-0123456789ab",
                  "/sys/fs/cgroup/systemd/sw-0123456789ab",
                  "/sys/fs/cgroup/unified/sw-0123456789ab",
              });
        // Never a path elsewhere.
        CHECK(top_cgroup_dirs("", mi).empty());
        CHECK(top_cgroup_dirs("..", mi).empty());
        CHECK(top_cgroup_dirs("a/b", mi).empty());
    }
}
