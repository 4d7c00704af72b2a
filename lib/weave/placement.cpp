// The controller's Api: Slurm places each sandbox; its traffic goes to the
// worker Slurm chose over `srun --overlap ... sandweave serve --stdio`.
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/core/process.hpp"
#include "lib/rpc/client.hpp"
#include "lib/weave/controller.hpp"

extern char** environ;

namespace sandweave::weave {

namespace fs = std::filesystem;
using nlohmann::json;

ClusterConfig read_cluster_env(const fs::path& file) {
    std::ifstream in(file);
    if (!in) throw Error(ErrorCode::usage, "cannot read the cluster file " + file.string());
    ClusterConfig c;
    std::string line;
    const std::string state_prefix = "SANDWEAVE_WEAVE_STATE_";
    while (std::getline(in, line)) {
        if (line.rfind("export ", 0) == 0) line = line.substr(7);
        auto eq = line.find('=');
        if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
        std::string key = line.substr(0, eq), value = line.substr(eq + 1);
        if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
            value.back() == value.front())
            value = value.substr(1, value.size() - 2);
        if (key == "SLURM_CONF") c.slurm_conf = value;
        if (key == "SANDWEAVE_WEAVE_PARTITION") c.partition = value;
        if (key.rfind(state_prefix, 0) == 0) c.state_dirs[key.substr(state_prefix.size())] = value;
    }
    return c;
}

namespace {

constexpr const char* comment_prefix = "sandweave:";

// One `srun --overlap ... sandweave serve --stdio` into a sandbox's job, and
// the RpcClient speaking over it.
class WorkerLink {
  public:
    WorkerLink(const ClusterConfig& c, long job, const std::string& node) {
        std::vector<std::string> argv = {"srun",          "--jobid=" + std::to_string(job),
                                         "--overlap",     "--unbuffered",
                                         "--quiet",       "--nodes=1",
                                         "--ntasks=1",    "--nodelist=" + node,
                                         c.worker_binary, "serve",
                                         "--stdio"};
        if (auto it = c.state_dirs.find(node); it != c.state_dirs.end()) {
            argv.push_back("--state-dir");
            argv.push_back(it->second);
        }
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
            throw_errno("socketpair");
        Fd ours(sv[0]), theirs(sv[1]);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, theirs.get(), 0);
        posix_spawn_file_actions_adddup2(&fa, theirs.get(), 1);
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        sigset_t none;
        sigemptyset(&none);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
        std::vector<char*> args;
        for (auto& a : argv) args.push_back(a.data());
        args.push_back(nullptr);
        int rc = ::posix_spawnp(&pid_, "srun", &fa, &attr, args.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        if (rc != 0)
            throw Error(ErrorCode::runtime, "cannot start srun: " + std::string(strerror(rc)));
        theirs.reset();
        Fd out(::fcntl(ours.get(), F_DUPFD_CLOEXEC, 3));
        peer_ = "worker " + node + " (job " + std::to_string(job) + ")";
        try {
            client_ = std::make_unique<rpc::RpcClient>(std::move(ours), std::move(out), peer_);
        } catch (...) {
            reap();
            throw;
        }
    }
    ~WorkerLink() {
        client_.reset();  // serve sees EOF, srun ends with it
        reap();
    }
    rpc::RpcClient& api() { return *client_; }

  private:
    void reap() {
        for (int i = 0; i < 50; ++i) {
            if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
    pid_t pid_ = -1;
    std::string peer_;
    std::unique_ptr<rpc::RpcClient> client_;
};

struct Placed {
    std::string id, name, node;
    long job = 0;
    std::shared_ptr<WorkerLink> link;
};

// A Slurm command; `timeout` nullopt: as long as it takes (a pending salloc).
CommandResult slurm(const std::vector<std::string>& argv,
                    std::optional<std::chrono::milliseconds> timeout = std::chrono::seconds(30)) {
    LocalRunner r;
    Command c;
    c.argv = argv;
    c.timeout = timeout;
    return r.run(c);
}

std::string last_line(const std::string& s) {
    auto end = s.find_last_not_of("\n ");
    if (end == std::string::npos) return "";
    auto start = s.rfind('\n', end);
    return s.substr(start == std::string::npos ? 0 : start + 1,
                    end - (start == std::string::npos ? 0 : start + 1) + 1);
}

class ControllerApi final : public api::Api {
  public:
    explicit ControllerApi(ClusterConfig c) : c_(std::move(c)) {
        if (!c_.slurm_conf.empty()) ::setenv("SLURM_CONF", c_.slurm_conf.c_str(), 1);
        rebuild();
    }

    // The map from Slurm: every job with our comment, running ones reconnected.
    void rebuild() {
        for (const json& j : squeue()) {
            std::string comment = j.value("comment", std::string());
            if (comment.rfind(comment_prefix, 0) != 0) continue;
            std::string id = comment.substr(std::string(comment_prefix).size());
            if (id.empty() || j.value("job_state", std::string()) != "RUNNING") continue;
            Placed p;
            p.id = id;
            p.job = j.value("job_id", 0L);
            p.node = j.value("nodes", std::string());
            try {
                p.link = std::make_shared<WorkerLink>(c_, p.job, p.node);
                p.name = p.link->api().inspect({id}).record.name;
                log().info("controller: sandbox " + id + " on " + p.node + " (job " +
                           std::to_string(p.job) + ") is back");
                std::lock_guard<std::mutex> g(mu_);
                placed_[id] = std::move(p);
            } catch (const Error& e) {
                log().warn("controller: job " + std::to_string(p.job) + " (sandbox " + id +
                           "): " + e.what());
            }
        }
    }

    api::VersionResult version() override {
        api::VersionResult v;
        v.version = SANDWEAVE_VERSION;
        return v;
    }

    SandboxView create(const api::CreateParams& p) override {
        std::vector<std::string> argv = {
            "salloc",     "--no-shell",           "--gres=sbx:1",
            "--ntasks=1", "--job-name=sandweave", std::string("--comment=") + comment_prefix};
        if (p.ttl_ms && *p.ttl_ms > 0)
            argv.push_back("--time=" + std::to_string((*p.ttl_ms + 59999) / 60000));
        if (!c_.partition.empty()) argv.push_back("--partition=" + c_.partition);
        CommandResult r = slurm(argv, std::nullopt);
        long job = 0;
        auto at = r.err.find("Granted job allocation ");
        if (!r.ok() || at == std::string::npos)
            throw Error(ErrorCode::runtime, "Slurm gave no allocation: " + last_line(r.err));
        job = std::stol(r.err.substr(at + 23));
        try {
            std::string node = node_of(job);
            auto link = std::make_shared<WorkerLink>(c_, job, node);
            SandboxView v = link->api().create(p);
            // The job takes the sandbox's id: a restarted controller pairs them up.
            slurm({"scontrol", "update", "JobId=" + std::to_string(job), "Name=" + v.record.id,
                   std::string("Comment=") + comment_prefix + v.record.id});
            v.worker = node;
            std::lock_guard<std::mutex> g(mu_);
            placed_[v.record.id] = Placed{v.record.id, v.record.name, node, job, link};
            return v;
        } catch (...) {
            slurm({"scancel", std::to_string(job)});
            throw;
        }
    }

    api::RunResult run(const api::RunParams& p, const api::RunIo& io) override {
        Placed pl = route(p.id).first;
        api::RunParams rp = p;
        rp.id = pl.id;
        return pl.link->api().run(rp, io);
    }
    api::ProcessList ps(const api::IdParams& p) override { return via(p, &api::Api::ps); }
    api::KillResult kill(const api::KillParams& p) override {
        Placed pl = route(p.id).first;
        api::KillParams k = p;
        k.id = pl.id;
        return pl.link->api().kill(k);
    }
    api::RunResult wait(const api::HandleParams& p) override {
        Placed pl = route(p.id).first;
        api::HandleParams h = p;
        h.id = pl.id;
        return pl.link->api().wait(h);
    }

    api::SandboxList ls(const api::LsParams& p) override {
        std::map<std::string, std::shared_ptr<WorkerLink>> by_node;
        std::map<std::string, std::string> node_of_id;
        {
            std::lock_guard<std::mutex> g(mu_);
            for (const auto& [id, pl] : placed_) {
                by_node.emplace(pl.node, pl.link);
                node_of_id[id] = pl.node;
            }
        }
        api::SandboxList out;
        for (const auto& [node, link] : by_node) {
            for (auto& v : link->api().ls(p).sandboxes) {
                auto it = node_of_id.find(v.record.id);
                if (it == node_of_id.end() || it->second != node) continue;
                v.worker = node;
                out.sandboxes.push_back(std::move(v));
            }
        }
        if (p.filter.empty()) {
            for (const json& j : squeue()) {
                if (j.value("comment", std::string()).rfind(comment_prefix, 0) != 0 ||
                    j.value("job_state", std::string()) != "PENDING")
                    continue;
                SandboxView v;
                v.record.id = "job-" + std::to_string(j.value("job_id", 0L));
                v.record.spec.template_name = "-";
                v.live = SandboxState::pending;
                v.worker = "-";
                out.sandboxes.push_back(std::move(v));
            }
        }
        return out;
    }

    SandboxView inspect(const api::IdParams& p) override {
        auto [pl, q] = route(p.id);
        SandboxView v = pl.link->api().inspect(q);
        v.worker = pl.node;
        return v;
    }
    SandboxView terminate(const api::IdParams& p) override {
        auto [pl, q] = route(p.id);
        SandboxView v = pl.link->api().terminate(q);
        v.worker = pl.node;
        return v;
    }
    api::Removed rm(const api::IdParams& p) override {
        auto [pl, q] = route(p.id);
        api::Removed r = pl.link->api().rm(q);
        {
            std::lock_guard<std::mutex> g(mu_);
            placed_.erase(pl.id);
        }
        pl.link.reset();
        slurm({"scancel", std::to_string(pl.job)});
        return r;
    }
    api::RemovedList prune() override {
        api::RemovedList out;
        for (const auto& v : ls({}).sandboxes)
            if (v.live == SandboxState::stopped || v.live == SandboxState::failed)
                out.removed.push_back(rm({v.record.id}).removed);
        return out;
    }
    audit::Status audit_export(const api::AuditExportParams&) override {
        throw Error(ErrorCode::usage,
                    "audit.export writes on the controller's host; a client fetches the log with "
                    "audit.fetch");
    }
    audit::Status audit_fetch(const api::IdParams& p,
                              const std::function<void(std::string_view)>& on_data) override {
        auto [pl, q] = route(p.id);
        return pl.link->api().audit_fetch(q, on_data);
    }
    audit::Status audit_status(const api::IdParams& p) override {
        return via(p, &api::Api::audit_status);
    }
    api::Empty cp_out(const api::CpOutParams& p, const api::CpIo& io) override {
        Placed pl = route(p.id).first;
        api::CpOutParams c = p;
        c.id = pl.id;
        return pl.link->api().cp_out(c, io);
    }
    api::Empty cp_in(const api::CpInParams& p, const api::CpIo& io) override {
        Placed pl = route(p.id).first;
        api::CpInParams c = p;
        c.id = pl.id;
        return pl.link->api().cp_in(c, io);
    }

    // Not routed yet (docs/weave.md says what comes next).
    SnapshotRecord snapshot_create(const api::SnapshotCreateParams&) override {
        throw later("snapshot create");
    }
    api::SnapshotList snapshot_ls() override { throw later("snapshot ls"); }
    api::Removed snapshot_rm(const api::IdParams&) override { throw later("snapshot rm"); }
    PoolInfo pool_create(const api::PoolCreateParams&) override { throw later("pools"); }
    SandboxView pool_acquire(const api::NameParams&) override { throw later("pools"); }
    api::PoolList pool_ls() override { throw later("pools"); }
    PoolInfo pool_resize(const api::PoolResizeParams&) override { throw later("pools"); }
    api::Removed pool_rm(const api::NameParams&) override { throw later("pools"); }
    api::TemplateList template_ls() override { throw later("template ls"); }
    api::TemplateShowResult template_show(const api::TemplateShowParams&) override {
        throw later("template show");
    }
    api::TemplateValidateResult template_validate(const api::TemplateValidateParams&) override {
        throw later("template validate");
    }
    api::Image image_build(const api::ImageBuildParams&) override { throw later("images"); }
    api::ImageList image_ls() override { throw later("images"); }
    api::RecipeList image_recipes() override { throw later("images"); }
    api::Removed image_rm(const api::NameParams&) override { throw later("images"); }
    api::Image image_import(const api::ImageImportParams&) override { throw later("images"); }
    api::Image image_inspect(const api::NameParams&) override { throw later("images"); }
    api::DoctorResult doctor() override { throw later("doctor"); }
    api::ScreenshotResult desktop_screenshot(
        const api::IdParams&, const std::function<void(std::string_view)>&) override {
        throw later("desktops");
    }
    api::Empty desktop_click(const api::PointerParams&) override { throw later("desktops"); }
    api::Empty desktop_move(const api::PointerParams&) override { throw later("desktops"); }
    api::Empty desktop_type(const api::TypeParams&) override { throw later("desktops"); }
    api::Empty desktop_key(const api::KeyParams&) override { throw later("desktops"); }

  private:
    static Error later(const std::string& what) {
        return Error(ErrorCode::runtime, what + " through a Weave controller is not built yet");
    }

    template <class R>
    R via(const api::IdParams& p, R (api::Api::*fn)(const api::IdParams&)) {
        auto [pl, q] = route(p.id);
        return ((pl.link->api()).*fn)(q);
    }

    // The sandbox an id names: its id, its name, or a unique prefix of its id.
    std::pair<Placed, api::IdParams> route(const std::string& id) {
        std::lock_guard<std::mutex> g(mu_);
        const Placed* found = nullptr;
        if (auto it = placed_.find(id); it != placed_.end()) found = &it->second;
        for (const auto& [k, pl] : placed_)
            if (!found && !pl.name.empty() && pl.name == id) found = &pl;
        if (!found && !id.empty()) {
            int matches = 0;
            for (const auto& [k, pl] : placed_)
                if (k.rfind(id, 0) == 0) found = &pl, ++matches;
            if (matches > 1)
                throw Error(ErrorCode::usage, "'" + id + "' matches more than one sandbox");
        }
        if (!found) throw Error(ErrorCode::not_found, "no sandbox '" + id + "' on this controller");
        return {*found, api::IdParams{found->id}};
    }

    std::string node_of(long job) {
        CommandResult r = slurm({"scontrol", "show", "job", "-o", std::to_string(job)});
        std::istringstream words(r.out);
        std::string w;
        while (words >> w)
            if (w.rfind("NodeList=", 0) == 0 && w.size() > 9) return w.substr(9);
        throw Error(ErrorCode::runtime, "Slurm did not say where job " + std::to_string(job) +
                                            " runs: " + last_line(r.err));
    }

    std::vector<json> squeue() {
        CommandResult r = slurm({"squeue", "--json"});
        if (!r.ok()) throw Error(ErrorCode::runtime, "squeue: " + r.describe());
        try {
            json j = parse_untrusted_json(r.out);
            return j.value("jobs", std::vector<json>{});
        } catch (const std::exception& e) {
            throw Error(ErrorCode::runtime, std::string("squeue --json: ") + e.what());
        }
    }

    ClusterConfig c_;
    std::mutex mu_;
    std::map<std::string, Placed> placed_;
};

}  // namespace

std::unique_ptr<api::Api> make_controller_api(const ClusterConfig& cluster) {
    return std::make_unique<ControllerApi>(cluster);
}

}  // namespace sandweave::weave
