#pragma once
// Root filesystem images. An image is a directory tree under <state>/images/<name>/
// rootfs, built once by a recipe and never modified afterwards: sandboxes mount it
// as the lower layer of an overlay. A build happens in a temporary directory and
// is renamed into place, so an interrupted build leaves nothing that looks built.
//
// Recipes: `base` copies Debian's busybox-static (seconds); `coding` runs
// debootstrap for a Debian with a shell, Python and git (minutes, with progress);
// `desktop` the same with an X display (lib/sandbox/desktop_image.cpp).

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/process.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

struct ImageInfo {
    std::string name;
    std::string recipe;
    std::string built_at;
    std::uint64_t bytes = 0;
    std::filesystem::path rootfs;
};

class ImageStore {
  public:
    ImageStore(std::filesystem::path images_dir, CommandRunner& runner);

    static std::vector<std::string> recipes();

    // The image's rootfs, building it first when missing.
    std::filesystem::path ensure(const std::string& name);
    ImageInfo build(const std::string& name, bool force);
    std::vector<ImageInfo> list() const;
    std::optional<ImageInfo> find(const std::string& name) const;
    void remove(const std::string& name);

  private:
    ObjectDir objects() const;  // the store's image kind, in dir_
    void build_base(const std::filesystem::path& rootfs);
    void build_coding(const std::filesystem::path& rootfs);
    void build_desktop(const std::filesystem::path& rootfs);  // desktop_image.cpp
    // A minimal Debian bookworm with `include` (comma-separated packages) in
    // rootfs, showing debootstrap's progress as "IMAGE: ..." log lines.
    void debootstrap(const std::filesystem::path& rootfs, const std::string& image,
                     const std::string& include);

    std::filesystem::path dir_;
    CommandRunner& runner_;
};

}  // namespace sandweave
