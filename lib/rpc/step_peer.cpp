// Admitting a Slurm job step's relay to a worker daemon (lib/rpc/step_peer.hpp).
#include "lib/rpc/step_peer.hpp"

#include <pwd.h>

#include <sstream>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/store/state.hpp"

namespace sandweave::rpc {

namespace {

// The label a worker's sandbox carries naming its Slurm job (the controller
// sets it, the epilog ends the job's sandboxes by it).
constexpr const char* job_label = "slurm_job";

// "uid_2001" with prefix "uid_" -> 2001; nullopt unless all digits follow.
std::optional<long> number_after(const std::string& part, const std::string& prefix) {
    if (part.size() <= prefix.size() || part.compare(0, prefix.size(), prefix) != 0 ||
        part.size() - prefix.size() > 10)
        return std::nullopt;
    long n = 0;
    for (std::size_t i = prefix.size(); i < part.size(); ++i) {
        if (part[i] < '0' || part[i] > '9') return std::nullopt;
        n = n * 10 + (part[i] - '0');
    }
    return n;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string part;
    std::istringstream in(s);
    while (std::getline(in, part, sep)) out.push_back(part);
    return out;
}

std::string user_name(uid_t uid) {
    passwd pw{}, *res = nullptr;
    std::string buf(16384, '\0');
    if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &res) != 0 || !res) return {};
    return res->pw_name;
}

[[noreturn]] void refuse(const std::string& what) {
    throw Error(ErrorCode::usage, "a Slurm job step's connection may not " + what);
}

// `base` limited to the sandboxes of one Slurm job.
class JobScopedApi final : public api::Api {
  public:
    JobScopedApi(api::Api& base, StateStore& store, long job, std::string user)
        : base_(base), store_(store), job_(std::to_string(job)), user_(std::move(user)) {}

    api::VersionResult version() override { return base_.version(); }

    SandboxView create(const api::CreateParams& p) override {
        api::CreateParams q = p;
        if (q.from_snapshot) own_snapshot(*q.from_snapshot);
        q.labels[job_label] = job_;
        return base_.create(q);
    }
    api::RunResult run(const api::RunParams& p, const api::RunIo& io) override {
        return base_.run(mine(p), io);
    }
    api::ProcessList ps(const api::IdParams& p) override { return base_.ps(mine(p)); }
    api::KillResult kill(const api::KillParams& p) override { return base_.kill(mine(p)); }
    api::RunResult wait(const api::HandleParams& p) override { return base_.wait(mine(p)); }
    api::SandboxList ls(const api::LsParams& p) override {
        api::LsParams q = p;
        q.filter.push_back(std::string("label=") + job_label + "=" + job_);
        return base_.ls(q);
    }
    SandboxView inspect(const api::IdParams& p) override { return base_.inspect(mine(p)); }
    SandboxView terminate(const api::IdParams& p) override { return base_.terminate(mine(p)); }
    api::Removed rm(const api::IdParams& p) override { return base_.rm(mine(p)); }
    api::RemovedList prune() override { refuse("prune"); }

    // Written on the worker's host, by root: only for root's own clients.
    audit::Status audit_export(const api::AuditExportParams&) override {
        refuse("export an audit log to a path on the worker (audit.fetch streams it)");
    }
    audit::Status audit_fetch(const api::IdParams& p,
                              const std::function<void(std::string_view)>& on_data) override {
        return base_.audit_fetch(mine(p), on_data);
    }
    audit::Status audit_status(const api::IdParams& p) override {
        return base_.audit_status(mine(p));
    }

    SnapshotRecord snapshot_create(const api::SnapshotCreateParams& p) override {
        api::SnapshotCreateParams q = p;
        q.sandbox = own(p.sandbox);
        return base_.snapshot_create(q);
    }
    api::SnapshotList snapshot_ls() override { refuse("list snapshots"); }
    api::Removed snapshot_rm(const api::IdParams&) override { refuse("remove snapshots"); }

    PoolInfo pool_create(const api::PoolCreateParams&) override { refuse("make pools"); }
    SandboxView pool_acquire(const api::PoolAcquireParams&) override { refuse("use pools"); }
    api::PoolList pool_ls() override { refuse("list pools"); }
    PoolInfo pool_resize(const api::PoolResizeParams&) override { refuse("resize pools"); }
    api::Removed pool_rm(const api::NameParams&) override { refuse("remove pools"); }

    api::TemplateList template_ls() override { return base_.template_ls(); }
    api::TemplateShowResult template_show(const api::TemplateShowParams& p) override {
        return base_.template_show(p);
    }
    api::TemplateValidateResult template_validate(const api::TemplateValidateParams&) override {
        refuse("validate a file on the worker");
    }
    api::Image image_build(const api::ImageBuildParams&) override { refuse("build images"); }
    api::ImageList image_ls() override { return base_.image_ls(); }
    api::RecipeList image_recipes() override { return base_.image_recipes(); }
    api::Removed image_rm(const api::NameParams&) override { refuse("remove images"); }
    api::Image image_import(const api::ImageImportParams&) override { refuse("import images"); }
    api::Image image_inspect(const api::NameParams& p) override { return base_.image_inspect(p); }
    api::DoctorResult doctor() override { return base_.doctor(); }

    api::ScreenshotResult desktop_screenshot(
        const api::IdParams& p, const std::function<void(std::string_view)>& on_data) override {
        return base_.desktop_screenshot(mine(p), on_data);
    }
    api::Empty desktop_click(const api::PointerParams& p) override {
        return base_.desktop_click(mine(p));
    }
    api::Empty desktop_move(const api::PointerParams& p) override {
        return base_.desktop_move(mine(p));
    }
    api::Empty desktop_type(const api::TypeParams& p) override {
        return base_.desktop_type(mine(p));
    }
    api::Empty desktop_key(const api::KeyParams& p) override { return base_.desktop_key(mine(p)); }
    api::Empty cp_out(const api::CpOutParams& p, const api::CpIo& io) override {
        return base_.cp_out(mine(p), io);
    }
    api::Empty cp_in(const api::CpInParams& p, const api::CpIo& io) override {
        return base_.cp_in(mine(p), io);
    }
    bool offers(const std::string& method) const override { return base_.offers(method); }

  private:
    // The id of sandbox `ref` when it is this job's; otherwise the answer
    // for a sandbox that does not exist (nothing of another's revealed).
    std::string own(const std::string& ref) const {
        auto none = [&] { return Error(ErrorCode::not_found, "no such sandbox: " + ref); };
        std::string id;
        try {
            id = store_.resolve_id(ref);
        } catch (const Error&) {
            throw none();
        }
        auto r = store_.try_load(id);
        if (!r) throw none();
        auto l = r->spec.labels.find(job_label);
        if (l == r->spec.labels.end() || l->second != job_) throw none();
        return id;
    }
    template <class P>
    P mine(const P& p) const {
        P q = p;
        q.id = own(p.id);
        return q;
    }
    // A snapshot is restored only into a sandbox of its owner's (the
    // controller's owner label, which its snapshots carry).
    void own_snapshot(const std::string& ref) {
        for (const SnapshotRecord& s : base_.snapshot_ls().snapshots) {
            if (s.id != ref && s.name != ref) continue;
            auto o = s.spec.labels.find(weave_owner_label);
            if (o != s.spec.labels.end() && !user_.empty() && o->second == user_) return;
        }
        throw Error(ErrorCode::not_found, "no such snapshot: " + ref);
    }

    api::Api& base_;
    StateStore& store_;
    std::string job_, user_;
};

}  // namespace

std::optional<SlurmStep> parse_slurm_cgroup(const std::string& proc_pid_cgroup) {
    for (const std::string& line : split(proc_pid_cgroup, '\n')) {
        // hierarchy-ID:controller-list:path
        auto first = line.find(':');
        auto second = first == std::string::npos ? first : line.find(':', first + 1);
        if (second == std::string::npos) continue;
        auto controllers = split(line.substr(first + 1, second - first - 1), ',');
        bool freezer = false;
        for (const auto& c : controllers) freezer = freezer || c == "freezer";
        if (!freezer) continue;
        auto parts = split(line.substr(second + 1), '/');
        for (std::size_t i = 1; i + 2 < parts.size(); ++i) {
            if (parts[i - 1].compare(0, 5, "slurm") != 0) continue;
            auto uid = number_after(parts[i], "uid_");
            auto job = number_after(parts[i + 1], "job_");
            const std::string& step = parts[i + 2];
            if (!uid || !job || *job == 0 || step.size() <= 5 || step.compare(0, 5, "step_") != 0)
                continue;
            return SlurmStep{static_cast<uid_t>(*uid), *job, step.substr(5)};
        }
        return std::nullopt;  // the freezer line names no step
    }
    return std::nullopt;
}

std::optional<SlurmStep> slurm_step_of(pid_t pid) {
    std::string text;
    try {
        text = read_file("/proc/" + std::to_string(pid) + "/cgroup", 1u << 16);
    } catch (const Error&) {
        return std::nullopt;
    }
    return parse_slurm_cgroup(text);
}

std::unique_ptr<api::Api> job_scoped(api::Api& base, StateStore& store, long job,
                                     const std::string& user) {
    return std::make_unique<JobScopedApi>(base, store, job, user);
}

std::unique_ptr<api::Api> admit_step_peer(api::Api& base, StateStore& store, pid_t pid, uid_t uid) {
    auto step = slurm_step_of(pid);
    if (!step)
        throw Error(ErrorCode::usage, "uid " + std::to_string(uid) +
                                          " may not use this worker daemon: only root, its own "
                                          "uid and a Slurm job step of the uid's own job may");
    if (step->uid != uid)
        throw Error(ErrorCode::usage, "uid " + std::to_string(uid) +
                                          " may not use this worker daemon: its process runs in a "
                                          "Slurm job of uid " +
                                          std::to_string(step->uid));
    return job_scoped(base, store, step->job, user_name(uid));
}

}  // namespace sandweave::rpc
