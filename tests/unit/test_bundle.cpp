// lib/bundle: the OCI config.json handed to runsc. What matters to a user: the
// guest's /proc carries hidepid only when asked, PID 1 is sandweave's init bound
// read-only, the root is the sandbox's overlay, and the guest environment is
// PATH/HOME, then the template's env, then the caller's --env (later wins).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include "fixtures.hpp"
#include "lib/runtime/bundle.hpp"
#include "lib/runtime/limits.hpp"

using namespace sandweave;
using nlohmann::json;

namespace {

BundleInput input(int hidepid) {
    BundleInput in;
    in.spec.template_name = "base";
    in.spec.image = "base";
    in.spec.runtime.hidepid = hidepid;
    in.spec.env = {{"LANG", "C.UTF-8"}};
    in.rootfs = "/var/lib/sandweave/sandboxes/sw-0123456789ab/rootfs";
    in.init_binary = "/usr/libexec/sandweave/sandweave-init";
    in.hostname = "sandweave";
    return in;
}

const json* mount_at(const json& config, const std::string& destination) {
    for (const auto& m : config.at("mounts"))
        if (m.at("destination") == destination) return &m;
    return nullptr;
}

bool has(const json& arr, const std::string& value) {
    return std::find(arr.begin(), arr.end(), json(value)) != arr.end();
}

std::vector<std::string> proc_options(const json& config) {
    const json* proc = mount_at(config, "/proc");
    REQUIRE(proc != nullptr);
    CHECK(proc->at("type") == "proc");
    return proc->value("options", std::vector<std::string>{});
}

}  // namespace

TEST_SUITE("bundle") {
    TEST_CASE("/proc carries hidepid only when it is not 0") {
        auto none = proc_options(build_oci_config(input(0)));
        CHECK(std::none_of(none.begin(), none.end(),
                           [](const std::string& o) { return o.rfind("hidepid", 0) == 0; }));

        auto one = proc_options(build_oci_config(input(1)));
        CHECK(std::count(one.begin(), one.end(), "hidepid=1") == 1);
        auto two = proc_options(build_oci_config(input(2)));
        CHECK(std::count(two.begin(), two.end(), "hidepid=2") == 1);
        CHECK(std::count(two.begin(), two.end(), "hidepid=1") == 0);
    }

    TEST_CASE("/proc caches a bounded number of dentries, whatever hidepid") {
        for (int h : {0, 2}) {
            auto opts = proc_options(build_oci_config(input(h)));
            CHECK(std::count(opts.begin(), opts.end(),
                             "dentry_cache_limit=" + std::to_string(proc_dentry_cache_limit)) == 1);
        }
        CHECK(proc_dentry_cache_limit > 0);
        CHECK(proc_dentry_cache_limit <= 64);
    }

    TEST_CASE("PID 1 is the guest init, bind-mounted read-only from the host") {
        json c = build_oci_config(input(0));
        CHECK(c.at("process").at("args") == json::array({guest_init_path}));
        CHECK(std::string(guest_init_path) == "/.sandweave/init");
        const json* init = mount_at(c, guest_init_path);
        REQUIRE(init != nullptr);
        CHECK(init->at("type") == "bind");
        CHECK(init->at("source") == "/usr/libexec/sandweave/sandweave-init");
        CHECK(has(init->at("options"), "ro"));
        CHECK((has(init->at("options"), "bind") || has(init->at("options"), "rbind")));
        CHECK(c.at("process").at("user").at("uid") == 0);
        CHECK(c.at("process").at("terminal") == false);
    }

    TEST_CASE(
        "the root is the sandbox's overlay, writable; the guest has its own namespaces and no "
        "network") {
        json c = build_oci_config(input(0));
        CHECK(c.at("root").at("path") == "/var/lib/sandweave/sandboxes/sw-0123456789ab/rootfs");
        CHECK(c.at("root").value("readonly", false) == false);
        CHECK(c.at("hostname") == "sandweave");
        std::vector<std::string> ns;
        for (const auto& n : c.at("linux").at("namespaces")) ns.push_back(n.at("type"));
        for (const char* want : {"pid", "network", "mount", "ipc", "uts"}) {
            CAPTURE(want);
            CHECK(std::count(ns.begin(), ns.end(), want) == 1);
        }
        CHECK(mount_at(c, "/dev") != nullptr);
        CHECK(mount_at(c, "/sys") != nullptr);
    }

    // The init needs CAP_SYS_ADMIN once, for the hierarchy of the command
    // groups (guest/command_group.h), and drops it; no command is given it.
    TEST_CASE("only the init gets CAP_SYS_ADMIN, on top of root's set") {
        json c = build_oci_config(input(0));
        json root = capabilities_for(UserSpec{0, 0});
        for (const char* set : {"bounding", "effective", "permitted"}) {
            CAPTURE(set);
            auto init = c["process"]["capabilities"][set].get<std::vector<std::string>>();
            auto cmd = root[set].get<std::vector<std::string>>();
            CHECK(std::count(init.begin(), init.end(), "CAP_SYS_ADMIN") == 1);
            CHECK(std::count(cmd.begin(), cmd.end(), "CAP_SYS_ADMIN") == 0);
            CHECK(init.size() == cmd.size() + 1);
        }
    }

    // The host cgroup holds the runtime too: it gets the guest's limits plus
    // room for it; the guest's own limits are annotations (test_limits.cpp).
    TEST_CASE("resources become host cgroup limits only when set") {
        json plain = build_oci_config(input(0));
        CHECK(plain.at("linux").at("resources").empty());

        BundleInput in = input(0);
        in.spec.resources.memory = 512ull << 20;
        in.spec.resources.cpus = 1.5;
        in.spec.resources.pids = 64;
        json c = build_oci_config(in);
        const json& r = c.at("linux").at("resources");
        CHECK(r.at("memory").at("limit") == (512ull << 20) + host_memory_headroom);
        CHECK(r.at("pids").at("limit") == host_pids_base + 64 * host_pids_per_guest_task);
        CHECK(c.at("annotations").at(guest_memory_annotation) == std::to_string(512ull << 20));
        CHECK(c.at("annotations").at(guest_pids_annotation) == "64");
        CHECK(r.at("cpu").at("quota") == 150000);
        CHECK(r.at("cpu").at("period") == 100000);
    }

    TEST_CASE("guest_env: PATH and HOME, then the template's env, then --env; later wins") {
        SandboxSpec spec;
        spec.user = UserSpec{0, 0};
        spec.env = {{"LANG", "C.UTF-8"}, {"A", "template"}, {"HOME", "/home/agent"}};
        auto env = guest_env(spec, {"A=flag", "B=two=parts", "EMPTY="});
        auto value = [&](const std::string& key) -> std::optional<std::string> {
            std::optional<std::string> v;
            for (const auto& kv : env)
                if (kv.rfind(key + "=", 0) == 0) {
                    CHECK_FALSE(v.has_value());  // each key at most once
                    v = kv.substr(key.size() + 1);
                }
            return v;
        };
        CHECK(value("PATH") == std::optional<std::string>(std::string(default_path_env).substr(5)));
        CHECK(value("HOME") ==
              std::optional<std::string>("/home/agent"));  // template beats the default
        CHECK(value("LANG") == std::optional<std::string>("C.UTF-8"));
        CHECK(value("A") == std::optional<std::string>("flag"));  // --env beats the template
        CHECK(value("B") == std::optional<std::string>("two=parts"));
        CHECK(value("EMPTY") == std::optional<std::string>(""));

        auto path_override = guest_env(spec, {"PATH=/opt/bin"});
        CHECK(std::count(path_override.begin(), path_override.end(), "PATH=/opt/bin") == 1);
    }

    TEST_CASE("guest_env: HOME defaults to /root for root and / for other users") {
        SandboxSpec root;
        root.user = UserSpec{0, 0};
        auto r = guest_env(root, {});
        CHECK(std::count(r.begin(), r.end(), "HOME=/root") == 1);

        SandboxSpec agent;
        agent.user = UserSpec{1001, 1001};
        auto a = guest_env(agent, {});
        CHECK(std::count(a.begin(), a.end(), "HOME=/") == 1);
    }

    TEST_CASE("init runs with the template's env but as root with HOME=/root") {
        BundleInput in = input(0);
        in.spec.user = UserSpec{1001, 1001};
        json c = build_oci_config(in);
        const json& env = c.at("process").at("env");
        CHECK(has(env, "LANG=C.UTF-8"));
        CHECK(has(env, "HOME=/root"));
        CHECK(has(env, default_path_env));
    }

    TEST_CASE("/tmp is bound from the root filesystem only when guest_tmp_dir gives a directory") {
        CHECK(mount_at(build_oci_config(input(0)), "/tmp") == nullptr);
        BundleInput in = input(0);
        in.tmp_dir = in.rootfs / "tmp";
        json c = build_oci_config(in);
        const json* tmp = mount_at(c, "/tmp");
        REQUIRE(tmp != nullptr);
        CHECK(tmp->at("type") == "bind");
        CHECK(tmp->at("source") == (in.rootfs / "tmp").string());
        CHECK(has(tmp->at("options"), "rw"));
    }

    TEST_CASE("guest_tmp_dir: the image's /tmp, made 1777 when missing, never through a symlink") {
        test::TempDir root("bundle");
        namespace fs = std::filesystem;
        fs::path rootfs = root.path / "rootfs";
        fs::create_directories(rootfs);
        CHECK(guest_tmp_dir(rootfs) == rootfs / "tmp");
        struct stat st {};
        REQUIRE(::lstat((rootfs / "tmp").c_str(), &st) == 0);
        CHECK(S_ISDIR(st.st_mode));
        CHECK((st.st_mode & 07777) == 01777);
        CHECK(guest_tmp_dir(rootfs) == rootfs / "tmp");  // an existing one is kept

        fs::remove(rootfs / "tmp");
        fs::create_directories(root.path / "host-dir");
        fs::create_directory_symlink(root.path / "host-dir", rootfs / "tmp");
        CHECK(guest_tmp_dir(rootfs).empty());

        fs::remove(rootfs / "tmp");
        std::ofstream(rootfs / "tmp") << "a file";
        CHECK(guest_tmp_dir(rootfs).empty());
    }

}  // TEST_SUITE
