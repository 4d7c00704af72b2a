#include "lib/sandbox/image.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/core/progress.hpp"
#include "lib/core/units.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void write_text(const fs::path& p, const std::string& text, mode_t mode = 0644) {
    write_file_atomic(p, text, mode);
}

// Directories and files every image has, whatever the recipe.
void common_layout(const fs::path& rootfs) {
    for (const char* d : {"bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "tmp",
                          "root", "home", "var/tmp", "run", ".sandweave"})
        make_dirs(rootfs / d, 0755);
    ::chmod((rootfs / "tmp").c_str(), 01777);
    ::chmod((rootfs / "var/tmp").c_str(), 01777);
    ::chmod((rootfs / "root").c_str(), 0700);
    // Mount point for the guest init (bind-mounted read-only at start).
    write_text(rootfs / ".sandweave/init", "", 0755);
}

std::string debian_mirror() {
    // The first Debian archive serving bookworm that this host's apt already
    // uses (only the files apt reads: sources.list, sources.list.d/*.list and
    // *.sources, in apt's order); no other network.
    std::vector<fs::path> files{"/etc/apt/sources.list"};
    std::vector<fs::path> parts;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/etc/apt/sources.list.d", ec)) {
        auto ext = e.path().extension().string();
        if (ext == ".list" || ext == ".sources") parts.push_back(e.path());
    }
    std::sort(parts.begin(), parts.end());
    files.insert(files.end(), parts.begin(), parts.end());
    std::regex deb_line(R"(^\s*deb\s+(\[[^\]]*\]\s+)?(https?://\S+)\s+bookworm\s+.*\bmain\b)");
    auto words = [](const std::string& v) {
        std::vector<std::string> w;
        std::istringstream in(v);
        for (std::string x; in >> x;) w.push_back(x);
        return w;
    };
    for (const auto& f : files) {
        std::ifstream in(f);
        std::string line;
        std::map<std::string, std::string> stanza;
        auto check_stanza = [&]() -> std::optional<std::string> {
            auto has = [&](const char* key, const std::string& want) {
                auto w = words(stanza[key]);
                return std::find(w.begin(), w.end(), want) != w.end();
            };
            std::optional<std::string> out;
            if (has("Types", "deb") && has("Suites", "bookworm") && has("Components", "main") &&
                stanza["Enabled"] != "no")
                for (const auto& u : words(stanza["URIs"]))
                    if (!out && (u.rfind("http://", 0) == 0 || u.rfind("https://", 0) == 0))
                        out = u;
            stanza.clear();
            return out;
        };
        bool deb822 = f.extension() == ".sources";
        while (std::getline(in, line)) {
            if (!deb822) {
                std::smatch m;
                if (std::regex_search(line, m, deb_line)) return m[2];
                continue;
            }
            if (line.find_first_not_of(" \t\r") == std::string::npos) {
                if (auto u = check_stanza()) return *u;
                continue;
            }
            if (line[0] == '#' || line[0] == ' ' || line[0] == '\t') continue;
            auto colon = line.find(':');
            if (colon == std::string::npos) continue;
            std::string v = line.substr(colon + 1);
            stanza[line.substr(0, colon)] = v;
        }
        if (deb822)
            if (auto u = check_stanza()) return *u;
    }
    return "http://deb.debian.org/debian";
}

}  // namespace

ImageStore::ImageStore(fs::path images_dir, CommandRunner& runner)
    : dir_(std::move(images_dir)), runner_(runner) {}

ObjectDir ImageStore::objects() const {
    return ObjectDir(image_kind, dir_);
}

std::vector<std::string> ImageStore::recipes() {
    return {"base", "coding", "desktop"};
}

std::optional<ImageInfo> ImageStore::find(const std::string& name) const {
    if (!objects().exists(name)) return std::nullopt;
    json j = parse_untrusted_json(read_file(dir_ / name / image_kind.record));
    ImageInfo info{name, j.value("recipe", name), j.value("built_at", std::string()),
                   j.value("bytes", std::uint64_t{0}), dir_ / name / "rootfs"};
    info.source = j.value("source", "recipe " + info.recipe);
    if (j.contains("imported")) {  // lib/sandbox/image_import.cpp
        const json& m = j["imported"];
        info.recipe.clear();
        info.created = m.value("created", std::string());
        info.digest = m.value("digest", std::string());
        info.layers = m.value("layers", 0);
        info.platform = m.value("platform", std::string());
        const json& c = m.value("config", json::object());
        info.config = ImageConfig{c.value("env", std::vector<std::string>{}),
                                  c.value("working_dir", std::string()),
                                  c.value("user", std::string()),
                                  c.value("uid_gid", std::string()),
                                  c.value("entrypoint", std::vector<std::string>{}),
                                  c.value("cmd", std::vector<std::string>{})};
    }
    return info;
}

fs::path ImageStore::ensure(const std::string& name) {
    if (auto info = find(name)) return info->rootfs;
    return build(name, false).rootfs;
}

ImageInfo ImageStore::build(const std::string& name, bool force) {
    auto known = recipes();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
        if (auto info = find(name)) {  // an imported image has no recipe
            if (!force) return *info;
            throw Error(ErrorCode::usage, "image '" + name + "' was imported (" + info->source +
                                              "): import it again to replace it");
        }
    }
    if (std::find(known.begin(), known.end(), name) == known.end())
        throw Error(ErrorCode::not_found, "unknown image '" + name + "'" +
                                              did_you_mean(name, known) +
                                              "; images: base, coding, desktop");
    // One builder at a time per image; the others wait and then find it built.
    FileLock lock(dir_ / ("." + name + ".lock"));
    if (!force) {
        if (auto info = find(name)) return *info;
    }
    fs::path tmp = dir_ / (".build-" + name + "-" + random_hex(8));
    make_dirs(tmp / "rootfs", 0755);
    try {
        log().info("building image '" + name + "'");
        if (name == "base")
            build_base(tmp / "rootfs");
        else if (name == "coding")
            build_coding(tmp / "rootfs");
        else
            build_desktop(tmp / "rootfs");
        common_layout(tmp / "rootfs");
        ImageInfo info{name, name, now_rfc3339(), tree_bytes(tmp / "rootfs"),
                       dir_ / name / "rootfs"};
        write_text(tmp / "image.json",
                   json{{"name", name},
                        {"recipe", name},
                        {"built_at", info.built_at},
                        {"bytes", info.bytes}}
                           .dump(2) +
                       "\n",
                   0600);
        publish(name, tmp);
        log().info("image '" + name + "' built (" + std::to_string(info.bytes / 1024) + " KiB)");
        return info;
    } catch (...) {
        remove_tree(tmp);
        throw;
    }
}

void ImageStore::publish(const std::string& name, const fs::path& tmp) {
    fs::path final_dir = dir_ / name;
    std::error_code ec;
    // Removing the old tree would empty the lower layer of every sandbox
    // mounted on it: the callers refuse to replace an image in use
    // (sandboxes_using_image), so none is.
    fs::path old;
    if (fs::exists(final_dir, ec)) old = objects().bury(name);
    fs::rename(tmp, final_dir);
    fsync_dir(dir_);
    if (!old.empty()) remove_tree(old);
}

void ImageStore::build_base(const fs::path& rootfs) {
    const fs::path busybox = "/bin/busybox";
    std::error_code ec;
    if (!fs::exists(busybox, ec))
        throw Error(ErrorCode::runtime,
                    "image base: /bin/busybox not found (apt-get install busybox-static)");
    make_dirs(rootfs / "bin", 0755);
    fs::copy_file(busybox, rootfs / "bin/busybox", fs::copy_options::overwrite_existing);
    ::chmod((rootfs / "bin/busybox").c_str(), 0755);
    Command c;
    c.argv = {busybox.string(), "--list-full"};
    auto r = runner_.run(c);
    if (!r.ok()) throw Error(ErrorCode::runtime, "busybox --list-full: " + r.describe());
    std::size_t start = 0;
    while (start < r.out.size()) {
        auto end = r.out.find('\n', start);
        if (end == std::string::npos) end = r.out.size();
        std::string rel = r.out.substr(start, end - start);
        start = end + 1;
        if (rel.empty() || rel == "bin/busybox" || rel.find("..") != std::string::npos) continue;
        fs::path link = rootfs / rel;
        make_dirs(link.parent_path(), 0755);
        fs::path target = fs::relative(rootfs / "bin/busybox", link.parent_path());
        fs::create_symlink(target, link, ec);
    }
    make_dirs(rootfs / "etc", 0755);
    write_text(
        rootfs / "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n");
    write_text(rootfs / "etc/group", "root:x:0:\nnogroup:x:65534:\n");
    write_text(rootfs / "etc/hostname", "sandweave\n");
    write_text(rootfs / "etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n");
}

void ImageStore::debootstrap(const fs::path& rootfs, const std::string& image,
                             const std::string& include) {
    if (::access("/usr/sbin/debootstrap", X_OK) != 0)
        throw Error(ErrorCode::runtime,
                    "image " + image + ": debootstrap not found (apt-get install debootstrap)");
    std::string mirror = debian_mirror();
    log().info("debootstrap bookworm from " + mirror + " (a few minutes)");
    Command c;
    c.argv = {"/usr/sbin/debootstrap", "--variant=minbase",
              "--include=" + include,  "bookworm",
              rootfs.string(),         mirror};
    c.timeout = std::chrono::minutes(30);
    std::size_t lines = 0;
    // Progress: debootstrap's phase ("Retrieving", "Unpacking", ...) and how
    // many of its steps so far.
    Progress shown("building image '" + image + "'");
    std::string phase;
    auto progress = [&](const std::string& line) {
        ++lines;
        if (line.rfind("I: ", 0) == 0) {
            std::string word = line.substr(3, line.find(' ', 3) - 3);
            if (word != phase) shown.step("debootstrap: " + (phase = word));
            shown.advance(1);
        }
        // Each step is progress (shown on a terminal or with --progress), not a log line.
        if (line.rfind("I: ", 0) == 0)
            log().debug(image + ": " + line.substr(3));
        else if (line.rfind("W: ", 0) == 0 || line.rfind("E: ", 0) == 0)
            log().warn(image + ": " + line);
    };
    c.on_out_line = progress;
    c.on_err_line = progress;
    auto r = runner_.run(c);
    if (!r.ok()) throw Error(ErrorCode::general, "debootstrap: " + r.describe());
    std::error_code ec;
    fs::remove_all(rootfs / "var/cache/apt/archives", ec);
    make_dirs(rootfs / "var/cache/apt/archives/partial", 0755);
}

void ImageStore::build_coding(const fs::path& rootfs) {
    debootstrap(rootfs, "coding", "python3,git,procps,ca-certificates,less");
}

std::vector<ImageInfo> ImageStore::list() const {
    std::vector<ImageInfo> out;
    for (const auto& n : objects().ids()) {
        try {
            if (auto i = find(n)) out.push_back(*i);
        } catch (const std::exception&) {
        }
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
}

void ImageStore::remove(const std::string& name) {
    ObjectDir images = objects();
    std::string id = images.resolve(name);  // "no such image: NAME" (exit 4)
    FileLock lock(dir_ / ("." + id + ".lock"));
    images.remove(id);
}

}  // namespace sandweave
