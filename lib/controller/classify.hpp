#pragma once
// What Slurm says, decided on: the watcher's middle step (watch.cpp
// observes Slurm, classify decides, watch.cpp acts). A pure function of what
// was observed (jobs and nodes, parsed by slurm_json.hpp) and what the
// controller holds (its sandboxes and their jobs), unit-tested on recorded
// Slurm output of 22.05 and 24.11.
//
// Slurm is the failure detector and the scheduler: a sandbox is lost when
// Slurm says its node failed (down or not responding) or its job ended
// NODE_FAIL; ended when its job ended any other way; a job of this
// controller's that no sandbox holds is reconnected (it names a sandbox and
// runs) or cancelled (a create that did not finish); an array slot Slurm
// started with no create coming is ended. Jobs of other controllers (their
// comment carries another controller's id) are never touched.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/controller/slurm_json.hpp"
#include "lib/store/state.hpp"

namespace sandweave::controller {

// A running job of ours that no create holds and that never got its
// sandbox's name is cancelled this long after Slurm started it (a create
// names its job as soon as its worker answers).
inline constexpr long unnamed_grace_s = 30;
// A job Slurm no longer lists at all (it keeps an ended one for MinJobAge
// with its final state) counts as ended after this many polls in a row: a
// slurmctld that is starting answers with no jobs for a moment.
inline constexpr int missing_polls = 8;
// How often the controller tries to reconnect to a running job's sandbox
// before it leaves it alone.
inline constexpr int max_tries = 3;
// A placed sandbox whose worker daemon could not be reached max_tries times
// is tried again every this many polls (the daemon may have restarted).
inline constexpr unsigned retry_unreachable_every = 10;

// One sandbox the controller holds, as the watcher needs it.
struct HeldSandbox {
    std::string id, node;
    long job = 0;
    std::optional<SandboxState> gone;  // lost or stopped already
    bool link_down = false;            // its link's srun has ended
    int missing = 0;                   // polls in a row whose squeue did not list its job
};

struct Holdings {
    std::string controller;  // the id its jobs carry (slurm_json.hpp)
    std::string instance;    // this process's name for jobs not yet named
    std::vector<HeldSandbox> sandboxes;
    std::set<long> in_flight;   // jobs a create is making its sandbox in
    std::set<long> ending;      // jobs of sandboxes the controller removed itself
    std::map<long, int> tries;  // reconnects that failed, by job
    long now_s = 0;             // seconds since the epoch
    bool first = false;         // the controller's start: NODE_FAIL jobs are listed as lost
    bool reap = false;          // this poll also reaps the workers (reap_every)
    bool retry_unreachable =
        false;  // this poll retries links past max_tries (retry_unreachable_every)
};

struct Observation {
    std::vector<slurm::Job> jobs;
    std::vector<slurm::Node> nodes;
};

struct Decision {
    enum class Kind {
        lost,           // sandbox: its worker failed (why)
        ended,          // sandbox: its job ended (why); the worker's epilog ended it
        unlisted,       // sandbox: Slurm did not list its job; `count` polls in a row now
        reconnect,      // sandbox (job, node): a running job whose link is down or not held
        list_lost,      // sandbox (job, node): at the start, a job of ours that ended NODE_FAIL
        list_ended,     // sandbox (job, node): at the start, a job of ours that ended otherwise
        cancel,         // job: of ours, with no sandbox coming (why)
        end_array,      // array: its slots run with no create coming and none in use
        end_slot,       // array, task: this slot runs with no create coming
        forget_ending,  // job: removed by the controller, and Slurm no longer lists it
        reap,           // node: remove its sandboxes whose job Slurm no longer runs
    };
    Kind kind;
    std::string sandbox;
    long job = 0;
    std::string node;
    long array = 0, task = -1;
    int count = 0;
    std::string why;
    std::string user;  // reconnect, list_lost/list_ended: Slurm's user of the job
};

std::vector<Decision> classify(const Observation& seen, const Holdings& held);

// The jobs Slurm runs or queues (any controller's), as the workers label
// their sandboxes (slurm::job_label): a sandbox labelled with another job
// has outlived it.
std::set<std::string> live_jobs(const Observation& seen);

}  // namespace sandweave::controller
