// One connection's view of the controller's API (lib/controller/identity.hpp):
// each call runs with the connection's identity as the thread's caller, so
// the controller's routing, listings and Slurm jobs are that identity's.
#include "lib/controller/identity.hpp"

namespace sandweave::controller {

namespace {

class CallerApi final : public api::Api {
    // `f` (a call of inner_) as the connection's identity. Defined first: the
    // overrides below deduce their calls' types from it.
    template <class F>
    auto as(F&& f) {
        CallerScope scope(who_);
        return f();
    }

  public:
    CallerApi(api::Api& inner, Identity who) : inner_(inner), who_(std::move(who)) {}

    api::VersionResult version() override {
        return as([&] { return inner_.version(); });
    }
    SandboxView create(const api::CreateParams& p) override {
        return as([&] { return inner_.create(p); });
    }
    api::RunResult run(const api::RunParams& p, const api::RunIo& io) override {
        return as([&] { return inner_.run(p, io); });
    }
    api::ProcessList ps(const api::IdParams& p) override {
        return as([&] { return inner_.ps(p); });
    }
    api::KillResult kill(const api::KillParams& p) override {
        return as([&] { return inner_.kill(p); });
    }
    api::RunResult wait(const api::HandleParams& p) override {
        return as([&] { return inner_.wait(p); });
    }
    api::SandboxList ls(const api::LsParams& p) override {
        return as([&] { return inner_.ls(p); });
    }
    SandboxView inspect(const api::IdParams& p) override {
        return as([&] { return inner_.inspect(p); });
    }
    SandboxView terminate(const api::IdParams& p) override {
        return as([&] { return inner_.terminate(p); });
    }
    api::Removed rm(const api::IdParams& p) override {
        return as([&] { return inner_.rm(p); });
    }
    api::RemovedList prune() override {
        return as([&] { return inner_.prune(); });
    }
    audit::Status audit_export(const api::AuditExportParams& p) override {
        return as([&] { return inner_.audit_export(p); });
    }
    audit::Status audit_fetch(const api::IdParams& p,
                              const std::function<void(std::string_view)>& on_data) override {
        return as([&] { return inner_.audit_fetch(p, on_data); });
    }
    audit::Status audit_status(const api::IdParams& p) override {
        return as([&] { return inner_.audit_status(p); });
    }
    SnapshotRecord snapshot_create(const api::SnapshotCreateParams& p) override {
        return as([&] { return inner_.snapshot_create(p); });
    }
    api::SnapshotList snapshot_ls() override {
        return as([&] { return inner_.snapshot_ls(); });
    }
    api::Removed snapshot_rm(const api::IdParams& p) override {
        return as([&] { return inner_.snapshot_rm(p); });
    }
    PoolInfo pool_create(const api::PoolCreateParams& p) override {
        return as([&] { return inner_.pool_create(p); });
    }
    SandboxView pool_acquire(const api::PoolAcquireParams& p) override {
        return as([&] { return inner_.pool_acquire(p); });
    }
    api::PoolList pool_ls() override {
        return as([&] { return inner_.pool_ls(); });
    }
    PoolInfo pool_resize(const api::PoolResizeParams& p) override {
        return as([&] { return inner_.pool_resize(p); });
    }
    api::Removed pool_rm(const api::NameParams& p) override {
        return as([&] { return inner_.pool_rm(p); });
    }
    api::Reservations* reservations() override {
        return inner_.reservations() ? &reservations_ : nullptr;
    }
    api::TemplateList template_ls() override {
        return as([&] { return inner_.template_ls(); });
    }
    api::TemplateShowResult template_show(const api::TemplateShowParams& p) override {
        return as([&] { return inner_.template_show(p); });
    }
    api::TemplateValidateResult template_validate(const api::TemplateValidateParams& p) override {
        return as([&] { return inner_.template_validate(p); });
    }
    api::Image image_build(const api::ImageBuildParams& p) override {
        return as([&] { return inner_.image_build(p); });
    }
    api::ImageList image_ls() override {
        return as([&] { return inner_.image_ls(); });
    }
    api::RecipeList image_recipes() override {
        return as([&] { return inner_.image_recipes(); });
    }
    api::Removed image_rm(const api::NameParams& p) override {
        return as([&] { return inner_.image_rm(p); });
    }
    api::Image image_import(const api::ImageImportParams& p) override {
        return as([&] { return inner_.image_import(p); });
    }
    api::Image image_inspect(const api::NameParams& p) override {
        return as([&] { return inner_.image_inspect(p); });
    }
    api::DoctorResult doctor() override {
        return as([&] { return inner_.doctor(); });
    }
    api::ScreenshotResult desktop_screenshot(
        const api::IdParams& p, const std::function<void(std::string_view)>& on_data) override {
        return as([&] { return inner_.desktop_screenshot(p, on_data); });
    }
    api::Empty desktop_click(const api::PointerParams& p) override {
        return as([&] { return inner_.desktop_click(p); });
    }
    api::Empty desktop_move(const api::PointerParams& p) override {
        return as([&] { return inner_.desktop_move(p); });
    }
    api::Empty desktop_type(const api::TypeParams& p) override {
        return as([&] { return inner_.desktop_type(p); });
    }
    api::Empty desktop_key(const api::KeyParams& p) override {
        return as([&] { return inner_.desktop_key(p); });
    }
    api::Empty cp_out(const api::CpOutParams& p, const api::CpIo& io) override {
        return as([&] { return inner_.cp_out(p, io); });
    }
    api::Empty cp_in(const api::CpInParams& p, const api::CpIo& io) override {
        return as([&] { return inner_.cp_in(p, io); });
    }
    bool offers(const std::string& method) const override { return inner_.offers(method); }

  private:
    // The inner Api's reservations, called as the connection's identity.
    class AsCaller final : public api::Reservations {
      public:
        explicit AsCaller(CallerApi& c) : c_(c) {}
        api::Reservation batch_reserve(const api::ReserveParams& p) override {
            return c_.as([&] { return c_.inner_.reservations()->batch_reserve(p); });
        }
        api::Removed batch_release(const api::IdParams& p) override {
            return c_.as([&] { return c_.inner_.reservations()->batch_release(p); });
        }

      private:
        CallerApi& c_;
    };

    api::Api& inner_;
    Identity who_;
    AsCaller reservations_{*this};
};

}  // namespace

std::unique_ptr<api::Api> as_caller(api::Api& controller, Identity who) {
    return std::make_unique<CallerApi>(controller, std::move(who));
}

}  // namespace sandweave::controller
