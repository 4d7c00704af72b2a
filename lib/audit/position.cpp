#include "lib/audit/position.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"

namespace sandweave::audit {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kSlotBytes = sizeof(std::uint64_t);

// Read and written only through atomic operations: the mapping is shared
// between the writer and any number of readers.
std::uint64_t load(const std::uint64_t* slot) {
    return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(slot))
        .load(std::memory_order_acquire);
}

}  // namespace

fs::path position_path(const fs::path& dir) {
    return dir / "position";
}

PositionPublisher::PositionPublisher(const fs::path& dir) {
    const fs::path path = position_path(dir);
    const fs::path tmp = dir / (".position.tmp-" + random_hex(8));
    Fd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) throw_errno("create " + tmp.string());
    if (::ftruncate(fd.get(), kSlotBytes) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw_errno("size " + tmp.string(), err);
    }
    void* p = ::mmap(nullptr, kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw_errno("map " + tmp.string(), err);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::munmap(p, kSlotBytes);
        ::unlink(tmp.c_str());
        throw_errno("rename " + path.string(), err);
    }
    slot_ = static_cast<std::uint64_t*>(p);
}

PositionPublisher::~PositionPublisher() {
    ::munmap(slot_, kSlotBytes);
}

void PositionPublisher::publish(std::uint64_t sequence) {
    std::atomic_ref<std::uint64_t>(*slot_).store(sequence, std::memory_order_release);
}

std::optional<std::uint64_t> published_position(const fs::path& dir) {
    Fd fd(::open(position_path(dir).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) return std::nullopt;
    struct stat st;
    // Exactly the writer's file: a regular one of ours, whole (a shorter
    // mapping would fault on the read).
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        st.st_size != static_cast<off_t>(kSlotBytes))
        return std::nullopt;
    void* p = ::mmap(nullptr, kSlotBytes, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) return std::nullopt;
    std::uint64_t v = load(static_cast<const std::uint64_t*>(p));
    ::munmap(p, kSlotBytes);
    return v;
}

}  // namespace sandweave::audit
