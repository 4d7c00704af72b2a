// The spec file of a batch: one JSON object per line, checked whole before
// anything runs, every problem one line naming the file and line.

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>

#include "lib/batch/batch.hpp"
#include "lib/core/error.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/progress.hpp"
#include "lib/core/sha256.hpp"
#include "lib/core/units.hpp"

namespace sandweave::batch {
namespace {

using json = nlohmann::json;

const std::vector<std::string>& known_keys() {
    static const std::vector<std::string> keys = {
        "id",       "template",  "hidepid", "audit",   "user",   "command", "script",
        "files_in", "files_out", "env",     "timeout", "labels", "network"};
    return keys;
}

[[noreturn]] void bad(const std::string& where, const std::string& what) {
    throw Error(ErrorCode::usage, where + ": " + what);
}

std::string string_of(const json& v, const std::string& where, const std::string& key) {
    if (!v.is_string()) bad(where, "'" + key + "': expected a string");
    return v.get<std::string>();
}

// A guest path: absolute, no "." or ".." component, no NUL.
std::string guest_path(const json& v, const std::string& where, const std::string& key) {
    std::string p = string_of(v, where, key);
    if (p.empty() || p[0] != '/' || p.size() > 4096 || p.find('\0') != std::string::npos)
        bad(where, "'" + key + "': '" + p + "' is not an absolute guest path");
    for (const auto& part : std::filesystem::path(p))
        if (part == ".." || part == ".")
            bad(where, "'" + key + "': '" + p + "' has a '.' or '..' component");
    return p;
}

bool valid_id(const std::string& id) {
    if (id.empty() || id.size() > 128 || !std::isalnum(static_cast<unsigned char>(id[0])))
        return false;
    for (char c : id)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
            return false;
    return true;
}

std::map<std::string, std::string> string_map(const json& v, const std::string& where,
                                              const std::string& key) {
    if (!v.is_object()) bad(where, "'" + key + "': expected an object of strings");
    std::map<std::string, std::string> out;
    for (const auto& [k, val] : v.items()) {
        if (!val.is_string()) bad(where, "'" + key + "." + k + "': expected a string");
        out[k] = val.get<std::string>();
    }
    return out;
}

void read_key(Episode& e, const std::string& key, const json& v, const std::string& where) {
    if (key == "id") {
        e.id = string_of(v, where, key);
        if (!valid_id(e.id))
            bad(where, "'id': '" + e.id +
                           "' is not a safe folder name (1-128 letters, digits, '-', '_' or "
                           "'.', starting with a letter or digit)");
        if (e.id == "summary.json") bad(where, "'id': 'summary.json' is the batch's summary file");
    } else if (key == "template") {
        e.template_ref = string_of(v, where, key);
        if (e.template_ref->empty()) bad(where, "'template': empty");
    } else if (key == "hidepid") {
        if (!v.is_number_integer() ||
            hidepid_problem(v.get<std::int64_t>()))  // the codec's check (api/types.hpp)
            bad(where, "'hidepid': expected 0, 1 or 2");
        e.hidepid = v.get<int>();
    } else if (key == "audit") {
        if (!v.is_boolean()) bad(where, "'audit': expected true or false");
        e.audit = v.get<bool>();
    } else if (key == "user") {
        e.user = string_of(v, where, key);
        if (!parse_user(*e.user)) bad(where, "'user': '" + *e.user + "': expected UID[:GID]");
    } else if (key == "command") {
        if (!v.is_array() || v.empty())
            bad(where, "'command': expected a non-empty list of strings");
        for (const auto& a : v) e.argv.push_back(string_of(a, where, "command[]"));
    } else if (key == "script") {
        std::string s = string_of(v, where, key);
        if (s.empty()) bad(where, "'script': empty");
        e.argv = {"/bin/sh", "-c", s};
    } else if (key == "files_in") {
        if (!v.is_object()) bad(where, "'files_in': expected {guest path: host path}");
        for (const auto& [g, h] : v.items()) {
            std::string gp = guest_path(json(g), where, "files_in");
            std::string hp = string_of(h, where, "files_in." + g);
            std::error_code ec;
            if (hp.empty() || !std::filesystem::exists(hp, ec))
                bad(where, "'files_in." + g + "': host path '" + hp + "' does not exist");
            e.files_in[gp] = std::filesystem::absolute(hp).string();
        }
    } else if (key == "files_out") {
        if (!v.is_array()) bad(where, "'files_out': expected a list of guest paths");
        std::set<std::string> seen;
        for (const auto& p : v) {
            std::string gp = guest_path(p, where, "files_out");
            if (gp == "/") bad(where, "'files_out': '/' is the whole guest");
            if (!seen.insert(gp).second) bad(where, "'files_out': '" + gp + "' given twice");
            e.files_out.push_back(gp);
        }
    } else if (key == "env") {
        for (const auto& [k, val] : string_map(v, where, key)) {
            if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos)
                bad(where, "'env': '" + k + "' is not a variable name");
            e.env.push_back(k + "=" + val);
        }
    } else if (key == "timeout") {
        if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 7 * 24 * 3600.0)
            bad(where, "'timeout': expected seconds, more than 0 and at most a week");
        e.timeout_ms = static_cast<std::int64_t>(std::ceil(v.get<double>() * 1000));
    } else if (key == "network") {
        if (v.is_string() && v.get<std::string>() == "none") {
            e.network = "none";
            return;
        }
        if (!v.is_object())
            bad(where, "'network': expected \"none\" or {\"allow\": [...], \"deny\": [...]}");
        for (const auto& [k, list] : v.items()) {
            if (k != "allow" && k != "deny")
                bad(where, "'network." + k + "': unknown key (allow, deny)");
            if (!list.is_array())
                bad(where, "'network." + k + "': expected a list of destinations");
            // Each entry is checked by the worker at create, which names it.
            std::vector<std::string> texts;
            for (const auto& d : list) texts.push_back(string_of(d, where, "network." + k));
            (k == "allow" ? e.allow : e.deny) = texts;
        }
    } else if (key == "labels") {
        e.labels = string_map(v, where, key);
        for (const auto& [k, val] : e.labels) {
            (void)val;
            if (k.empty() || k.find('=') != std::string::npos)
                bad(where, "'labels': '" + k + "': a key must be non-empty, without '='");
            if (k.rfind("sandweave.", 0) == 0)
                bad(where,
                    "'labels': '" + k + "': keys starting with 'sandweave.' are the batch's");
        }
    }
}

}  // namespace

Episode parse_episode(std::string_view text, const std::string& where) {
    json doc;
    try {
        doc = parse_untrusted_json(text);
    } catch (const json::exception& e) {
        bad(where, std::string("not JSON: ") + e.what());
    }
    if (!doc.is_object()) bad(where, "expected a JSON object");
    for (const auto& [key, v] : doc.items()) {
        (void)v;
        const auto& keys = known_keys();
        if (std::find(keys.begin(), keys.end(), key) == keys.end())
            bad(where, "unknown key '" + key + "'" + did_you_mean(key, keys) +
                           " (known: id, template, hidepid, audit, user, command, script, "
                           "files_in, files_out, env, timeout, labels, network)");
    }
    if (!doc.contains("id")) bad(where, "'id' is required");
    if (doc.contains("command") == doc.contains("script"))
        bad(where, "give either 'command' (a list) or 'script' (run by /bin/sh), not " +
                       std::string(doc.contains("command") ? "both" : "neither"));
    Episode e;
    for (const auto& [key, v] : doc.items()) read_key(e, key, v, where);
    return e;
}

std::vector<Episode> parse_spec(const std::filesystem::path& file) {
    std::error_code ec;
    auto size = std::filesystem::file_size(file, ec);
    if (ec) throw Error(ErrorCode::usage, file.string() + ": " + ec.message());
    if (size > max_spec_bytes)
        throw Error(ErrorCode::usage, file.string() + ": " + human_bytes(size) +
                                          ", more than the limit of " +
                                          human_bytes(max_spec_bytes));
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(ErrorCode::usage, file.string() + ": cannot open");
    std::vector<Episode> out;
    std::set<std::string> ids;
    std::string line;
    std::size_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        std::string where = file.string() + ":" + std::to_string(n);
        if (line.size() > max_line_bytes)
            bad(where, "line longer than " + std::to_string(max_line_bytes) + " bytes");
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank
        if (out.size() >= max_episodes)
            bad(where, "more than " + std::to_string(max_episodes) + " episodes");
        Episode e = parse_episode(line, where);
        e.line = n;
        if (!ids.insert(e.id).second)
            bad(where, "'id': '" + e.id + "' was used on an earlier line");
        out.push_back(std::move(e));
    }
    if (out.empty()) throw Error(ErrorCode::usage, file.string() + ": no episodes");
    return out;
}

std::filesystem::path results_folder(const std::filesystem::path& out) {
    auto p = std::filesystem::absolute(out).lexically_normal();
    return p.has_filename() ? p : p.parent_path();  // "/a/b/" is "/a/b"
}

std::string batch_key(const std::filesystem::path& out) {
    return sha256_hex(results_folder(out).string()).substr(0, 16);
}

}  // namespace sandweave::batch
