#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>

int main(int argc, char** argv) {
    // Library code re-executes "itself" for internal helpers (__shim,
    // __audit-writer); inside the test binary that must never rerun the tests.
    if (argc > 1 && std::strncmp(argv[1], "__", 2) == 0) return 97;
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
