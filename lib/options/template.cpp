#include "lib/options/template.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/units.hpp"
#include "lib/options/create_options.hpp"
#include "lib/options/network.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t max_template_bytes = 1u << 20;
constexpr std::size_t max_extends_depth = 32;
// Nodes one document may have, each alias counted as often as it is used: a
// template has a few dozen, and a YAML alias bomb ("billion laughs": nine
// levels of nine aliases) stops here instead of being walked 9^9 times.
constexpr std::size_t max_template_nodes = 100000;
// How deep a template's values may nest; an alias inside its own anchor's
// node makes an endless nesting that only this ends.
constexpr std::size_t max_template_depth = 64;

// User text inside an error message, kept on one line: control characters
// (a key "a\nb" from inline JSON) are shown escaped.
std::string printable(std::string_view text) {
    static const char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : text) {
        if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c == 0x7f) {
            out += "\\x";
            out.push_back(hex[c >> 4]);
            out.push_back(hex[c & 0xf]);
        } else {
            out.push_back(static_cast<char>(c));
        }
    }
    return out;
}

// Where a document came from, for error messages.
// A file's text is quoted in a message only once the file is known to be a
// template (a map of template keys): a host file named as a template
// (/etc/shadow) must never be echoed back, least of all to a remote client.
struct Where {
    std::string label;  // "template 'coding' (/usr/share/.../coding.yaml)"
    std::string chain;  // " (extends chain: a -> b)" or ""
    bool file = false;  // a file's text (not inline text the caller wrote)
};

std::string line_of(const YAML::Node& node) {
    if (!node.IsDefined() || node.Mark().line < 0) return "";
    return " line " + std::to_string(node.Mark().line + 1);
}

[[noreturn]] void fail(const Where& w, const YAML::Node& node, const std::string& key,
                       const std::string& msg) {
    throw Error(ErrorCode::usage,
                printable(w.label + line_of(node) + ": " + key + ": " + msg + w.chain));
}

std::string scalar_text(const YAML::Node& n) {
    return n.Scalar();
}
bool is_plain(const YAML::Node& n) {
    return n.Tag() != "!";
}

std::string shown(const YAML::Node& n) {
    if (n.IsMap()) return "a map";
    if (n.IsSequence()) return "a list";
    if (n.IsNull()) return "nothing";
    return is_plain(n) ? scalar_text(n) : "\"" + scalar_text(n) + "\"";
}

// What a node is, without its text.
std::string kind_of(const YAML::Node& n) {
    if (n.IsMap()) return "a map";
    if (n.IsSequence()) return "a list";
    if (n.IsNull()) return "nothing";
    return "text";
}

// Before anything else looks at a file: it is a map whose keys are template
// keys. What fails here names the line and what was expected, never the text.
void require_template_shape(const YAML::Node& root, const Where& w,
                            const std::vector<std::string>& keys) {
    if (!root.IsMap())
        fail(w, root, "template", "expected a map of template keys, got " + kind_of(root));
    for (const auto& kv : root) {
        const YAML::Node& k = kv.first;
        std::string text = k.IsScalar() ? k.Scalar() : std::string();
        if (std::find(keys.begin(), keys.end(), text) == keys.end()) {
            std::string hint = k.IsScalar() ? did_you_mean(text, keys) : std::string();
            fail(w, k, "template", "unknown key" + (hint.empty() ? " (not a template key)" : hint));
        }
    }
}

// Every key and scalar of a document, before anything reads it: what goes
// into a sandbox's record must be UTF-8, and the user is told which key to fix.
// An alias is walked as often as it is used, and so is counted: `budget`
// bounds the whole walk, and `depth` the recursion (yaml-cpp bounds what it
// parses at 2000 levels, but an alias that contains itself has no bottom).
void require_utf8_scalars(const YAML::Node& n, const Where& w, const std::string& key,
                          std::size_t& budget, std::size_t depth = 0) {
    if (depth > max_template_depth)
        fail(w, n, key.empty() ? "template" : key,
             "nested more than " + std::to_string(max_template_depth) +
                 " levels deep (or an alias inside its own anchor)");
    if (budget == 0)
        throw Error(
            ErrorCode::usage,
            printable(w.label + ": more than " + std::to_string(max_template_nodes) +
                      " nodes once its aliases are expanded (a YAML alias bomb?)" + w.chain));
    --budget;
    if (n.IsScalar()) {
        if (std::string problem = utf8_problem(n.Scalar()); !problem.empty())
            fail(w, n, key.empty() ? "template" : key, problem);
    } else if (n.IsMap()) {
        for (const auto& kv : n) {
            std::string k = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
            if (std::string problem = utf8_problem(k); !problem.empty())
                fail(w, kv.first, key.empty() ? "a key" : "a key in " + key, problem);
            require_utf8_scalars(kv.second, w, key.empty() ? k : key + "." + k, budget, depth + 1);
        }
    } else if (n.IsSequence()) {
        std::size_t i = 0;
        for (const auto& e : n)
            require_utf8_scalars(e, w, key + "[" + std::to_string(i++) + "]", budget, depth + 1);
    }
}

using Validator = std::function<json(const YAML::Node&, const Where&, const std::string& key)>;

json as_string(const YAML::Node& n, const Where& w, const std::string& key) {
    if (!n.IsScalar()) fail(w, n, key, "expected a string, got " + shown(n));
    return scalar_text(n);
}

json as_abs_path(const YAML::Node& n, const Where& w, const std::string& key) {
    std::string s = as_string(n, w, key);
    if (s.empty() || s[0] != '/') fail(w, n, key, "expected an absolute path, got " + shown(n));
    return s;
}

json as_user(const YAML::Node& n, const Where& w, const std::string& key) {
    std::string s = as_string(n, w, key);
    if (!parse_user(s)) fail(w, n, key, "expected UID[:GID] with numeric ids, got " + shown(n));
    return s;
}

json as_bool(const YAML::Node& n, const Where& w, const std::string& key) {
    if (n.IsScalar() && is_plain(n)) {
        std::string s = scalar_text(n);
        if (s == "true" || s == "True" || s == "TRUE") return true;
        if (s == "false" || s == "False" || s == "FALSE") return false;
    }
    fail(w, n, key, "expected true or false, got " + shown(n));
}

json as_hidepid(const YAML::Node& n, const Where& w, const std::string& key) {
    if (n.IsScalar() && is_plain(n)) {
        std::string s = scalar_text(n);
        if (s.size() == 1 && s[0] >= '0' && s[0] <= '9' && !hidepid_problem(s[0] - '0'))
            return s[0] - '0';
    }
    fail(w, n, key, "expected 0, 1 or 2, got " + shown(n));
}

json as_size(const YAML::Node& n, const Where& w, const std::string& key) {
    if (n.IsScalar()) {
        if (auto v = parse_size(scalar_text(n))) return *v;
    }
    fail(w, n, key, "expected a positive byte count (e.g. 1073741824 or 8GiB), got " + shown(n));
}

json as_positive_number(const YAML::Node& n, const Where& w, const std::string& key) {
    if (n.IsScalar() && is_plain(n)) {
        char* end = nullptr;
        std::string s = scalar_text(n);
        double v = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == '\0' && v > 0 && v < 1e6) return v;
    }
    fail(w, n, key, "expected a positive number, got " + shown(n));
}

json as_duration(const YAML::Node& n, const Where& w, const std::string& key) {
    if (n.IsScalar() && parse_duration(scalar_text(n))) return scalar_text(n);
    fail(w, n, key, "expected a duration (e.g. 90s, 10m, 1h30m), got " + shown(n));
}

json as_positive_int(const YAML::Node& n, const Where& w, const std::string& key) {
    if (n.IsScalar() && is_plain(n)) {
        std::string s = scalar_text(n);
        if (!s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), ::isdigit) &&
            std::stol(s) > 0)
            return std::stol(s);
    }
    fail(w, n, key, "expected a positive integer, got " + shown(n));
}

Validator one_of(std::vector<std::string> allowed) {
    return [allowed](const YAML::Node& n, const Where& w, const std::string& key) -> json {
        if (n.IsScalar() &&
            std::find(allowed.begin(), allowed.end(), scalar_text(n)) != allowed.end())
            return scalar_text(n);
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(w, n, key,
             "expected one of " + list + ", got " + shown(n) +
                 (n.IsScalar() ? did_you_mean(scalar_text(n), allowed) : ""));
    };
}

json as_string_map(const YAML::Node& n, const Where& w, const std::string& key) {
    if (!n.IsMap()) fail(w, n, key, "expected a map of strings, got " + shown(n));
    json out = json::object();
    for (const auto& kv : n) {
        std::string k = kv.first.Scalar();
        if (k.empty()) fail(w, kv.first, key, "empty key");
        if (!kv.second.IsScalar())
            fail(w, kv.second, key + "." + k, "expected a string, got " + shown(kv.second));
        out[k] = scalar_text(kv.second);
    }
    return out;
}

json as_string_list(const YAML::Node& n, const Where& w, const std::string& key) {
    if (!n.IsSequence()) fail(w, n, key, "expected a list of strings, got " + shown(n));
    json out = json::array();
    for (const auto& e : n) {
        if (!e.IsScalar())
            fail(w, e, key, "expected a list of strings, got " + shown(e) + " in it");
        out.push_back(scalar_text(e));
    }
    return out;
}

using Table = std::vector<std::pair<std::string, Validator>>;

json validate_map(const YAML::Node& n, const Where& w, const std::string& prefix,
                  const Table& table) {
    if (!n.IsMap())
        fail(w, n, prefix.empty() ? "template" : prefix, "expected a map, got " + shown(n));
    std::vector<std::string> names;
    for (const auto& [k, v] : table) names.push_back(k);
    json out = json::object();
    for (const auto& kv : n) {
        std::string k = kv.first.Scalar();
        std::string full = prefix.empty() ? k : prefix + "." + k;
        auto it =
            std::find_if(table.begin(), table.end(), [&](const auto& e) { return e.first == k; });
        if (it == table.end()) fail(w, kv.first, full, "unknown key" + did_you_mean(k, names));
        out[k] = it->second(kv.second, w, full);
    }
    return out;
}

json validate_resources(const YAML::Node& n, const Where& w, const std::string& key) {
    static const Table table = {
        {"cpus", as_positive_number}, {"memory", as_size}, {"pids", as_positive_int}};
    return validate_map(n, w, key, table);
}

// `none`, or an egress policy {allow: [...], deny: [...]} (lib/options/network.hpp):
// each entry checked where it stands, so an error names its line.
json as_network(const YAML::Node& n, const Where& w, const std::string& key) {
    if (n.IsScalar()) {
        if (scalar_text(n) == "none") return "none";
        fail(w, n, key, "expected none or a policy {allow: [...], deny: [...]}, got " + shown(n));
    }
    if (!n.IsMap()) fail(w, n, key, "expected none or a policy {allow: [...], deny: [...]}");
    json out = json::object();
    for (const auto& kv : n) {
        std::string k = kv.first.Scalar();
        if (k != "allow" && k != "deny")
            fail(w, kv.first, key + "." + k, "unknown key" + did_you_mean(k, {"allow", "deny"}));
        if (!kv.second.IsSequence())
            fail(w, kv.second, key + "." + k,
                 "expected a list of destinations, got " + shown(kv.second));
        json list = json::array();
        for (const auto& e : kv.second) {
            if (!e.IsScalar()) fail(w, e, key + "." + k, "expected a destination, got " + shown(e));
            auto parsed = parse_destination(scalar_text(e), k == "deny");
            if (!parsed.dest) fail(w, e, key + "." + k, scalar_text(e) + ": " + parsed.error);
            list.push_back(parsed.dest->str());
        }
        out[k] = list;
    }
    return out;
}

json validate_runtime_options(const YAML::Node& n, const Where& w, const std::string& key) {
    static const Table table = {
        {"hidepid", as_hidepid},      {"audit", as_bool},
        {"audit_max_bytes", as_size}, {"platform", one_of({"ptrace", "kvm"})},
        {"network", as_network},
    };
    return validate_map(n, w, key, table);
}

// ---- desktop ----------------------------------------------------------------

json as_screen(const YAML::Node& n, const Where& w, const std::string& key) {
    if (n.IsScalar())
        if (auto s = parse_screen(scalar_text(n))) return s->str();
    fail(w, n, key,
         "expected WIDTHxHEIGHT with each side " + std::to_string(min_screen_side) + " to " +
             std::to_string(max_screen_side) + " (e.g. 1280x800), got " + shown(n));
}

json as_desktop_user(const YAML::Node& n, const Where& w, const std::string& key) {
    json u = as_user(n, w, key);
    if (parse_user(u.get<std::string>())->uid == 0)
        fail(w, n, key, "the desktop must not run as root");
    return u;
}

// The display a sandbox starts at create (lib/sandbox/desktop.hpp).
json validate_desktop(const YAML::Node& n, const Where& w, const std::string& key) {
    static const Table table = {
        {"screen", as_screen}, {"start", as_abs_path}, {"user", as_desktop_user}};
    return validate_map(n, w, key, table);
}

// ------------------------------------------------------------------------------

const Table& top_level_table() {
    static const Table table = {
        {"description", as_string},
        {"extends", as_string},
        {"image", as_string},
        {"user", as_user},
        {"env", as_string_map},
        {"cwd", as_abs_path},
        {"entrypoint", as_string_list},
        {"cmd", as_string_list},
        {"labels", as_string_map},
        {"resources", validate_resources},
        {"runtime_options", validate_runtime_options},
        {"desktop", validate_desktop},
        {"ttl", as_duration},
        {"idle_timeout", as_duration},
    };
    return table;
}

void collect_leaves(const json& j, const std::string& ptr, const std::string& src,
                    std::map<std::string, std::string>& origin) {
    if (j.is_object() && !j.empty()) {
        for (const auto& [k, v] : j.items())
            collect_leaves(v, ptr + "/" + pointer_token(k), src, origin);
    } else {
        origin[ptr] = src;
    }
}

void erase_under(std::map<std::string, std::string>& origin, const std::string& ptr) {
    auto it = origin.lower_bound(ptr);
    while (it != origin.end() && (it->first == ptr || it->first.rfind(ptr + "/", 0) == 0))
        it = origin.erase(it);
}

// Child over parent: maps merge key by key, everything else is replaced.
void merge_into(json& base, const json& child, const std::string& ptr, const std::string& src,
                std::map<std::string, std::string>& origin) {
    for (const auto& [k, v] : child.items()) {
        std::string p = ptr + "/" + pointer_token(k);
        if (v.is_object() && base.contains(k) && base[k].is_object()) {
            merge_into(base[k], v, p, src, origin);
        } else {
            erase_under(origin, p);
            base[k] = v;
            collect_leaves(v, p, src, origin);
        }
    }
}

std::string chain_text(const std::vector<std::string>& chain) {
    if (chain.size() < 2) return "";
    std::string s = " (extends chain: ";
    for (std::size_t i = 0; i < chain.size(); ++i) s += (i ? " -> " : "") + chain[i];
    return s + ")";
}

bool looks_like_path(const std::string& ref) {
    return ref.find('/') != std::string::npos || ref.ends_with(".yaml") || ref.ends_with(".yml") ||
           ref.ends_with(".json");
}

}  // namespace

std::string pointer_token(const std::string& key) {
    std::string out;
    for (char c : key) {
        if (c == '~')
            out += "~0";
        else if (c == '/')
            out += "~1";
        else
            out.push_back(c);
    }
    return out;
}

bool is_template_file(const std::string& ref) {
    return !is_inline_template(ref) && looks_like_path(ref);
}

bool is_inline_template(const std::string& ref) {
    auto first = ref.find_first_not_of(" \t\r\n");
    return first != std::string::npos && (ref[first] == '{' || ref.find('\n') != std::string::npos);
}

struct TemplateResolver::Loaded {
    std::string name;   // short name for chains and origins
    std::string label;  // for error messages
    std::optional<fs::path> file;
    bool file_text = false;  // a file's text: this host's, or a client's it sent
    YAML::Node root;
};

TemplateResolver::TemplateResolver(std::vector<fs::path> user_dirs,
                                   std::vector<fs::path> builtin_dirs)
    : user_dirs_(std::move(user_dirs)), builtin_dirs_(std::move(builtin_dirs)) {}

TemplateResolver TemplateResolver::with_default_paths(const fs::path& state_dir) {
    std::vector<fs::path> user;
    if (const char* env = std::getenv("SANDWEAVE_TEMPLATE_PATH")) {
        std::string s = env;
        std::size_t start = 0;
        while (start <= s.size()) {
            auto end = s.find(':', start);
            if (end == std::string::npos) end = s.size();
            if (end > start) user.emplace_back(s.substr(start, end - start));
            start = end + 1;
        }
    }
    if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg)
        user.push_back(fs::path(xdg) / "sandweave/templates");
    else if (const char* home = std::getenv("HOME"); home && *home)
        user.push_back(fs::path(home) / ".config/sandweave/templates");
    user.push_back(state_dir / "templates");
    std::vector<fs::path> builtin;
    std::error_code ec;
    if (fs::is_directory(SANDWEAVE_SOURCE_TEMPLATES, ec))
        builtin.emplace_back(SANDWEAVE_SOURCE_TEMPLATES);
    builtin.emplace_back(SANDWEAVE_INSTALLED_TEMPLATES);
    return TemplateResolver(std::move(user), std::move(builtin));
}

std::optional<fs::path> TemplateResolver::find_named(const std::string& name, bool* builtin) const {
    std::error_code ec;
    auto search = [&](const std::vector<fs::path>& dirs) -> std::optional<fs::path> {
        for (const auto& d : dirs)
            for (const char* ext : {".yaml", ".yml", ".json"})
                if (fs::is_regular_file(d / (name + ext), ec)) return d / (name + ext);
        return std::nullopt;
    };
    if (auto p = search(user_dirs_)) {
        if (builtin) *builtin = false;
        return p;
    }
    if (auto p = search(builtin_dirs_)) {
        if (builtin) *builtin = true;
        return p;
    }
    return std::nullopt;
}

TemplateResolver::Loaded TemplateResolver::load_ref(const std::string& ref,
                                                    const std::optional<fs::path>& base_dir,
                                                    const std::string& source) const {
    Loaded l;
    std::string text;
    if (is_inline_template(ref)) {
        l.name = "inline";
        l.label = "inline template";
        // A client's file, read there and sent: named, and not quoted.
        if (!source.empty()) {
            l.label = "template '" + source + "'";
            l.file_text = true;
        }
        text = ref;
    } else {
        if (ref.empty()) throw Error(ErrorCode::usage, "template name is empty");
        fs::path file;
        if (looks_like_path(ref)) {
            // A path the caller gave (not one a template file of ours names,
            // relative to itself) is read only for a caller on this host.
            if (!base_dir && !caller_paths_)
                throw Error(ErrorCode::usage,
                            "template '" + printable(ref) +
                                "': a template file is not read for a remote client; send "
                                "the template's content (the CLI and the Python SDK read "
                                "template files where they run) or name an installed template");
            file = fs::path(ref);
            if (file.is_relative() && base_dir) file = *base_dir / file;
            std::error_code ec;
            if (!fs::is_regular_file(file, ec))
                throw Error(ErrorCode::not_found,
                            "template file " + printable(file.string()) + ": not found");
            l.name = file.string();
        } else {
            auto found = find_named(ref, nullptr);
            if (!found) {
                std::vector<std::string> names;
                for (const auto& t : list()) names.push_back(t.name);
                throw Error(ErrorCode::not_found, "unknown template '" + printable(ref) + "'" +
                                                      did_you_mean(ref, names) +
                                                      "; `sandweave template ls` lists them");
            }
            file = *found;
            l.name = ref;
        }
        l.file = fs::absolute(file);
        l.file_text = true;
        l.label = "template '" + l.name + "' (" + l.file->string() + ")";
        text = read_file(*l.file, max_template_bytes);
    }
    try {
        l.root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        // A few of yaml-cpp's messages end with the offending text
        // ("unknown escape character: x"): not quoted from a file.
        std::string what = e.msg;
        if (l.file_text) what = what.substr(0, what.find(':'));
        throw Error(ErrorCode::usage,
                    printable(l.label + " line " + std::to_string(e.mark.line + 1) +
                              ": malformed YAML: " + what));
    }
    return l;
}

ResolvedTemplate TemplateResolver::resolve_loaded(Loaded loaded,
                                                  std::vector<std::string> chain) const {
    chain.push_back(loaded.name);
    Where where{loaded.label, chain_text(chain), loaded.file_text};
    if (chain.size() > max_extends_depth)
        throw Error(ErrorCode::usage, printable("template extends chain deeper than " +
                                                std::to_string(max_extends_depth) + where.chain));
    if (!loaded.root.IsDefined() || loaded.root.IsNull())
        throw Error(ErrorCode::usage, printable(loaded.label + ": empty template" + where.chain));
    if (where.file) {
        std::vector<std::string> keys;
        for (const auto& [k, v] : top_level_table()) keys.push_back(k);
        require_template_shape(loaded.root, where, keys);
    }
    std::size_t budget = max_template_nodes;
    require_utf8_scalars(loaded.root, where, "", budget);
    json doc = validate_map(loaded.root, where, "", top_level_table());

    ResolvedTemplate out;
    if (doc.contains("extends")) {
        std::string parent = doc["extends"];
        doc.erase("extends");
        std::optional<fs::path> base_dir;
        if (loaded.file) base_dir = loaded.file->parent_path();
        Loaded p = with_context(printable(loaded.label + ": extends '" + parent + "'"), [&] {
            try {
                return load_ref(parent, base_dir);
            } catch (const Error& e) {
                // A missing parent makes this template bad (exit 2), unlike a
                // missing template the user named directly (exit 4).
                if (e.code() == ErrorCode::not_found) throw Error(ErrorCode::usage, e.what());
                throw;
            }
        });
        // A cycle: the parent's identity is already on the chain.
        if (std::find(chain.begin(), chain.end(), p.name) != chain.end()) {
            auto cyc = chain;
            cyc.push_back(p.name);
            std::string s;
            for (std::size_t i = 0; i < cyc.size(); ++i) s += (i ? " -> " : "") + cyc[i];
            throw Error(ErrorCode::usage, "template cycle: " + printable(s));
        }
        out = resolve_loaded(std::move(p), chain);
    } else {
        out.doc = json::object();
    }
    merge_into(out.doc, doc, "", loaded.name, out.origin);
    out.chain.insert(out.chain.begin(), loaded.name);
    out.name = loaded.name;
    return out;
}

ResolvedTemplate TemplateResolver::resolve(const std::string& ref,
                                           const std::string& source) const {
    ResolvedTemplate r = resolve_loaded(load_ref(ref, std::nullopt, source), {});
    if (!r.doc.contains("image"))
        throw Error(ErrorCode::usage,
                    printable("template '" + r.name +
                              "': no image (set `image:` or extend a template that has one)" +
                              chain_text(r.chain)));
    return r;
}

ResolvedTemplate TemplateResolver::validate_file(const fs::path& file) const {
    std::string ref = file.string();
    if (!looks_like_path(ref)) ref = "./" + ref;
    return resolve(ref);
}

std::vector<TemplateInfo> TemplateResolver::list() const {
    std::vector<TemplateInfo> out;
    std::set<std::string> seen;
    auto scan = [&](const std::vector<fs::path>& dirs, bool builtin) {
        for (const auto& d : dirs) {
            std::error_code ec;
            if (!fs::is_directory(d, ec)) continue;
            std::vector<fs::path> files;
            for (const auto& e : fs::directory_iterator(d, ec)) files.push_back(e.path());
            std::sort(files.begin(), files.end());
            for (const auto& f : files) {
                auto ext = f.extension().string();
                if (ext != ".yaml" && ext != ".yml" && ext != ".json") continue;
                std::string name = f.stem().string();
                if (!seen.insert(name).second) continue;
                TemplateInfo info{name, f, "", builtin};
                try {
                    YAML::Node n = YAML::Load(read_file(f, max_template_bytes));
                    if (n.IsMap() && n["description"] && n["description"].IsScalar())
                        info.description = n["description"].Scalar();
                } catch (const std::exception&) {
                    info.description = "(unreadable)";
                }
                out.push_back(std::move(info));
            }
        }
    };
    scan(user_dirs_, false);
    scan(builtin_dirs_, true);
    return out;
}

}  // namespace sandweave
