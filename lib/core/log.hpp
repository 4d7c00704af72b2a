#pragma once
// The library logs through this small interface; main() installs a spdlog-backed
// implementation that writes to stderr. Data goes to stdout, never through here.
// Progress lines (long builds, pool refills) are info-level so --quiet hides them.

#include <memory>
#include <string>

namespace sandweave {

class Logger {
  public:
    virtual ~Logger() = default;
    virtual void debug(const std::string& msg) = 0;
    virtual void info(const std::string& msg) = 0;
    virtual void warn(const std::string& msg) = 0;
    virtual void error(const std::string& msg) = 0;
};

// The process-wide logger. Defaults to a silent one (unit tests, the audit writer
// before it has a log file).
Logger& log();
void set_logger(std::shared_ptr<Logger> logger);

// While alive, log() on this thread goes to `logger` (a server sends a
// request's log lines to the client that made it). Nests.
class ThreadLogger {
  public:
    explicit ThreadLogger(Logger& logger);
    ~ThreadLogger();
    ThreadLogger(const ThreadLogger&) = delete;
    ThreadLogger& operator=(const ThreadLogger&) = delete;

  private:
    Logger* previous_;
};

}  // namespace sandweave
