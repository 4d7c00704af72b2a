#include "lib/core/log.hpp"

#include <atomic>

namespace sandweave {
namespace {

class NullLogger final : public Logger {
  public:
    void debug(const std::string&) override {}
    void info(const std::string&) override {}
    void warn(const std::string&) override {}
    void error(const std::string&) override {}
};

std::shared_ptr<Logger>& current() {
    static std::shared_ptr<Logger> logger = std::make_shared<NullLogger>();
    return logger;
}

thread_local Logger* thread_logger = nullptr;

}  // namespace

Logger& log() {
    if (thread_logger) return *thread_logger;
    return *std::atomic_load(&current());
}

ThreadLogger::ThreadLogger(Logger& logger) : previous_(thread_logger) {
    thread_logger = &logger;
}

ThreadLogger::~ThreadLogger() {
    thread_logger = previous_;
}

void set_logger(std::shared_ptr<Logger> logger) {
    std::atomic_store(&current(), std::move(logger));
}

}  // namespace sandweave
