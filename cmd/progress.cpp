#include "cmd/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <mutex>
#include <string>

#include "lib/core/progress.hpp"

namespace sandweave::cli {
namespace {

std::string format(const ProgressUpdate& u) {
    std::string line = u.task;
    if (!u.step.empty()) line += ": " + u.step;
    auto amount = [&](std::uint64_t n) {
        return u.unit == ProgressUnit::bytes ? human_bytes(n) : std::to_string(n);
    };
    if (u.total) {
        line += "  " + amount(u.done) + " / " + amount(u.total);
        line += "  " + std::to_string(u.done >= u.total ? 100 : u.done * 100 / u.total) + "%";
    } else if (u.done) {
        line += "  " + amount(u.done);
    }
    return line;
}

void write_err(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
        ssize_t n = ::write(STDERR_FILENO, s.data() + off, s.size() - off);
        if (n <= 0) return;  // a closed terminal: nothing more to show
        off += static_cast<std::size_t>(n);
    }
}

class CliProgress final : public ProgressSink {
  public:
    explicit CliProgress(bool tty) : tty_(tty) {}

    void update(const ProgressUpdate& u) override {
        std::lock_guard<std::mutex> g(mu_);
        if (tty_) {
            if (u.finished) {
                erase();
                shown_.clear();
                return;
            }
            shown_ = format(u);
            std::size_t width = terminal_width();
            if (shown_.size() >= width) shown_.resize(width - 1);
            write_err("\r\033[K" + shown_);
            return;
        }
        if (u.finished) return;
        std::string key = u.task + "\n" + u.step;
        int tenth =
            u.total ? static_cast<int>(std::min<std::uint64_t>(u.done * 10 / u.total, 10)) : -1;
        if (key == last_key_ && tenth == last_tenth_) return;
        last_key_ = key;
        last_tenth_ = tenth;
        write_err(format(u) + "\n");
    }

    void around(const std::function<void()>& write) {
        std::lock_guard<std::mutex> g(mu_);
        if (!shown_.empty()) erase();
        write();
        if (!shown_.empty()) write_err(shown_);
    }

  private:
    void erase() { write_err("\r\033[K"); }
    static std::size_t terminal_width() {
        winsize ws{};
        if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10) return ws.ws_col;
        return 80;
    }

    bool tty_;
    std::mutex mu_;
    std::string shown_;  // the line on the terminal now
    std::string last_key_;
    int last_tenth_ = -2;
};

std::shared_ptr<CliProgress>& installed() {
    static std::shared_ptr<CliProgress> p;
    return p;
}

}  // namespace

void install_progress(bool forced, bool quiet) {
    if (quiet) return;
    bool tty = ::isatty(STDERR_FILENO) == 1;
    if (!tty && !forced) return;
    installed() = std::make_shared<CliProgress>(tty);
    set_progress_sink(installed());
}

void with_progress_hidden(const std::function<void()>& write) {
    if (auto& p = installed())
        p->around(write);
    else
        write();
}

}  // namespace sandweave::cli
