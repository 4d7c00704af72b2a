#include "lib/api/fields.hpp"

namespace sandweave::api {

namespace detail {

std::string type_name(const json& j) {
    switch (j.type()) {
        case json::value_t::null:
            return "null";
        case json::value_t::boolean:
            return "a boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned:
            return "an integer";
        case json::value_t::number_float:
            return "a number";
        case json::value_t::string:
            return "a string";
        case json::value_t::array:
            return "an array";
        case json::value_t::object:
            return "an object";
        default:
            return "a value of another kind";
    }
}

void type_error(const std::string& where, const char* expected, const json& got) {
    throw Error(ErrorCode::usage, where + ": expected " + expected + ", got " + type_name(got));
}

}  // namespace detail

void Reader::finish() const {
    if (unknown_ == Unknown::ignore) return;
    for (const auto& [k, v] : in_.items()) {
        (void)v;
        if (!seen_.count(k) && !v.is_null()) {
            // A null value is the same as an absent one, known field or not.
            std::string shown = k.size() > 64 ? k.substr(0, 64) + "..." : k;
            throw Error(ErrorCode::usage, where_ + ": unknown parameter '" + shown + "'");
        }
    }
}

}  // namespace sandweave::api
