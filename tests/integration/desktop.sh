#!/usr/bin/env bash
# The `desktop` template: an X display started at create as a
# desktop user of its own (uid 1000), screenshots as checked PNGs written on the
# client (also over ssh://), and input for computer-use agents, on hidepid 2
# and audit. Pixels are decoded (tests/helpers/png_pixels.py), never judged by
# file size.
#
# The image is built once in a persistent state dir,
# SANDWEAVE_DESKTOP_STATE_DIR (default /var/tmp/sandweave-test-desktop), like
# coding_image.sh's; the sandboxes this test creates are removed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "sandweave drives runsc and overlayfs"
require_cmd jq python3
require_helpers png_pixels.py
test_setup
export SANDWEAVE_STATE_DIR="${SANDWEAVE_DESKTOP_STATE_DIR:-/var/tmp/sandweave-test-desktop}"
mkdir -p "$SANDWEAVE_STATE_DIR" || fatal "create the state directory $SANDWEAVE_STATE_DIR"
IDS=()
remove_sandboxes() {
    local id
    for id in "${IDS[@]}"; do sw rm "$id" >/dev/null 2>&1; done
}
on_cleanup remove_sandboxes
pixels() { python3 "$HELPERS/png_pixels.py" "$@"; }
value() { awk -v k="$1" '$1 == k { print $2 }'; }  # KEY < png_pixels output

if [[ "$(sw image ls --json)" != *'"name": "desktop"'* ]]; then
    t0=$SECONDS
    sw image build desktop >&2 || fatal "image build desktop" "sandweave image build desktop failed (output above)"
    echo "built the desktop image in $((SECONDS - t0)) s" >&2
fi
assert_true "the desktop image is under 250 MiB" \
    jq -e '.[] | select(.name == "desktop") | .bytes < 250 * 1048576' <<<"$(sw image ls --json)"

# ---- 1. the template comes up on hidepid 2 and audit -------------------------------
capture sw create --template desktop --hidepid 2 --audit
assert_eq "create --template desktop --hidepid 2 --audit succeeds" 0 "$LAST_RC"
[[ "$LAST_RC" == 0 ]] || fatal "a desktop sandbox" "$LAST_ERR"
id=$LAST_OUT
IDS+=("$id")
spec=$(sw inspect --json "$id" | jq -c '.spec')
assert_eq "its spec has hidepid 2, audit and the desktop" '2 true "1280x800" "1000:1000"' \
    "$(jq -r '"\(.runtime_options.hidepid) \(.runtime_options.audit) \"\(.desktop.screen)\" \"\(.desktop.user)\""' <<<"$spec")"

# ---- 2. a screenshot is a PNG of the configured size: an empty (black) screen -----
shot="$SCRATCH/empty.png"
capture sw desktop screenshot "$id" "$shot"
assert_eq "desktop screenshot writes the file and prints its path" "0 $shot" "$LAST_RC $LAST_OUT"
out=$(pixels "$shot")
assert_eq "the screenshot is 1280x800" 1280x800 "$(value size <<<"$out")"
assert_true "the empty screen is all black" awk -v v="$(value lit <<<"$out")" 'BEGIN { exit !(v == 0) }'
assert_eq "the PNG is written 0644" 644 "$(stat -c %a "$shot")"

# ---- 3. an agent's terminal shows as a window ----------------------------------------
assert_exit "the agent (uid 1001) starts a terminal in the background" 0 \
    sw run "$id" -- sh -c 'stterm -g 80x24+0+0 -e sh </dev/null >/dev/null 2>&1 &'
lit_at() {  # FILE X Y W H: the lit fraction of that rectangle
    pixels "$1" --region "$2" "$3" "$4" "$5" | value lit
}
window_shown() {
    sw desktop screenshot "$id" "$SCRATCH/window.png" >/dev/null 2>&1 &&
        awk -v v="$(lit_at "$SCRATCH/window.png" 0 0 400 300)" 'BEGIN { exit !(v > 0.03) }'
}
assert_true "a window (title bar, border, prompt) appears at the top left (pixels, within 30 s)" wait_for 30 window_shown
assert_true "the rest of the screen stays black" \
    awk -v v="$(lit_at "$SCRATCH/window.png" 900 500 380 300)" 'BEGIN { exit !(v == 0) }'

# ---- 4. typed text reaches the terminal -----------------------------------------------
assert_exit "desktop move into the terminal" 0 sw desktop move "$id" 200 150
assert_exit "desktop click in the terminal" 0 sw desktop click "$id" 200 150
sw desktop screenshot "$id" "$SCRATCH/before.png" >/dev/null
assert_exit "desktop type a command" 0 sw desktop type "$id" 'echo typed-by-xdotool >/tmp/typed'
assert_exit "desktop key Return" 0 sw desktop key "$id" Return
typed() { [[ "$(sw run "$id" -- cat /tmp/typed 2>/dev/null)" == typed-by-xdotool ]]; }
assert_true "the shell in the terminal ran what was typed (/tmp/typed)" wait_for 15 typed
assert_eq "the file was written by the agent's uid" 1001 "$(sw run "$id" -- stat -c %u /tmp/typed 2>&1)"
sw desktop screenshot "$id" "$SCRATCH/after.png" >/dev/null
before=$(lit_at "$SCRATCH/before.png" 0 20 560 340)
after=$(lit_at "$SCRATCH/after.png" 0 20 560 340)
assert_true "the typed text lit more of the terminal ($before -> $after)" \
    awk -v a="$before" -v b="$after" 'BEGIN { exit !(b > a + 0.002) }'

# ---- 5. hidepid 2: the agent cannot see the X server; root can ----------------------
agent_ps=$(sw run "$id" -- ps -eo uid=,comm= 2>&1)
assert_no_match "uid 1001 does not see Xvfb or twm in /proc" 'Xvfb|twm' "$agent_ps"
assert_match "uid 1001 sees its own terminal" 'stterm' "$agent_ps"
root_ps=$(sw run "$id" --user 0:0 -- ps -eo uid=,comm= 2>&1)
assert_match "root sees Xvfb running as uid 1000" '(^|[[:space:]])1000 Xvfb' "$root_ps"
assert_match "root sees twm running as uid 1000" '(^|[[:space:]])1000 twm' "$root_ps"
xpid=$(awk '$2 == "Xvfb" { print $3 }' <<<"$(sw run "$id" --user 0:0 -- ps -eo uid=,comm=,pid= 2>&1)")
assert_match "the X server has a pid" '^[0-9]+$' "$xpid"
assert_exit "uid 1001 cannot read the X server's /proc/PID/cmdline" 1 \
    sw run "$id" -- cat "/proc/$xpid/cmdline"
assert_exit "uid 1001 cannot read the desktop user's home (the X server's log)" 1 \
    sw run "$id" -- cat /home/desktop/desktop.log

# ---- 6. the audit log records the agent's own execs ---------------------------------
sw run "$id" -c '/bin/echo audited-agent-exec' >/dev/null
capture sw audit export "$id" "$SCRATCH/audit.jsonl"
assert_eq "audit export is complete" 0 "$LAST_RC"
assert_true "execve of the agent's terminal with uid 1001" \
    jq -se 'any(.point == "sentry/execve" and (.argv[0] | endswith("stterm")) and .context_data.credentials.effective_uid == 1001)' "$SCRATCH/audit.jsonl"
assert_true "execve of /bin/echo with its argv" \
    jq -se 'any(.point == "sentry/execve" and .argv == ["/bin/echo", "audited-agent-exec"])' "$SCRATCH/audit.jsonl"
assert_true "the X server's start shows as uid 1000's execve of Xvfb" \
    jq -se 'any(.point == "sentry/execve" and (.argv[0] | endswith("Xvfb")) and .context_data.credentials.effective_uid == 1000)' "$SCRATCH/audit.jsonl"

# ---- 7. the screen size is a template option ------------------------------------------
capture sw create --template '{"extends": "desktop", "desktop": {"screen": "800x600"}}'
assert_eq "create with desktop.screen 800x600" 0 "$LAST_RC"
small=$LAST_OUT
[[ "$LAST_RC" == 0 ]] && IDS+=("$small")
sw desktop screenshot "$small" "$SCRATCH/small.png" >/dev/null
assert_eq "its screenshot is 800x600" 800x600 "$(pixels "$SCRATCH/small.png" | value size)"
assert_exit "a point off an 800x600 screen is refused (exit 2)" 2 sw desktop click "$small" 800 10
assert_match "... saying so in one line" '^sandweave: .*point 800,10 is off the 800x600 screen$' "$LAST_ERR"
sw rm "$small" >/dev/null

# ---- 8. a filesystem snapshot restores with its display ------------------------------
capture sw snapshot create "$id" --name "desktop-test-$$"
assert_eq "snapshot of the desktop sandbox (fs: audit is on)" 0 "$LAST_RC"
capture sw create --from-snapshot "desktop-test-$$"
assert_eq "create --from-snapshot starts the desktop again (stale X lock and socket removed)" 0 "$LAST_RC"
if [[ "$LAST_RC" == 0 ]]; then
    restored=$LAST_OUT
    IDS+=("$restored")
    sw desktop screenshot "$restored" "$SCRATCH/restored.png" >/dev/null
    assert_eq "the restored sandbox's screen is 1280x800" 1280x800 "$(pixels "$SCRATCH/restored.png" | value size)"
    sw rm "$restored" >/dev/null
fi
sw snapshot rm "desktop-test-$$" >/dev/null 2>&1

# ---- 9. bad input ---------------------------------------------------------------------
assert_exit "a bad key name is refused (exit 2)" 2 sw desktop key "$id" 'Return;rm'
assert_exit "button 12 is refused (exit 2)" 2 sw desktop click "$id" 1 1 --button 12
assert_exit "a bad screen size in a template is refused (exit 2)" 2 \
    sw create --template '{"extends": "desktop", "desktop": {"screen": "10x10"}}'
assert_match "... naming the key" 'desktop.screen: expected WIDTHxHEIGHT' "$LAST_ERR"
assert_exit "a desktop run as root is refused (exit 2)" 2 \
    sw create --template '{"extends": "desktop", "desktop": {"user": "0:0"}}'
capture sw create --template base
plain=$LAST_OUT
IDS+=("$plain")
assert_exit "a screenshot of a sandbox without a desktop is refused (exit 2)" 2 \
    sw desktop screenshot "$plain" "$SCRATCH/none.png"
assert_match "... saying it has no desktop" 'has no desktop' "$LAST_ERR"
assert_true "... and writes no file" test ! -e "$SCRATCH/none.png"
sw rm "$plain" >/dev/null
# A guest that lies: maim replaced by something printing a non-PNG (as root,
# which the agent cannot do; a compromised guest could).
sw run "$id" --user 0:0 -- sh -c 'mv /usr/bin/maim /usr/bin/maim.real && printf "#!/bin/sh\necho not-a-png\n" >/usr/bin/maim && chmod 755 /usr/bin/maim'
assert_exit "a screenshot that is not a PNG is refused (exit 1)" 1 sw desktop screenshot "$id" "$SCRATCH/lie.png"
assert_match "... in one line naming the problem" '^sandweave: .*not a usable PNG: .*$' "$LAST_ERR"
assert_eq "... one line" 1 "$(line_count "$LAST_ERR")"
assert_true "... and no file is written" test ! -e "$SCRATCH/lie.png"
sw run "$id" --user 0:0 -- sh -c 'printf "#!/bin/sh\nexec /usr/bin/maim.real --geometry 640x480+0+0 \"\$@\"\n" >/usr/bin/maim'
assert_exit "a screenshot of the wrong size is refused (exit 1)" 1 sw desktop screenshot "$id" "$SCRATCH/lie.png"
assert_match "... naming both sizes" '640x480 instead of the screen.s 1280x800' "$LAST_ERR"
sw run "$id" --user 0:0 -- mv /usr/bin/maim.real /usr/bin/maim

# ---- 10. over ssh:// the PNG is written on the client ---------------------------------
if [[ -x /usr/sbin/sshd ]]; then
    unset SSH_AUTH_SOCK
    source "$SANDWEAVE_SOURCE_DIR/tests/helpers/sshd_fixture.sh"
    stop_sshd() { sshd_stop "$SSHD_CONFIG"; }
    sshd_fixture_init "$SCRATCH/sshd" "$SANDWEAVE_STATE_DIR" || fatal "ssh keys and sshd config made"
    on_cleanup stop_sshd
    sshd_start || fatal "sshd starts" "$(tail -n 5 "$SSHD_CONFIG.log")"
    : >"$SCRATCH/sshd/empty_ssh_config"
    rsw() {
        env -u SANDWEAVE_STATE_DIR "$SW" --host "ssh://root@127.0.0.1:$SSHD_PORT" --identity "$SSHD_USERKEY" \
            --known-hosts "$SSHD_KNOWN_HOSTS" --ssh-config "$SCRATCH/sshd/empty_ssh_config" --remote-binary "$SW" "$@"
    }
    capture rsw --json desktop screenshot "$id" "$SCRATCH/remote.png"
    assert_eq "desktop screenshot over ssh:// succeeds" 0 "$LAST_RC"
    assert_eq "... reporting the size" 1280x800 "$(jq -r '"\(.width)x\(.height)"' <<<"$LAST_OUT")"
    assert_eq "... and the PNG on the client is the screen" 1280x800 "$(pixels "$SCRATCH/remote.png" | value size)"
    assert_eq "... its bytes as the worker counted them" "$(jq -r .bytes <<<"$LAST_OUT")" "$(stat -c %s "$SCRATCH/remote.png")"
    assert_exit "desktop key over ssh://" 0 rsw desktop key "$id" ctrl+u
else
    skipped "no sshd: the ssh:// screenshot"
fi
finish
