#pragma once
// The API's wire types: for each operation of docs/protocol.md ("noun.verb"),
// its request (params) and its result, each listing its fields once for the
// JSON codec of lib/api/fields.hpp (strict when decoding untrusted params,
// tolerant of unknown fields when a client decodes a worker's result). Three
// library records travel as they are (a sandbox's view, a snapshot, a pool)
// with the same JSON as their state files and --json output (codecs.cpp).
// RunIo and CpIo are not JSON: they bind a call's streams in-process.
//
// Nothing here runs an operation: the interface is lib/api/api.hpp, the
// worker's implementation lib/api/local.hpp.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/api/fields.hpp"
#include "lib/audit/audit.hpp"
#include "lib/core/process.hpp"
#include "lib/options/create_options.hpp"
#include "lib/sandbox/records.hpp"

namespace sandweave::api {

inline constexpr int protocol_version = 1;

// JSON of the library types the API carries as they are.
template <>
struct Codec<SandboxView> {
    static json encode(const SandboxView& v);
    static SandboxView decode(const json& j, const std::string& where);
};
template <>
struct Codec<audit::Status> {
    static json encode(const audit::Status& s);
    static audit::Status decode(const json& j, const std::string& where);
};
template <>
struct Codec<SnapshotRecord> {
    static json encode(const SnapshotRecord& s);
    static SnapshotRecord decode(const json& j, const std::string& where);
};
template <>
struct Codec<PoolInfo> {
    static json encode(const PoolInfo& p);
    static PoolInfo decode(const json& j, const std::string& where);
};

// ---- shared shapes ---------------------------------------------------------

struct Empty {
    template <class V>
    void fields(V&) {}
};

struct IdParams {
    std::string id;
    template <class V>
    void fields(V& v) {
        v.required("id", id);
    }
};

struct NameParams {
    std::string name;
    template <class V>
    void fields(V& v) {
        v.required("name", name);
    }
};

struct Removed {
    std::string removed;
    template <class V>
    void fields(V& v) {
        v.required("removed", removed);
    }
};

struct RemovedList {
    std::vector<std::string> removed;
    template <class V>
    void fields(V& v) {
        v.required("removed", removed);
    }
};

// ---- hello, version --------------------------------------------------------

struct HelloParams {
    int protocol = 0;
    std::optional<std::string> client;
    std::vector<std::string> capabilities;
    template <class V>
    void fields(V& v) {
        v.required("protocol", protocol);
        v.optional("client", client);
        v.optional("capabilities", capabilities);
    }
};

struct HelloResult {
    int protocol = protocol_version;
    std::string server;
    std::vector<std::string> capabilities;
    std::vector<std::string> methods;
    // The create options it understands (lib/options/create_options.hpp);
    // absent from an older server.
    std::optional<std::vector<std::string>> create_options;
    template <class V>
    void fields(V& v) {
        v.required("protocol", protocol);
        v.required("server", server);
        v.required("capabilities", capabilities);
        v.required("methods", methods);
        v.optional("create_options", create_options);
    }
};

struct RuntimeInfo {
    std::string path;
    std::string version;
    // The patches built into it (runtime/build-runsc.sh's manifest), when
    // known; else patches_detail says why they are not.
    std::optional<std::vector<std::string>> patches;
    std::optional<std::string> patches_detail;
    template <class V>
    void fields(V& v) {
        v.required("path", path);
        v.required("version", version);
        v.optional("patches", patches);
        v.optional("patches_detail", patches_detail);
    }
};

struct VersionResult {
    std::string version;
    int protocol = protocol_version;
    std::optional<RuntimeInfo> runtime;
    std::optional<std::string> revision;  // git revision of the build ("unknown" from a tarball)
    template <class V>
    void fields(V& v) {
        v.required("version", version);
        v.optional("revision", revision);
        v.required("protocol", protocol);
        v.optional("runtime", runtime);
    }
};

// ---- sandboxes -------------------------------------------------------------

// sandbox.create, and the create options of pool.create.
struct CreateParams {
    std::optional<std::string> template_ref;  // default "base"
    std::optional<std::string> from_snapshot;
    std::optional<int> hidepid;
    std::optional<bool> audit;
    std::optional<std::string> user;
    std::optional<std::string> name;
    std::map<std::string, std::string> labels;
    // Set by a client that resolved a template file itself and sends the
    // result inline: where it came from, shown as the template's name.
    std::optional<std::string> template_source;
    // Lifetime (lib/sandbox/lifetime.hpp), overriding the template's.
    std::optional<std::int64_t> ttl_ms;
    std::optional<std::int64_t> idle_timeout_ms;
    // Made as an idle member of this pool, handed out later by pool.acquire
    // with its id: a Weave controller's pool, whose members each live in a
    // Slurm allocation of their own (the worker keeps no pool record).
    std::optional<std::string> pool;
    // Resources, overriding the template's (through a controller also the
    // Slurm job's --cpus-per-task and --mem).
    std::optional<double> cpus;
    std::optional<std::uint64_t> memory;  // bytes
    // The network (lib/options/network.hpp): "none" whatever the template says,
    // or destinations added to the template's egress policy.
    std::optional<std::string> network;
    std::optional<std::vector<std::string>> allow, deny;
    // Guest TCP ports published on host loopback ports: "GUEST" or
    // "HOST:GUEST" (lib/options/options.hpp).
    std::optional<std::vector<std::string>> publish;
    // Through a controller: made in slot `slot` (0-based) of the reservation
    // `reservation` (batch.reserve: a Slurm job array) instead of an
    // allocation of its own; waits while Slurm keeps that slot pending.
    std::optional<std::string> reservation;
    std::optional<std::int64_t> slot;
    template <class V>
    void fields(V& v) {
        v.optional("template", template_ref);
        v.optional("reservation", reservation);
        v.optional("slot", slot);
        v.optional("cpus", cpus);
        v.optional("memory", memory);
        v.optional("network", network);
        v.optional("allow", allow);
        v.optional("deny", deny);
        v.optional("publish", publish);
        v.optional("template_source", template_source);
        v.optional("pool", pool);
        v.optional("ttl_ms", ttl_ms);
        v.optional("idle_timeout_ms", idle_timeout_ms);
        v.optional("from_snapshot", from_snapshot);
        v.optional("hidepid", hidepid);
        v.optional("audit", audit);
        v.optional("user", user);
        v.optional("name", name);
        v.optional("labels", labels);
    }
};

struct RunParams {
    std::string id;
    // docker run's rule: the command is the sandbox's entrypoint followed by
    // argv, or by its cmd when argv is empty; `entrypoint` replaces the
    // sandbox's own (and drops its cmd), [] runs argv as it is
    // (capability "run.entrypoint"; command_line in lib/options/options.hpp).
    std::vector<std::string> argv;
    std::optional<std::vector<std::string>> entrypoint;
    std::optional<std::string> user;
    std::optional<std::string> cwd;
    std::vector<std::string> env;
    std::optional<std::int64_t> timeout_ms;
    bool stdin = false;   // the client streams stdin; else the command reads /dev/null
    bool tty = false;     // a pty in the guest (needs the guest agent)
    bool detach = false;  // start it and answer with its handle at once
    // Instead of starting a command: the kept output of detached command
    // `attach` (argv empty), then with `follow` its live output until it ends.
    std::optional<std::int64_t> attach;
    bool follow = false;
    // With tty: the client terminal's size (run.resize follows it).
    std::optional<std::int64_t> rows, cols;
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.optional("argv", argv);
        v.optional("entrypoint", entrypoint);
        v.optional("user", user);
        v.optional("cwd", cwd);
        v.optional("env", env);
        v.optional("timeout_ms", timeout_ms);
        v.optional("stdin", stdin);
        v.optional("tty", tty);
        v.optional("detach", detach);
        v.optional("attach", attach);
        v.optional("follow", follow);
        v.optional("rows", rows);
        v.optional("cols", cols);
    }
};

struct RunResult {
    int exit_code = 125;
    bool timed_out = false;
    std::optional<std::string> message;
    std::optional<std::int64_t> handle;  // detach: the command's handle
    std::optional<std::int64_t> pid;     // detach: its pid in the guest
    bool running = false;                // attach without follow: it still runs
    template <class V>
    void fields(V& v) {
        v.required("exit_code", exit_code);
        v.required("timed_out", timed_out);
        v.optional("message", message);
        v.optional("handle", handle);
        v.optional("pid", pid);
        v.optional("running", running);
    }
};

// sandbox.ps: what sandweave started in a sandbox through its agent.
struct ProcessInfo {
    std::int64_t handle = 0;
    std::int64_t pid = 0;
    std::string user;
    std::string command;
    std::string state;  // running | exited
    bool detached = false;
    std::string started_at;
    std::optional<std::int64_t> exit_code;
    template <class V>
    void fields(V& v) {
        v.required("handle", handle);
        v.required("pid", pid);
        v.required("user", user);
        v.required("command", command);
        v.required("state", state);
        v.required("detached", detached);
        v.required("started_at", started_at);
        v.optional("exit_code", exit_code);
    }
};

struct ProcessList {
    std::vector<ProcessInfo> processes;
    template <class V>
    void fields(V& v) {
        v.required("processes", processes);
    }
};

struct HandleParams {
    std::string id;
    std::int64_t handle = 0;
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.required("handle", handle);
    }
};

struct KillParams {
    std::string id;
    std::int64_t handle = 0;
    json signal = "TERM";  // a name or a number (parse_signal)
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.required("handle", handle);
        v.optional("signal", signal);
    }
};

// A signal as params give it (KillParams::signal, run.signal): "TERM",
// "SIGTERM" or 15 -> 15; throws Error(usage) for anything else. A client
// checks with it before connecting (lib/api/methods.cpp).
int parse_signal(const json& sig);

struct KillResult {
    bool running = false;  // it had not ended when the signal went out
    template <class V>
    void fields(V& v) {
        v.required("running", running);
    }
};

// The streams a run is bound to: the CLI gives its own descriptors, the server
// pipes that it relays as protocol messages. See AttachOptions.
struct RunIo {
    int stdin_fd = -1;  // -1: the command's stdin is empty
    OutputSink out;
    OutputSink err;
    bool forward_own_signals = false;
    RunControl* control = nullptr;
};

// ---- sandbox.cp_in / sandbox.cp_out: sandweave cp -------------------------
// The data is a copy stream (wire/copy.h): the client turns local files or a
// tar into one and back (copy() in lib/api/api.hpp); the worker's guest agent
// does the file work in the sandbox.

struct CpOutParams {
    std::string id;
    std::string path;                 // absolute, in the guest
    std::optional<std::string> user;  // UID[:GID] reading it; root by default
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.required("path", path);
        v.optional("user", user);
    }
};

struct CpInParams {
    std::string id;
    std::string path;                 // the destination, absolute, in the guest
    std::string name;                 // the copy's name when path is a directory
    bool contents = false;            // merge the root directory's contents into path
    std::optional<std::string> user;  // UID[:GID] writing it; root by default
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.required("path", path);
        v.optional("name", name);
        v.optional("contents", contents);
        v.optional("user", user);
    }
};

// Where a copy's stream goes or comes from on the worker's caller.
struct CpIo {
    OutputSink out;  // cp_out: the stream
    int in_fd = -1;  // cp_in: the stream, read to its end
    bool forward_own_signals = false;
    RunControl* control = nullptr;  // cancel: stop the copy
};

// sandbox.ls: every term must hold (lib/sandbox/filter.hpp), e.g.
// ["label=team=a", "state=running", "older-than=2h"].
struct LsParams {
    std::vector<std::string> filter;
    template <class V>
    void fields(V& v) {
        v.optional("filter", filter);
    }
};

struct SandboxList {
    std::vector<SandboxView> sandboxes;
    template <class V>
    void fields(V& v) {
        v.required("sandboxes", sandboxes);
    }
};

// ---- audit -----------------------------------------------------------------

// sandbox.finish: an episode's end in one call.
struct FinishParams {
    std::string id;
    // Where the worker writes the finished audit log and its sidecar.
    std::optional<std::string> audit_path;
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.optional("audit_path", audit_path);
    }
};

struct Finished {
    std::string removed;
    std::optional<audit::Status> audit;  // with audit_path: the export's status
    template <class V>
    void fields(V& v) {
        v.required("removed", removed);
        v.optional("audit", audit);
    }
};

struct AuditExportParams {
    std::string id;
    std::string path;
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.required("path", path);
    }
};

// ---- snapshots -------------------------------------------------------------

struct SnapshotCreateParams {
    std::string sandbox;
    std::optional<std::string> kind;  // fs | memory | auto (default)
    std::optional<std::string> name;
    template <class V>
    void fields(V& v) {
        v.required("sandbox", sandbox);
        v.optional("kind", kind);
        v.optional("name", name);
    }
};

struct SnapshotList {
    std::vector<SnapshotRecord> snapshots;
    template <class V>
    void fields(V& v) {
        v.required("snapshots", snapshots);
    }
};

// ---- pools -----------------------------------------------------------------

// `name` is the pool's: its members get none, so the create options are
// flattened into the params object without theirs.
struct PoolCreateParams {
    std::string name;
    int size = 0;
    CreateParams options;
    template <class V>
    void fields(V& v) {
        v.required("name", name);
        v.required("size", size);
        v.optional("template", options.template_ref);
        v.optional("from_snapshot", options.from_snapshot);
        v.optional("hidepid", options.hidepid);
        v.optional("audit", options.audit);
        v.optional("user", options.user);
        v.optional("labels", options.labels);
        v.optional("template_source", options.template_source);
        v.optional("ttl_ms", options.ttl_ms);
        v.optional("idle_timeout_ms", options.idle_timeout_ms);
        v.optional("network", options.network);
        v.optional("allow", options.allow);
        v.optional("deny", options.deny);
    }
};

// pool.acquire: `id` hands out that idle member (the controller's pick
// among members Slurm placed); without it the worker picks one.
struct PoolAcquireParams {
    std::string name;
    std::optional<std::string> id = {};
    template <class V>
    void fields(V& v) {
        v.required("name", name);
        v.optional("id", id);
    }
};

struct PoolResizeParams {
    std::string name;
    int size = 0;
    template <class V>
    void fields(V& v) {
        v.required("name", name);
        v.required("size", size);
    }
};

// batch.reserve (a controller's): `count` sandbox slots as one Slurm job
// array, at most `at_once` of them running; each slot is one create's
// allocation (CreateParams::reservation and slot), and its sandbox's rm ends
// it, so Slurm starts the next. The slots' resources and time limit are
// every create's in them.
struct ReserveParams {
    std::int64_t count = 0;
    int at_once = 1;
    std::optional<std::int64_t> ttl_ms;
    std::optional<double> cpus;
    std::optional<std::uint64_t> memory;  // bytes
    // Who reserves (a batch's key: letters, digits, '.', '_', '-'): a new
    // reservation ends what an earlier one of the same owner left.
    std::string owner;
    template <class V>
    void fields(V& v) {
        v.required("count", count);
        v.required("at_once", at_once);
        v.optional("ttl_ms", ttl_ms);
        v.optional("cpus", cpus);
        v.optional("memory", memory);
        v.required("owner", owner);
    }
};

struct Reservation {
    std::string id;  // the Slurm job array's id
    std::int64_t count = 0;
    int at_once = 1;
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.required("count", count);
        v.required("at_once", at_once);
    }
};

struct PoolList {
    std::vector<PoolInfo> pools;
    template <class V>
    void fields(V& v) {
        v.required("pools", pools);
    }
};

// ---- templates -------------------------------------------------------------

struct TemplateEntry {
    std::string name;
    std::string file;
    std::string description;
    bool builtin = false;
    // Through a controller: the workers that lack it (absent: every worker
    // asked has it).
    std::optional<std::vector<std::string>> missing_on = {};
    template <class V>
    void fields(V& v) {
        v.required("name", name);
        v.required("file", file);
        v.required("description", description);
        v.required("builtin", builtin);
        v.optional("missing_on", missing_on);
    }
};

struct TemplateList {
    std::vector<TemplateEntry> templates;
    template <class V>
    void fields(V& v) {
        v.required("templates", templates);
    }
};

struct TemplateShowParams {
    std::string template_ref;
    template <class V>
    void fields(V& v) {
        v.required("template", template_ref);
    }
};

struct TemplateShowResult {
    std::string name;
    std::vector<std::string> chain;
    nlohmann::json resolved = nlohmann::json::object();
    std::map<std::string, std::string> origin;
    template <class V>
    void fields(V& v) {
        v.required("name", name);
        v.required("chain", chain);
        v.required("resolved", resolved);
        v.required("origin", origin);
    }
};

struct TemplateValidateParams {
    std::string file;
    template <class V>
    void fields(V& v) {
        v.required("file", file);
    }
};

struct TemplateValidateResult {
    bool valid = true;
    std::string file;
    std::vector<std::string> chain;
    template <class V>
    void fields(V& v) {
        v.required("valid", valid);
        v.required("file", file);
        v.required("chain", chain);
    }
};

// ---- images ----------------------------------------------------------------

struct ImageBuildParams {
    std::string name;
    bool force = false;
    template <class V>
    void fields(V& v) {
        v.required("name", name);
        v.optional("force", force);
    }
};

// An imported image's config (OCI): what a template naming it gets as
// defaults.
struct ImageConfigInfo {
    std::vector<std::string> env;
    std::string working_dir;
    std::string user;     // as the image says it
    std::string uid_gid;  // resolved in the image's /etc/passwd
    std::vector<std::string> entrypoint;
    std::vector<std::string> cmd;
    template <class V>
    void fields(V& v) {
        v.required("env", env);
        v.required("working_dir", working_dir);
        v.required("user", user);
        v.required("uid_gid", uid_gid);
        v.required("entrypoint", entrypoint);
        v.required("cmd", cmd);
    }
};

struct Image {
    std::string name;
    std::string rootfs;
    std::uint64_t bytes = 0;
    std::string built_at;
    // "recipe base", or an import's source ("oci-archive:/abs/img.tar").
    std::optional<std::string> source = {};
    // Imported images only: the image's own creation time, manifest digest,
    // layer count, platform and config.
    std::optional<std::string> created = {};
    std::optional<std::string> digest = {};
    std::optional<int> layers = {};
    std::optional<std::string> platform = {};
    std::optional<ImageConfigInfo> config = {};
    // Through a controller: the workers that lack it (absent: every worker
    // asked has it).
    std::optional<std::vector<std::string>> missing_on = {};
    template <class V>
    void fields(V& v) {
        v.required("name", name);
        v.required("rootfs", rootfs);
        v.required("bytes", bytes);
        v.required("built_at", built_at);
        v.optional("source", source);
        v.optional("created", created);
        v.optional("digest", digest);
        v.optional("layers", layers);
        v.optional("platform", platform);
        v.optional("config", config);
        v.optional("missing_on", missing_on);
    }
};

struct ImageImportParams {
    std::string name;
    std::string source;  // docker-archive:FILE, oci-archive:FILE or oci:DIR, on the worker
    bool force = false;  // replace an image of that name
    template <class V>
    void fields(V& v) {
        v.required("name", name);
        v.required("source", source);
        v.optional("force", force);
    }
};

struct ImageList {
    std::vector<Image> images;
    template <class V>
    void fields(V& v) {
        v.required("images", images);
    }
};

// image.recipes: the names image.build knows how to build from nothing.
struct RecipeList {
    std::vector<std::string> recipes;
    template <class V>
    void fields(V& v) {
        v.required("recipes", recipes);
    }
};

// ---- doctor ----------------------------------------------------------------

struct Check {
    std::string name;
    bool ok = false;
    bool required = true;
    std::string detail;
    template <class V>
    void fields(V& v) {
        v.required("name", name);
        v.required("ok", ok);
        v.required("required", required);
        v.required("detail", detail);
    }
};

struct DoctorResult {
    bool ok = false;  // every required check passed
    std::vector<Check> checks;
    template <class V>
    void fields(V& v) {
        v.required("ok", ok);
        v.required("checks", checks);
    }
};

// ---- desktops (lib/sandbox/desktop.hpp) -------------------------------------

// desktop.screenshot: the PNG travels as desktop.data chunks before the result.
struct ScreenshotResult {
    int width = 0;
    int height = 0;
    std::uint64_t bytes = 0;
    std::string sha256;
    template <class V>
    void fields(V& v) {
        v.required("width", width);
        v.required("height", height);
        v.required("bytes", bytes);
        v.required("sha256", sha256);
    }
};

// desktop.click (button default 1) and desktop.move.
struct PointerParams {
    std::string id;
    int x = 0;
    int y = 0;
    std::optional<int> button;
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.required("x", x);
        v.required("y", y);
        v.optional("button", button);
    }
};

struct TypeParams {
    std::string id;
    std::string text;
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.required("text", text);
    }
};

// xdotool key names, pressed one after another ("ctrl+l", "Return").
struct KeyParams {
    std::string id;
    std::vector<std::string> keys;
    template <class V>
    void fields(V& v) {
        v.required("id", id);
        v.required("keys", keys);
    }
};

}  // namespace sandweave::api
