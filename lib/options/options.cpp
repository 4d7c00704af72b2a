#include "lib/options/options.hpp"

#include "lib/core/error.hpp"

namespace sandweave {

using nlohmann::json;

namespace {

std::string tmpl_origin(const ResolvedTemplate& tmpl, const std::string& ptr);

// Fills `field` from the highest layer that has `ptr`, recording the origin.
template <typename T, typename Get>
void pick(T& field, const std::string& ptr, SandboxSpec& spec, const ResolvedTemplate& tmpl,
          const json* snap, const std::string& snap_label, const std::optional<T>& flag, Get get) {
    json::json_pointer jp(ptr);
    // The snapshot layer is its saved runtime_options object.
    const std::string rt_prefix = "/runtime_options";
    json::json_pointer snap_jp(ptr.rfind(rt_prefix, 0) == 0 ? ptr.substr(rt_prefix.size()) : ptr);
    if (flag) {
        field = *flag;
        spec.origin[ptr] = "flag";
    } else if (snap && snap->contains(snap_jp)) {
        field = get(snap->at(snap_jp));
        spec.origin[ptr] = snap_label;
    } else if (tmpl.doc.contains(jp)) {
        field = get(tmpl.doc.at(jp));
        spec.origin[ptr] = tmpl_origin(tmpl, ptr);
    } else {
        spec.origin[ptr] = "default";
    }
}

// "template T", or "image I" for a default an imported image gave the template
// (ImageStore::apply_defaults).
std::string tmpl_origin(const ResolvedTemplate& tmpl, const std::string& ptr) {
    auto it = tmpl.origin.find(ptr);
    if (it != tmpl.origin.end() && it->second.rfind("image ", 0) == 0) return it->second;
    return "template " + (it != tmpl.origin.end() ? it->second : tmpl.name);
}

// The template's network (none or a policy), then the flags: --network none
// clears it, --allow and --deny add to it. Its origin names both layers when
// both gave entries.
void resolve_network(SandboxSpec& s, const ResolvedTemplate& tmpl, const FlagOverrides& flags) {
    const std::string ptr = "/runtime_options/network";
    json::json_pointer jp(ptr);
    s.publish = flags.publish;
    if (flags.network_none) {
        if (!flags.allow.empty() || !flags.deny.empty())
            throw Error(ErrorCode::usage, "a network of none has nothing to allow or deny");
        if (!flags.publish.empty())
            throw Error(ErrorCode::usage,
                        "a network of none cannot publish a port (--publish gives the sandbox a "
                        "network that lets nothing out)");
        s.origin[ptr] = "flag";
        return;
    }
    std::string origin = "default";
    if (tmpl.doc.contains(jp)) {
        origin = tmpl_origin(tmpl, ptr);
        // A policy's leaves are its lists: one template set them all, or the
        // child's lists replaced the parent's one by one.
        for (const char* list : {"/allow", "/deny"})
            if (tmpl.origin.count(ptr + list)) origin = tmpl_origin(tmpl, ptr + list);
        if (const json& n = tmpl.doc.at(jp); n.is_object())
            s.runtime.egress = egress_policy_from_json(n);
    }
    if (!flags.allow.empty() || !flags.deny.empty()) {
        if (!s.runtime.egress) s.runtime.egress = EgressPolicy{};
        s.runtime.egress->allow.insert(s.runtime.egress->allow.end(), flags.allow.begin(),
                                       flags.allow.end());
        s.runtime.egress->deny.insert(s.runtime.egress->deny.end(), flags.deny.begin(),
                                      flags.deny.end());
        origin = origin == "default" || !tmpl.doc.at(jp).is_object() ? "flag" : origin + " + flag";
    }
    if (!flags.publish.empty() && !s.runtime.egress) {
        // A published port needs a network; this one lets nothing out.
        s.runtime.egress = EgressPolicy{};
        origin = "flag (--publish)";
    }
    s.runtime.network = s.runtime.egress ? "sandbox" : "none";
    s.origin[ptr] = origin;
}

}  // namespace

std::string PublishedPort::str() const {
    return std::to_string(host_port) + ":" + std::to_string(guest_port);
}

std::optional<PublishedPort> parse_published_port(const std::string& text, std::string& why) {
    auto port = [&](const std::string& t, std::uint16_t& out) {
        if (t.empty() || t.size() > 5 || t.find_first_not_of("0123456789") != std::string::npos ||
            std::stoul(t) < 1 || std::stoul(t) > 65535) {
            why = "'" + t + "' is not a port (1 to 65535)";
            return false;
        }
        out = static_cast<std::uint16_t>(std::stoul(t));
        return true;
    };
    PublishedPort p;
    auto colon = text.find(':');
    if (colon == std::string::npos) {
        if (!port(text, p.guest_port)) return std::nullopt;
        p.host_port = p.guest_port;
        return p;
    }
    if (!port(text.substr(0, colon), p.host_port) || !port(text.substr(colon + 1), p.guest_port))
        return std::nullopt;
    return p;
}

SandboxSpec resolve_spec(const ResolvedTemplate& tmpl, const json* snapshot_settings,
                         const std::string& snapshot_name, const FlagOverrides& flags) {
    SandboxSpec s;
    const std::string snap_label = "snapshot " + snapshot_name;
    s.template_name = tmpl.name;
    s.image = tmpl.doc.at("image").get<std::string>();
    s.origin["/image"] = tmpl_origin(tmpl, "/image");

    const json* rt_snap = snapshot_settings;
    pick<int>(s.runtime.hidepid, "/runtime_options/hidepid", s, tmpl, rt_snap, snap_label,
              flags.hidepid, [](const json& j) { return j.get<int>(); });
    pick<bool>(s.runtime.audit, "/runtime_options/audit", s, tmpl, rt_snap, snap_label, flags.audit,
               [](const json& j) { return j.get<bool>(); });
    pick<std::uint64_t>(s.runtime.audit_max_bytes, "/runtime_options/audit_max_bytes", s, tmpl,
                        rt_snap, snap_label, std::nullopt,
                        [](const json& j) { return j.get<std::uint64_t>(); });
    pick<std::string>(s.runtime.platform, "/runtime_options/platform", s, tmpl, nullptr, snap_label,
                      std::nullopt, [](const json& j) { return j.get<std::string>(); });
    resolve_network(s, tmpl, flags);

    pick<UserSpec>(s.user, "/user", s, tmpl, nullptr, snap_label, flags.user,
                   [](const json& j) { return *parse_user(j.get<std::string>()); });
    pick<std::string>(s.cwd, "/cwd", s, tmpl, nullptr, snap_label, std::nullopt,
                      [](const json& j) { return j.get<std::string>(); });

    // Unset unless a template or flag sets it: no lifetime by default.
    auto lifetime = [&](const std::string& ptr,
                        const std::optional<std::chrono::milliseconds>& flag)
        -> std::optional<std::chrono::milliseconds> {
        std::chrono::milliseconds v{0};
        pick<std::chrono::milliseconds>(
            v, ptr, s, tmpl, nullptr, snap_label, flag,
            [](const json& j) { return parse_duration(j.get<std::string>()).value(); });
        if (s.origin[ptr] == "default") return std::nullopt;
        return v;
    };
    s.lifetime.ttl = lifetime("/ttl", flags.ttl);
    s.lifetime.idle_timeout = lifetime("/idle_timeout", flags.idle_timeout);

    if (tmpl.doc.contains("env")) {
        for (const auto& [k, v] : tmpl.doc["env"].items()) {
            s.env[k] = v.get<std::string>();
            s.origin["/env/" + pointer_token(k)] = tmpl_origin(tmpl, "/env/" + pointer_token(k));
        }
    }
    for (const char* key : {"entrypoint", "cmd"}) {
        if (!tmpl.doc.contains(key)) continue;
        (std::string(key) == "cmd" ? s.cmd : s.entrypoint) =
            tmpl.doc[key].get<std::vector<std::string>>();
        s.origin[std::string("/") + key] = tmpl_origin(tmpl, std::string("/") + key);
    }
    if (tmpl.doc.contains("labels")) {
        for (const auto& [k, v] : tmpl.doc["labels"].items()) {
            s.labels[k] = v.get<std::string>();
            s.origin["/labels/" + pointer_token(k)] =
                tmpl_origin(tmpl, "/labels/" + pointer_token(k));
        }
    }
    for (const auto& [k, v] : flags.labels) {
        s.labels[k] = v;
        s.origin["/labels/" + pointer_token(k)] = "flag";
    }
    if (tmpl.doc.contains("resources")) {
        const json& r = tmpl.doc["resources"];
        if (r.contains("cpus")) s.resources.cpus = r["cpus"].get<double>();
        if (r.contains("memory")) s.resources.memory = r["memory"].get<std::uint64_t>();
        if (r.contains("pids")) s.resources.pids = r["pids"].get<std::int64_t>();
        for (const auto& [k, v] : r.items())
            s.origin["/resources/" + k] = tmpl_origin(tmpl, "/resources/" + k);
    }
    if (flags.cpus) {
        s.resources.cpus = flags.cpus;
        s.origin["/resources/cpus"] = "flag";
    }
    if (flags.memory) {
        s.resources.memory = flags.memory;
        s.origin["/resources/memory"] = "flag";
    }
    if (tmpl.doc.contains("desktop")) {
        DesktopSpec d;
        pick<ScreenSize>(d.screen, "/desktop/screen", s, tmpl, nullptr, snap_label, std::nullopt,
                         [](const json& j) { return *parse_screen(j.get<std::string>()); });
        pick<std::string>(d.start, "/desktop/start", s, tmpl, nullptr, snap_label, std::nullopt,
                          [](const json& j) { return j.get<std::string>(); });
        pick<UserSpec>(d.user, "/desktop/user", s, tmpl, nullptr, snap_label, std::nullopt,
                       [](const json& j) { return *parse_user(j.get<std::string>()); });
        s.desktop = d;
    }
    return s;
}

// ---- the sandbox's own command: docker run's rule -------------------------------
std::vector<std::string> command_line(const SandboxSpec& spec, const std::vector<std::string>& args,
                                      const std::optional<std::vector<std::string>>& entrypoint,
                                      const std::string& who) {
    std::vector<std::string> argv = entrypoint.value_or(spec.entrypoint);
    const std::vector<std::string>& rest = args.empty() && !entrypoint ? spec.cmd : args;
    argv.insert(argv.end(), rest.begin(), rest.end());
    if (argv.empty())
        throw Error(ErrorCode::usage,
                    entrypoint ? "no command given (the entrypoint was cleared and no arguments "
                                 "follow)"
                               : "no command given, and " + who +
                                     " has none of its own (its template and image set no "
                                     "entrypoint or cmd)");
    if (argv[0].empty()) throw Error(ErrorCode::usage, "argv[0]: empty program name");
    return argv;
}
// ---------------------------------------------------------------------------------

json to_json(const SandboxSpec& s) {
    json res = json::object();
    if (s.resources.cpus) res["cpus"] = *s.resources.cpus;
    if (s.resources.memory) res["memory"] = *s.resources.memory;
    if (s.resources.pids) res["pids"] = *s.resources.pids;
    json out{
        {"template", s.template_name},
        {"image", s.image},
        {"user", s.user.str()},
        {"env", s.env},
        {"cwd", s.cwd},
        {"entrypoint", s.entrypoint},
        {"cmd", s.cmd},
        {"resources", res},
        {"runtime_options",
         {{"hidepid", s.runtime.hidepid},
          {"audit", s.runtime.audit},
          {"audit_max_bytes", s.runtime.audit_max_bytes},
          {"platform", s.runtime.platform},
          {"network", s.runtime.egress ? to_json(*s.runtime.egress) : json("none")}}},
        {"labels", s.labels},
        {"origin", s.origin},
    };
    if (s.desktop)
        out["desktop"] = {{"screen", s.desktop->screen.str()},
                          {"start", s.desktop->start},
                          {"user", s.desktop->user.str()}};
    if (!s.publish.empty()) {
        out["publish"] = json::array();
        for (const auto& p : s.publish) out["publish"].push_back(p.str());
    }
    if (s.lifetime.ttl) out["lifetime"]["ttl_ms"] = s.lifetime.ttl->count();
    if (s.lifetime.idle_timeout)
        out["lifetime"]["idle_timeout_ms"] = s.lifetime.idle_timeout->count();
    return out;
}

SandboxSpec spec_from_json(const json& j) {
    SandboxSpec s;
    s.template_name = j.at("template").get<std::string>();
    s.image = j.at("image").get<std::string>();
    s.user = parse_user(j.at("user").get<std::string>()).value_or(UserSpec{});
    s.env = j.value("env", std::map<std::string, std::string>{});
    s.cwd = j.value("cwd", std::string("/"));
    s.entrypoint = j.value("entrypoint", std::vector<std::string>{});
    s.cmd = j.value("cmd", std::vector<std::string>{});
    const json& res = j.value("resources", json::object());
    if (res.contains("cpus")) s.resources.cpus = res["cpus"].get<double>();
    if (res.contains("memory")) s.resources.memory = res["memory"].get<std::uint64_t>();
    if (res.contains("pids")) s.resources.pids = res["pids"].get<std::int64_t>();
    const json& rt = j.at("runtime_options");
    s.runtime.hidepid = rt.value("hidepid", 0);
    s.runtime.audit = rt.value("audit", false);
    s.runtime.audit_max_bytes = rt.value("audit_max_bytes", default_audit_max_bytes);
    s.runtime.platform = rt.value("platform", std::string("ptrace"));
    if (rt.contains("network") && rt["network"].is_object())
        s.runtime.egress = egress_policy_from_json(rt["network"]);
    s.runtime.network = s.runtime.egress ? "sandbox" : "none";
    s.labels = j.value("labels", std::map<std::string, std::string>{});
    s.origin = j.value("origin", std::map<std::string, std::string>{});
    if (j.contains("desktop")) {
        const json& d = j["desktop"];
        DesktopSpec ds;
        if (auto sc = parse_screen(d.value("screen", std::string()))) ds.screen = *sc;
        ds.start = d.value("start", std::string(default_desktop_start));
        if (auto u = parse_user(d.value("user", std::string()))) ds.user = *u;
        s.desktop = ds;
    }
    for (const auto& p : j.value("publish", json::array())) {
        std::string why;
        if (!p.is_string()) continue;
        if (auto pp = parse_published_port(p.get<std::string>(), why)) s.publish.push_back(*pp);
    }
    if (const json& lt = j.value("lifetime", json::object()); lt.is_object()) {
        if (lt.contains("ttl_ms"))
            s.lifetime.ttl = std::chrono::milliseconds(lt["ttl_ms"].get<std::int64_t>());
        if (lt.contains("idle_timeout_ms"))
            s.lifetime.idle_timeout =
                std::chrono::milliseconds(lt["idle_timeout_ms"].get<std::int64_t>());
    }
    return s;
}

}  // namespace sandweave
