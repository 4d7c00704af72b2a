// The controller's calls about what every worker holds (lib/controller/controller_api.hpp):
// templates and images are answered by each worker Slurm lists (`sinfo`), and
// one a worker lacks is flagged with `missing_on`; images are installed on
// the workers, not through the controller. Snapshots live in a directory
// every worker shares (cluster.env's SANDWEAVE_WEAVE_SNAPSHOTS), so one taken
// on any worker restores on any other (docs/weave.md, "Snapshots").
#include <future>
#include <set>
#include <sstream>

#include "lib/controller/controller_api.hpp"
#include "lib/controller/identity.hpp"
#include "lib/controller/slurm.hpp"
#include "lib/core/error.hpp"
#include "lib/core/log.hpp"

namespace sandweave::controller {

namespace {

struct Node {
    std::string name;
    std::string state;  // sinfo's compact state: idle, mix, alloc, down*, ...
    bool up() const {
        return state == "idle" || state == "mix" || state == "alloc" || state == "comp";
    }
};

// The partition's nodes, as Slurm lists them.
std::vector<Node> worker_nodes(slurm::Client& slurm, const ClusterConfig& c) {
    std::vector<std::string> argv = {"sinfo", "-h", "-N", "-o", "%N %t"};
    if (!c.partition.empty()) argv.push_back("--partition=" + c.partition);
    CommandResult r = slurm.run(argv);
    if (!r.ok()) throw Error(ErrorCode::runtime, "sinfo: " + slurm::last_line(r.err));
    std::vector<Node> out;
    std::set<std::string> seen;
    std::istringstream lines(r.out);
    Node n;
    while (lines >> n.name >> n.state)
        if (seen.insert(n.name).second) out.push_back(n);
    if (out.empty()) throw Error(ErrorCode::runtime, "Slurm lists no worker node");
    return out;
}

// One worker's answer, or why there is none.
template <class R>
struct Answer {
    std::string node;
    std::optional<R> result;
    std::optional<Error> error;
};

// Asks every node at once; a node that is not up answers with an error.
template <class R>
std::vector<Answer<R>> ask_workers(
    const std::vector<Node>& nodes,
    const std::function<std::shared_ptr<WorkerLink>(const std::string&)>& link_to,
    const std::function<R(api::Api&)>& fn) {
    std::vector<std::pair<std::string, std::future<R>>> asked;
    std::vector<Answer<R>> out;
    for (const Node& n : nodes) {
        if (!n.up()) continue;
        asked.emplace_back(n.name, std::async(std::launch::async, [&, name = n.name] {
                               std::shared_ptr<WorkerLink> link = link_to(name);
                               return fn(link->api());
                           }));
    }
    for (const Node& n : nodes) {
        Answer<R> a;
        a.node = n.name;
        if (!n.up()) a.error = Error(ErrorCode::runtime, n.name + " is " + n.state + " in Slurm");
        out.push_back(std::move(a));
    }
    for (auto& [name, f] : asked) {
        const std::string& node = name;  // clang 14 cannot capture a structured binding
        auto& a = *std::find_if(out.begin(), out.end(), [&](auto& x) { return x.node == node; });
        try {
            a.result = f.get();
        } catch (const Error& e) {
            a.error = e.wrap("on worker " + name);
        }
    }
    return out;
}

// The first answer; when no worker gave one, the first error.
template <class R>
R first_answer(const std::vector<Answer<R>>& answers) {
    for (const auto& a : answers)
        if (a.result) return *a.result;
    for (const auto& a : answers)
        if (a.error && a.error->code() != ErrorCode::runtime) throw *a.error;
    throw *answers.front().error;
}

// Entries merged by name, in the order the workers list them, each flagged
// with the workers that lack it.
template <class E>
std::vector<E> merged(const std::vector<Answer<std::vector<E>>>& answers) {
    std::vector<E> out;
    std::map<std::string, std::set<std::string>> has;
    for (const auto& a : answers) {
        if (!a.result) {
            log().warn("controller: " + std::string(a.error->what()));
            continue;
        }
        for (const E& e : *a.result) {
            if (has[e.name].empty()) out.push_back(e);
            has[e.name].insert(a.node);
        }
    }
    for (E& e : out) {
        std::vector<std::string> missing;
        for (const auto& a : answers)
            if (!has[e.name].count(a.node)) missing.push_back(a.node);
        if (!missing.empty()) e.missing_on = missing;
    }
    return out;
}

Error images_on_workers(const std::string& verb) {
    return Error(ErrorCode::usage, "image " + verb +
                                       ": images are installed on each worker (`sandweave image "
                                       "build` or `import` there), not through a controller");
}

}  // namespace

std::shared_ptr<WorkerLink> ControllerApi::link_to(const std::string& node) {
    {
        std::lock_guard<std::mutex> g(mu_);
        // A sandbox's link is served only its job's sandboxes unless the
        // job is the controller's own user's (lib/rpc/step_peer.hpp).
        for (const auto& [id, pl] : placed_)
            if (pl.node == node && pl.link && !pl.gone && pl.owner == own_unix_user())
                return pl.link;
    }
    return std::make_shared<WorkerLink>(c_, node);
}

api::TemplateList ControllerApi::template_ls() {
    auto answers = ask_workers<std::vector<api::TemplateEntry>>(
        worker_nodes(slurm_, c_), [this](const std::string& n) { return link_to(n); },
        [](api::Api& a) { return a.template_ls().templates; });
    first_answer(answers);  // no worker answered: its error
    return api::TemplateList{merged(answers)};
}

api::TemplateShowResult ControllerApi::template_show(const api::TemplateShowParams& p) {
    return first_answer(ask_workers<api::TemplateShowResult>(
        worker_nodes(slurm_, c_), [this](const std::string& n) { return link_to(n); },
        [&](api::Api& a) { return a.template_show(p); }));
}

api::TemplateValidateResult ControllerApi::template_validate(const api::TemplateValidateParams& p) {
    auto answers = ask_workers<api::TemplateValidateResult>(
        worker_nodes(slurm_, c_), [this](const std::string& n) { return link_to(n); },
        [&](api::Api& a) { return a.template_validate(p); });
    // Valid only where every worker says so.
    for (const auto& a : answers)
        if (a.error) throw *a.error;
    return *answers.front().result;
}

api::ImageList ControllerApi::image_ls() {
    auto answers = ask_workers<std::vector<api::Image>>(
        worker_nodes(slurm_, c_), [this](const std::string& n) { return link_to(n); },
        [](api::Api& a) { return a.image_ls().images; });
    first_answer(answers);
    return api::ImageList{merged(answers)};
}

api::Image ControllerApi::image_inspect(const api::NameParams& p) {
    auto answers = ask_workers<api::Image>(
        worker_nodes(slurm_, c_), [this](const std::string& n) { return link_to(n); },
        [&](api::Api& a) { return a.image_inspect(p); });
    api::Image i = first_answer(answers);
    std::vector<std::string> missing;
    for (const auto& a : answers)
        if (!a.result) missing.push_back(a.node);
    if (!missing.empty()) i.missing_on = missing;
    return i;
}

api::RecipeList ControllerApi::image_recipes() {
    return first_answer(ask_workers<api::RecipeList>(
        worker_nodes(slurm_, c_), [this](const std::string& n) { return link_to(n); },
        [](api::Api& a) { return a.image_recipes(); }));
}

api::Image ControllerApi::image_build(const api::ImageBuildParams&) {
    throw images_on_workers("build");
}
api::Image ControllerApi::image_import(const api::ImageImportParams&) {
    throw images_on_workers("import");
}
api::Removed ControllerApi::image_rm(const api::NameParams&) {
    throw images_on_workers("rm");
}

namespace {

void need_shared_snapshots(const ClusterConfig& c) {
    if (c.snapshots.empty())
        throw Error(ErrorCode::usage,
                    "snapshots through a controller need a snapshot directory every worker "
                    "shares (SANDWEAVE_WEAVE_SNAPSHOTS in the cluster file; docs/weave.md)");
}

}  // namespace

SnapshotRecord ControllerApi::snapshot_create(const api::SnapshotCreateParams& p) {
    need_shared_snapshots(c_);
    Placed pl = route(p.sandbox).first;
    api::SnapshotCreateParams q = p;
    q.sandbox = pl.id;
    return on_link(pl, [&](api::Api& a) { return a.snapshot_create(q); });
}

namespace {

// Whose a snapshot is: the owner label its source sandbox carried.
std::string owner_of(const SnapshotRecord& s) {
    auto it = s.spec.labels.find(owner_label);
    return it == s.spec.labels.end() ? std::string() : it->second;
}

}  // namespace

// Every worker sees the same directory: the first worker up answers. The
// caller sees its own snapshots (an admin: all).
api::SnapshotList ControllerApi::snapshot_ls() {
    need_shared_snapshots(c_);
    const Identity& who = caller();
    for (const Node& n : worker_nodes(slurm_, c_)) {
        if (!n.up()) continue;
        api::SnapshotList all = link_to(n.name)->api().snapshot_ls();
        std::erase_if(all.snapshots,
                      [&](const SnapshotRecord& s) { return !who.sees(owner_of(s)); });
        return all;
    }
    throw Error(ErrorCode::runtime, "no worker is up in Slurm");
}

// Resolved among the caller's snapshots only, and sent on by full id, so a
// worker never resolves a name or prefix to someone else's.
std::string ControllerApi::own_snapshot(const std::string& id) {
    need_shared_snapshots(c_);
    const auto mine = snapshot_ls().snapshots;
    for (const auto& s : mine)
        if (s.id == id) return s.id;
    for (const auto& s : mine)
        if (!s.name.empty() && s.name == id) return s.id;
    const SnapshotRecord* found = nullptr;
    int matches = 0;
    for (const auto& s : mine)
        if (!id.empty() && s.id.rfind(id, 0) == 0) found = &s, ++matches;
    if (matches > 1) throw Error(ErrorCode::usage, "'" + id + "' matches more than one snapshot");
    if (!found) throw Error(ErrorCode::not_found, "no such snapshot: " + id);
    return found->id;
}

api::Removed ControllerApi::snapshot_rm(const api::IdParams& p) {
    api::IdParams q{own_snapshot(p.id)};
    for (const Node& n : worker_nodes(slurm_, c_))
        if (n.up()) return link_to(n.name)->api().snapshot_rm(q);
    throw Error(ErrorCode::runtime, "no worker is up in Slurm");
}

}  // namespace sandweave::controller
