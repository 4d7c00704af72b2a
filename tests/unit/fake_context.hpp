#pragma once
// FakeContext: a Context for unit tests of lib/sandbox. A private state
// directory (removed afterwards), a ScriptedRunner in place of runsc and the
// other programs, a FakeHost in place of mounts and processes. What lifecycle
// code needs from the disk is real: the store, templates, an image directory
// (a stand-in built by install_image, never by a recipe).

#include <doctest/doctest.h>

#include <stdlib.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "lib/core/fsutil.hpp"
#include "lib/sandbox/context.hpp"
#include "lib/store/state.hpp"
#include "tests/unit/fake_host.hpp"
#include "tests/unit/scripted_runner.hpp"

namespace sandweave {

struct FakeContext {
    // Any executable file passes find_runsc; it is never run (runner is fake).
    static constexpr const char* runsc = "/bin/true";

    std::filesystem::path root = make_root();
    StateStore store{root};
    ScriptedRunner runner;
    FakeHost host;
    Context ctx{store, runner, host, std::string(runsc)};

    FakeContext() = default;
    FakeContext(const FakeContext&) = delete;
    FakeContext& operator=(const FakeContext&) = delete;
    ~FakeContext() {
        std::error_code ec;
        std::filesystem::remove_all(root, ec);
    }

    // An image the store finds as built: its record and an (empty) rootfs.
    void install_image(const std::string& name = "base") {
        std::filesystem::path dir = store.images_dir() / name;
        make_dirs(dir / "rootfs", 0755);
        write_file_atomic(dir / "image.json",
                          nlohmann::json{{"name", name}, {"recipe", name}, {"bytes", 0}}.dump());
    }

  private:
    static std::filesystem::path make_root() {
        // Short: an audited sandbox's socket path must fit in sockaddr_un.
        std::string tmpl = "/tmp/sw-unit.XXXXXX";
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        return tmpl;
    }
};

}  // namespace sandweave
