// ls, inspect, terminate, rm, prune.
#include <algorithm>
#include <cstdio>
#include <functional>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"
#include "lib/core/log.hpp"

namespace sandweave::cli {
namespace {

std::string labels_text(const std::map<std::string, std::string>& labels) {
    std::string s;
    for (const auto& [k, v] : labels) s += (s.empty() ? "" : ",") + k + "=" + v;
    return s.empty() ? "-" : s;
}

// "4m12s", "1h03m", "busy" (idle clock stopped, no ttl), "-" (no lifetime).
std::string left_text(const SandboxView& v) {
    if (!v.left) return "-";
    auto soonest = v.left->soonest();
    if (!soonest) return v.left->busy ? "busy" : "-";
    long long s = std::max<long long>(0, (soonest->count() + 999) / 1000);
    char buf[32];
    if (s >= 3600)
        std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s / 60 % 60);
    else if (s >= 60)
        std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
    else
        std::snprintf(buf, sizeof buf, "%llds", s);
    return buf;
}

// What the sandbox's limits did: "oom-kills=1,alloc-failures=3", or "-".
std::string limit_events_text(const std::optional<LimitUsage>& u) {
    std::string s;
    if (u && u->oom_kills) s += "oom-kills=" + std::to_string(u->oom_kills);
    if (u && u->memory_failcnt)
        s += (s.empty() ? "" : ",") + std::string("alloc-failures=") +
             std::to_string(u->memory_failcnt);
    return s.empty() ? "-" : s;
}

void print_table(const std::vector<SandboxView>& views) {
    // WORKER only through a Weave controller, where sandboxes have one.
    bool workers = false;
    for (const auto& v : views) workers = workers || v.worker.has_value();
    std::printf("%-16s %-16s %-10s %-9s %-21s %-8s %-16s %s%s\n", "ID", "NAME", "TEMPLATE", "STATE",
                "CREATED", "LEFT", "LABELS", "LIMIT-EVENTS", workers ? "  WORKER" : "");
    for (const auto& v : views) {
        const auto& r = v.record;
        std::string tmpl = r.spec.template_name.size() > 10
                               ? r.spec.template_name.substr(0, 9) + "~"
                               : r.spec.template_name;
        std::string events = limit_events_text(v.limits);
        if (workers)
            events = (events + std::string(12, ' '))
                         .substr(0, std::max<std::size_t>(12, events.size())) +
                     "  " + v.worker.value_or("-");
        std::printf("%-16s %-16s %-10s %-9s %-21s %-8s %-16s %s\n", r.id.c_str(),
                    r.name.empty() ? "-" : r.name.c_str(), tmpl.c_str(), to_string(v.live).c_str(),
                    r.created_at.c_str(), left_text(v).c_str(), labels_text(r.spec.labels).c_str(),
                    events.c_str());
    }
}

}  // namespace

// The sandboxes a verb acts on: the ids given, or those the filters select
// (all of them with --all). Filters are checked by the worker.
std::vector<std::string> targets(Session& s, const std::string& verb,
                                 const std::vector<std::string>& ids,
                                 const std::vector<std::string>& filters, bool all,
                                 bool only_ended = false) {
    if (!ids.empty() && (!filters.empty() || all))
        throw Error(ErrorCode::usage, verb + ": give sandbox ids or --filter/--all, not both");
    if (!ids.empty()) return ids;
    if (filters.empty() && !all)
        throw Error(ErrorCode::usage,
                    verb + ": give sandbox ids, --filter KEY=VALUE" +
                        (verb == "rm" ? std::string(", or --all") : std::string()));
    std::vector<std::string> out;
    for (const auto& v : s.api().ls({filters}).sandboxes)
        if (!only_ended || v.live == SandboxState::stopped || v.live == SandboxState::failed ||
            v.live == SandboxState::lost)
            out.push_back(v.record.id);
    return out;
}

// Acts on each target in turn. One that fails is reported on a line of its
// own and the others still go, as `docker rm a b` does; the exit status is the
// first failure's. A sandbox that filters or --all selected and that is gone
// by the time it is reached (another rm, a prune or its ttl got there first)
// is skipped: gone is what was asked for. With --json the failures are listed
// as {"id", "message", "exit_status"} objects in `errors`.
bool sandbox_gone(Session& s, const std::string& id) {
    try {
        s.api().inspect({id});
        return false;
    } catch (const Error& e) {
        return e.code() == ErrorCode::not_found;
    }
}

int for_each_target(Session& s, const std::vector<std::string>& ids, bool selected,
                    const std::function<void(const std::string&)>& act, nlohmann::json* errors) {
    int status = 0;
    for (const auto& id : ids) {
        try {
            act(id);
        } catch (const Error& e) {
            if (selected && e.code() == ErrorCode::not_found && sandbox_gone(s, id)) continue;
            log().error(e.what());
            if (errors)
                errors->push_back({{"id", id},
                                   {"message", e.what()},
                                   {"exit_status", static_cast<int>(e.code())}});
            if (status == 0) status = static_cast<int>(e.code());
        }
    }
    return status;
}

void add_filter_option(CLI::App* sub, std::vector<std::string>& filters) {
    sub->add_option("--filter", filters,
                    "Only sandboxes matching KEY=VALUE (repeatable, all must hold): label=K=V, "
                    "state=S, template=T, pool=P, older-than=DUR")
        ->allow_extra_args(false);
}

namespace {

// rm --audit-log: the sandbox ended in one request; 3 when the export is
// not complete. A failed export leaves the sandbox stopped with its log (an error).
int finish_one(Session& s, const GlobalOptions& g, const std::string& id,
               const std::string& audit_log) {
    api::Finished f = s.api().finish({id, audit_log});
    if (!f.audit) throw Error(ErrorCode::general, "rm --audit-log: the worker returned no export");
    if (g.json) {
        print_json({{"removed", {f.removed}}, {"audit", api::encode_value(*f.audit)}});
    } else {
        print_line(f.removed);
        print_line(audit::summary_line(*f.audit));
    }
    return f.audit->complete ? 0 : 3;
}

void register_ls(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* ls = app.add_subcommand("ls", "List sandboxes");
    ls->alias("list");
    auto quiet_ids = std::make_shared<bool>(false);
    auto ls_filters = std::make_shared<std::vector<std::string>>();
    // -q as in docker ps -q; after the verb it is this flag, before it the
    // global --quiet.
    ls->add_flag("-q,--ids", *quiet_ids, "Print only ids, one a line (as docker ps -q)");
    add_filter_option(ls, *ls_filters);
    ls->callback([&g, &out, quiet_ids, ls_filters] {
        Session s(g);
        auto views = s.api().ls({*ls_filters}).sandboxes;
        if (g.json) {
            print_json(api::encode_value(views));
        } else if (*quiet_ids) {
            for (const auto& v : views) print_line(v.record.id);
        } else {
            print_table(views);
        }
        out.exit_code = 0;
    });
}

void register_inspect(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* inspect =
        app.add_subcommand("inspect", "Show a sandbox's record and resolved spec (JSON)");
    auto inspect_id = std::make_shared<std::string>();
    inspect->add_option("id", *inspect_id, "Sandbox id or name")->required()->type_name("SANDBOX");
    inspect->callback([&g, &out, inspect_id] {
        Session s(g);
        print_json(api::encode_value(s.api().inspect({*inspect_id})));
        out.exit_code = 0;
    });
}

void register_terminate(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* term =
        app.add_subcommand("terminate", "Stop a sandbox (its files and audit log stay until rm)");
    auto term_ids = std::make_shared<std::vector<std::string>>();
    auto term_filters = std::make_shared<std::vector<std::string>>();
    term->add_option("ids", *term_ids, "Sandbox ids or names")->type_name("SANDBOX");
    add_filter_option(term, *term_filters);
    term->callback([&g, &out, term_ids, term_filters] {
        Session s(g);
        nlohmann::json arr = nlohmann::json::array();
        out.exit_code = for_each_target(
            s, targets(s, "terminate", *term_ids, *term_filters, false), term_ids->empty(),
            [&](const std::string& id) {
                auto v = s.api().terminate({id});
                if (g.json)
                    arr.push_back(api::encode_value(v));
                else
                    print_line(v.record.id);
            },
            nullptr);
        if (g.json) print_json(arr);
    });
}

void register_rm(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* rm =
        app.add_subcommand("rm", "Remove sandboxes and everything of them, audit log included");
    auto rm_ids = std::make_shared<std::vector<std::string>>();
    auto rm_filters = std::make_shared<std::vector<std::string>>();
    auto rm_all = std::make_shared<bool>(false);
    rm->add_option("ids", *rm_ids, "Sandbox ids or names")->type_name("SANDBOX");
    add_filter_option(rm, *rm_filters);
    rm->add_flag("--all", *rm_all, "Every sandbox (with --filter: every one that matches)");
    // docker rm needs -f for a running container; rm here always stops one
    // first, so the flag is taken for the habit and changes nothing.
    rm->add_flag("-f,--force")
        ->description("Accepted as in docker rm -f: a running sandbox is always stopped first");
    auto rm_audit = std::make_shared<std::string>();
    rm->add_option("--audit-log", *rm_audit,
                   "One sandbox: after its final audit barrier, export the whole log to FILE "
                   "and FILE.status.json, then remove it (one request); exit 3 when incomplete")
        ->type_name("FILE");
    rm->callback([&g, &out, rm_ids, rm_filters, rm_all, rm_audit] {
        Session s(g);
        if (!rm_audit->empty()) {
            if (rm_ids->size() != 1 || !rm_filters->empty() || *rm_all)
                throw Error(ErrorCode::usage, "rm --audit-log: give exactly one sandbox");
            out.exit_code = finish_one(s, g, rm_ids->front(), *rm_audit);
            return;
        }
        nlohmann::json arr = nlohmann::json::array();
        nlohmann::json errors = nlohmann::json::array();
        out.exit_code = for_each_target(
            s, targets(s, "rm", *rm_ids, *rm_filters, *rm_all), rm_ids->empty(),
            [&](const std::string& ref) {
                std::string id = s.api().rm({ref}).removed;
                if (g.json)
                    arr.push_back(id);
                else
                    print_line(id);
            },
            &errors);
        if (g.json) {
            nlohmann::json res = {{"removed", arr}};
            if (!errors.empty()) res["errors"] = errors;
            print_json(res);
        }
    });
}

void register_prune(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* prune = app.add_subcommand("prune", "Remove every stopped or failed sandbox");
    auto prune_filters = std::make_shared<std::vector<std::string>>();
    add_filter_option(prune, *prune_filters);
    prune->callback([&g, &out, prune_filters] {
        Session s(g);
        std::vector<std::string> removed;
        out.exit_code = 0;
        if (prune_filters->empty()) {
            removed = s.api().prune().removed;
        } else {
            out.exit_code = for_each_target(
                s, targets(s, "prune", {}, *prune_filters, false, true), true,
                [&](const std::string& id) { removed.push_back(s.api().rm({id}).removed); },
                nullptr);
        }
        if (g.json)
            print_json({{"removed", removed}});
        else
            for (const auto& id : removed) print_line(id);
    });
}

}  // namespace

void register_sandbox_verbs(CLI::App& app, GlobalOptions& g, Outcome& out) {
    register_ls(app, g, out);
    register_inspect(app, g, out);
    register_terminate(app, g, out);
    register_rm(app, g, out);
    register_prune(app, g, out);
}

}  // namespace sandweave::cli
