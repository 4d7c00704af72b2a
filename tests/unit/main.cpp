#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lib/audit/audit.hpp"

int main(int argc, char** argv) {
    // Library code re-executes "itself" for internal helpers (__shim,
    // __audit-writer); inside the test binary that must never rerun the tests.
    // The audit writer is the real one, as in sandweave: the lifecycle tests
    // create audited sandboxes (with a fake runtime) and check that a failed
    // create stops it.
    if (argc > 1 && std::strcmp(argv[1], "__audit-writer") == 0) {
        try {
            return sandweave::audit::writer_main(sandweave::audit::parse_writer_argv(
                std::vector<std::string>(argv + 1, argv + argc)));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "audit writer (unit tests): %s\n", e.what());
            return 1;
        }
    }
    if (argc > 1 && std::strncmp(argv[1], "__", 2) == 0) return 97;
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
