// Shell completion, from the same CLI11 tree that produces --help: nothing
// here lists verbs or flags. `sandweave completion bash|zsh|fish` prints a
// small script whose only job is to call back `sandweave __complete -- WORDS`
// (the words typed so far, the last one being completed, possibly empty) and
// hand the answer to the shell. That hidden query walks the tree the way the
// parser would: verbs and their aliases, each level's flags plus the global
// ones, which flags take a value, and each positional in order.
//
// What a value is, is said once where the option is declared, by its type
// name (shown by --help too): SANDBOX, TEMPLATE, IMAGE, SNAPSHOT, POOL (names
// asked of the connection, so `--host ssh://...` and `--state-dir` given on
// the line are honoured), RECIPE (the built-in image recipes), FILE, DIR,
// SOURCE (`transport:PATH`), or a list of
// choices "a|b|c". An untyped positional called id or ids is a sandbox (the
// verbs that predate the type names: run, desktop).
//
// The answer: a first line saying what to complete ("words", or "files" /
// "dirs" followed by a tab and the part of the word before the path, e.g.
// "docker-archive:"), then one candidate per line, "WORD\tDESCRIPTION" where
// there is one. A query never prints an error: a shell would show it mid-line.

#include <cstdio>
#include <functional>
#include <iostream>
#include <set>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"

namespace sandweave::cli {
namespace {

struct Candidate {
    std::string word;
    std::string description;
};

struct Answer {
    std::string kind = "words";  // words | files | dirs
    std::string prefix;          // for files/dirs: the part of the word before the path
    std::vector<Candidate> words;
};

bool takes_value(const CLI::Option* o) {
    return o->nonpositional() && o->get_type_size_max() > 0;
}

// The option's value kind: its type name without CLI11's validator suffixes.
std::string kind_of(const CLI::Option* o) {
    std::string t = o->get_type_name();
    t = t.substr(0, t.find(':'));
    if ((t.empty() || t == "TEXT") && o->get_positional() &&
        (o->get_name() == "id" || o->get_name() == "ids"))
        return "SANDBOX";
    return t;
}

std::string first_line(const std::string& s) {
    return s.substr(0, s.find('\n'));
}

// The options that apply at `level`: its own and, as the parser falls
// through, every enclosing level's.
std::vector<const CLI::Option*> options_at(const CLI::App* level) {
    std::vector<const CLI::Option*> out;
    for (const CLI::App* a = level; a; a = a->get_parent())
        for (const auto* o : a->get_options())
            if (o->nonpositional()) out.push_back(o);
    return out;
}

const CLI::Option* find_option(const CLI::App* level, const std::string& word) {
    for (const auto* o : options_at(level))
        if (o->check_name(word)) return o;
    return nullptr;
}

std::vector<CLI::App*> visible_subcommands(CLI::App* level) {
    std::vector<CLI::App*> out;
    for (auto* s : level->get_subcommands({}))
        if (!s->get_group().empty()) out.push_back(s);
    return out;
}

// Names the connection knows, for a value of `kind`.
std::vector<Candidate> query(const GlobalOptions& g, const std::string& kind) {
    std::vector<Candidate> out;
    try {
        Session s(g);
        auto& api = s.api();
        if (kind == "RECIPE") {
            for (const auto& r : api.image_recipes().recipes)
                out.push_back({r, "built-in image recipe"});
        } else if (kind == "SANDBOX") {
            for (const auto& v : api.ls({}).sandboxes) {
                std::string what =
                    v.record.id + " " + to_string(v.live) + ", " + v.record.spec.template_name;
                if (!v.record.name.empty()) out.push_back({v.record.name, "sandbox " + what});
                out.push_back({v.record.id, "sandbox " + what});
            }
        } else if (kind == "TEMPLATE") {
            for (const auto& t : api.template_ls().templates)
                out.push_back({t.name, t.description});
        } else if (kind == "IMAGE") {
            for (const auto& i : api.image_ls().images) out.push_back({i.name, "image"});
        } else if (kind == "SNAPSHOT") {
            for (const auto& r : api.snapshot_ls().snapshots) {
                std::string what = "snapshot (" + to_string(r.kind) + ") of " + r.source;
                if (!r.name.empty()) out.push_back({r.name, what});
                out.push_back({r.id, what});
            }
        } else if (kind == "POOL") {
            for (const auto& p : api.pool_ls().pools)
                out.push_back({p.name, "pool of " + std::to_string(p.size)});
        }
    } catch (const std::exception&) {
        // No state directory yet, an unreachable worker: nothing to offer.
    }
    return out;
}

// Completes `cur`, the value of an option (or positional) of `kind`; `prefix`
// is what precedes the value in the word ("--template=").
Answer complete_value(const GlobalOptions& g, const std::string& kind, const std::string& prefix,
                      const std::string& cur) {
    Answer a;
    auto files = [&](const char* k, const std::string& pre) {
        a.kind = k;
        a.prefix = pre;
        return a;
    };
    if (kind == "FILE" || kind == "PATH") return files("files", prefix);
    if (kind == "DIR") return files("dirs", prefix);
    if (kind == "SOURCE") {
        auto colon = cur.find(':');
        if (colon != std::string::npos) return files("files", prefix + cur.substr(0, colon + 1));
        for (const char* t : {"docker-archive:", "oci-archive:", "oci:"})
            a.words.push_back({prefix + t, "image source transport"});
        return a;
    }
    if (kind == "TEMPLATE" && cur.find('/') != std::string::npos) return files("files", prefix);
    if (kind.find('|') != std::string::npos) {
        std::size_t start = 0;
        while (start <= kind.size()) {
            auto bar = kind.find('|', start);
            if (bar == std::string::npos) bar = kind.size();
            a.words.push_back({prefix + kind.substr(start, bar - start), ""});
            start = bar + 1;
        }
        return a;
    }
    for (auto& c : query(g, kind)) a.words.push_back({prefix + c.word, c.description});
    return a;
}

// The global options that choose the connection, as typed on the line.
void note_global(GlobalOptions& g, const std::string& name, const std::string& value) {
    if (name == "--state-dir") g.state_dir = value;
    if (name == "--host") g.host = value;
    if (name == "--runsc") g.runsc = value;
    if (name == "--identity") g.identity = value;
    if (name == "--known-hosts") g.known_hosts = value;
    if (name == "--ssh-config") g.ssh_config = value;
    if (name == "--remote-binary") g.remote_binary = value;
}

Answer complete_words(CLI::App& app, const std::vector<std::string>& words) {
    GlobalOptions g;
    if (const char* h = std::getenv("SANDWEAVE_HOST")) g.host = h;
    CLI::App* level = &app;
    std::size_t positional = 0;
    bool after_separator = false;
    const CLI::Option* pending = nullptr;  // an option whose value is the next word
    std::string pending_name;
    std::string cur = words.empty() ? "" : words.back();
    for (std::size_t i = 0; i + 1 < words.size(); ++i) {
        const std::string& w = words[i];
        if (pending) {
            note_global(g, pending_name, w);
            pending = nullptr;
            continue;
        }
        if (after_separator) continue;
        if (w == "--") {
            after_separator = true;
            continue;
        }
        if (w.size() > 1 && w[0] == '-') {
            auto eq = w.find('=');
            std::string name = w.substr(0, eq);
            const CLI::Option* o = find_option(level, name);
            if (o && takes_value(o)) {
                if (eq == std::string::npos) {
                    pending = o;
                    pending_name = name;
                } else {
                    note_global(g, name, w.substr(eq + 1));
                }
            }
            continue;
        }
        CLI::App* next = nullptr;
        for (auto* s : level->get_subcommands({}))
            if (s->check_name(w)) next = s;
        if (next) {
            level = next;
            positional = 0;
        } else {
            ++positional;
        }
    }
    Answer a;
    if (after_separator) return a;  // the command inside the sandbox: nothing known here
    if (pending) return complete_value(g, kind_of(pending), "", cur);
    if (cur.size() > 1 && cur[0] == '-' && cur.find('=') != std::string::npos) {
        std::string name = cur.substr(0, cur.find('='));
        const CLI::Option* o = find_option(level, name);
        if (o && takes_value(o))
            return complete_value(g, kind_of(o), name + "=", cur.substr(name.size() + 1));
        return a;
    }
    if (!cur.empty() && cur[0] == '-') {
        std::set<std::string> seen;
        for (const auto* o : options_at(level)) {
            for (const auto& l : o->get_lnames())
                if (seen.insert("--" + l).second)
                    a.words.push_back({"--" + l, first_line(o->get_description())});
            for (const auto& s : o->get_snames())
                if (seen.insert("-" + s).second)
                    a.words.push_back({"-" + s, first_line(o->get_description())});
        }
    } else if (auto subs = visible_subcommands(level); !subs.empty()) {
        for (auto* s : subs) {
            a.words.push_back({s->get_name(), first_line(s->get_description())});
            for (const auto& alias : s->get_aliases())
                a.words.push_back({alias, first_line(s->get_description())});
        }
    } else {
        std::vector<const CLI::Option*> positionals;
        for (const auto* o : level->get_options())
            if (o->get_positional()) positionals.push_back(o);
        if (positionals.empty()) return a;
        const CLI::Option* o = nullptr;
        if (positional < positionals.size())
            o = positionals[positional];
        else if (positionals.back()->get_items_expected_max() > 1)
            o = positionals.back();  // a list: every further word is one more
        if (!o) return a;
        return complete_value(g, kind_of(o), "", cur);
    }
    return a;
}

// ---- the scripts ------------------------------------------------------------

const char* bash_script = R"SH(# sandweave completion for bash: source it, e.g. from ~/.bashrc:
#   source <(sandweave completion bash)
# or install it: sandweave completion bash > /etc/bash_completion.d/sandweave
_sandweave() {
    local line=${COMP_LINE:0:COMP_POINT} IFS=$' \t\n'
    local -a words
    read -r -a words <<<"$line"
    if [[ -z $line || $line == *[[:space:]] ]]; then words+=(""); fi
    local cur=${words[${#words[@]}-1]}
    local -a out
    mapfile -t out < <("${words[0]}" __complete -- "${words[@]:1}" 2>/dev/null)
    ((${#out[@]})) || return 0
    local kind=${out[0]%%$'\t'*} pre=""
    [[ ${out[0]} == *$'\t'* ]] && pre=${out[0]#*$'\t'}
    COMPREPLY=()
    case $kind in
        files | dirs)
            # readline replaces only what follows the last ':' or '=' of the word.
            local path=${cur#"$pre"} flag=-f
            [[ $kind == dirs ]] && flag=-d
            mapfile -t COMPREPLY < <(compgen "$flag" -- "$path")
            compopt -o filenames 2>/dev/null
            ;;
        *)
            local trim=${cur%"${cur##*[:=]}"} c
            for c in "${out[@]:1}"; do
                c=${c%%$'\t'*}
                [[ $c == "$cur"* ]] || continue
                COMPREPLY+=("${c#"$trim"}")
                [[ $c == *[:=] ]] && compopt -o nospace 2>/dev/null
            done
            ;;
    esac
    return 0
}
complete -F _sandweave sandweave
)SH";

const char* zsh_script = R"SH(#compdef sandweave
# sandweave completion for zsh: put it on $fpath as _sandweave, e.g.
#   sandweave completion zsh > "${fpath[1]}/_sandweave"
# or source it after compinit: source <(sandweave completion zsh)
_sandweave() {
    local -a out spaced bare
    local line kind pre word desc
    out=("${(@f)$("${words[1]}" __complete -- "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    (( ${#out} )) || return 1
    kind=${out[1]%%$'\t'*}
    pre=
    [[ $out[1] == *$'\t'* ]] && pre=${out[1]#*$'\t'}
    case $kind in
        files) [[ -n $pre ]] && compset -P '*[=:]'; _files ;;
        dirs) [[ -n $pre ]] && compset -P '*[=:]'; _files -/ ;;
        *)
            for line in "${(@)out[2,-1]}"; do
                [[ -z $line ]] && continue
                word=${line%%$'\t'*}
                desc=
                [[ $line == *$'\t'* ]] && desc=${line#*$'\t'}
                if [[ $word == *[=:] ]]; then
                    bare+=("$word")
                else
                    spaced+=("${word//:/\\:}${desc:+:$desc}")
                fi
            done
            (( ${#bare} )) && compadd -S '' -- "${bare[@]}"
            (( ${#spaced} )) && _describe -t values 'sandweave' spaced
            ;;
    esac
}
if [[ "${funcstack[1]}" == _sandweave ]]; then
    _sandweave "$@"
else
    compdef _sandweave sandweave
fi
)SH";

const char* fish_script = R"SH(# sandweave completion for fish: install it with
#   sandweave completion fish > ~/.config/fish/completions/sandweave.fish
function __sandweave_complete
    set -l tokens (commandline -opc)
    set -l cur "$(commandline -ct)"
    set -l out ($tokens[1] __complete -- $tokens[2..-1] $cur 2>/dev/null)
    or return
    test (count $out) -gt 0; or return
    set -l head (string split -m1 \t -- $out[1])
    switch $head[1]
        case files dirs
            set -l pre ''
            test (count $head) -gt 1; and set pre $head[2]
            set -l rest (string sub -s (math (string length -- "$pre") + 1) -- "$cur")
            if test $head[1] = dirs
                for p in (__fish_complete_directories "$rest")
                    echo "$pre$p"
                end
            else
                for p in (__fish_complete_path "$rest")
                    echo "$pre$p"
                end
            end
        case '*'
            printf '%s\n' $out[2..-1]
    end
end
complete -c sandweave -f -a '(__sandweave_complete)'
)SH";

}  // namespace

int run_completion_query(CLI::App& app, const std::vector<std::string>& words) {
    Answer a = complete_words(app, words);
    std::string cur = words.empty() ? "" : words.back();
    std::string out = a.kind;
    if (a.kind != "words") out += "\t" + a.prefix;
    out += "\n";
    for (const auto& c : a.words) {
        if (c.word.compare(0, cur.size(), cur) != 0) continue;
        out += c.word;
        if (!c.description.empty()) out += "\t" + c.description;
        out += "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

void register_completion(CLI::App& app, GlobalOptions& g, Outcome& out) {
    (void)g;
    auto* sub = app.add_subcommand(
        "completion",
        "Print a completion script for bash, zsh or fish (see sandweave-completion(1))");
    auto shell = std::make_shared<std::string>();
    sub->add_option("shell", *shell, "The shell")->required()->type_name("bash|zsh|fish");
    sub->callback([&out, shell] {
        if (*shell == "bash")
            std::fputs(bash_script, stdout);
        else if (*shell == "zsh")
            std::fputs(zsh_script, stdout);
        else if (*shell == "fish")
            std::fputs(fish_script, stdout);
        else
            throw Error(ErrorCode::usage,
                        "completion '" + *shell + "': expected bash, zsh or fish");
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
