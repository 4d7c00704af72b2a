#pragma once
// A shared library opened on first use. Linking a library makes every
// sandweave process (each command, each shim and audit writer) load it and
// resolve its symbols at start, which costs milliseconds and memory per
// process (bench/lifecycle.sh, bench/idle_memory.sh). Libraries only some
// commands need (libssh for ssh://, libarchive for tar streams) are not
// linked; their functions are defined as forwarders (SANDWEAVE_LAZY_FORWARD)
// that open the library once, on the first call, and call through. A function
// the code starts to use needs its forwarder (the link fails otherwise, so it
// cannot be forgotten).

#include <string>

#include "lib/core/error.hpp"

namespace sandweave {

struct LazyLibrary {
    const char* soname;   // e.g. "libssh.so.4"
    const char* needed;   // what needs it, for the error: "ssh:// connections"
    const char* package;  // the Debian package that ships it
    ErrorCode code;       // the error's exit code when it cannot be opened
};

// The address of `name` in `lib`, opening it on the first call (thread-safe);
// throws Error(lib.code) with one line when the library or symbol is missing.
void* lazy_symbol(const LazyLibrary& lib, const char* name);

template <typename F>
F lazy_function(const LazyLibrary& lib, const char* name) {
    return reinterpret_cast<F>(lazy_symbol(lib, name));
}

}  // namespace sandweave

// Defines `ret name params` (extern "C" where the library's header declares
// it so) calling the library's own `name`, resolved once.
#define SANDWEAVE_LAZY_FORWARD(lib, ret, name, params, args)                              \
    ret name params {                                                                     \
        static const auto real = ::sandweave::lazy_function<decltype(&name)>(lib, #name); \
        return real args;                                                                 \
    }
