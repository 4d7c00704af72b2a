#pragma once
// Template resolution. A template is a YAML (or JSON) document naming an image, a
// default user, environment, working directory, resources and runtime_options.
// `extends` names a parent: a built-in or user template name, or a file path
// (relative to the child's file). Resolution is depth-first; maps merge key by
// key, lists and scalars are replaced by the child.
//
// Every document is checked on its own before merging, so an error names the file
// (and line), the key, and the chain that led there. Unknown keys are errors with a
// "did you mean"; so are wrong types. The resolved document records, for every
// leaf, which template set it (`sandweave template show`).

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sandweave {

struct ResolvedTemplate {
    std::string name;                // what the user asked for (name, path or "inline")
    nlohmann::json doc;              // merged document (extends removed)
    std::vector<std::string> chain;  // child first: ["mine", "coding", "base"]
    // JSON pointer of every leaf ("/runtime_options/hidepid") -> template that set it.
    std::map<std::string, std::string> origin;
};

struct TemplateInfo {
    std::string name;
    std::filesystem::path file;
    std::string description;
    bool builtin = false;
};

class TemplateResolver {
  public:
    // user_dirs are searched before builtin_dirs; the first match wins.
    TemplateResolver(std::vector<std::filesystem::path> user_dirs,
                     std::vector<std::filesystem::path> builtin_dirs);

    // The default search path: $SANDWEAVE_TEMPLATE_PATH (colon-separated),
    // ~/.config/sandweave/templates, <state>/templates; then the built-ins.
    static TemplateResolver with_default_paths(const std::filesystem::path& state_dir);

    // `ref` is a template name, a path to a file, or inline JSON/YAML text.
    // `source` names the file inline text was read from by a client
    // ("client:/home/me/t.yaml"): errors name it, and quote none of it.
    ResolvedTemplate resolve(const std::string& ref, const std::string& source = "") const;

    // Checks one file (and its extends chain); throws on the first problem.
    ResolvedTemplate validate_file(const std::filesystem::path& file) const;

    std::vector<TemplateInfo> list() const;

    // For a remote client: a template it names by path (its ref, or the
    // `extends` of its inline text) is refused, not read on this host; a
    // template found by name may still extend files beside it.
    TemplateResolver& refuse_caller_paths() {
        caller_paths_ = false;
        return *this;
    }

  private:
    struct Loaded;
    Loaded load_ref(const std::string& ref, const std::optional<std::filesystem::path>& base_dir,
                    const std::string& source = "") const;
    ResolvedTemplate resolve_loaded(Loaded loaded, std::vector<std::string> chain) const;
    std::optional<std::filesystem::path> find_named(const std::string& name, bool* builtin) const;

    std::vector<std::filesystem::path> user_dirs_;
    std::vector<std::filesystem::path> builtin_dirs_;
    bool caller_paths_ = true;
};

// One key as a JSON pointer token (RFC 6901: "~" is "~0", "/" is "~1"), so
// the origin of label "app.example/tier" is "/labels/app.example~1tier".
std::string pointer_token(const std::string& key);

// True when `ref` is inline template text rather than a name or path.
bool is_inline_template(const std::string& ref);
// True when `ref` names a template file (a path) rather than a template name.
bool is_template_file(const std::string& ref);

}  // namespace sandweave
