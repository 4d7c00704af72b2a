#include "lib/core/fsutil.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <system_error>
#include <vector>

#include "lib/core/after_answer.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"

namespace sandweave {
namespace {

void write_all(int fd, std::string_view data, const fs::path& path) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_errno("write " + path.string());
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

}  // namespace

void fsync_dir(const fs::path& dir) {
    Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) throw_errno("open " + dir.string());
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + dir.string());
}

namespace {

constexpr std::size_t temp_hex_digits = 8;

fs::path dir_of(const fs::path& path) {
    return path.parent_path().empty() ? fs::path(".") : path.parent_path();
}

std::string temp_prefix(const fs::path& path) {
    return "." + path.filename().string() + ".tmp-";
}

bool is_temp_name_of(const std::string& name, const std::string& prefix) {
    if (name.size() != prefix.size() + temp_hex_digits || name.compare(0, prefix.size(), prefix))
        return false;
    return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

TempFile create_temp_beside(const fs::path& path, mode_t mode) {
    TempFile t;
    t.path = dir_of(path) / (temp_prefix(path) + random_hex(temp_hex_digits));
    t.fd = Fd(::open(t.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
    if (!t.fd) throw_errno("create " + t.path.string());
    if (::flock(t.fd.get(), LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        ::unlink(t.path.c_str());
        throw_errno("lock " + t.path.string(), err);
    }
    return t;
}

std::size_t remove_stale_temps(const fs::path& path) {
    const fs::path dir = dir_of(path);
    const std::string prefix = temp_prefix(path);
    Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dfd) return 0;
    std::size_t removed = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!is_temp_name_of(name, prefix)) continue;
        Fd f(::openat(dfd.get(), name.c_str(),
                      O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
        struct stat st {};
        if (!f || ::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid())
            continue;
        // Locked: its writer is alive (an export of the same path right now).
        if (::flock(f.get(), LOCK_EX | LOCK_NB) != 0) continue;
        if (::unlinkat(dfd.get(), name.c_str(), 0) == 0) ++removed;
    }
    return removed;
}

namespace {

// A second link to the file a rename is about to replace, dropped after the
// answer: the rename then frees no blocks, which on a filesystem mounted with
// `discard` is a synchronous TRIM (~0.4 ms on a cloud VM's disk) in the
// middle of a request. Only while an answer is pending (serve), and only for
// our own state files (live), so a user's directory never shows the link.
void keep_replaced_until_answered(const fs::path& path) {
    if (!answer_pending()) return;
    fs::path keep = dir_of(path) / (temp_prefix(path) + random_hex(temp_hex_digits));
    // None yet (a first save) or no second link possible: freed at once.
    if (::link(path.c_str(), keep.c_str()) != 0) return;
    // Named as a temp file and never locked: a kill before the unlink leaves
    // it to remove_stale_temps.
    after_answer([keep] { ::unlink(keep.c_str()); });
}

}  // namespace

void write_file_atomic(const fs::path& path, std::string_view data, mode_t mode,
                       Durability durability) {
    fs::path dir = dir_of(path);
    auto [tmp, fd] = create_temp_beside(path, mode);
    try {
        if (::fchmod(fd.get(), mode) != 0) throw_errno("chmod " + tmp.string());
        write_all(fd.get(), data, tmp);
        bool durable = durability == Durability::durable;
        if (durable && ::fsync(fd.get()) != 0) throw_errno("fsync " + tmp.string());
        // close() can report a write error (NFS, quotas): checked, not left to ~Fd.
        if (::close(fd.release()) != 0) throw_errno("close " + tmp.string());
        if (!durable) keep_replaced_until_answered(path);
        if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("rename to " + path.string());
        if (durable) fsync_dir(dir);
    } catch (...) {
        fd.reset();
        ::unlink(tmp.c_str());
        throw;
    }
}

std::string read_file(const fs::path& path, std::size_t max_bytes) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
        int err = errno;
        throw Error(err == ENOENT ? ErrorCode::not_found : ErrorCode::general,
                    errno_message("open " + path.string(), err));
    }
    // Read straight into the string, in growing chunks: a 64 KiB buffer on the
    // stack would stay resident in every long-lived helper (the audit writer
    // reads its points file at start-up) for the rest of its life.
    std::string out;
    std::size_t chunk = 16u << 10;
    for (;;) {
        const std::size_t old = out.size();
        out.resize(old + chunk);
        ssize_t n = ::read(fd.get(), out.data() + old, chunk);
        if (n < 0) {
            int err = errno;
            out.resize(old);
            if (err == EINTR) continue;
            throw_errno("read " + path.string(), err);
        }
        out.resize(old + static_cast<std::size_t>(n));
        if (n == 0) break;
        if (out.size() > max_bytes)
            throw Error(ErrorCode::general, "read " + path.string() + ": file larger than " +
                                                std::to_string(max_bytes) + " bytes");
        chunk = std::min<std::size_t>(chunk * 2, 1u << 20);
    }
    return out;
}

void make_dirs(const fs::path& path, mode_t mode) {
    if (path.empty()) return;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            throw Error(ErrorCode::general,
                        "mkdir " + path.string() + ": exists and is not a directory");
        return;
    }
    if (path.has_parent_path() && path.parent_path() != path) make_dirs(path.parent_path(), mode);
    if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) throw_errno("mkdir " + path.string());
}

void read_chunks(const fs::path& path, const std::function<bool(std::string_view)>& on_chunk) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) throw_errno("open " + path.string());
    std::vector<char> buf(1 << 20);
    for (;;) {
        ssize_t n = ::read(fd.get(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno("read " + path.string());
        if (n == 0 || !on_chunk(std::string_view(buf.data(), static_cast<std::size_t>(n)))) return;
    }
}

void remove_tree(const fs::path& path) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
        throw Error(ErrorCode::general, "remove " + path.string() + ": " + ec.message());
}

FileLock::FileLock(const fs::path& lock_file, Mode mode)
    : fd_(::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (!fd_) throw_errno("open lock " + lock_file.string());
    int op = mode == Mode::exclusive ? LOCK_EX : LOCK_SH;
    while (::flock(fd_.get(), op) != 0) {
        if (errno == EINTR) continue;
        throw_errno("lock " + lock_file.string());
    }
}

FileLock FileLock::try_lock(const fs::path& lock_file, Mode mode) {
    FileLock lock;
    lock.fd_.reset(::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock.fd_) throw_errno("open lock " + lock_file.string());
    int op = (mode == Mode::exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
    if (::flock(lock.fd_.get(), op) != 0) lock.fd_.reset();
    return lock;
}

bool unix_address(const fs::path& path, UnixAddress& a) {
    a.addr.sun_family = AF_UNIX;
    std::string p = path.string();
    if (p.size() >= sizeof a.addr.sun_path) {
        a.dir = Fd(::open(path.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!a.dir) return false;
        p = "/proc/self/fd/" + std::to_string(a.dir.get()) + "/" + path.filename().string();
        if (p.size() >= sizeof a.addr.sun_path) {
            errno = ENAMETOOLONG;
            return false;
        }
    }
    std::memcpy(a.addr.sun_path, p.c_str(), p.size() + 1);
    a.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + p.size() + 1);
    return true;
}

std::uint64_t tree_bytes(const fs::path& p) {
    std::uint64_t total = 0;
    std::error_code ec;
    for (auto it =
             fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) break;
        if (it->is_regular_file(ec) && !it->is_symlink(ec)) total += it->file_size(ec);
    }
    return total;
}

bool valid_object_name(const std::string& n) {
    if (n.empty() || n.size() > 64 || !std::isalnum(static_cast<unsigned char>(n[0]))) return false;
    return std::all_of(n.begin(), n.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
}

std::string random_hex(std::size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    unsigned char buf[32];
    while (out.size() < n) {
        ssize_t got = ::getrandom(buf, sizeof buf, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            throw_errno("getrandom");
        }
        for (ssize_t i = 0; i < got && out.size() < n; ++i) out.push_back(digits[buf[i] & 0xf]);
    }
    return out;
}

}  // namespace sandweave
