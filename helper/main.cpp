// sandweave-helper: the per-sandbox helper processes, the audit writer
// (`__audit-writer`) and the shim (`__shim`), in a binary of their own.
// sandweave starts one of each per sandbox; from the main binary each carried
// its share of relocated data (~450 KiB of the binary's pages written by the
// dynamic loader, private to every process). This binary links only what the
// two need. sandweave falls back to running itself with the same arguments
// when it finds no helper beside it (lib/core/process.hpp, helper_exe).

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lib/audit/audit.hpp"
#include "lib/core/log.hpp"
#include "lib/runtime/shim.hpp"
#include "lib/sandbox/companions.hpp"

namespace {

// As the main binary logs: the message alone on stderr, info and above.
class StderrLogger final : public sandweave::Logger {
  public:
    void debug(const std::string&) override {}
    void info(const std::string& m) override { line(m); }
    void warn(const std::string& m) override { line(m); }
    void error(const std::string& m) override { line(m); }

  private:
    void line(const std::string& m) {
        std::lock_guard<std::mutex> g(mu_);
        std::fprintf(stderr, "%s\n", m.c_str());
    }
    std::mutex mu_;
};

}  // namespace

int main(int argc, char** argv) {
    using namespace sandweave;
    if (argc < 2) {
        std::fprintf(stderr, "sandweave-helper: started by sandweave only\n");
        return 2;
    }
    // As from sandweave: the shim keeps the silent default logger, the
    // writer logs to its stderr (its writer.log).
    if (std::strcmp(argv[1], shim_verb) == 0)
        return shim_main(std::vector<std::string>(argv + 2, argv + argc), shim_companions);
    if (std::strcmp(argv[1], audit::writer_verb) == 0) {
        set_logger(std::make_shared<StderrLogger>());
        return audit::writer_entry(std::vector<std::string>(argv + 1, argv + argc));
    }
    std::fprintf(stderr, "sandweave-helper: unknown entry %s\n", argv[1]);
    return 2;
}
