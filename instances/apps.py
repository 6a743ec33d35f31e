from django.apps import AppConfig


class InstancesConfig(AppConfig):
    name = "instances"
    verbose_name = "Instances"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from instances.backends import register_backend
        from instances.disk_full import last_login_update
        from instances.manifests.builtin import builtin_kinds_register
        from instances.services.clusters import kubevirt_backend

        register_backend("kubevirt", kubevirt_backend)
        builtin_kinds_register()
        # a login on a full disk still lets the user in: the time is only a hint
        user_logged_in.disconnect(dispatch_uid="update_last_login")
        user_logged_in.connect(last_login_update, dispatch_uid="update_last_login")
