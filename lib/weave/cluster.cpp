// The cluster file the controller reads (lib/weave/controller.hpp).
#include <fstream>

#include "lib/core/error.hpp"
#include "lib/weave/controller.hpp"

namespace sandweave::weave {

ClusterConfig read_cluster_env(const std::filesystem::path& file) {
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
        if (key == "SANDWEAVE_WEAVE_SNAPSHOTS") c.snapshots = value;
        if (key == "SANDWEAVE_WEAVE_MUNGE_SOCKET") c.munge_socket = value;
        if (key.rfind(state_prefix, 0) == 0) c.state_dirs[key.substr(state_prefix.size())] = value;
    }
    return c;
}

}  // namespace sandweave::weave
