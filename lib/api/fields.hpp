#pragma once
// JSON for the API's request and result types, written once per type. Each
// type lists its fields in a `fields(v)` member template:
//
//   struct InspectParams {
//       std::string id;
//       template <class V> void fields(V& v) { v.required("id", id); }
//   };
//
// and gets to_json / from_json from it. from_json is strict, because params
// come from untrusted peers: a wrong type, a missing required field or an
// unknown field is an Error(usage) naming the field ("params.argv: expected an
// array of strings, got a string"), never an nlohmann exception or a silent
// default. Optional fields (std::optional) are omitted from the JSON when
// empty; other fields are always written.
//
// A client reading a worker's results decodes with Unknown::ignore instead:
// a newer worker may add fields (docs/protocol.md, "Handshake"), and an older
// client must still understand the ones it knows.

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"

namespace sandweave::api {

using nlohmann::json;

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// Library types the API carries as they are (a sandbox record, an audit
// status) get their JSON from a specialization of Codec with
//   static json encode(const T&);  static T decode(const json&, const std::string& where);
template <class T>
struct Codec;

namespace detail {

std::string type_name(const json& j);
[[noreturn]] void type_error(const std::string& where, const char* expected, const json& got);

}  // namespace detail

class Writer;
class Reader;

template <class T>
json encode_value(const T& v);
// What a field the type does not list means: an error (params from a peer),
// or nothing (results from a possibly newer worker).
enum class Unknown { refuse, ignore };

template <class T>
void decode_value(const json& j, T& out, const std::string& where,
                  Unknown unknown = Unknown::refuse);

class Writer {
  public:
    template <class T>
    void required(const char* name, const T& v) {
        out[name] = encode_value(v);
    }
    template <class T>
    void optional(const char* name, const T& v) {
        if constexpr (is_optional<T>::value) {
            if (v) out[name] = encode_value(*v);
        } else {
            out[name] = encode_value(v);
        }
    }
    json out = json::object();
};

class Reader {
  public:
    Reader(const json& in, std::string where, Unknown unknown = Unknown::refuse)
        : in_(in), where_(std::move(where)), unknown_(unknown) {}

    template <class T>
    void required(const char* name, T& v) {
        auto it = in_.find(name);
        if (it == in_.end() || it->is_null())
            throw Error(ErrorCode::usage, where_ + "." + name + ": missing");
        seen_.insert(name);
        read(*it, name, v);
    }
    template <class T>
    void optional(const char* name, T& v) {
        auto it = in_.find(name);
        if (it == in_.end() || it->is_null()) return;
        seen_.insert(name);
        read(*it, name, v);
    }
    // Every key of the object must have been a field.
    void finish() const;

  private:
    template <class T>
    void read(const json& j, const char* name, T& v) {
        if constexpr (is_optional<T>::value) {
            typename T::value_type inner{};
            decode_value(j, inner, where_ + "." + name, unknown_);
            v = std::move(inner);
        } else {
            decode_value(j, v, where_ + "." + name, unknown_);
        }
    }

    const json& in_;
    std::string where_;
    Unknown unknown_;
    std::set<std::string> seen_;
};

template <class T>
json to_json(const T& v) {
    Writer w;
    const_cast<T&>(v).fields(w);
    return w.out;
}

// `where` names the object in errors ("params", "result").
template <class T>
T from_json(const json& j, const std::string& where = "params", Unknown unknown = Unknown::refuse) {
    if (!j.is_object()) detail::type_error(where, "an object", j);
    T v{};
    Reader r(j, where, unknown);
    v.fields(r);
    r.finish();
    return v;
}

template <class T>
json encode_value(const T& v) {
    if constexpr (std::is_same_v<T, json>) {
        return v;
    } else if constexpr (requires { Codec<T>::encode(v); }) {
        return Codec<T>::encode(v);
    } else if constexpr (requires(T & t, Writer & w) { t.fields(w); }) {
        return to_json(v);
    } else if constexpr (
        requires { typename T::value_type; } && !std::is_same_v<T, std::string> &&
        !requires { typename T::mapped_type; }) {
        json a = json::array();
        for (const auto& e : v) a.push_back(encode_value(e));
        return a;
    } else if constexpr (requires { typename T::mapped_type; }) {
        json o = json::object();
        for (const auto& [k, e] : v) o[k] = encode_value(e);
        return o;
    } else {
        return json(v);
    }
}

template <class T>
void decode_value(const json& j, T& out, const std::string& where, Unknown unknown) {
    if constexpr (std::is_same_v<T, json>) {
        out = j;
    } else if constexpr (requires { Codec<T>::decode(j, where); }) {
        out = Codec<T>::decode(j, where);
    } else if constexpr (std::is_same_v<T, bool>) {
        if (!j.is_boolean()) detail::type_error(where, "a boolean", j);
        out = j.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
        // Integers only: 1.5 or "1" is refused, and so is a value out of range.
        if (!j.is_number_integer()) detail::type_error(where, "an integer", j);
        if constexpr (std::is_signed_v<T>) {
            if (j.is_number_unsigned() &&
                j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
                detail::type_error(where, "a smaller integer", j);
            std::int64_t x = j.get<std::int64_t>();
            if (x < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
                x > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
                detail::type_error(where, "an integer in range", j);
            out = static_cast<T>(x);
        } else {
            if (!j.is_number_unsigned() && j.get<std::int64_t>() < 0)
                detail::type_error(where, "a non-negative integer", j);
            std::uint64_t x = j.get<std::uint64_t>();
            if (x > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
                detail::type_error(where, "an integer in range", j);
            out = static_cast<T>(x);
        }
    } else if constexpr (std::is_floating_point_v<T>) {
        if (!j.is_number()) detail::type_error(where, "a number", j);
        out = j.get<T>();
    } else if constexpr (std::is_same_v<T, std::string>) {
        if (!j.is_string()) detail::type_error(where, "a string", j);
        out = j.get<std::string>();
    } else if constexpr (requires(T & t, Reader & r) { t.fields(r); }) {
        out = from_json<T>(j, where, unknown);
    } else if constexpr (requires { typename T::mapped_type; }) {
        if (!j.is_object()) detail::type_error(where, "an object", j);
        out.clear();
        for (const auto& [k, e] : j.items()) {
            typename T::mapped_type v{};
            decode_value(e, v, where + "." + k, unknown);
            out.emplace(k, std::move(v));
        }
    } else if constexpr (requires { typename T::value_type; }) {
        if (!j.is_array()) detail::type_error(where, "an array", j);
        out.clear();
        std::size_t i = 0;
        for (const auto& e : j) {
            typename T::value_type v{};
            decode_value(e, v, where + "[" + std::to_string(i++) + "]", unknown);
            out.push_back(std::move(v));
        }
    } else {
        static_assert(sizeof(T) == 0, "no JSON conversion for this type");
    }
}

}  // namespace sandweave::api
