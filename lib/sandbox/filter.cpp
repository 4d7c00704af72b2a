#include "lib/sandbox/filter.hpp"

#include <algorithm>
#include <ctime>

#include "lib/core/error.hpp"
#include "lib/core/units.hpp"

namespace sandweave {

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& s) {
    std::tm tm{};
    const char* end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end) return std::nullopt;
    std::time_t t = ::timegm(&tm);
    if (t == static_cast<std::time_t>(-1)) return std::nullopt;
    return std::chrono::system_clock::from_time_t(t);
}

bool SandboxFilter::matches(const SandboxView& v, std::chrono::system_clock::time_point now) const {
    const auto& r = v.record;
    for (const auto& [k, want] : labels) {
        auto it = r.spec.labels.find(k);
        if (it == r.spec.labels.end() || (want && it->second != *want)) return false;
    }
    if (state && v.live != *state) return false;
    if (template_name && r.spec.template_name != *template_name) return false;
    if (pool && r.pool != *pool) return false;
    if (older_than) {
        auto created = parse_rfc3339(r.created_at);
        if (!created || now - *created <= *older_than) return false;
    }
    return true;
}

SandboxFilter parse_filter(const std::vector<std::string>& terms) {
    static const std::vector<std::string> keys = {"label", "state", "template", "pool",
                                                  "older-than"};
    SandboxFilter f;
    for (const auto& term : terms) {
        auto eq = term.find('=');
        std::string key = term.substr(0, eq);
        if (eq == std::string::npos || eq == 0)
            throw Error(ErrorCode::usage, "filter '" + term + "': expected KEY=VALUE (" +
                                              "label, state, template, pool or older-than)");
        std::string value = term.substr(eq + 1);
        if (key == "label") {
            auto eq2 = value.find('=');
            std::string k = value.substr(0, eq2);
            if (k.empty())
                throw Error(ErrorCode::usage, "filter '" + term + "': expected label=KEY=VALUE");
            f.labels[k] =
                eq2 == std::string::npos ? std::nullopt : std::optional(value.substr(eq2 + 1));
        } else if (key == "state") {
            static const std::vector<std::string> states = {"creating", "running", "stopped",
                                                            "failed", "lost"};
            if (std::find(states.begin(), states.end(), value) == states.end())
                throw Error(ErrorCode::usage,
                            "filter '" + term +
                                "': state is creating, running, stopped, failed or lost" +
                                did_you_mean(value, states));
            f.state =
                value == "creating" ? SandboxState::creating : sandbox_state_from_string(value);
        } else if (key == "template") {
            f.template_name = value;
        } else if (key == "pool") {
            f.pool = value;
        } else if (key == "older-than") {
            std::string text = value;
            std::optional<std::chrono::milliseconds> d;
            if (text.size() >= 2 && text.size() <= 7 && text.back() == 'd' &&
                text.find_first_not_of("0123456789") == text.size() - 1)
                d = std::chrono::hours(24) * std::stoll(text.substr(0, text.size() - 1));
            else
                d = parse_duration(text);
            if (!d)
                throw Error(ErrorCode::usage,
                            "filter '" + term + "': expected a duration such as 30m, 2h or 1d");
            f.older_than = *d;
        } else {
            throw Error(ErrorCode::usage, "filter '" + term + "': unknown key '" + key + "'" +
                                              did_you_mean(key, keys) +
                                              " (label, state, template, pool, older-than)");
        }
    }
    return f;
}

}  // namespace sandweave
