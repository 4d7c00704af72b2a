#!/usr/bin/env python3
"""Edits a `runsc spec` config.json for the tests that drive runsc directly
(hidepid_runtime_matrix.sh, ptrace_placement.sh).

hidepid_oci_config.py CONFIG_JSON ROOTFS PROC_OPTION ARGS...: a read-only ROOTFS,
ARGS as the init process, no terminal, no capabilities, PROC_OPTION as the
only option of the /proc mount.
"""
import json, sys
path, rootfs, opt, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
spec = json.load(open(path))
spec["root"] = {"path": rootfs, "readonly": True}
spec["process"]["args"] = args
spec["process"]["terminal"] = False
# No capabilities: `runsc exec` processes inherit the container's sets unless
# --cap is given, and gVisor (like runc) does not drop them for non-root users.
spec["process"]["capabilities"] = {k: [] for k in
    ("bounding", "effective", "inheritable", "permitted", "ambient")}
spec["hostname"] = "hidepid"
for m in spec["mounts"]:
    if m["destination"] == "/proc":
        m["options"] = [opt]
        break
else:
    sys.exit("no /proc mount in runsc spec")
json.dump(spec, open(path, "w"), indent=2)
