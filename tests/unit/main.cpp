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
    if (argc > 1 && std::strcmp(argv[1], sandweave::audit::writer_verb) == 0)
        return sandweave::audit::writer_entry(std::vector<std::string>(argv + 1, argv + argc));
    if (argc > 1 && std::strncmp(argv[1], "__", 2) == 0) return 97;
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
