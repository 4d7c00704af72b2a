#pragma once
// The bounded queue between the socket reader and the log writer: a single-
// producer single-consumer byte ring (about 8 MiB). The reader must never
// wait for the disk, so push() fails instead of blocking when full and the
// caller counts the loss. Entries are copied in whole (a 16-byte header plus
// the received bytes, padded to 16) and never split across the wrap point.
// The consumer sleeps on a condition variable only when the ring is empty and
// says so in a flag, so a busy stream costs the producer no syscalls.
// A burst that went round the ring leaves all of it resident: the producer,
// about to idle, gives the free part's pages back (release_free()). A push
// into an empty ring past its first quarter starts again at its beginning,
// so a consumer that keeps up has the producer touch about a quarter of it
// instead of streaming through all 8 MiB and faulting them in again after
// each idle release (under a dd guest the copy into the ring and those
// faults were a sixth of the writer's CPU). The skipped rest counts as used
// until the consumer passes it: at most three quarters of the ring, so a
// quarter stays free for the producer (the writer's reader takes a round of
// messages only with 2 MiB free, kReadRoom, and a round is a little over
// 1 MiB).

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

namespace sandweave::audit {

// Gives the whole pages inside [p, p + len) back to the kernel; they read as
// zeros when next touched. For private anonymous memory nobody reads.
inline void release_whole_pages(void* p, std::size_t len) {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) & ~(page - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(p) + len) & ~(page - 1);
    if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

class ByteQueue {
  public:
    struct Entry {
        std::uint16_t kind;
        std::uint64_t arg;
        std::string_view data;
    };

    explicit ByteQueue(std::size_t capacity_pow2 = 8u << 20)
        : cap_(capacity_pow2), buf_(new unsigned char[capacity_pow2]) {}

    std::size_t capacity() const { return cap_; }
    // Bytes an entry of `len` data bytes occupies.
    static std::size_t footprint(std::size_t len) { return (kHdr + len + 15) & ~std::size_t(15); }
    std::size_t used() const {
        return static_cast<std::size_t>(head_.load(std::memory_order_acquire) -
                                        tail_.load(std::memory_order_acquire));
    }

    // Producer only. False when the entry does not fit (the ring is full).
    bool push(std::uint16_t kind, std::uint64_t arg, std::string_view data) {
        const std::size_t need = footprint(data.size());
        std::uint64_t head = head_.load(std::memory_order_relaxed);
        const std::uint64_t tail = tail_.load(std::memory_order_acquire);
        std::size_t pos = static_cast<std::size_t>(head & (cap_ - 1));
        std::size_t contiguous = cap_ - pos;
        // Empty (the consumer popped everything, so it reads nothing here)
        // and past the first quarter: back to the start through a wrap
        // marker, as at the end, unless the skipped rest and the entry would
        // not fit together (an entry over a quarter of the ring: it goes in
        // place, as before).
        const bool restart = head == tail && pos >= cap_ / 4 && contiguous + need <= cap_;
        const bool wrap = need > contiguous || restart;
        std::size_t total = wrap ? contiguous + need : need;
        if (need > cap_ / 2 || head - tail + total > cap_) return false;
        if (wrap) {
            write_hdr(pos, kWrap, 0, 0);
            head += contiguous;
            pos = 0;
        }
        write_hdr(pos, kind, arg, static_cast<std::uint32_t>(data.size()));
        if (!data.empty()) std::memcpy(buf_.get() + pos + kHdr, data.data(), data.size());
        head_.store(head + need, std::memory_order_release);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (sleeping_.load(std::memory_order_relaxed)) poke();
        return true;
    }

    // Producer only, between pushes: releases the pages of the free part of
    // the ring ([head, tail + capacity) of the stream). The consumer only
    // reads [tail, head) and the free part only grows meanwhile, so nothing
    // it may still read is touched.
    void release_free() {
        const std::uint64_t head = head_.load(std::memory_order_relaxed);
        const std::uint64_t tail = tail_.load(std::memory_order_acquire);
        const std::size_t free = cap_ - static_cast<std::size_t>(head - tail);
        const std::size_t pos = static_cast<std::size_t>(head & (cap_ - 1));
        const std::size_t first = std::min(free, cap_ - pos);
        release_whole_pages(buf_.get() + pos, first);
        release_whole_pages(buf_.get(), free - first);
    }

    // Consumer only. Returns the oldest entry without removing it.
    bool peek(Entry& e) {
        for (;;) {
            std::uint64_t tail = tail_.load(std::memory_order_relaxed);
            if (tail == head_.load(std::memory_order_acquire)) return false;
            std::size_t pos = static_cast<std::size_t>(tail & (cap_ - 1));
            std::uint16_t kind;
            std::uint32_t len;
            std::uint64_t arg;
            std::memcpy(&kind, buf_.get() + pos, 2);
            std::memcpy(&len, buf_.get() + pos + 4, 4);
            std::memcpy(&arg, buf_.get() + pos + 8, 8);
            if (kind == kWrap) {
                tail_.store(tail + (cap_ - pos), std::memory_order_release);
                continue;
            }
            e.kind = kind;
            e.arg = arg;
            e.data = std::string_view(reinterpret_cast<const char*>(buf_.get() + pos + kHdr), len);
            return true;
        }
    }
    // Consumer only: drops the entry returned by the last peek().
    void pop(const Entry& e) {
        tail_.store(tail_.load(std::memory_order_relaxed) + footprint(e.data.size()),
                    std::memory_order_release);
    }

    // Consumer only: sleeps until something is pushed, poke() or `timeout`
    // (none: until one of the first two).
    void wait(std::optional<std::chrono::milliseconds> timeout) {
        std::unique_lock lock(mu_);
        sleeping_.store(true, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_relaxed)) {
            if (timeout)
                cv_.wait_for(lock, *timeout);
            else
                cv_.wait(lock);
        }
        sleeping_.store(false, std::memory_order_relaxed);
    }
    // Wakes a consumer blocked in wait() (new data, shutdown, a barrier).
    void poke() {
        std::lock_guard lock(mu_);
        cv_.notify_one();
    }

    static constexpr std::uint16_t kWrap = 0xffff;

  private:
    static constexpr std::size_t kHdr = 16;
    void write_hdr(std::size_t pos, std::uint16_t kind, std::uint64_t arg, std::uint32_t len) {
        std::uint16_t zero = 0;
        std::memcpy(buf_.get() + pos, &kind, 2);
        std::memcpy(buf_.get() + pos + 2, &zero, 2);
        std::memcpy(buf_.get() + pos + 4, &len, 4);
        std::memcpy(buf_.get() + pos + 8, &arg, 8);
    }

    const std::size_t cap_;
    std::unique_ptr<unsigned char[]> buf_;
    alignas(64) std::atomic<std::uint64_t> head_{0};
    alignas(64) std::atomic<std::uint64_t> tail_{0};
    std::atomic<bool> sleeping_{false};
    std::mutex mu_;
    std::condition_variable cv_;
};

}  // namespace sandweave::audit
