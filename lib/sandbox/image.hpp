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
#include "lib/options/template.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

// What an imported image's OCI config says a container should start with.
// `user` is as the image wrote it (a name or an id); `uid_gid` is that user
// resolved against the image's own /etc/passwd and /etc/group, "" when unset.
struct ImageConfig {
    std::vector<std::string> env;  // KEY=VALUE
    std::string working_dir;
    std::string user;
    std::string uid_gid;
    std::vector<std::string> entrypoint;
    std::vector<std::string> cmd;
};

struct ImageInfo {
    std::string name;
    std::string recipe;  // built images: the recipe; imported ones: ""
    std::string built_at;
    std::uint64_t bytes = 0;
    std::filesystem::path rootfs;
    // "recipe base" or the import's source ("oci-archive:/abs/path.tar").
    std::string source = {};
    // Imported images: the image's own creation time, manifest digest, layer
    // count, platform and config.
    std::string created = {};
    std::string digest = {};
    int layers = 0;
    std::string platform = {};
    std::optional<ImageConfig> config = {};
};

class ImageStore {
  public:
    ImageStore(std::filesystem::path images_dir, CommandRunner& runner);

    static std::vector<std::string> recipes();

    // The image's rootfs, building it first when missing.
    std::filesystem::path ensure(const std::string& name);
    ImageInfo build(const std::string& name, bool force);
    // Brings in an image from SOURCE: docker-archive:FILE (`docker save`),
    // oci-archive:FILE or oci:DIR, through skopeo (to an OCI layout) and umoci
    // (layers unpacked in order, whiteouts applied), after every layer's
    // member names were checked (lib/core/tar_scan.hpp). Built in a temporary
    // directory and renamed into place: a failed import leaves nothing.
    // (lib/sandbox/image_import.cpp)
    ImageInfo import(const std::string& name, const std::string& source, bool force);
    // A template naming an imported image gets the image's config as
    // defaults (env, cwd, user, entrypoint, cmd) wherever the template sets
    // nothing, with origin "image NAME".
    void apply_defaults(ResolvedTemplate& t) const;
    std::vector<ImageInfo> list() const;
    std::optional<ImageInfo> find(const std::string& name) const;
    void remove(const std::string& name);

  private:
    ObjectDir objects() const;  // the store's image kind, in dir_
    // Renames a finished build directory into place, replacing an old image.
    void publish(const std::string& name, const std::filesystem::path& tmp);
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
