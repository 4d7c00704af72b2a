#include "lib/core/lazy_library.hpp"

#include <dlfcn.h>

#include <map>
#include <mutex>

namespace sandweave {

void* lazy_symbol(const LazyLibrary& lib, const char* name) {
    struct Opened {
        void* handle = nullptr;
        std::string error;
    };
    static std::mutex mu;
    static std::map<std::string, Opened> opened;
    void* handle = nullptr;
    std::string error;
    {
        std::lock_guard<std::mutex> g(mu);
        auto it = opened.find(lib.soname);
        if (it == opened.end()) {
            Opened o;
            o.handle = ::dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
            if (!o.handle) {
                const char* e = ::dlerror();
                o.error = e ? e : "unknown error";
            }
            it = opened.emplace(lib.soname, std::move(o)).first;
        }
        handle = it->second.handle;
        error = it->second.error;
    }
    if (!handle)
        throw Error(lib.code, std::string(lib.needed) + " need " + lib.soname + " (install " +
                                  lib.package + "): " + error);
    void* f = ::dlsym(handle, name);
    if (!f) throw Error(lib.code, std::string(lib.soname) + " has no function " + name);
    return f;
}

}  // namespace sandweave
