#include "lib/core/error.hpp"

#include <cerrno>
#include <cstring>

namespace sandweave {

std::string errno_message(const std::string& what, int err) {
    return what + ": " + std::strerror(err);
}

std::string errno_message(const std::string& what) {
    return errno_message(what, errno);
}

void throw_errno(const std::string& what, int err) {
    throw Error(ErrorCode::general, errno_message(what, err));
}

void throw_errno(const std::string& what) {
    throw_errno(what, errno);
}

}  // namespace sandweave
