#include "lib/core/copy_stream.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>
#include <set>
#include <vector>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "wire/copy.h"

namespace sandweave::copy {

namespace {

void progress_thunk(void* ctx, std::uint64_t bytes) {
    (*static_cast<const OnBytes*>(ctx))(bytes);
}

struct ProgressHook {
    sw_copy_progress p{nullptr, nullptr};
    explicit ProgressHook(const OnBytes& on_bytes) {
        if (on_bytes) p = {&progress_thunk, const_cast<OnBytes*>(&on_bytes)};
    }
};

ssize_t read_fd(void* ctx, void* buf, std::size_t n) {
    return ::read(*static_cast<int*>(ctx), buf, n);
}

// Buffered writes of stream records to a descriptor.
class StreamOut {
  public:
    explicit StreamOut(int fd) : fd_(fd) { buf_.reserve(cap); }
    void put(std::string_view data) {
        if (buf_.size() + data.size() > cap) flush();
        if (data.size() > cap) {
            write(data);
            return;
        }
        buf_.append(data);
    }
    void entry(const sw_copy_entry& e) {
        std::string rec(SW_COPY_RECORD + 2 * SW_COPY_MAX_PATH, '\0');
        rec.resize(sw_copy_encode(&e, reinterpret_cast<unsigned char*>(rec.data())));
        put(rec);
    }
    void flush() {
        write(buf_);
        buf_.clear();
    }

  private:
    void write(std::string_view data) {
        if (!write_all(fd_, data)) throw_errno("writing the copy stream");
    }
    static constexpr std::size_t cap = 256u << 10;
    int fd_;
    std::string buf_;
};

// A tar member's name as an entry path: "./" prefixes and trailing slashes
// dropped; "" for the archive's own top directory.
std::string member_path(const char* raw) {
    std::string p = raw ? raw : "";
    while (p.size() >= 2 && p.compare(0, 2, "./") == 0) p.erase(0, 2);
    while (!p.empty() && p.back() == '/') p.pop_back();
    if (p == ".") p.clear();
    return p;
}

std::string parent_of(const std::string& p) {
    auto slash = p.rfind('/');
    return slash == std::string::npos ? "" : p.substr(0, slash);
}

sw_copy_entry new_entry(std::uint8_t type, const std::string& path) {
    sw_copy_entry e{};
    e.type = type;
    std::memcpy(e.path, path.data(), path.size());
    e.path[path.size()] = 0;
    return e;
}

[[noreturn]] void refuse(const std::string& why) {
    throw Error(ErrorCode::general, why);
}

struct ArchiveReadFree {
    void operator()(archive* a) const { archive_read_free(a); }
};
struct ArchiveWriteFree {
    void operator()(archive* a) const { archive_write_free(a); }
};
struct EntryFree {
    void operator()(archive_entry* e) const { archive_entry_free(e); }
};

}  // namespace

std::string root_name(const std::string& path) {
    std::string p = path;
    if (wants_contents(p)) p.resize(p.size() - 2);
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    if (p == "/" || p.empty()) return ".";
    auto slash = p.rfind('/');
    std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
    return name.empty() || name == ".." ? "." : name;
}

bool wants_contents(const std::string& path) {
    return path == "." || (path.size() >= 2 && path.compare(path.size() - 2, 2, "/.") == 0);
}

void send_local(const std::string& path, int out, const OnBytes& on_bytes) {
    ProgressHook hook(on_bytes);
    sw_copy_error e{};
    if (sw_copy_send(path.c_str(), out, &hook.p, &e) != 0) throw Error(ErrorCode::general, e.msg);
}

void receive_local(int in, const std::string& dest, const std::string& name, bool contents,
                   const OnBytes& on_bytes) {
    ProgressHook hook(on_bytes);
    sw_copy_error e{};
    if (sw_copy_receive(in, dest.c_str(), name.c_str(), contents ? SW_COPY_CONTENTS : 0, &hook.p,
                        &e) != 0)
        throw Error(ErrorCode::general, e.msg);
}

namespace {

// A tar archive read member by member and written as the copy stream, each
// member checked first: nothing absolute, escaping, hard-linked or special,
// no path twice, no member under a symlink or a file of the archive.
class TarToStream {
  public:
    TarToStream(int in, int out, const OnBytes& on_bytes)
        : a_(archive_read_new()), s_(out), on_bytes_(on_bytes), buf_(256u << 10) {
        archive_read_support_format_all(a_.get());
        archive_read_support_filter_all(a_.get());
        if (archive_read_open_fd(a_.get(), in, 64 * 1024) != ARCHIVE_OK)
            refuse(std::string("reading the tar archive: ") + archive_error_string(a_.get()));
    }

    void run() {
        sw_copy_entry root = new_entry(SW_ENT_DIR, "");
        root.mode = 0755;
        root.mtime_sec = now_;
        s_.entry(root);
        archive_entry* ent = nullptr;
        for (;;) {
            int rc = archive_read_next_header(a_.get(), &ent);
            if (rc == ARCHIVE_EOF) break;
            if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
                refuse(std::string("reading the tar archive: ") + archive_error_string(a_.get()));
            member(ent);
        }
        s_.put("Z");
        s_.flush();
    }

  private:
    void member(archive_entry* ent) {
        const char* raw = archive_entry_pathname(ent);
        const std::string shown = raw ? raw : "";
        std::string path = checked_path(ent, raw, shown);
        if (path.empty()) return;  // the archive's "./": the destination itself
        std::uint8_t type = member_type(ent, shown);
        make_parents(path, shown);
        if (dirs_.count(path) || others_.count(path)) {
            if (type == SW_ENT_DIR && dirs_.count(path)) return;  // listed after its children
            refuse("tar member '" + shown + "' appears twice");
        }
        sw_copy_entry e = entry_of(ent, type, path, shown);
        s_.entry(e);
        (type == SW_ENT_DIR ? dirs_ : others_).insert(path);
        copy_data(e.size, shown);
    }

    static std::string checked_path(archive_entry* ent, const char* raw, const std::string& shown) {
        if (!shown.empty() && shown[0] == '/')
            refuse("refused: tar member '" + shown + "' is an absolute path");
        std::string path = member_path(raw);
        if (path.empty()) return path;
        if (sw_copy_path_ok(path.data(), path.size()) != 0)
            refuse("refused: tar member '" + shown + "' escapes the destination");
        if (archive_entry_hardlink(ent))
            refuse("tar member '" + shown + "' is a hard link; hard links are not copied");
        return path;
    }

    static std::uint8_t member_type(archive_entry* ent, const std::string& shown) {
        switch (archive_entry_filetype(ent)) {
            case AE_IFREG:
                return SW_ENT_FILE;
            case AE_IFDIR:
                return SW_ENT_DIR;
            case AE_IFLNK:
                return SW_ENT_SYMLINK;
            default:
                refuse("tar member '" + shown +
                       "' is a device, fifo or socket; only files, directories and symlinks are "
                       "copied");
        }
    }

    // Its directories: made when the archive does not list them first; never
    // through a symlink or a file of the archive.
    void make_parents(const std::string& path, const std::string& shown) {
        std::vector<std::string> missing;
        for (std::string p = parent_of(path); !dirs_.count(p); p = parent_of(p)) {
            if (others_.count(p))
                refuse("refused: tar member '" + shown + "' goes through '" + p +
                       "', which is not a directory");
            missing.push_back(p);
        }
        for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
            sw_copy_entry d = new_entry(SW_ENT_DIR, *it);
            d.mode = 0755;
            d.mtime_sec = now_;
            s_.entry(d);
            dirs_.insert(*it);
        }
    }

    static sw_copy_entry entry_of(archive_entry* ent, std::uint8_t type, const std::string& path,
                                  const std::string& shown) {
        sw_copy_entry e = new_entry(type, path);
        e.mode = static_cast<std::uint32_t>(archive_entry_perm(ent)) & 07777;
        e.mtime_sec = archive_entry_mtime(ent);
        e.mtime_nsec = static_cast<std::uint32_t>(archive_entry_mtime_nsec(ent));
        if (e.mtime_nsec >= 1000000000u) e.mtime_nsec = 0;
        e.uid = static_cast<std::uint32_t>(archive_entry_uid(ent));
        e.gid = static_cast<std::uint32_t>(archive_entry_gid(ent));
        if (type == SW_ENT_SYMLINK) {
            const char* target = archive_entry_symlink(ent);
            std::string t = target ? target : "";
            if (t.empty() || t.size() > SW_COPY_MAX_PATH ||
                sw_copy_link_ok(path.c_str(), t.c_str()) != 0)
                refuse("refused: tar member '" + shown + "' is a symlink to '" + t +
                       "', outside the destination");
            std::memcpy(e.link, t.c_str(), t.size() + 1);
        }
        if (type == SW_ENT_FILE) {
            if (!archive_entry_size_is_set(ent) || archive_entry_size(ent) < 0)
                refuse("tar member '" + shown + "' has no size");
            e.size = static_cast<std::uint64_t>(archive_entry_size(ent));
        }
        return e;
    }

    void copy_data(std::uint64_t left, const std::string& shown) {
        while (left) {
            la_ssize_t n = archive_read_data(a_.get(), buf_.data(), buf_.size());
            if (n < 0)
                refuse("reading tar member '" + shown + "': " + archive_error_string(a_.get()));
            if (n == 0) refuse("tar member '" + shown + "' is cut short");
            auto got = std::min<std::uint64_t>(left, static_cast<std::uint64_t>(n));
            s_.put(std::string_view(buf_.data(), got));
            left -= got;
            bytes_ += got;
            if (on_bytes_) on_bytes_(bytes_);
        }
    }

    std::unique_ptr<archive, ArchiveReadFree> a_;
    StreamOut s_;
    const OnBytes& on_bytes_;
    const std::int64_t now_ = std::time(nullptr);
    std::set<std::string> dirs_{""}, others_;
    std::uint64_t bytes_ = 0;
    std::vector<char> buf_;
};

}  // namespace

void tar_to_stream(int in, int out, const OnBytes& on_bytes) {
    TarToStream(in, out, on_bytes).run();
}

void stream_to_tar(int in, int out, const std::string& name, const OnBytes& on_bytes) {
    auto r = std::make_unique<sw_copy_reader>();
    int fd = in;
    sw_copy_reader_init(r.get(), &read_fd, &fd);
    std::unique_ptr<archive, ArchiveWriteFree> a(archive_write_new());
    archive_write_set_format_pax_restricted(a.get());
    archive_write_set_bytes_in_last_block(a.get(), 1);
    if (archive_write_open_fd(a.get(), out) != ARCHIVE_OK)
        refuse(std::string("writing the tar archive: ") + archive_error_string(a.get()));
    std::set<std::string> dirs;
    std::set<std::string> seen;
    auto e = std::make_unique<sw_copy_entry>();
    sw_copy_error err{};
    std::vector<char> buf(256u << 10);
    std::uint64_t bytes = 0;
    for (;;) {
        int got = sw_copy_next(r.get(), e.get(), &err);
        if (got < 0) refuse(err.msg);
        if (got == 0) break;
        std::string rel = e->path;
        // Parents first, and only directories: no member may go through a
        // symlink of the archive (an extractor would follow it).
        if (!rel.empty() && !dirs.count(parent_of(rel)))
            refuse("refused: '" + rel + "' does not come after its directory in the copy");
        if (!seen.insert(rel).second) refuse("'" + rel + "' appears twice in the copy");
        if (e->type == SW_ENT_DIR) dirs.insert(rel);
        std::string member = rel.empty() ? name : name + "/" + rel;
        std::unique_ptr<archive_entry, EntryFree> ae(archive_entry_new());
        archive_entry_set_pathname(ae.get(), member.c_str());
        archive_entry_set_perm(ae.get(), e->mode);
        archive_entry_set_uid(ae.get(), e->uid);
        archive_entry_set_gid(ae.get(), e->gid);
        archive_entry_set_mtime(ae.get(), e->mtime_sec, e->mtime_nsec);
        if (e->type == SW_ENT_FILE) {
            archive_entry_set_filetype(ae.get(), AE_IFREG);
            archive_entry_set_size(ae.get(), static_cast<la_int64_t>(e->size));
        } else if (e->type == SW_ENT_DIR) {
            archive_entry_set_filetype(ae.get(), AE_IFDIR);
        } else {
            archive_entry_set_filetype(ae.get(), AE_IFLNK);
            archive_entry_set_symlink(ae.get(), e->link);
        }
        if (archive_write_header(a.get(), ae.get()) != ARCHIVE_OK)
            refuse(std::string("writing the tar archive: ") + archive_error_string(a.get()));
        for (;;) {
            ssize_t n = sw_copy_read_data(r.get(), buf.data(), buf.size(), &err);
            if (n < 0) refuse(err.msg);
            if (n == 0) break;
            if (archive_write_data(a.get(), buf.data(), static_cast<std::size_t>(n)) != n)
                refuse(std::string("writing the tar archive: ") + archive_error_string(a.get()));
            bytes += static_cast<std::uint64_t>(n);
            if (on_bytes) on_bytes(bytes);
        }
    }
    if (archive_write_close(a.get()) != ARCHIVE_OK)
        refuse(std::string("writing the tar archive: ") + archive_error_string(a.get()));
}

}  // namespace sandweave::copy
