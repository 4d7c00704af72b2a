// weave://: the URL, the fingerprint forms a user may paste, and the
// cluster file scripts/weave-cluster.sh writes for the controller.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lib/controller/controller.hpp"
#include "lib/core/error.hpp"
#include "lib/rpc/tls.hpp"

using namespace sandweave;

TEST_SUITE("weave") {
    TEST_CASE("weave:// URLs: host, optional port (7443)") {
        auto t = rpc::parse_weave_url("weave://ctl.example");
        CHECK(t.host == "ctl.example");
        CHECK(t.port == 7443);
        CHECK(rpc::parse_weave_url("weave://127.0.0.1:7543").port == 7543);
        CHECK(rpc::parse_weave_url("weave://127.0.0.1:7543").url() == "weave://127.0.0.1:7543");
        for (const char* bad : {"weave://", "weave://h:", "weave://h:0", "weave://h:70000",
                                "weave://h:x", "weave://u@h", "weave://h/path", "ssh://h"})
            CHECK_THROWS_AS(rpc::parse_weave_url(bad), Error);
    }

    TEST_CASE("a fingerprint reads in sandweave's form and in openssl x509's") {
        const std::string hex(64, 'a');
        std::string colons;
        for (int i = 0; i < 32; ++i) colons += (i ? ":" : "") + std::string("AA");
        CHECK(rpc::normalize_fingerprint("sha256:" + hex) == "sha256:" + hex);
        CHECK(rpc::normalize_fingerprint("sha256 Fingerprint=" + colons) == "sha256:" + hex);
        CHECK(rpc::normalize_fingerprint(hex) == "sha256:" + hex);
        CHECK_FALSE(rpc::normalize_fingerprint("sha256:" + hex.substr(1)));
        CHECK_FALSE(rpc::normalize_fingerprint("sha256:" + hex.substr(1) + "g"));
    }

    TEST_CASE("the cluster file: SLURM_CONF and each worker's state directory") {
        auto dir = std::filesystem::temp_directory_path() /
                   ("sw-weave-unit-" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
        {
            std::ofstream f(dir / "cluster.env");
            f << "# Written by scripts/weave-cluster.sh\n"
                 "export SLURM_CONF=/c/etc/slurm.conf\n"
                 "export SANDWEAVE_WEAVE_WORKERS=\"w1 w2\"\n"
                 "export SANDWEAVE_WEAVE_STATE_w1=/c/workers/w1/state\n"
                 "SANDWEAVE_WEAVE_STATE_w2='/c/workers/w2/state'\n";
        }
        auto c = controller::read_cluster_env(dir / "cluster.env");
        CHECK(c.slurm_conf == "/c/etc/slurm.conf");
        CHECK(c.state_dirs.size() == 2);
        CHECK(c.state_dirs["w1"] == "/c/workers/w1/state");
        CHECK(c.state_dirs["w2"] == "/c/workers/w2/state");
        CHECK_THROWS_AS(controller::read_cluster_env(dir / "missing.env"), Error);
        std::filesystem::remove_all(dir);
    }
}
