#include "lib/core/progress.hpp"

#include <atomic>
#include <cstdio>

namespace sandweave {
namespace {

std::shared_ptr<ProgressSink>& current() {
    static std::shared_ptr<ProgressSink> sink;
    return sink;
}

thread_local ProgressSink* thread_sink = nullptr;

constexpr auto min_interval = std::chrono::milliseconds(100);

}  // namespace

void set_progress_sink(std::shared_ptr<ProgressSink> sink) {
    std::atomic_store(&current(), std::move(sink));
}

ProgressSink* progress_sink() {
    if (thread_sink) return thread_sink;
    return std::atomic_load(&current()).get();
}

ThreadProgress::ThreadProgress(ProgressSink& sink) : previous_(thread_sink) {
    thread_sink = &sink;
}

ThreadProgress::~ThreadProgress() {
    thread_sink = previous_;
}

Progress::Progress(std::string task, ProgressUnit unit, std::uint64_t total)
    : sink_(progress_sink()) {
    u_.task = std::move(task);
    u_.unit = unit;
    u_.total = total;
    send(true);
}

Progress::~Progress() {
    u_.finished = true;
    send(true);
}

void Progress::step(std::string name, std::uint64_t total, ProgressUnit unit) {
    u_.step = std::move(name);
    u_.done = 0;
    u_.total = total;
    u_.unit = unit;
    send(true);
}

void Progress::set(std::uint64_t done) {
    bool reached = u_.total != 0 && done >= u_.total && u_.done < u_.total;
    u_.done = done;
    send(reached);
}

void Progress::set_total(std::uint64_t total) {
    u_.total = total;
    send(false);
}

void Progress::send(bool force) {
    if (!sink_) return;
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < min_interval) return;
    last_ = now;
    try {
        sink_->update(u_);
    } catch (...) {
        // Showing progress must never fail the operation (a closed terminal,
        // a client gone): it stops being shown.
        sink_ = nullptr;
    }
}

std::string human_bytes(std::uint64_t n) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(n);
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        ++i;
    }
    char buf[32];
    if (i == 0)
        std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
    else
        std::snprintf(buf, sizeof buf, "%.1f %s", v, units[i]);
    return buf;
}

}  // namespace sandweave
