// `image import`: an image from a docker-archive, an oci-archive or an OCI
// layout, and what its config gives a template as defaults. The steps, in a
// temporary directory under images/ that is renamed into place at the end:
//   1. skopeo copies SOURCE into an OCI layout (tmp/oci), locally only;
//   2. the manifest and config are read (size-limited, validated);
//   3. every layer's member names are checked (TarScan): a member leaving the
//      root is refused before anything is unpacked;
//   4. umoci unpacks the layers in order into tmp/rootfs, applying whiteouts
//      and opaque directories;
//   5. the mount points sandweave needs are made without following the
//      image's symlinks (an image may point /tmp at /etc: nothing here may
//      touch the host through it), the config's user is resolved against the
//      image's own /etc/passwd, and image.json records source, digest, size
//      and config.
// Everything the archive says is hostile input.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/core/progress.hpp"
#include "lib/core/tar_scan.hpp"
#include "lib/core/units.hpp"
#include "lib/sandbox/image.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t max_json_blob = 4u << 20;

const fs::path skopeo_bin = "/usr/bin/skopeo";
const fs::path umoci_bin = "/usr/bin/umoci";

struct Source {
    std::string transport;
    fs::path path;
    std::string text() const { return transport + ":" + path.string(); }
};

Source parse_source(const std::string& source) {
    auto colon = source.find(':');
    std::string transport = colon == std::string::npos ? "" : source.substr(0, colon);
    static const std::vector<std::string> known = {"docker-archive", "oci-archive", "oci"};
    if (std::find(known.begin(), known.end(), transport) == known.end())
        throw Error(
            ErrorCode::usage,
            "image source '" + source + "': unknown transport" +
                (transport.empty() ? "" : " '" + transport + "'" + did_you_mean(transport, known)) +
                "; expected docker-archive:FILE, oci-archive:FILE or oci:DIR");
    std::string rest = source.substr(colon + 1);
    // skopeo reads `oci:DIR:REF`; sandweave takes the first image of the layout.
    if (rest.empty())
        throw Error(ErrorCode::usage,
                    "image source '" + source + "': no path after '" + transport + ":'");
    std::error_code ec;
    fs::path p = fs::absolute(rest, ec);
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0)
        throw Error(ErrorCode::usage,
                    "image source '" + source + "': " + p.string() + ": " + std::strerror(errno));
    bool want_dir = transport == "oci";
    if (want_dir != S_ISDIR(st.st_mode))
        throw Error(ErrorCode::usage, "image source '" + source + "': " + p.string() + " is " +
                                          (want_dir ? "not a directory (an OCI layout)"
                                                    : "not a file (use oci:DIR for a layout)"));
    return Source{transport, p.lexically_normal()};
}

// The last line of a tool's stderr, for a one-line error.
std::string last_line(const CommandResult& r) {
    std::string text = r.err.empty() ? r.out : r.err;
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    auto nl = text.rfind('\n');
    std::string line = nl == std::string::npos ? text : text.substr(nl + 1);
    // skopeo and umoci log as `time="..." level=fatal msg="..."`: keep the msg.
    auto msg = line.find("msg=\"");
    if (msg != std::string::npos) {
        line = line.substr(msg + 5);
        if (!line.empty() && line.back() == '"') line.pop_back();
    }
    if (line.size() > 400) line = line.substr(0, 400) + "...";
    return line.empty() ? r.describe() : line;
}

json read_json(const fs::path& p, const std::string& what) {
    try {
        json j = parse_untrusted_json(read_file(p, max_json_blob));
        if (!j.is_object()) throw std::runtime_error("not a JSON object");
        return j;
    } catch (const Error& e) {
        throw Error(ErrorCode::general, what + ": " + e.what());
    } catch (const std::exception& e) {
        throw Error(ErrorCode::general, what + ": " + e.what());
    }
}

fs::path blob_path(const fs::path& layout, const json& descriptor, const std::string& what) {
    if (!descriptor.is_object() || !descriptor.contains("digest") ||
        !descriptor["digest"].is_string())
        throw Error(ErrorCode::general, what + ": no digest");
    std::string d = descriptor["digest"].get<std::string>();
    auto colon = d.find(':');
    std::string algo = d.substr(0, colon == std::string::npos ? 0 : colon);
    std::string hex = colon == std::string::npos ? "" : d.substr(colon + 1);
    if ((algo != "sha256" && algo != "sha512") || hex.empty() ||
        !std::all_of(hex.begin(), hex.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
        throw Error(ErrorCode::general, what + ": malformed digest '" + d + "'");
    return layout / "blobs" / algo / hex;
}

std::vector<std::string> string_list(const json& c, const char* key) {
    std::vector<std::string> out;
    if (!c.contains(key) || c[key].is_null()) return out;
    if (!c[key].is_array())
        throw Error(ErrorCode::general, std::string("image config: ") + key + ": not a list");
    for (const auto& e : c[key]) {
        if (!e.is_string())
            throw Error(ErrorCode::general, std::string("image config: ") + key + ": not strings");
        out.push_back(e.get<std::string>());
    }
    return out;
}

std::string host_arch() {
    utsname u{};
    ::uname(&u);
    std::string m = u.machine;
    if (m == "x86_64") return "amd64";
    if (m == "aarch64") return "arm64";
    return m;
}

// Checks one layer's member names, reading it through a decompressor when it
// is compressed (gzip, zstd: Debian's own tools, streamed, never on disk).
void scan_layer(CommandRunner& runner, const fs::path& blob, const std::string& media,
                const std::string& label, Progress& progress) {
    TarScan scan;
    std::uint64_t seen = 0;
    struct stat st {};
    if (::stat(blob.c_str(), &st) != 0) throw_errno(label + ": " + blob.string());
    bool gz = media.find("gzip") != std::string::npos;
    bool zst = media.find("zstd") != std::string::npos;
    // A compressed layer is counted in decompressed bytes: no total known.
    progress.step("checking " + label, gz || zst ? 0 : static_cast<std::uint64_t>(st.st_size),
                  ProgressUnit::bytes);
    if (!gz && !zst) {
        read_chunks(blob, [&](std::string_view chunk) {
            seen += chunk.size();
            progress.set(seen);
            return scan.feed(chunk);
        });
    } else {
        Command c;
        c.argv = gz ? std::vector<std::string>{"/usr/bin/gzip", "-dc", "--", blob.string()}
                    : std::vector<std::string>{"/usr/bin/zstd", "-dcq", "--", blob.string()};
        RunControl control;
        AttachOptions o;
        o.stdin_fd = -1;
        o.forward_own_signals = false;
        o.control = &control;
        std::string err;
        o.out = OutputSink{-1, [&](std::string_view chunk) {
                               seen += chunk.size();
                               progress.set(seen);
                               if (!scan.feed(chunk)) control.cancel();
                           }};
        o.err = OutputSink{-1, [&](std::string_view chunk) {
                               if (err.size() < 4096) err.append(chunk);
                           }};
        auto r = runner.run_attached(c, o);
        if (scan.error().empty() && !r.ok()) {
            while (!err.empty() && err.back() == '\n') err.pop_back();
            throw Error(ErrorCode::usage,
                        label + ": cannot decompress (" +
                            (err.empty() ? r.describe() : err.substr(err.rfind('\n') + 1)) + ")");
        }
    }
    if (!scan.error().empty() || !scan.finish())
        throw Error(ErrorCode::usage, label + ": " + scan.error());
}

// A regular file of the image, read without following a symlink anywhere on
// its path (the image's /etc may point at the host's).
std::optional<std::string> image_file(const fs::path& rootfs, const std::string& rel) {
    int dir = ::open(rootfs.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (dir < 0) return std::nullopt;
    Fd cur(dir);
    std::stringstream parts(rel);
    std::string part;
    std::vector<std::string> names;
    while (std::getline(parts, part, '/'))
        if (!part.empty()) names.push_back(part);
    for (std::size_t i = 0; i < names.size(); ++i) {
        bool last = i + 1 == names.size();
        int fd = ::openat(cur.get(), names[i].c_str(),
                          O_NOFOLLOW | O_CLOEXEC | (last ? O_RDONLY : O_DIRECTORY | O_RDONLY));
        if (fd < 0) return std::nullopt;
        cur = Fd(fd);
    }
    struct stat st {};
    if (::fstat(cur.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (4 << 20))
        return std::nullopt;
    std::string out(static_cast<std::size_t>(st.st_size), '\0');
    ssize_t n = ::pread(cur.get(), out.data(), out.size(), 0);
    if (n < 0) return std::nullopt;
    out.resize(static_cast<std::size_t>(n));
    return out;
}

// name -> (field 2, field 3) of a passwd or group file.
std::optional<std::pair<std::string, std::string>> lookup(const std::optional<std::string>& file,
                                                          const std::string& name) {
    if (!file) return std::nullopt;
    std::stringstream in(*file);
    for (std::string line; std::getline(in, line);) {
        std::vector<std::string> f;
        std::stringstream ls(line);
        for (std::string x; std::getline(ls, x, ':');) f.push_back(x);
        if (f.size() >= 4 && f[0] == name) return std::make_pair(f[2], f[3]);
    }
    return std::nullopt;
}

bool all_digits(const std::string& s) {
    return !s.empty() && s.size() < 10 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Docker's rules: USER is user[:group], each a name or an id; a user id alone
// takes its passwd entry's group, else 0.
std::string resolve_user(const fs::path& rootfs, const std::string& user) {
    if (user.empty()) return "";
    auto colon = user.find(':');
    std::string u = user.substr(0, colon),
                g = colon == std::string::npos ? "" : user.substr(colon + 1);
    auto passwd = image_file(rootfs, "etc/passwd");
    std::string uid, gid;
    if (all_digits(u)) {
        uid = u;
        gid = "0";
        if (passwd) {
            std::stringstream in(*passwd);
            for (std::string line; std::getline(in, line);) {
                std::vector<std::string> f;
                std::stringstream ls(line);
                for (std::string x; std::getline(ls, x, ':');) f.push_back(x);
                if (f.size() >= 4 && f[2] == u && all_digits(f[3])) {
                    gid = f[3];
                    break;
                }
            }
        }
    } else {
        auto e = lookup(passwd, u);
        if (!e || !all_digits(e->first) || !all_digits(e->second))
            throw Error(ErrorCode::usage,
                        "image user '" + user + "': '" + u + "' is not in the image's /etc/passwd");
        uid = e->first;
        gid = e->second;
    }
    if (!g.empty()) {
        if (all_digits(g)) {
            gid = g;
        } else {
            auto e = lookup(image_file(rootfs, "etc/group"), g);
            if (!e || !all_digits(e->second))
                throw Error(ErrorCode::usage, "image user '" + user + "': group '" + g +
                                                  "' is not in the image's /etc/group");
            gid = e->second;
        }
    }
    return uid + ":" + gid;
}

// The mount points sandweave needs, made inside rootfs without following any
// of the image's symlinks: a missing one is created, /.sandweave (ours) is
// replaced whatever the image put there.
void sandweave_layout(const fs::path& rootfs) {
    int root = ::open(rootfs.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (root < 0) throw_errno("open " + rootfs.string());
    Fd dir(root);
    for (const char* d : {"proc", "sys", "dev", "tmp"}) {
        struct stat st {};
        if (::fstatat(dir.get(), d, &st, AT_SYMLINK_NOFOLLOW) == 0) continue;  // the image's own
        if (::mkdirat(dir.get(), d, 0755) != 0) throw_errno(std::string("mkdir /") + d);
        if (std::string(d) == "tmp") ::fchmodat(dir.get(), d, 01777, 0);
    }
    std::error_code ec;
    fs::remove_all(rootfs / ".sandweave", ec);  // never follows a symlink
    if (ec) throw Error(ErrorCode::general, "remove the image's /.sandweave: " + ec.message());
    if (::mkdirat(dir.get(), ".sandweave", 0755) != 0) throw_errno("mkdir /.sandweave");
    int sw = ::openat(dir.get(), ".sandweave", O_DIRECTORY | O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (sw < 0) throw_errno("open /.sandweave");
    Fd swd(sw);
    int init =
        ::openat(swd.get(), "init", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0755);
    if (init < 0) throw_errno("create /.sandweave/init");
    ::close(init);
}

json config_json(const ImageConfig& c) {
    return json{{"env", c.env},         {"working_dir", c.working_dir}, {"user", c.user},
                {"uid_gid", c.uid_gid}, {"entrypoint", c.entrypoint},   {"cmd", c.cmd}};
}

// 1. skopeo: the source as an OCI layout, nothing from the network.
void copy_to_oci_layout(CommandRunner& runner, const Source& source, const fs::path& tmp,
                        Progress& progress) {
    progress.step("reading " + source.transport);
    Command copy;
    copy.argv = {skopeo_bin.string(),
                 "--insecure-policy",
                 "--tmpdir",
                 tmp.string(),
                 "copy",
                 source.text(),
                 "oci:" + (tmp / "oci").string() + ":image"};
    copy.timeout = std::chrono::minutes(60);
    std::uint64_t blobs = 0;
    copy.on_out_line = [&](const std::string& line) {
        if (line.rfind("Copying blob", 0) == 0) progress.set(++blobs);
    };
    auto r = runner.run(copy);
    if (!r.ok()) throw Error(ErrorCode::usage, "reading the source: " + last_line(r));
}

// What an OCI layout of one image says about it.
struct OciImage {
    std::string digest;  // of its manifest
    json manifest;
    json config;
    std::string arch;  // empty: not said
    ImageConfig settings;
};

ImageConfig image_settings(const json& config) {
    const json& cc = config.contains("config") && config["config"].is_object() ? config["config"]
                                                                               : json::object();
    ImageConfig ic;
    ic.env = string_list(cc, "Env");
    ic.entrypoint = string_list(cc, "Entrypoint");
    ic.cmd = string_list(cc, "Cmd");
    ic.working_dir = cc.value("WorkingDir", std::string());
    ic.user = cc.value("User", std::string());
    for (const auto& e : ic.env)
        if (e.find('=') == std::string::npos || e[0] == '=')
            throw Error(ErrorCode::usage, "image config: Env '" + e + "': expected KEY=VALUE");
    if (!ic.working_dir.empty() && ic.working_dir[0] != '/')
        throw Error(ErrorCode::usage,
                    "image config: WorkingDir '" + ic.working_dir + "': not absolute");
    return ic;
}

// 2. The manifest and config.
OciImage read_oci_image(const fs::path& layout) {
    OciImage img;
    json index = read_json(layout / "index.json", "index.json");
    if (!index.contains("manifests") || !index["manifests"].is_array() ||
        index["manifests"].size() != 1)
        throw Error(ErrorCode::general, "index.json: expected exactly one manifest");
    const json& mdesc = index["manifests"][0];
    img.manifest = read_json(blob_path(layout, mdesc, "manifest"), "manifest");
    if (!img.manifest.contains("layers") || !img.manifest["layers"].is_array())
        throw Error(ErrorCode::general, "manifest: no layers");
    img.config = read_json(blob_path(layout, img.manifest.value("config", json()), "config"),
                           "image config");
    img.arch = img.config.value("architecture", std::string());
    if (!img.arch.empty() && img.arch != host_arch())
        throw Error(ErrorCode::usage,
                    "the image is for " + img.arch + ", this host is " + host_arch());
    img.settings = image_settings(img.config);
    img.digest = mdesc.value("digest", std::string());
    return img;
}

// 3. Every layer's names, before anything is unpacked.
void scan_layers(CommandRunner& runner, const fs::path& layout, const json& layers,
                 Progress& progress) {
    for (std::size_t i = 0; i < layers.size(); ++i) {
        std::string label = "layer " + std::to_string(i + 1) + "/" + std::to_string(layers.size());
        scan_layer(runner, blob_path(layout, layers[i], label),
                   layers[i].value("mediaType", std::string()), label, progress);
    }
}

// 4. umoci: the layers in order, whiteouts applied.
void unpack_layers(CommandRunner& runner, const fs::path& tmp, std::size_t count,
                   Progress& progress) {
    progress.step("unpacking " + std::to_string(count) + " layer(s)");
    Command unpack;
    unpack.argv = {umoci_bin.string(),
                   "--log",
                   "error",
                   "raw",
                   "unpack",
                   "--image",
                   (tmp / "oci").string() + ":image",
                   (tmp / "rootfs").string()};
    unpack.timeout = std::chrono::minutes(60);
    auto r = runner.run(unpack);
    if (!r.ok()) throw Error(ErrorCode::usage, "unpacking the layers: " + last_line(r));
    remove_tree(tmp / "oci");
}

void write_image_record(const fs::path& tmp, const ImageInfo& info) {
    write_file_atomic(tmp / "image.json",
                      json{{"name", info.name},
                           {"source", info.source},
                           {"built_at", info.built_at},
                           {"bytes", info.bytes},
                           {"imported",
                            {{"created", info.created},
                             {"digest", info.digest},
                             {"layers", info.layers},
                             {"platform", info.platform},
                             {"config", config_json(*info.config)}}}}
                              .dump(2) +
                          "\n",
                      0600);
}

}  // namespace

ImageInfo ImageStore::import(const std::string& name, const std::string& source_text, bool force) {
    if (!image_kind.valid_ref(name))
        throw Error(ErrorCode::usage, "image name '" + name +
                                          "': letters, digits, '-', '_' and '.', starting with a "
                                          "letter or digit, at most 64");
    auto known = recipes();
    if (std::find(known.begin(), known.end(), name) != known.end())
        throw Error(ErrorCode::usage, "image name '" + name +
                                          "' is a built-in image (image build); import under "
                                          "another name");
    Source source = parse_source(source_text);
    for (const auto& tool : {skopeo_bin, umoci_bin})
        if (::access(tool.c_str(), X_OK) != 0)
            throw Error(ErrorCode::runtime,
                        "image import needs " + tool.string() + " (apt-get install skopeo umoci)");
    make_dirs(dir_, 0700);
    FileLock lock(dir_ / ("." + name + ".lock"));
    if (find(name) && !force)
        throw Error(ErrorCode::usage,
                    "image '" + name + "' already exists; remove it first or replace it (force)");

    fs::path tmp = dir_ / (".build-" + name + "-" + random_hex(8));
    make_dirs(tmp, 0700);
    try {
        return with_context("importing image '" + name + "' from " + source.text(), [&] {
            Progress progress("importing image '" + name + "'");
            log().debug("importing image '" + name + "' from " + source.text());

            copy_to_oci_layout(runner_, source, tmp, progress);
            fs::path layout = tmp / "oci";
            OciImage img = read_oci_image(layout);
            const json& layers = img.manifest["layers"];
            scan_layers(runner_, layout, layers, progress);
            unpack_layers(runner_, tmp, layers.size(), progress);

            // 5. Our mount points, the user, the record.
            fs::path rootfs = tmp / "rootfs";
            ::chmod(rootfs.c_str(), 0755);
            sandweave_layout(rootfs);
            img.settings.uid_gid = resolve_user(rootfs, img.settings.user);

            ImageInfo info;
            info.name = name;
            info.built_at = now_rfc3339();
            info.bytes = tree_bytes(rootfs);
            info.rootfs = dir_ / name / "rootfs";
            info.source = source.text();
            info.created = img.config.value("created", std::string());
            info.digest = img.digest;
            info.layers = static_cast<int>(layers.size());
            info.platform = img.config.value("os", std::string("linux")) + "/" +
                            (img.arch.empty() ? host_arch() : img.arch);
            info.config = img.settings;
            write_image_record(tmp, info);
            publish(name, tmp);
            log().info("image '" + name + "' imported (" + std::to_string(info.layers) +
                       " layer(s), " + human_bytes(info.bytes) + ")");
            return info;
        });
    } catch (...) {
        remove_tree(tmp);
        throw;
    }
}

void ImageStore::apply_defaults(ResolvedTemplate& t) const {
    if (!t.doc.contains("image") || !t.doc["image"].is_string()) return;
    std::string image = t.doc["image"].get<std::string>();
    std::optional<ImageInfo> info;
    try {
        info = find(image);
    } catch (const std::exception&) {
        return;  // unreadable record: the create reports it when it mounts the image
    }
    if (!info || !info->config) return;
    const ImageConfig& c = *info->config;
    const std::string from = "image " + image;
    auto set = [&](const std::string& ptr, const json& v) {
        json::json_pointer jp(ptr);
        if (t.doc.contains(jp)) return;  // the template's own value wins
        t.doc[jp] = v;
        t.origin[ptr] = from;
    };
    for (const auto& e : c.env) {
        auto eq = e.find('=');
        std::string key = e.substr(0, eq);
        if (key.find('/') != std::string::npos || key.find('~') != std::string::npos) continue;
        set("/env/" + key, e.substr(eq + 1));
    }
    if (!c.working_dir.empty()) set("/cwd", c.working_dir);
    if (!c.uid_gid.empty()) set("/user", c.uid_gid);
    if (!c.entrypoint.empty()) set("/entrypoint", c.entrypoint);
    if (!c.cmd.empty()) set("/cmd", c.cmd);
}

}  // namespace sandweave
