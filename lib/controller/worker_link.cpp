// A sandbox's connection to its worker through Slurm (lib/controller/worker_link.hpp).
#include "lib/controller/worker_link.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/process.hpp"
#include "lib/rpc/socket_relay.hpp"

namespace sandweave::controller {

WorkerLink::WorkerLink(const ClusterConfig& c, long job, const std::string& node,
                       const std::string& user) {
    open(c, node, {"--jobid=" + std::to_string(job), "--overlap"},
         "worker " + node + " (job " + std::to_string(job) + ")", user);
}

WorkerLink::WorkerLink(const ClusterConfig& c, const std::string& node) {
    // A step in an allocation of its own (one CPU, no sandbox slot) that
    // ends with the connection.
    std::vector<std::string> own = {"--job-name=sandweave-query", "--time=5"};
    if (!c.partition.empty()) own.push_back("--partition=" + c.partition);
    open(c, node, own, "worker " + node, "");
}

void WorkerLink::open(const ClusterConfig& c, const std::string& node,
                      const std::vector<std::string>& srun_options, const std::string& peer,
                      const std::string& user) {
    std::vector<std::string> argv = {"srun"};
    argv.insert(argv.end(), srun_options.begin(), srun_options.end());
    for (const char* a : {"--unbuffered", "--quiet", "--nodes=1", "--ntasks=1"}) argv.push_back(a);
    argv.push_back("--nodelist=" + node);
    // The step only forwards bytes to the node's worker daemon, which owns
    // the sandboxes: the step's end (the controller gone, a killed srun,
    // the job's end) loses nothing but this connection.
    for (const std::string& a : {c.worker_binary, std::string(rpc::relay_verb),
                                 std::string("--socket"), worker_socket(c, node)})
        argv.push_back(a);
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw_errno("socketpair");
    Fd ours(sv[0]), theirs(sv[1]);
    Command cmd;
    cmd.argv = std::move(argv);
    cmd.in = cmd.out = cmd.err = Command::Stdio::inherit;
    cmd.pass_fds = {{theirs.get(), 0}, {theirs.get(), 1}};
    cmd.run_as = run_as_other(user);
    try {
        pid_ = start_command(cmd);
    } catch (const Error& e) {
        throw Error(ErrorCode::runtime, std::string("cannot start srun: ") + e.what());
    }
    theirs.reset();
    Fd out(::fcntl(ours.get(), F_DUPFD_CLOEXEC, 3));
    peer_ = peer;
    try {
        client_ = std::make_unique<rpc::RpcClient>(std::move(ours), std::move(out), peer_);
    } catch (...) {
        reap();
        throw;
    }
}

WorkerLink::~WorkerLink() {
    client_.reset();  // serve sees EOF, srun ends with it
    reap();
}

bool WorkerLink::exited() {
    std::lock_guard<std::mutex> g(mu_);
    if (!reaped_ && ::waitpid(pid_, nullptr, WNOHANG) == pid_) reaped_ = true;
    return reaped_;
}

void WorkerLink::reap() {
    std::lock_guard<std::mutex> g(mu_);
    if (reaped_) return;
    reaped_ = true;
    for (int i = 0; i < 50; ++i) {
        if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
}

}  // namespace sandweave::controller
