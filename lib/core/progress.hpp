#pragma once
// Progress of long operations: an image build or import, a large audit
// export, a pool create, a copy. The library reports through a Progress
// object and never decides how (or whether) it is shown: the program installs
// a sink (the CLI draws one line on a terminal, cmd/progress.cpp), a server
// installs one per request thread (it becomes `progress` notifications to the
// client that asked, docs/protocol.md). With no sink nothing happens, so
// library code reports unconditionally.
//
// Updates are rate-limited here (a step change and the end always go out), so
// reporting every chunk of a copy is cheap.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace sandweave {

enum class ProgressUnit { count, bytes };

struct ProgressUpdate {
    std::string task;         // "importing image 'web'"
    std::string step;         // "unpacking layer 2/3"; may be empty
    std::uint64_t done = 0;   // of the step
    std::uint64_t total = 0;  // 0: not known
    ProgressUnit unit = ProgressUnit::count;
    bool finished = false;  // the task ended (well or not); nothing follows
};

class ProgressSink {
  public:
    virtual ~ProgressSink() = default;
    virtual void update(const ProgressUpdate& u) = 0;
};

// The process-wide sink (none by default).
void set_progress_sink(std::shared_ptr<ProgressSink> sink);
// The sink for this thread: a ThreadProgress's, else the process-wide one, or
// nullptr.
ProgressSink* progress_sink();

// While alive, progress reported on this thread goes to `sink`. Nests.
class ThreadProgress {
  public:
    explicit ThreadProgress(ProgressSink& sink);
    ~ThreadProgress();
    ThreadProgress(const ThreadProgress&) = delete;
    ThreadProgress& operator=(const ThreadProgress&) = delete;

  private:
    ProgressSink* previous_;
};

// One task's progress, reported to the sink current when it was made. Its
// destructor reports the end.
class Progress {
  public:
    explicit Progress(std::string task, ProgressUnit unit = ProgressUnit::count,
                      std::uint64_t total = 0);
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // A new step: `done` starts again at 0.
    void step(std::string name, std::uint64_t total = 0, ProgressUnit unit = ProgressUnit::count);
    void set(std::uint64_t done);
    void advance(std::uint64_t n) { set(u_.done + n); }
    void set_total(std::uint64_t total);

  private:
    void send(bool force);

    ProgressSink* sink_;
    ProgressUpdate u_;
    std::chrono::steady_clock::time_point last_{};
};

// "12.3 MiB", "950 B": for progress lines.
std::string human_bytes(std::uint64_t n);

}  // namespace sandweave
