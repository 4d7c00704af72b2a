// sandbox.finish as the calls it stands for, for an Api whose worker does
// not offer it in one (an older worker, a controller routing each call).

#include "lib/api/api.hpp"

namespace sandweave::api {

Finished Api::finish(const FinishParams& p) {
    terminate({p.id});
    Finished out;
    if (p.audit_path) out.audit = audit_export({p.id, *p.audit_path});
    out.removed = rm({p.id}).removed;
    return out;
}

}  // namespace sandweave::api
